#!/usr/bin/env python3
# per-remote-host cap: 300 conns from a non-loopback local address (SRC), each delivering one message
import socket, time, sys
from common import *
src = sys.argv[1]; ts = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()); conns = []; errs = 0
for i in range(300):
    try:
        s = socket.socket(); s.bind((src, 0)); s.settimeout(2); s.connect(ADDR)
        s.sendall(f"<14>1 {ts} q{i} other - - - hello {i}\n".encode()); conns.append(s)
    except Exception as e: errs += 1
time.sleep(2)
def alive(s):
    try:
        s.setblocking(False); return s.recv(1) != b""
    except BlockingIOError: return True
    except OSError: return False
i = ing(); print("open:", sum(alive(s) for s in conns), "errs", errs, {k: i[k] for k in ["tcp_connections", "tcp_rejected"]})
print("legit from 127.0.0.1 meanwhile:", legit_tcp("q"))
