# Sourced (from fuzz/) by smoke.sh and replay.sh: how the targets are built on stable Rust.
# cargo-fuzz's instrumentation, without ASan (stable has no -Zsanitizer); see README.md. Debug
# assertions and overflow checks come from fuzz/Cargo.toml's release profile. `--target
# "$TRIPLE"` is required, or the flags reach build scripts and proc-macros and linking fails.
TRIPLE=x86_64-unknown-linux-gnu
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
export CARGO_TARGET_DIR="$PWD/target"
