#!/usr/bin/env python3
"""cepheus replay JSON-lines alerts -> score.py lines.
Rules whose name starts with 'hb' -> ALERT/RESOLVE HB host=H; 'bf' -> ALERT BF ip=IP.
Anything else (retracted, other reasons, other rules) is printed as 'OTHER ...' (score.py ignores it)
and counted on stderr."""
import collections, json, sys
c = collections.Counter()
for ln in open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin:
    ln = ln.strip()
    if not ln.startswith("{"):
        continue
    a = json.loads(ln)
    r, st, g = a["rule"], a["state"], a.get("group", {})
    key = (r.split("-")[0], st, a.get("reason"))
    c[key] += 1
    if r.startswith("hb") and st == "firing":
        print("ALERT HB host=%s t=%s rule=%s" % (g["host"], a["time"], r))
    elif r.startswith("hb") and st == "resolved" and a.get("reason") is None:
        print("RESOLVE HB host=%s t=%s rule=%s" % (g["host"], a["time"], r))
    elif r.startswith("bf") and st == "firing":
        print("ALERT BF ip=%s t=%s" % (g["src"], a["time"]))
    else:
        print("OTHER %s %s %s %s %s" % (r, st, a.get("reason"), json.dumps(g), a["time"]))
for k, n in sorted(c.items(), key=str):
    print("  %s: %d" % (k, n), file=sys.stderr)
