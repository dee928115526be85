#!/bin/bash
# An absence storm of N expected hosts firing at once, followed by `curl -sN /alerts/stream`:
# prints the alert changes made, streamed, and missed (lagged). Usage: docs/stream_storm.sh BIN N
# (docs/benchmarks.md, "The store").
BIN=$1; N=$2
W=$(mktemp -d); cd $W; mkdir rules
python3 -c "
import sys
with open('rules/hosts.txt','w') as f:
    for i in range($N): f.write(f'host-{i:07d}\n')
"
cat > rules/hb.toml <<'R'
[[rule]]
name = "hb"
severity = "high"
group_by = ["host"]
expect = { file = "hosts.txt" }
events.hb = 'syslog and app == "hb"'
pattern = "absent(hb) for 3s"
R
cat > cfg.toml <<'C'
[syslog]
udp = []
tcp = ["127.0.0.1:25517"]
[rules]
paths = ["rules"]
[store]
path = "data"
[api]
listen = "127.0.0.1:29517"
[output]
stdout = false
C
$BIN run --config cfg.toml > out.log 2> err.log &
P=$!
for i in 1 2 3 4 5 6 7 8 9 10; do curl -s -o /dev/null 127.0.0.1:29517/health && break; sleep 0.2; done
curl -sN 127.0.0.1:29517/alerts/stream > stream.txt &
C=$!
sleep 15
curl -s 127.0.0.1:29517/stats | python3 -c 'import sys,json; j=json.load(sys.stdin); print("alerts", j["sink"]["alerts"], end=" ")'
kill $C
echo "streamed $(grep -c '^event: alert' stream.txt) missed $(grep -A1 '^event: lagged' stream.txt | grep -o '[0-9]*' | awk '{s+=$1} END{print s+0}')"
kill $P; wait $P 2>/dev/null
cd /; rm -rf $W
