#!/bin/sh
# Installs cepheus as a systemd service: the binary, the unit, its user, the configuration
# folder, the packaged configuration and rules (kept if already there), and an API token
# generated here (kept if already there). Then enables and starts the service.
#
#   sudo systemd/install.sh [BINARY]        # default: target/release/cepheus
#   DESTDIR=/tmp/root systemd/install.sh    # files only, into a staging root (packaging,
#                                           # tests): no user, no systemctl
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../target/release/cepheus}
root=${DESTDIR:-}
[ -x "$bin" ] || { echo "error: no binary at $bin (cargo build --release first)" >&2; exit 1; }

install -Dm0755 "$bin" "$root/usr/bin/cepheus"
install -Dm0644 "$here/cepheus.service" "$root/usr/lib/systemd/system/cepheus.service"
install -Dm0644 "$here/cepheus.sysusers.conf" "$root/usr/lib/sysusers.d/cepheus.conf"
install -Dm0644 "$here/cepheus.tmpfiles.conf" "$root/usr/lib/tmpfiles.d/cepheus.conf"

if [ -z "$root" ]; then
  systemd-sysusers /usr/lib/sysusers.d/cepheus.conf
  systemd-tmpfiles --create /usr/lib/tmpfiles.d/cepheus.conf
  group=cepheus
else
  mkdir -p "$root/etc/cepheus/rules"
  group=$(id -gn)
fi
etc=$root/etc/cepheus
if [ ! -e "$etc/cepheus.toml" ]; then
  install -m0640 "$here/cepheus.toml" "$etc/cepheus.toml"
  chgrp "$group" "$etc/cepheus.toml"
fi
# The shipped rules, unless the folder already holds some.
if [ -z "$(ls -A "$etc/rules" 2>/dev/null)" ]; then
  for f in "$here"/../rules/*; do
    install -m0640 "$f" "$etc/rules/"
    chgrp "$group" "$etc/rules/$(basename "$f")"
  done
fi
# 32 random bytes as hex: readable by root and the service's group only.
if [ ! -e "$etc/api.token" ]; then
  (umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$etc/api.token" && echo >> "$etc/api.token")
  chgrp "$group" "$etc/api.token"
  chmod 0640 "$etc/api.token"
fi

if [ -z "$root" ]; then
  /usr/bin/cepheus config check /etc/cepheus/cepheus.toml
  systemctl daemon-reload
  systemctl enable --now cepheus
  echo "cepheus is running: systemctl status cepheus; cepheus alerts (as root or a member of group cepheus)"
fi
