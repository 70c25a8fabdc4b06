#!/bin/bash
# Runs one libFuzzer target for a bounded time:
#   run_fuzz.sh FUZZER SECONDS CORPUS_DIR SEED_DIR...
# New inputs go to CORPUS_DIR (created), a crash to CORPUS_DIR/../crash-*.
# The exit status is non-zero on a crash, a leak, a sanitizer report, a
# failed check or a timeout.
set -euo pipefail
fuzzer=$1 seconds=$2 corpus=$3
shift 3
mkdir -p "$corpus"
name=$(basename "$fuzzer")
# fuzz_index writes and fsyncs an index per input: tmpfs is much faster.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# libFuzzer reports a crash with 77 by default, which meson takes for
# "skipped": hence -error_exitcode and -timeout_exitcode.  One job each:
# meson runs the targets in parallel on the shared cores.
exec "$fuzzer" -max_total_time="$seconds" -timeout=25 \
	-error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
	-artifact_prefix="$(dirname "$corpus")/crash-$name-" "$corpus" "$@"
