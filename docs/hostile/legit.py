#!/usr/bin/env python3
# Legitimate traffic probe. Cycles: host legit-a sends heartbeats (UDP + TCP, fresh conn) for 4s, goes silent
# 16s (hb-missing D=10s should fire ~10s after last hb), then hb again -> resolve. Also each cycle: seq start/end for a
# fresh sid (should fire seq-capture), and 6 web msgs from legit-web (count-web, 1 episode).
# Reads alerts.jsonl to measure latencies. usage: legit.py CYCLES LOG
import socket, time, json, sys, os
ADDR = ("127.0.0.1", 47514)
cycles, log = int(sys.argv[1]), sys.argv[2]
ALF = "/tmp/audit-dos/alerts.jsonl"
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n = [0]
def msg(host, app, text):
    n[0] += 1
    return f"<14>1 {time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime())}.{n[0]%1000:03d}Z {host} {app} - - - {text} n={n[0]}"
def send(host, app, text):
    m = msg(host, app, text).encode()
    u.sendto(m, ADDR)
    try:
        s = socket.create_connection(ADDR, timeout=3)
        s.sendall(b"%d " % len(m + b"x") + m + b"x")  # different bytes so not deduped
        s.close()
    except Exception as e:
        out(f"TCP send failed: {e}")
def out(s):
    with open(log, "a") as f: f.write(f"{time.strftime('%H:%M:%S')} {s}\n")
def alerts_since(pos):
    try:
        with open(ALF) as f:
            f.seek(pos); data = f.read(); return [json.loads(l) for l in data.splitlines() if l.strip()], pos + len(data.encode())
    except FileNotFoundError: return [], pos
def wait_for(pred, timeout, pos):
    t0 = time.time()
    while time.time() - t0 < timeout:
        al, pos2 = alerts_since(pos)
        for a in al:
            if pred(a): return time.time(), a
        time.sleep(0.2)
    return None, None
for c in range(cycles):
    pos = os.path.getsize(ALF) if os.path.exists(ALF) else 0
    sid = f"legitsid{int(time.time())}"
    send("legit-s", "seqapp", f"start id={sid}"); time.sleep(0.3); send("legit-s", "seqapp", f"end id={sid}")
    for i in range(6): send("legit-web", "web", f"GET /{i}")
    t, a = wait_for(lambda a: a["rule"] == "seq-capture" and a["group"].get("sid") == sid, 10, pos)
    out(f"cycle {c}: seq alert {'OK %.1fs' % (t - time.time() + (time.time()-t)) if t else 'MISSING'}")
    for i in range(4): send("legit-a", "heartbeat", "alive"); time.sleep(1)
    last = time.time()
    t, a = wait_for(lambda a: a["rule"] == "hb-missing" and a["group"].get("host") == "legit-a" and a["state"] == "firing", 25, pos)
    out(f"cycle {c}: hb firing after {t - last:.1f}s (expect ~10s)" if t else f"cycle {c}: hb firing MISSING after 25s")
    pos2 = os.path.getsize(ALF)
    t0 = time.time(); send("legit-a", "heartbeat", "alive")
    t, a = wait_for(lambda a: a["rule"] == "hb-missing" and a["group"].get("host") == "legit-a" and a["state"] == "resolved", 15, pos)
    out(f"cycle {c}: hb resolved after {t - t0:.1f}s" if t else f"cycle {c}: hb resolve MISSING after 15s")
    al, _ = alerts_since(pos)
    out(f"cycle {c}: count-web alerts this cycle: {sum(1 for a in al if a['rule']=='count-web' and a['group'].get('host')=='legit-web')}")
