#!/usr/bin/env python3
# Probe pipeline latency during a reload. usage: reload_probe.py SECONDS AGENT_PID   (run the reload in parallel)
import threading, time, sys, json, urllib.request
from common import *
secs, pid = float(sys.argv[1]), int(sys.argv[2])
t0 = time.time(); lat = []; samp = []
def a():
    i = 0
    while time.time() - t0 < secs:
        t = time.time(); r = legit_tcp(f"rl{i}", timeout=30); lat.append((round(t - t0, 1), r)); i += 1; time.sleep(0.25)
def b():
    while time.time() - t0 < secs:
        t = time.time()
        try:
            j = json.loads(urllib.request.urlopen(API + "/stats", timeout=30).read())
            samp.append((round(t - t0, 1), round(time.time() - t, 2), len(j["rules"]), j["sink"]["reloads"], j["sink"]["reloads_failed"], rss(pid), bool(j["reload_error"])))
        except Exception as e: samp.append((round(t - t0, 1), "ERR", str(e)[:50]))
        time.sleep(0.2)
ts = [threading.Thread(target=f) for f in (a, b)]; [x.start() for x in ts]; [x.join() for x in ts]
bad = [x for x in lat if not isinstance(x[1], float) or x[1] > 1]
print("pipeline probes:", len(lat), "max latency:", max((x[1] for x in lat if isinstance(x[1], float)), default=None), "bad/slow:", bad[:20])
slow = [x for x in samp if x[1] == "ERR" or x[1] > 0.5]
print("stats samples:", len(samp), "slow/err:", slow[:20])
print("first/last:", samp[0], samp[-1])
ch = [samp[i] for i in range(1, len(samp)) if samp[i][2:5] != samp[i-1][2:5]]
print("changes (t, stats_latency, rules, reloads, failed, rss, reload_error):", ch[:10])
