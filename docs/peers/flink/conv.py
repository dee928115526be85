#!/usr/bin/env python3
"""Flink peer CSV -> input for `cepheus replay` (stdlib only).

Reads the header-less CSV of ../shared/peers/flink/gen_events.py
    epoch_ms,host,program,src_ip,outcome,message
in file (arrival) order and writes one event per line, in the same order:

  --format json (default): cepheus JSON-lines events
      {"source":"syslog","time":"<epoch_ms as RFC 3339, ms>","host":H,"app":PROGRAM,"msg":MESSAGE}
      `arrival` is left out (it defaults to `time`): the replay clock is then the
      largest stamp seen, so an event-time rule's watermark is max(time) - max_delay,
      Flink's `WATERMARK FOR ts AS ts - INTERVAL '5' SECOND`.
  --format syslog: RFC 5424 lines
      <PRI>1 TIMESTAMP HOST APP - - - MESSAGE

src_ip and outcome are not separate fields: the generator's sshd messages already carry
them the way OpenSSH writes them ("Failed password for root from 10.0.0.48 port 22 ssh2",
"Accepted password for alice from ..."), so the rules capture src with a regex.

usage: conv.py [--format json|syslog] IN.csv [OUT]     (OUT default: stdout)
"""
import datetime
import json
import sys

PRI = {"sshd": 38, "heartbeat": 14, "kernel": 6, "cron": 78, "nginx": 134, "systemd": 30}
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def stamp(ms):
    # integer arithmetic: exact milliseconds, no float rounding
    d = EPOCH + datetime.timedelta(milliseconds=ms)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (ms % 1000)


def main(argv):
    fmt = "json"
    if len(argv) > 1 and argv[0] == "--format":
        fmt, argv = argv[1], argv[2:]
    if fmt not in ("json", "syslog") or not 1 <= len(argv) <= 2:
        sys.exit(__doc__)
    out = open(argv[1], "w") if len(argv) == 2 else sys.stdout
    w = out.write
    with open(argv[0]) as f:
        for line in f:
            ms, host, prog, _src, _outcome, msg = line.rstrip("\n").split(",", 5)
            ts = stamp(int(ms))
            if fmt == "json":
                w(json.dumps({"source": "syslog", "time": ts, "host": host,
                              "app": prog, "msg": msg}, separators=(",", ":")) + "\n")
            else:
                w("<%d>1 %s %s %s - - - %s\n" % (PRI.get(prog, 13), ts, host, prog, msg))
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main(sys.argv[1:])
