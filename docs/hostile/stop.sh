#!/bin/bash
# stop monitor, agent (SIGTERM, by pid) and notify listener; archive logs into run dir $1
cd /tmp/audit-dos
kill $(cat mon.pid) 2>/dev/null; kill -TERM $(cat agent.pid); for i in $(seq 1 100); do kill -0 $(cat agent.pid) 2>/dev/null || break; sleep 0.2; done
kill -0 $(cat agent.pid) 2>/dev/null && echo "agent still alive after 20s"
kill $(cat notify.pid) 2>/dev/null
mkdir -p $1; mv agent.err agent.out alerts.jsonl mon.log mon.err notify.log *.out $1/ 2>/dev/null; rm -rf data
