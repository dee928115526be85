#!/usr/bin/env python3
"""A brute force for `rules/ssh.toml`: 1,000 addresses x 800 failed logins inside five
minutes, then one accepted login each (801,000 RFC 5424 lines on stdout).

    python3 docs/bench/ssh_flood.py > /tmp/ssh_flood.log
    /usr/bin/time -f '%M KB %e s' cepheus replay --rules rules/ssh.toml /tmp/ssh_flood.log
"""
import sys

out = sys.stdout
t = 0.0
for _ in range(800):
    for a in range(1000):
        t += 0.0003
        s = int(t)
        us = int((t - s) * 1e6)
        out.write(
            f"<38>1 2026-12-01T10:{s // 60:02d}:{s % 60:02d}.{us:06d}Z gw sshd 1 - - "
            f"Failed password for root from 10.{a // 250}.{a % 250}.9 port 4000 ssh2\n"
        )
t += 1
for a in range(1000):
    s = int(t)
    out.write(
        f"<38>1 2026-12-01T10:{s // 60:02d}:{s % 60:02d}.000000Z gw sshd 1 - - "
        f"Accepted password for root from 10.{a // 250}.{a % 250}.9 port 4000 ssh2\n"
    )
