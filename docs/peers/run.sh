#!/bin/bash
# One row of the comparison with the peers (docs/benchmarks.md, "Against the peers"):
#   docs/peers/run.sh RULES WORKLOAD [replay flags...]
# RULES: a rule file or folder (docs/peers/gen_rules.py R > r.toml); WORKLOAD: the name of a
# workload made by ../shared/peers/gen_workload.py in $WORK (WORK/W.log, WORK/W.truth.json).
# Prints: workload, lines, hosts, cpu s, peak RSS MB, and the HB / resolve / BF
# expected/missed/extra of ../shared/peers/score.py.
set -euo pipefail
RULES=$1; W=$2; shift 2
BIN=${BIN:-target/release/cepheus}
WORK=${WORK:-/tmp/peers-work}
PEERS=${PEERS:-../shared/peers}
HERE=$(dirname "$0")
OUT=$(mktemp -d)
/usr/bin/time -f "%U %S %M" -o "$OUT/time" "$BIN" replay --rules "$RULES" --year 2026 "$@" \
  "$WORK/$W.log" > "$OUT/alerts.jsonl" 2> "$OUT/err"
python3 "$HERE/conv.py" "$OUT/alerts.jsonl" > "$OUT/alerts.txt" 2> /dev/null
score=$(python3 "$PEERS/score.py" "$WORK/$W.truth.json" "$OUT/alerts.txt")
python3 - "$W" "$OUT/time" "$score" "$WORK/$W.truth.json" <<'PY'
import json, sys
w, tf, score, truth = sys.argv[1:]
u, s_, rss = open(tf).read().split()[-3:]
t, s = json.load(open(truth)), json.loads(score)
f = lambda k: "%d/%d/%d" % (s[k + "_expected"], s[k + "_missed"], s[k + "_extra"])
print("\t".join([w, str(t["lines"]), str(t["hosts"]), "%.2f" % (float(u) + float(s_)),
                 "%.0f" % (int(rss) / 1024), f("hb"), f("res"), f("bf")]))
PY
rm -rf "$OUT"
