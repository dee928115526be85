#!/usr/bin/env bash
# Builds every fuzz target on stable Rust and runs each for N seconds (default 20): a CI
# compile + smoke step. Exits non-zero if a build fails or a target crashes, times out or
# runs out of memory (the reproducer is written to artifacts/<target>/).
#
#   fuzz/smoke.sh            # 20 s per target
#   fuzz/smoke.sh 600        # 10 min per target
#   TARGETS="syslog pcap" fuzz/smoke.sh 60
#
# Everything stays under fuzz/: build in fuzz/target, working corpora in fuzz/corpus (both
# ignored by git), seeds from fuzz/seeds plus the repository's own rule files and captures.
set -euo pipefail

cd "$(dirname "$0")"
SECS="${1:-20}"
TARGETS="${TARGETS:-rules engine engine_batch reshard reload syslog pcap texts rules_test}"
# shellcheck source=env.sh
source env.sh

start=$(date +%s)
nice -n 10 cargo build --release --target "$TRIPLE" --bins
built=$(date +%s)
echo "smoke: build took $((built - start)) s"

# The longest input each target is given.
max_len() {
    case "$1" in
        rules) echo 8192 ;;
        engine | engine_batch | reshard | reload) echo 4096 ;;
        syslog) echo 4096 ;;
        pcap) echo 65536 ;;
        texts | rules_test) echo 8192 ;;
    esac
}

# Seeds: fuzz/seeds/<target>, plus the shipped rules (rules), the test captures (pcap) and the
# shipped configuration (texts).
seed() {
    local t="$1" dir="corpus/$1"
    mkdir -p "$dir"
    if [ -d "seeds/$t" ]; then cp -n seeds/"$t"/* "$dir"/ 2>/dev/null || true; fi
    case "$t" in
        rules) cp -n ../rules/*.toml "$dir"/ 2>/dev/null || true ;;
        texts) { printf '\0'; cat ../systemd/cepheus.toml; } > "$dir/shipped-config" ;;
        pcap)
            for f in ../agent/tests/data/pcap/*.pcap ../agent/tests/data/pcap/*.pcapng \
                ../agent/tests/data/synthetic/*.pcap; do
                # Captures larger than max_len would be cut; the large ones are left out.
                if [ -f "$f" ] && [ "$(stat -c %s "$f")" -le "$(max_len pcap)" ]; then
                    cp -n "$f" "$dir"/
                fi
            done
            ;;
    esac
}

for t in $TARGETS; do
    seed "$t"
    mkdir -p "artifacts/$t"
    dict=()
    if [ -f "dicts/$t.dict" ]; then dict=("-dict=dicts/$t.dict"); fi
    # (`rules test` reports on stdout and stderr: not kept, the log would fill up; libFuzzer
    # still writes its own lines.)
    if [ "$t" = rules_test ]; then dict+=("-close_fd_mask=3"); fi
    echo "smoke: $t for $SECS s"
    log="corpus/$t.log"
    status=0
    nice -n 10 "target/$TRIPLE/release/$t" "corpus/$t" "${dict[@]}" \
        -max_total_time="$SECS" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$log" 2>&1 || status=$?
    grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)|==[0-9]+== ERROR|SUMMARY|thread .* panicked|.*Test unit written)' "$log" || true
    if [ "$status" -ne 0 ]; then
        tail -n 60 "$log" >&2
        echo "smoke: $t FAILED (exit $status); reproducer in fuzz/artifacts/$t/, log in fuzz/$log" >&2
        exit "$status"
    fi
done
echo "smoke: all done in $(($(date +%s) - start)) s"
