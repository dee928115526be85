#!/bin/sh
# Makes the API token file unless it exists: 64 hex digits from /dev/urandom, mode 0640, group
# cepheus. The unit runs it before each start (as root: `ExecStartPre=+`), so every host gets
# its own token, installed by install.sh or from a package (which must not ship one).
#
#   make-token [FILE] [GROUP]      default: /etc/cepheus/api.token cepheus
set -eu
f=${1:-/etc/cepheus/api.token}
group=${2:-cepheus}
[ -e "$f" ] && exit 0
umask 077
tmp="$f.new.$$"
trap 'rm -f "$tmp"' EXIT
od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$tmp"
echo >> "$tmp"
chgrp "$group" "$tmp"
chmod 0640 "$tmp"
mv "$tmp" "$f"
trap - EXIT
