#!/bin/bash
# start notify listener + agent (copy of /tmp/cepheus-audit2 named cdosbin, systemd watchdog 10s) + monitor
cd /tmp/audit-dos
(setsid python3 notify_listen.py > /dev/null 2>&1 < /dev/null & echo $! > notify.pid)
sleep 0.5
(NOTIFY_SOCKET=/tmp/audit-dos/notify.sock WATCHDOG_USEC=10000000 setsid ./cdosbin run --config /tmp/audit-dos/${CFG:-cfg.toml} > agent.out 2> agent.err < /dev/null & echo $! > agent.pid)
sleep 1.5
(setsid python3 monitor.py $(cat agent.pid) mon.log > mon.err 2>&1 < /dev/null & echo $! > mon.pid)
