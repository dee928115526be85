#!/usr/bin/env python3
"""An alert storm through `cepheus run` and its store (docs/benchmarks.md, "The store").

usage: docs/store_storm.py BINARY [N] [stdout]

Starts the agent in a scratch folder with one rule that alerts on every event (5,000
hosts), sends N RFC 5424 lines over one TCP connection, waits until the store holds the N
alert changes (N must stay below store.max_alerts), and prints the time, the counters, the store's size on disk and the agent's peak RSS. With
`stdout`, alerts are also written (to a file); without, the store alone."""
import json, os, shutil, socket, subprocess, sys, tempfile, time, urllib.request

binary = os.path.abspath(sys.argv[1])
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200000
stdout = len(sys.argv) > 3 and sys.argv[3] == "stdout"
d = tempfile.mkdtemp(prefix="cepheus-storm-")
os.makedirs(d + "/rules")
open(d + "/rules/all.toml", "w").write("""[[rule]]
name = "every"
severity = "low"
group_by = ["host"]
events.a = 'syslog and app == "storm"'
pattern = "a"
""")
def free():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
port, api = free(), free()
open(d + "/c.toml", "w").write(f"""[syslog]
udp = []
tcp = ["127.0.0.1:{port}"]
[rules]
paths = ["rules"]
[api]
listen = "127.0.0.1:{api}"
[store]
path = "data"
[output]
stdout = {"true" if stdout else "false"}
""")
out = open(d + "/out.jsonl", "w")
agent = subprocess.Popen([binary, "run", "--config", "c.toml"], cwd=d, stdout=out,
                         stderr=subprocess.DEVNULL)
def stats():
    return json.load(urllib.request.urlopen(f"http://127.0.0.1:{api}/stats"))
for _ in range(100):
    try:
        stats(); break
    except OSError:
        time.sleep(0.1)
lines = b"".join(b"<14>1 2026-12-03T05:00:00Z h%d storm - - - msg %d\n" % (i % 5000, i)
                 for i in range(n))
t = time.time()
s = socket.create_connection(("127.0.0.1", port)); s.sendall(lines); s.close()
while True:
    st = stats()
    kept = st["store"]["alert_changes"] + st["sink"]["store_errors"]
    if kept + st["alerts_dropped"] >= n or time.time() - t > 120:
        break
    time.sleep(0.05)
el = time.time() - t
hwm = next((l.split()[1] for l in open(f"/proc/{agent.pid}/status") if l.startswith("VmHWM")), "0")
agent.terminate(); agent.wait()
size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d + "/data") for f in fs)
print(f"{n} alerts in {el:.2f} s ({n / el:,.0f}/s), dropped {st['alerts_dropped']}, "
      f"store errors {st['sink']['store_errors']}, kept {st['store']['alert_changes']}, "
      f"store on disk {size / 1e6:.0f} MB ({size / n:.0f} B per alert change), "
      f"peak RSS {int(hwm) / 1024:.0f} MB")
shutil.rmtree(d)
