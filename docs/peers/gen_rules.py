#!/usr/bin/env python3
"""cepheus rules for R = 10**j heartbeat rules (rule i: hosts whose name ends in the
j-digit number i, as ../shared/peers/gen_rules.py does for SEC and syslog-ng) + the brute-force rule.
usage: gen_rules.py R [processing] > rules.toml"""
import sys
R = int(sys.argv[1]); j = len(str(R)) - 1
assert R == 10 ** j
tm = "" if len(sys.argv) > 2 and sys.argv[2] == "processing" else 'time     = "event"\n'
for i in range(R):
    sfx = "%0*d" % (j, i) if j else ""
    cond = 'syslog and app == "heartbeat" and msg starts_with "alive"' + (' and host ends_with "%s"' % sfx if sfx else "")
    print('[[rule]]\nname     = "hb-%s"\nseverity = "critical"\nmessage  = "no heartbeat from {host} for 30s"\n'
          'group_by = ["host"]\n%sevents.hb = \'%s\'\npattern  = "absent(hb) for 30s"\n' % (sfx or "all", tm, cond))
print('''[[rule]]
name     = "bf"
severity = "high"
message  = "{user} logged in from {src} after a brute force"
group_by = ["src"]
%sevents.fail = 'syslog and app == "sshd" and msg =~ "Failed password for (?:invalid user )?(?P<user>\\S+) from (?P<src>[0-9.]+) port"'
events.ok   = 'syslog and app == "sshd" and msg =~ "Accepted \\S+ for (?P<user>\\S+) from (?P<src>[0-9.]+) port"'
pattern  = "seq(fail{5,}, ok) within 5m"''' % tm)
