#!/usr/bin/env python3
# Blinding the shipped ssh rules: 1) real brute force from 198.51.100.7 (control) -> alert expected
# 2) 100,001 forged "Failed password" lines from distinct IPv4s (one each) over one TCP conn
# 3) real brute force + success from a NEW address 203.0.113.99 -> does ssh-bruteforce / -then-success alert?
import socket, time, json, os
from common import *
def brute(ip, s, ok=True):
    ts = time.strftime('%b %d %H:%M:%S', time.gmtime())
    for i in range(6): s.sendall(f"<38>{ts} bastion sshd[{100+i}]: Failed password for root from {ip} port {40000+i} ssh2\n".encode())
    if ok: s.sendall(f"<38>{ts} bastion sshd[200]: Accepted password for root from {ip} port 41000 ssh2\n".encode())
def alerts_for(ip, pos):
    out = []
    with open(ALF) as f:
        f.seek(pos)
        for l in f:
            if ip in l: a = json.loads(l); out.append((a["rule"], a["state"]))
    return out
s = socket.create_connection(ADDR)
pos = os.path.getsize(ALF) if os.path.exists(ALF) else 0
brute("198.51.100.7", s); time.sleep(2); print("control:", alerts_for("198.51.100.7", pos) if os.path.exists(ALF) else "no alerts file")
t = time.time(); ts = time.strftime('%b %d %H:%M:%S', time.gmtime()); buf = []
for i in range(100001):
    ip = f"10.{(i>>16)&255}.{(i>>8)&255}.{i&255}"
    buf.append(f"<38>{ts} bastion sshd[1]: Failed password for x from {ip} port 1 ssh2\n".encode())
    if len(buf) == 5000: s.sendall(b"".join(buf)); buf = []
s.sendall(b"".join(buf)); print(f"forged 100001 lines in {time.time()-t:.1f}s"); time.sleep(5)
pos = os.path.getsize(ALF)
brute("203.0.113.99", s); time.sleep(3); print("new attacker after flood:", alerts_for("203.0.113.99", pos))
st = stats()
for r in st["rules"]:
    if r["rule"].startswith("ssh"): print(" ", r["rule"], "groups", r["groups"], "rejected", r["counters"]["groups_rejected"])
