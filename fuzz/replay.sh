#!/usr/bin/env bash
# Builds every fuzz target on stable Rust and runs each, once, on its saved reproducers
# (fuzz/artifacts/<target>/, the inputs that once crashed, hung or diverged) and its seeds
# (fuzz/seeds/<target>/): deterministic, a few seconds after the build, so CI can run it
# (timed fuzzing is smoke.sh's job; see README.md). Exits non-zero if one fails.
set -euo pipefail

cd "$(dirname "$0")"
# shellcheck source=env.sh
source env.sh

start=$(date +%s)
cargo build --release --target "$TRIPLE" --bins
echo "fuzz replay: build took $(($(date +%s) - start)) s"

for t in rules engine engine_batch reshard reload syslog pcap texts rules_test; do
    inputs=()
    for d in "artifacts/$t" "seeds/$t"; do
        [ -d "$d" ] || continue
        while IFS= read -r -d '' f; do
            # `*.txt` beside a reproducer says what it is; it is no input.
            case "$f" in *.txt) continue ;; esac
            inputs+=("$f")
        done < <(find "$d" -type f -print0 | sort -z)
    done
    if [ "${#inputs[@]}" -eq 0 ]; then
        continue
    fi
    echo "fuzz replay: $t on ${#inputs[@]} inputs"
    # -runs=1 with files: each is run once; a panic, a hang (-timeout) or a divergence fails.
    "target/$TRIPLE/release/$t" -runs=1 -timeout=20 -rss_limit_mb=2048 "${inputs[@]}" \
        >"target/replay-$t.log" 2>&1 || {
        tail -n 40 "target/replay-$t.log" >&2
        echo "fuzz replay: $t FAILED" >&2
        exit 1
    }
done
echo "fuzz replay: all clean in $(($(date +%s) - start)) s"
