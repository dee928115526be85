#!/usr/bin/env python3
# usage: streams.py N_CLIENTS SECONDS AGENT_PID  -- opens N /alerts/stream clients that NEVER read (tiny rcvbuf),
# reports status codes, then meanwhile triggers a storm of big alerts (count-web with 60 KB messages), watching RSS
import socket, time, sys, os, subprocess, threading
from common import *
n, secs, pid = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
cl = []; codes = {}
for i in range(n):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096); s.connect(("127.0.0.1", 49514))
    s.sendall(b"GET /alerts/stream HTTP/1.1\r\nHost: localhost\r\n\r\n")
    cl.append(s)
time.sleep(1)
for s in cl:
    s.settimeout(2)
    try: line = s.recv(64).split(b"\r\n")[0].decode()
    except Exception as e: line = "no answer"
    codes[line] = codes.get(line, 0) + 1
print("stream responses:", codes, flush=True)
def du(): return int(subprocess.run(["du", "-sm", "/tmp/audit-dos/data"], capture_output=True, text=True).stdout.split()[0])
print(f"before storm: rss={rss(pid)}MB store={du()}MB", flush=True)
# storm: H hosts x 6 messages of 60 KB over one TCP conn (count-web fires at 5, resolves 10 s later with 6 events)
ts = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()); t0 = time.time(); H = 1000
big = "y" * 60000
s = socket.create_connection(ADDR)
for h in range(H):
    s.sendall(b"".join(f"<14>1 {ts} storm{h} web - - - {j} {big}\n".encode() for j in range(6)))
s.close()
print(f"storm sent: {H*6} msgs, {H*6*60/1024:.0f} MB in {time.time()-t0:.1f}s", flush=True)
peak = 0
while time.time() - t0 < secs:
    r = rss(pid); peak = max(peak, r)
    try: st = stats(); a = st["sink"]["alerts"]
    except Exception as e: a = "ERR"
    print(f"  t={time.time()-t0:.0f}s rss={r}MB store={du()}MB sink.alerts={a} alerts.jsonl={os.path.getsize(ALF)>>20}MB legit={legit_tcp('st', timeout=10)}", flush=True)
    time.sleep(4)
print("peak rss", peak)
for s in cl: s.close()
time.sleep(6); print(f"after closing streams: rss={rss(pid)}MB")
