#!/usr/bin/env python3
# fake systemd notify socket: logs each datagram with a timestamp
import socket, os, time, sys
p = "/tmp/audit-dos/notify.sock"
if os.path.exists(p): os.unlink(p)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(p)
with open("/tmp/audit-dos/notify.log", "a", buffering=1) as f:
    while True:
        d = s.recv(4096); f.write(f"{time.time():.2f} {time.strftime('%H:%M:%S')} {d.decode(errors='replace').strip()}\n")
