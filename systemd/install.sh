#!/bin/sh
# Installs cepheus as a systemd service: the binary, the unit, its user, the configuration
# folder, the packaged configuration and rules (kept if already there), and an API token
# (kept if already there). Then enables and (re)starts the service.
#
#   sudo systemd/install.sh [BINARY]        # default: target/release/cepheus
#   DESTDIR=/tmp/root systemd/install.sh    # files only, into a staging root (packaging,
#                                           # tests): no user, no token (each host makes its
#                                           # own at first start), no systemctl
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../target/release/cepheus}
root=${DESTDIR:-}
[ -x "$bin" ] || { echo "error: no binary at $bin (cargo build --release first)" >&2; exit 1; }

install -Dm0755 "$bin" "$root/usr/bin/cepheus"
install -Dm0644 "$here/cepheus.service" "$root/usr/lib/systemd/system/cepheus.service"
install -Dm0644 "$here/cepheus.sysusers.conf" "$root/usr/lib/sysusers.d/cepheus.conf"
install -Dm0644 "$here/cepheus.tmpfiles.conf" "$root/usr/lib/tmpfiles.d/cepheus.conf"
install -Dm0755 "$here/make-token.sh" "$root/usr/lib/cepheus/make-token"

if [ -z "$root" ]; then
  systemd-sysusers /usr/lib/sysusers.d/cepheus.conf
  systemd-tmpfiles --create /usr/lib/tmpfiles.d/cepheus.conf
  group=cepheus
else
  # The group is set where the package is installed (cepheus.tmpfiles.conf), not here: the
  # builder's group means nothing there.
  install -d -m0750 "$root/etc/cepheus" "$root/etc/cepheus/rules"
  group=
fi
etc=$root/etc/cepheus
if [ ! -e "$etc/cepheus.toml" ]; then
  install -m0640 "$here/cepheus.toml" "$etc/cepheus.toml"
  [ -z "$group" ] || chgrp "$group" "$etc/cepheus.toml"
fi
# The shipped rules, unless the folder already holds some; their hosts.txt without the
# example hosts (web-1, web-2, db-1), which would alert as silent a minute after the start:
# until the operator lists the fleet, each host is watched from its first heartbeat.
if [ -z "$(ls -A "$etc/rules" 2>/dev/null)" ]; then
  for f in "$here"/../rules/*; do
    # Rule files and the lists they read; not their tests (they belong to the source
    # tree) nor folders.
    [ -f "$f" ] || continue
    case "$f" in *.test.toml) continue ;; esac
    install -m0640 "$f" "$etc/rules/"
    [ -z "$group" ] || chgrp "$group" "$etc/rules/$(basename "$f")"
  done
  if [ -f "$etc/rules/hosts.txt" ]; then
    sed -i '/^[[:space:]]*[^#[:space:]]/d' "$etc/rules/hosts.txt"
    echo "# (None listed yet: each host is watched from its first heartbeat.)" >>"$etc/rules/hosts.txt"
  fi
fi
if [ -z "$root" ]; then
  # (The unit makes it too, before each start, if it is missing.)
  /usr/lib/cepheus/make-token /etc/cepheus/api.token cepheus
  /usr/bin/cepheus config check /etc/cepheus/cepheus.toml
  systemctl daemon-reload
  systemctl enable cepheus
  # A restart, so an upgrade runs the new binary (it starts the service if it was not).
  systemctl restart cepheus
  echo "cepheus is running: systemctl status cepheus; cepheus alerts (as root or a member of group cepheus)"
fi
