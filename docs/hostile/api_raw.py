#!/usr/bin/env python3
# raw HTTP edge cases against the API
import socket, time
def raw(req, timeout=5, read=200):
    s = socket.create_connection(("127.0.0.1", 49514), timeout=timeout); t = time.time()
    try:
        s.sendall(req); d = s.recv(read)
    except Exception as e: d = repr(e).encode()
    s.close(); return f"{time.time()-t:.2f}s " + d.split(b"\r\n")[0].decode(errors="replace")
cases = {
 "HTTP/1.0 no Host": b"GET /stats HTTP/1.0\r\n\r\n",
 "two Host (evil first)": b"GET /stats HTTP/1.1\r\nHost: evil\r\nHost: localhost\r\n\r\n",
 "two Host (localhost first)": b"GET /stats HTTP/1.1\r\nHost: localhost\r\nHost: evil\r\n\r\n",
 "absolute URI evil, Host localhost": b"GET http://evil.com/stats HTTP/1.1\r\nHost: localhost\r\n\r\n",
 "absolute URI localhost, Host evil": b"GET http://localhost/stats HTTP/1.1\r\nHost: evil.com\r\n\r\n",
 "Host localhost:1@evil": b"GET /stats HTTP/1.1\r\nHost: localhost:1@evil.com\r\n\r\n",
 "Host localhost. (trailing dot)": b"GET /stats HTTP/1.1\r\nHost: localhost.\r\n\r\n",
 "Host 127.1": b"GET /stats HTTP/1.1\r\nHost: 127.1\r\n\r\n",
 "Host 0x7f.0.0.1": b"GET /stats HTTP/1.1\r\nHost: 0x7f.0.0.1\r\n\r\n",
 "Host 127.0.0.2 (loopback)": b"GET /stats HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n",
 "X-Forwarded-Host evil": b"GET /stats HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-Host: evil\r\n\r\n",
 "query 1 MB": b"GET /alerts?recent=5&" + b"a" * (1 << 20) + b" HTTP/1.1\r\nHost: localhost\r\n\r\n",
 "query 30 KB": b"GET /alerts?recent=5&" + b"a=1&" * 7500 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n",
 "recent=huge": b"GET /alerts?recent=99999999999999999999999 HTTP/1.1\r\nHost: localhost\r\n\r\n",
 "recent=-1": b"GET /alerts?recent=-1 HTTP/1.1\r\nHost: localhost\r\n\r\n",
 "recent=20000": b"GET /alerts?recent=20000 HTTP/1.1\r\nHost: localhost\r\n\r\n",
 "header 1 MB": b"GET /stats HTTP/1.1\r\nHost: localhost\r\nX-A: " + b"a" * (1 << 20) + b"\r\n\r\n",
 "500 headers": b"GET /stats HTTP/1.1\r\nHost: localhost\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(500)) + b"\r\n",
 "POST ack 10 MB body": b"POST /alerts/ack HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 10485760\r\n\r\n" + b"{" * 100000,
 "POST ack deep JSON": b"POST /alerts/ack HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n" + b"[" * 200000,
 "POST forget deep JSON": b"POST /groups/forget HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n" + b"[" * 200000,
 "POST forget evil Host": b"POST /groups/forget HTTP/1.1\r\nHost: evil.com\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n" + b'{"rule":"hb-missing","key":"legit-a"}   ',
 "chunked huge": b"POST /alerts/ack HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFF\r\n" + b"a" * 1000,
 "garbage": b"\x00\xff" * 1000 + b"\r\n\r\n",
}
for k, v in cases.items(): print(f"{k:38s} -> {raw(v)}", flush=True)
