#!/usr/bin/env bash
# cepheus against the Apache Flink CEP peer (../shared/peers/flink): the same data sets
# (gen_events.py, seed 42: 2000, 100k and 1M events), the same two detections
# (rules.toml) and the same scoring (score.py mirrors heartbeat_cep.py's score()).
#
#   BIN=/path/to/cepheus docs/peers/flink/run.sh          # from the repository root
#
# Env: BIN (default target/release/cepheus), WORK (default /tmp/flinkcmp),
#      PEER (the Flink harness, default ../shared/peers/flink), SIZES (default
#      "2000 100000 1000000"), RUNS (timed runs per size, default 3).
# Per size: generate CSV + truth (if missing), convert to JSON lines (conv.py), replay RUNS
# times under /usr/bin/time -v, score the alerts (also with heartbeat_cep.py's own score()),
# replay once with --no-share and once from RFC 5424 lines (conv.py --format syslog) and
# compare their alerts with the first run's, and once with `--until +10m` so the trailing
# silences fire: those must be exactly the truth's end-of-stream cases (and are not scored).
# Prints one row per size: events, conversion wall s (Python, not counted in cpu_s),
# cepheus cpu_s = user+sys (median of RUNS), wall_s (median), peak RSS MB (max of RUNS),
# bf and hb as true_pos/expected missed/extra/dup (+ end-of-stream alerts for hb),
# whether --no-share gave identical alerts (and its cpu_s), whether the syslog input did,
# the --until run's end-of-stream alerts (= truth?), and whether Flink's score() agrees.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
BIN="${BIN:-target/release/cepheus}"
WORK="${WORK:-/tmp/flinkcmp}"
PEER="${PEER:-$HERE/../../../../shared/peers/flink}"
SIZES="${SIZES:-2000 100000 1000000}"
RUNS="${RUNS:-3}"
RULES="$HERE/rules.toml"
mkdir -p "$WORK"
"$BIN" rules check "$RULES" 2> "$WORK/rules_check.txt" || { cat "$WORK/rules_check.txt"; exit 1; }
tail -1 "$WORK/rules_check.txt"
echo "machine: $(nproc) vCPU, $(uname -r); $("$BIN" --version)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

timed() {  # timed OUT_PREFIX ARGS... : replay under /usr/bin/time -v
  local p=$1; shift
  /usr/bin/time -v -o "$p.time" "$BIN" replay --rules "$RULES" "$@" > "$p.alerts" 2> "$p.err"
}

printf "| events | conv_s | cpu_s | wall_s | rss_MB | bf tp/exp miss/extra/dup | hb tp/exp miss/extra/dup eos | no-share same (cpu_s) | syslog same (cpu_s) | --until +10m: eos | flink score() agrees | load1 |\n"
printf "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
for n in $SIZES; do
  csv="$WORK/ev_$n.csv"; truth="$WORK/ev_$n.truth.json"
  [ -f "$csv" ] && [ -f "$truth" ] || python3 "$PEER/gen_events.py" --events "$n" --seed 42 --out "$csv" > /dev/null
  t0=$(date +%s.%N)
  python3 "$HERE/conv.py" "$csv" "$WORK/ev_$n.jsonl"
  t1=$(date +%s.%N)
  conv_s=$(python3 -c "print($t1 - $t0)")
  python3 "$HERE/conv.py" --format syslog "$csv" "$WORK/ev_$n.log"
  for r in $(seq 1 "$RUNS"); do timed "$WORK/r${n}_$r" "$WORK/ev_$n.jsonl"; done
  timed "$WORK/r${n}_noshare" --no-share "$WORK/ev_$n.jsonl"
  timed "$WORK/r${n}_syslog" "$WORK/ev_$n.log"
  timed "$WORK/r${n}_until" --until +10m "$WORK/ev_$n.jsonl"
  python3 "$HERE/score.py" --flink-score "$PEER/heartbeat_cep.py" "$truth" "$WORK/r${n}_1.alerts" > "$WORK/r${n}.score.json"
  python3 "$HERE/score.py" "$truth" "$WORK/r${n}_until.alerts" > "$WORK/r${n}_until.score.json"
  python3 - "$WORK" "$n" "$RUNS" "$conv_s" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, re, statistics, sys
work, n, runs, conv_s, load1 = sys.argv[1:]
def tv(p):
    t = open(p).read()
    g = lambda k: re.search(re.escape(k) + r": (\S+)", t).group(1)
    w = g("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")
    wall = sum(float(x) * 60 ** i for i, x in enumerate(reversed(w)))
    return float(g("User time (seconds)")) + float(g("System time (seconds)")), wall, \
        int(g("Maximum resident set size (kbytes)")) / 1024
pre = "%s/r%s_" % (work, n)
tr = [tv(pre + "%d.time" % r) for r in range(1, int(runs) + 1)]
cpu = statistics.median(t[0] for t in tr); wall = statistics.median(t[1] for t in tr)
rss = max(t[2] for t in tr)
base = open(pre + "1.alerts").read()
same_runs = all(open(pre + "%d.alerts" % r).read() == base for r in range(2, int(runs) + 1))
ns = open(pre + "noshare.alerts").read() == base
sy = open(pre + "syslog.alerts").read()
# the syslog input's events carry `procid`/`facility`/`severity`... in `events`; compare what is scored + ids
key = lambda s: sorted((a["id"], a["rule"], a["state"], a["time"], json.dumps(a["group"], sort_keys=True))
                       for a in map(json.loads, s.splitlines()) if s)
sy_same = key(sy) == key(base)
s = json.load(open("%s/r%s.score.json" % (work, n)))
u = json.load(open("%s/r%s_until.score.json" % (work, n)))
fl = s["flink_score"]
flink_agrees = all(fl[k]["true_pos"] == s[k]["true_pos"] and fl[k]["false_pos"] == s[k]["false_pos"]
                   and fl[k]["false_neg"] == s[k]["false_neg"] and fl[k]["duplicates"] == s[k]["duplicates"]
                   for k in ("bf", "hb"))
f = lambda d: "%d/%d %d/%d/%d" % (d["true_pos"], d["expected"], d["missed"], d["extra"], d["duplicates"])
ev = int(re.search(r"replay: (\d+) events", open(pre + "1.err").read()).group(1))
print("| %d | %.2f | %.2f | %.2f | %.1f | %s | %s eos=%d | %s (%.2f) | %s (%.2f) | %d %s, scored: %s/%s | %s | %s |%s" % (
    ev, float(conv_s), cpu, wall, rss, f(s["bf"]), f(s["hb"]), s["hb"]["end_of_stream_alerts"],
    "yes" if ns else "NO", tv(pre + "noshare.time")[0], "yes" if sy_same else "NO", tv(pre + "syslog.time")[0],
    u["hb"]["end_of_stream_alerts"], "= truth" if u["hb"]["end_of_stream_exact"] else "!= truth",
    u["bf"]["exact"], u["hb"]["exact"], "yes" if flink_agrees else "NO", load1,
    "" if same_runs else " (runs differ!)"))
PY
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
