#!/usr/bin/env bash
# tests/ci/fuzz.sh TARGET SECONDS: runs one cargo-fuzz target (fuzz/fuzz_targets/TARGET.rs) for
# SECONDS from its committed seeds (fuzz/seeds/TARGET/), in the build FUZZ_PROFILE names (--dev or
# --release). `make fuzz` grows fuzz/corpus/TARGET/; `make test-fuzz` starts from the seeds alone
# each time (target/fuzz-corpus/, emptied first). Fails on a crash, a timeout or the memory limit
# (Makefile's FUZZ_TIMEOUT, FUZZ_RSS_MB), printing the end of libFuzzer's log.
set -u
t=$1; seconds=$2
profile=${FUZZ_PROFILE:---release}
max_len=65536; [ "$t" = gguf ] && max_len=300000
if [ "$profile" = --release ]; then corpus=fuzz/corpus/$t; else corpus=target/fuzz-corpus/$t; rm -rf "$corpus"; fi
mkdir -p "$corpus" target/fuzz-logs
log=target/fuzz-logs/$t.log
cargo +"${NIGHTLY:-nightly}" fuzz run "$profile" --sanitizer none "$t" "$corpus" "fuzz/seeds/$t" -- \
  -max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb="${FUZZ_RSS_MB:-3072}" \
  -max_len="$max_len" -print_final_stats=1 > "$log" 2>&1
rc=$?
runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
if [ $rc = 0 ]; then
  echo "fuzz $t: ${runs:-?} inputs in ${seconds} s, no failure"
else
  echo "fuzz $t FAILED (exit $rc; the input is in fuzz/artifacts/$t/; the whole log: $log):"
  grep -A1 -E "panicked at|ERROR: libFuzzer|SUMMARY|Test unit written|Base64" "$log" | head -n 12
fi
exit $rc
