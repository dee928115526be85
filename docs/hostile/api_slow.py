#!/usr/bin/env python3
# (1) 3000 API connections with a partial request head, held; is /health,/stats still served? when are they closed?
# (2) 64 /alerts/stream clients that never read; after 30 s, is a 65th refused (503)?
import socket, time
def get(path, host="localhost"):
    t = time.time()
    try:
        s = socket.create_connection(("127.0.0.1", 49514), timeout=5); s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        d = s.recv(64); s.close(); l = d.split(b'\r\n')[0].decode(); return f"{l} {time.time()-t:.2f}s"
    except Exception as e: return f"{e!r} {time.time()-t:.2f}s"
cs = []
for i in range(3000):
    try:
        s = socket.create_connection(("127.0.0.1", 49514), timeout=2); s.sendall(b"GET /stats HTTP/1.1\r\nHost: local"); cs.append(s)
    except Exception as e: print("conn err", i, e); break
print("held partial-head conns:", len(cs), "| /health:", get("/health"), "| /stats:", get("/stats"))
time.sleep(6)
def closed(s):
    s.setblocking(False)
    try: return s.recv(100) is not None and True
    except BlockingIOError: return False
    except OSError: return True
print("after 6 s: closed by server:", sum(closed(s) for s in cs), "| /stats:", get("/stats"))
for s in cs: s.close()
st = []
for i in range(64):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048); s.connect(("127.0.0.1", 49514))
    s.sendall(b"GET /alerts/stream HTTP/1.1\r\nHost: localhost\r\n\r\n"); st.append(s)
time.sleep(2); print("65th stream right away:", get("/alerts/stream"))
time.sleep(30); print("65th stream after 30 s of 64 idle non-reading clients:", get("/alerts/stream"))
for s in st: s.close()
time.sleep(7); print("after closing them (+7 s):", get("/alerts/stream"))
