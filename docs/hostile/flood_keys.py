#!/usr/bin/env python3
# Flood of unique group keys. usage: flood_keys.py udp|tcp SECONDS PROCS
# Each message has a fresh random host (hb-missing, count-web) or sid capture (seq-capture start).
import socket, time, sys, os, random, multiprocessing as mp
ADDR = ("127.0.0.1", 47514)
def worker(mode, secs, seed, q):
    r = random.Random(seed); sent = 0; end = time.time() + secs
    if mode == "udp": s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    else: s = socket.create_connection(ADDR)
    ts = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
    while time.time() < end:
        batch = []
        for i in range(200):
            k = "%016x" % r.getrandbits(64)
            kind = sent % 3
            if kind == 0: m = f"<14>1 {ts} h{k} heartbeat - - - alive"
            elif kind == 1: m = f"<14>1 {ts} flood seqapp - - - start id=s{k}"
            else: m = f"<14>1 {ts} w{k} web - - - GET /"
            sent += 1
            if mode == "udp":
                try: s.sendto(m.encode(), ADDR)
                except OSError: pass
            else: batch.append(m.encode() + b"\n")
        if mode == "tcp": s.sendall(b"".join(batch))
    q.put(sent)
if __name__ == "__main__":
    mode, secs, procs = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    q = mp.Queue()
    ps = [mp.Process(target=worker, args=(mode, secs, os.getpid()*100+i, q)) for i in range(procs)]
    [p.start() for p in ps]; tot = sum(q.get() for _ in ps); [p.join() for p in ps]
    print(f"{mode}: sent {tot} messages in {secs}s with {procs} procs")
