import socket, time, json, os, urllib.request
ADDR = ("127.0.0.1", 47514)
API = "http://127.0.0.1:49514"
ALF = "/tmp/audit-dos/alerts.jsonl"
def stats():
    return json.loads(urllib.request.urlopen(API + "/stats", timeout=30).read())
def ing(): return stats()["ingest"]
def rss(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1]) // 1024
def legit_tcp(tag, timeout=15, src=None):
    """send 5 web msgs over a fresh TCP conn for host legit-<tag>; return seconds until count-web fires, or an error string"""
    pos = os.path.getsize(ALF) if os.path.exists(ALF) else 0
    host = f"legit-{tag}-{int(time.time()*1000)}"
    t0 = time.time()
    try:
        s = socket.socket(); s.settimeout(5)
        if src: s.bind((src, 0))
        s.connect(ADDR)
        ts = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
        s.sendall(b"".join(f"<14>1 {ts} {host} web - - - GET /{i}\n".encode() for i in range(5)))
        s.close()
    except Exception as e:
        return f"SEND-ERR {e!r}"
    while time.time() - t0 < timeout:
        if not os.path.exists(ALF): time.sleep(0.1); continue
        with open(ALF) as f:
            f.seek(pos)
            for l in f:
                if host in l and '"firing"' in l: return round(time.time() - t0, 2)
        time.sleep(0.1)
    return "NO-ALERT"
