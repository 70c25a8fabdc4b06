#!/bin/bash
# Sets up, builds and runs the whole bucketfs test suite: unit tests, the
# test S3 server's suite and the integration tests (real servers on
# loopback), first in a normal build with warnings as errors, then again in
# an ASan+UBSan build.  Ends with one line "tests: N passed, N failed".
#
#   tools/run-tests.sh [--no-setup] [--no-sanitize] [MESON_TEST_ARGS...]
set -uo pipefail
cd "$(dirname "$0")/.."

setup=1 sanitize=1
while [ $# -gt 0 ]; do
	case "$1" in
	--no-setup) setup=0 ;;
	--no-sanitize) sanitize=0 ;;
	*) break ;;
	esac
	shift
done

if [ "$setup" = 1 ]; then
	tools/setup.sh || { echo "tests: setup failed"; exit 1; }
fi

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=98
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp

builds=(build)
[ "$sanitize" = 1 ] && builds+=(build-asan)

status=0
for b in "${builds[@]}"; do
	opts=(-Dwerror=true)
	[ "$b" = build-asan ] &&
		opts+=(-Db_sanitize=address,undefined -Db_lundef=false)
	if [ -d "$b" ]; then
		meson setup --reconfigure "$b" "${opts[@]}" >/dev/null
	else
		meson setup "$b" "${opts[@]}" >/dev/null
	fi || { echo "tests: meson setup $b failed"; exit 1; }
	meson compile -C "$b" || { echo "tests: build $b failed"; exit 1; }
	echo "== $b: meson test"
	meson test -C "$b" --print-errorlogs "$@" || status=1
done

# One closing line for all builds, from meson's own logs.
/usr/bin/python3 - "${builds[@]}" <<'PY'
import json, sys
ok = fail = skip = 0
for b in sys.argv[1:]:
    try:
        lines = open(f"{b}/meson-logs/testlog.json").read().splitlines()
    except OSError:
        continue
    for line in lines:
        r = json.loads(line)["result"]
        if r in ("OK", "EXPECTEDFAIL"):
            ok += 1
        elif r == "SKIP":
            skip += 1
        else:
            fail += 1
print(f"tests: {ok} passed, {fail} failed, {skip} skipped")
PY
exit $status
