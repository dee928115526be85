#!/usr/bin/env python3
# send N 64 KB lowercase messages (UDP) that the rule regex [a-z]{50000}z must scan, then probe legit latency
import socket, random, time, sys, threading
from common import *
n = int(sys.argv[1]); via = sys.argv[2] if len(sys.argv) > 2 else "udp"
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
ts = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
t0 = time.time()
for i in range(n):
    m = (f"<14>1 {ts} slow{i} web - - - " + "".join(random.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(64000))).encode()
    if via == "udp": u.sendto(m, ADDR)
    else:
        s = socket.create_connection(ADDR); s.sendall(m + b"\n"); s.close()
print(f"sent {n} slow messages via {via} in {time.time()-t0:.1f}s")
res = []
def probe():
    while time.time() - t0 < 60:
        t = time.time(); res.append((round(t - t0, 1), legit_tcp("slow", timeout=60))); time.sleep(1)
th = threading.Thread(target=probe); th.start()
tt = time.time()
while time.time() - t0 < 60:
    try:
        t = time.time(); urllib.request.urlopen(API + "/health", timeout=10).read(); h = time.time() - t
    except Exception as e: h = str(e)
    time.sleep(5)
th.join()
print("legit TCP probes (t since start, seconds-to-alert):", res)
