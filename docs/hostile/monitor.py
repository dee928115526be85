#!/usr/bin/env python3
# usage: monitor.py PID OUTFILE  -- samples every 1s: RSS, CPU%, threads, fds, /health and /stats latency + key counters
import sys, time, json, os, urllib.request
pid, out = int(sys.argv[1]), sys.argv[2]
API = "http://127.0.0.1:49514"
tck = os.sysconf('SC_CLK_TCK')
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(')',1)[1].split()
    return (int(f[11]) + int(f[12])) / tck
def status():
    d = {}
    for l in open(f"/proc/{pid}/status"):
        k, v = l.split(':', 1)
        d[k] = v.strip()
    return d
def get(path, timeout=5):
    t = time.time()
    try:
        r = urllib.request.urlopen(API + path, timeout=timeout).read()
        return time.time() - t, r
    except Exception as e:
        return time.time() - t, ("ERR " + str(e)).encode()
prev_c, prev_t = cpu(), time.time()
with open(out, "a", buffering=1) as fo:
    while True:
        try:
            st = status()
        except FileNotFoundError:
            fo.write(f"{time.strftime('%H:%M:%S')} PROCESS GONE\n"); break
        c, t = cpu(), time.time()
        cpupct = 100 * (c - prev_c) / (t - prev_t); prev_c, prev_t = c, t
        nfd = len(os.listdir(f"/proc/{pid}/fd"))
        hl, h = get("/health")
        sl, s = get("/stats")
        summ = ""
        try:
            j = json.loads(s)
            ing = j["ingest"]
            keys = ["udp_datagrams","tcp_connections","tcp_rejected","tcp_idle_closed","tcp_evicted","tcp_unframeable","tcp_frames","malformed","oversized","duplicates","parsed","routed","queue_full","read_errors"]
            summ = " ".join(f"{k}={ing.get(k)}" for k in keys if ing.get(k))
            summ += f" kdrops={j.get('udp_kernel_drops')}"
            summ += " groups=" + ",".join(f"{r['rule']}:{r['groups']}/rej{r['counters']['groups_rejected']}/pm{r['partial_matches']}/b{r['bytes']}" for r in j["rules"])
            summ += " qb=" + ",".join(str(x["queued_batches"]) for x in j["shards"])
            summ += f" alerts={j['sink']['alerts']} reloads={j['sink']['reloads']}/{j['sink']['reloads_failed']}"
        except Exception as e:
            summ = "STATS " + s[:100].decode(errors='replace')
        fo.write(f"{time.strftime('%H:%M:%S')} rss={int(st['VmRSS'].split()[0])//1024}MB cpu={cpupct:.0f}% thr={st['Threads']} fds={nfd} health={hl*1000:.0f}ms:{h[:20].decode(errors='replace').strip()} stats={sl*1000:.0f}ms {summ}\n")
        time.sleep(max(0, 1 - (time.time() - t)))
