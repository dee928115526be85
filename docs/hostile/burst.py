#!/usr/bin/env python3
# Burst much faster than the engine. usage: burst.py udp|tcp N AGENT_PID
import socket, time, sys, threading
from common import *
mode, N, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ts = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
def m(i):
    return (f"<14>1 {ts} b{i%1000} heartbeat - - - alive {i}" if i % 2 else f"<14>1 {ts} w{i%1000} web - - - GET /{i}").encode()
s0 = stats(); i0 = s0["ingest"]; k0 = s0["udp_kernel_drops"]
t0 = time.time()
probe = []
def prober():
    while not done:
        probe.append((round(time.time() - t0, 1), legit_tcp("burst", timeout=20))); time.sleep(2)
done = False; th = threading.Thread(target=prober); th.start()
if mode == "udp":
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); errs = 0
    for i in range(N):
        try: u.sendto(m(i), ADDR)
        except OSError: errs += 1
    print(f"udp: {N} sent in {time.time()-t0:.2f}s, send errors {errs}")
else:
    s = socket.create_connection(ADDR); buf = []
    for i in range(N):
        buf.append(m(i) + b"\n")
        if len(buf) == 5000: s.sendall(b"".join(buf)); buf = []
    s.sendall(b"".join(buf)); s.close()
    print(f"tcp: {N} sent (all bytes accepted by kernel/agent) in {time.time()-t0:.2f}s")
tsend = time.time()
# wait for drain: parsed+duplicates+malformed stable and queues empty
last = None; peak = 0
while True:
    s1 = stats(); i1 = s1["ingest"]; peak = max(peak, rss(pid))
    cur = (i1["parsed"], i1["routed"], i1["queue_full"], tuple(x["queued_batches"] for x in s1["shards"]))
    if cur == last and all(q == 0 for q in cur[3]): break
    last = cur; time.sleep(1)
done = True; th.join()
d = {k: i1[k] - i0[k] for k in ["udp_datagrams", "tcp_frames", "parsed", "routed", "queue_full", "duplicates", "malformed"]}
print(f"drained {time.time()-tsend:.1f}s after sending ended; deltas {d}; kernel drops +{s1['udp_kernel_drops']-k0}; peak rss {peak}MB")
print("legit TCP probes (t, seconds-to-alert):", probe)
