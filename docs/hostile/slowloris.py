#!/usr/bin/env python3
# usage: slowloris.py AGENT_PID  -- runs sub-tests a..e of attack 2, printing counters and RSS
import socket, time, sys, os, threading
from common import *
pid = int(sys.argv[1])
def show(label):
    i = ing(); print(f"  [{label}] rss={rss(pid)}MB fds={len(os.listdir(f'/proc/{pid}/fd'))} " + " ".join(f"{k}={i[k]}" for k in ["tcp_connections","tcp_rejected","tcp_idle_closed","tcp_evicted","tcp_unframeable","tcp_frames","malformed","oversized","parsed"]), flush=True)
def alive(s):
    try:
        s.setblocking(False)
        d = s.recv(1)
        return False if d == b"" else True
    except BlockingIOError: return True
    except OSError: return False
ts = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
print("== a) 600 conns (max 256), each a partial frame, then stall"); show("before")
conns = []
for i in range(600):
    try:
        s = socket.create_connection(ADDR, timeout=2); s.sendall(f"<14>1 {ts} slow{i} web - - - partial".encode()); conns.append(s)
    except Exception as e: print("  connect err", i, e); break
time.sleep(2); show("after open")
print("  still open (client view):", sum(alive(s) for s in conns))
print("  legit TCP during a):", legit_tcp("a"))
show("after legit"); print("  still open:", sum(alive(s) for s in conns))
for s in conns: s.close()
print("== b) 300 conns that each deliver ONE valid message then stall with partial frame (not eviction candidates)")
conns = []
for i in range(300):
    try:
        s = socket.create_connection(ADDR, timeout=2)
        s.sendall(f"<14>1 {ts} slowb{i} other - - - hello {i}\n<14>1 {ts} x y - - - part".encode()); conns.append(s)
    except Exception as e: print("  connect err", i, e); break
time.sleep(2); show("after open"); print("  still open:", sum(alive(s) for s in conns))
for k in range(3):
    print(f"  legit TCP during b) try {k}:", legit_tcp("b"))
show("after legit")
# remote-ish sources: 127.0.0.2 (one remote host holds at most a quarter)
for s in conns: s.close()
time.sleep(1)
print("== b2) 300 conns from 127.0.0.2 (one remote host: at most a quarter = 64?)")
conns = []
for i in range(300):
    try:
        s = socket.socket(); s.bind(("127.0.0.2", 0)); s.settimeout(2); s.connect(ADDR)
        s.sendall(f"<14>1 {ts} slowc{i} other - - - hello {i}\n".encode()); conns.append(s)
    except Exception as e: print("  connect err", i, e); break
time.sleep(2); show("after open"); print("  still open:", sum(alive(s) for s in conns))
print("  legit TCP from 127.0.0.3:", legit_tcp("b2", src="127.0.0.3"))
for s in conns: s.close()
time.sleep(1)
print("== c) huge octet-count prefixes")
for pref in [b"99999999999999999999 ", b"4294967296 ", b"65537 ", b"18446744073709551616 <14>", b"1" * 5000 + b" "]:
    s = socket.create_connection(ADDR); s.sendall(pref + b"<14>1 x y z - - - hi\n")
    t = time.time(); s.settimeout(5)
    try: r = s.recv(10); print(f"  prefix {pref[:24]!r}: server closed={r==b''} after {time.time()-t:.2f}s")
    except socket.timeout: print(f"  prefix {pref[:24]!r}: still open after 5s")
    s.close()
show("after c")
print("== d) endless line, no newline: 200 MB at full speed on one conn")
s = socket.create_connection(ADDR); chunk = b"A" * 65536; sent = 0; t = time.time(); peak = 0
s.settimeout(10)
try:
    while sent < 200 * 2**20:
        s.sendall(chunk); sent += len(chunk)
        if sent % (16 * 2**20) == 0: peak = max(peak, rss(pid))
    print(f"  sent {sent>>20} MB in {time.time()-t:.1f}s, peak rss {peak}MB")
except Exception as e: print(f"  after {sent>>20} MB: {e!r}")
print("  legit TCP during d):", legit_tcp("d"))
s.close(); show("after d")
print("== e) NUL flood: 200 MB of \\0 on one conn, plus 100k NUL-only UDP datagrams")
s = socket.create_connection(ADDR); chunk = b"\0" * 65536; sent = 0; t = time.time()
s.settimeout(10)
try:
    while sent < 200 * 2**20: s.sendall(chunk); sent += len(chunk)
    print(f"  sent {sent>>20} MB in {time.time()-t:.1f}s, rss {rss(pid)}MB")
except Exception as e: print(f"  after {sent>>20} MB: {e!r}")
print("  legit TCP during e):", legit_tcp("e"))
s.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(100000): u.sendto(b"\0" * (1 + i % 100), ADDR)
time.sleep(1); show("after e")
print("  legit TCP after all:", legit_tcp("end"))
