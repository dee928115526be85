#!/usr/bin/env python3
# 20,000 malformed HTTP requests to the API; counts agent log lines they cause
import socket, time
t = time.time()
for i in range(20000):
    s = socket.create_connection(("127.0.0.1", 49514)); s.sendall(b"\x00\xff garbage\r\n\r\n")
    try: s.recv(100)
    except Exception: pass
    s.close()
print(f"20000 bad requests in {time.time()-t:.1f}s")
