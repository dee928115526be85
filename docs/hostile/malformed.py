#!/usr/bin/env python3
# Malformed syslog at high rate over UDP and TCP. usage: malformed.py SECONDS PROCS
import socket, time, sys, os, random, multiprocessing as mp
ADDR = ("127.0.0.1", 47514)
def gen(r):
    k = r.randrange(10)
    if k == 0: return os.urandom(r.randrange(1, 2000))                       # random bytes
    if k == 1: return b"<" + str(r.getrandbits(200)).encode() + b">1 2026-01-01T00:00:00Z h a - - - x"  # huge PRI
    if k == 2: return b"<999999999>" + os.urandom(50)
    if k == 3: return b"<14>1 2026-01-01T00:00:00Z h\xff\xfe\xc3 heartbeat - - - \xed\xa0\x80\xc0\xaf invalid utf8 " + os.urandom(8)
    if k == 4: return b"<14>1 " + b"9" * r.randrange(10, 5000) + b" h a - - - bad time"
    if k == 5: return b"<14>1 - - - - - [" + b"a=" * r.randrange(1, 20000) + b"] sd bomb"   # SD nesting junk
    if k == 6: return b"<14>1 2026-01-01T00:00:00Z h web - - - " + b"x" * r.randrange(60000, 70000)  # ~64KiB boundary
    if k == 7: return b"<14>Dec 99 99:99:99 host tag[" + b"9" * 100 + b"]: m " + os.urandom(4)
    if k == 8: return b"<" * r.randrange(1, 3000) + os.urandom(4)
    return b"<14>1 2026-01-01T00:00:00Z h app - - [x@1 a=\"" + b"\\" * r.randrange(1, 3000) + b"\"] " + os.urandom(4)
def worker(mode, secs, seed, q):
    r = random.Random(seed); sent = 0; end = time.time() + secs; errs = 0
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if mode == "udp" else socket.create_connection(ADDR)
    while time.time() < end:
        m = gen(r)
        try:
            if mode == "udp": s.sendto(m[:65000], ADDR)
            else:
                s.sendall(m.replace(b"\n", b" ") + b"\n" if r.random() < .7 else b"%d " % len(m) + m)
        except OSError:
            errs += 1
            if mode == "tcp":
                s.close(); time.sleep(0.01)
                try: s = socket.create_connection(ADDR)
                except OSError: pass
        sent += 1
    q.put((mode, sent, errs))
if __name__ == "__main__":
    secs, procs = float(sys.argv[1]), int(sys.argv[2])
    q = mp.Queue(); ps = []
    for i in range(procs):
        for mode in ("udp", "tcp"):
            ps.append(mp.Process(target=worker, args=(mode, secs, os.getpid() * 10 + i * 2 + (mode == "tcp"), q)))
    [p.start() for p in ps]; res = [q.get() for _ in ps]; [p.join() for p in ps]
    print("sent (mode, msgs, errors/reconnects):", res)
