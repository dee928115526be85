#!/bin/bash
# An absence storm through `cepheus run`: N expected hosts, none of which ever sends a
# heartbeat, all firing 2 s after start; prints the agent's resident memory once a second and
# its peak (VmHWM). With a third argument `stream`, a `curl -sN /alerts/stream` follows it
# from the start, and the alert changes it got and was told it missed (`lagged`) are printed
# at the end. Usage: docs/absence_storm.sh BIN N [stream]   (docs/benchmarks.md, "The store").
set -eu
BIN=$(realpath "$1"); N=$2; MODE=${3:-}
W=$(mktemp -d); cd "$W"; mkdir rules
python3 -c "
import sys
with open('rules/hosts.txt','w') as f:
    for i in range(int(sys.argv[1])): f.write(f'host-{i:07d}.example.internal\n')
" "$N"
cat > rules/hb.toml <<'R'
[[rule]]
name = "hb"
severity = "high"
message = "no heartbeat from {host} for 2s: the agent on it may be down, or the network to it"
group_by = ["host"]
expect = { file = "hosts.txt" }
events.hb = 'syslog and app == "hb"'
pattern = "absent(hb) for 2s"
R
cat > cfg.toml <<'C'
[syslog]
udp = ["127.0.0.1:25514"]
tcp = ["127.0.0.1:25514"]
[rules]
paths = ["rules"]
[store]
path = "data"
[api]
listen = "127.0.0.1:29514"
C
"$BIN" run --config cfg.toml > out.log 2> err.log &
P=$!
if [ "$MODE" = stream ]; then
  for i in $(seq 1 50); do curl -s -o /dev/null 127.0.0.1:29514/health && break; sleep 0.2; done
  curl -sN 127.0.0.1:29514/alerts/stream > stream.txt &
  C=$!
fi
for i in $(seq 1 40); do
  sleep 1
  a=$(curl -s -m 1 127.0.0.1:29514/stats | python3 -c 'import sys,json; print(json.load(sys.stdin)["sink"]["alerts"])' 2>/dev/null || true)
  echo "$i s: $(grep VmRSS /proc/$P/status | awk '{print $2}') kB, alerts $a"
done
grep VmHWM /proc/$P/status
if [ "$MODE" = stream ]; then
  kill $C
  echo "streamed $(grep -c '^event: alert' stream.txt || true) missed $(grep -A1 '^event: lagged' stream.txt | grep -o '[0-9]*' | awk '{s+=$1} END{print s+0}')"
fi
kill $P; wait $P || true
rm -rf "$W"
