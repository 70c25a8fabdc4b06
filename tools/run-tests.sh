#!/bin/bash
# Sets up, builds and runs the whole bucketfs test suite: unit tests, the
# test S3 server's suite and the integration tests (real servers on
# loopback), first in a normal build with warnings as errors, then again in
# an ASan+UBSan build, then the unit tests and the threaded integration
# tests (suite 'threads') in a TSan build (clang), then the libFuzzer targets for a bounded time (clang,
# tests/fuzz).  One Ceph RGW (tests/rgw/rgw.sh) serves every build's
# integration tests and is stopped at the end, also on failure.  Ends with one line "tests: N passed, N failed, N skipped".
#
#   tools/run-tests.sh [--no-setup] [--no-sanitize] [--no-tsan] [--no-fuzz]
#                      [MESON_TEST_ARGS...]
#
# --no-sanitize skips every sanitizer build (ASan, TSan, fuzz).  Extra
# arguments go to meson test in every build but the fuzz one, which always
# runs its own suite.  Build directories are build, build-asan, build-tsan
# and build-fuzz, under $BFS_BUILD_PREFIX if set (e.g. /tmp/ci/).
#
# Sanitizer reports: every instrumented process (the daemons in the
# background too, whose exit status no test may see) writes its report to
# <builddir>/sanitizer-logs/ instead of stderr.  Each process that wrote a
# report there counts as one failed test, and the reports are printed.
set -uo pipefail
cd "$(dirname "$0")/.."

setup=1 sanitize=1 tsan=1 fuzz=1
while [ $# -gt 0 ]; do
	case "$1" in
	--no-setup) setup=0 ;;
	--no-sanitize) sanitize=0 tsan=0 fuzz=0 ;;
	--no-tsan) tsan=0 ;;
	--no-fuzz) fuzz=0 ;;
	*) break ;;
	esac
	shift
done

if [ "$setup" = 1 ]; then
	tools/setup.sh || { echo "tests: setup failed"; exit 1; }
fi

prefix=${BFS_BUILD_PREFIX:-}
if ! command -v clang >/dev/null && [ "$((tsan + fuzz))" -gt 0 ]; then
	echo "run-tests: no clang: skipping the TSan and fuzz builds"
	tsan=0 fuzz=0
fi

builds=(build)
[ "$sanitize" = 1 ] && builds+=(build-asan)
[ "$tsan" = 1 ] && builds+=(build-tsan)
[ "$fuzz" = 1 ] && builds+=(build-fuzz)

# One Ceph RGW for the whole run (tests/rgw/rgw.sh): the integration
# tests of every build use it through BFS_RGW_* (harness.RGW), each in a
# bucket of its own.  If it cannot start, the RGW tests start their own
# and fail with the reason.
rgw_dir=$(mktemp -d /tmp/bfs-suite-rgw.XXXXXX)
stop_rgw() {
	[ -n "$rgw_dir" ] && bash tests/rgw/rgw.sh stop "$rgw_dir"
	rgw_dir=
}
trap stop_rgw EXIT
trap 'stop_rgw; exit 130' INT TERM
if bash tests/rgw/rgw.sh start "$rgw_dir"; then
	set -a
	# shellcheck disable=SC1091
	. "$rgw_dir/env"
	set +a
else
	echo "run-tests: Ceph RGW did not start (above); its tests will fail"
	bash tests/rgw/rgw.sh stop "$rgw_dir"
	rgw_dir=
fi

supp=$PWD/tests
status=0
reports=()
for name in "${builds[@]}"; do
	b=$prefix$name
	logs=$PWD/$b/sanitizer-logs
	[ "${b:0:1}" = / ] && logs=$b/sanitizer-logs
	opts=(-Dwerror=true)
	cc=${CC:-}
	targs=("$@")
	env=()
	case "$name" in
	build-asan)
		opts+=(-Db_sanitize=address,undefined -Db_lundef=false)
		env=("ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99:log_path=$logs/asan"
		     "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=98:log_path=$logs/ubsan"
		     "LSAN_OPTIONS=suppressions=$supp/lsan.supp") ;;
	build-tsan)
		cc=clang
		# tests/tsan_glib.h shows TSan our GMutex and GCond calls.
		opts+=(-Db_sanitize=thread -Db_lundef=false
		       "-Dc_args=-include $PWD/tests/tsan_glib.h")
		# GSlice hands memory between threads inside GLib, where TSan
		# cannot see it: plain malloc instead (GLib >= 2.76 always).
		env=("TSAN_OPTIONS=halt_on_error=0:exitcode=66:second_deadlock_stack=1:suppressions=$supp/tsan.supp:log_path=$logs/tsan"
		     "G_SLICE=always-malloc")
		# Unit, and the integration tests whose daemon runs several
		# threads at once (tests/meson.build: suite 'threads').
		targs=(--suite unit --suite threads --timeout-multiplier 3 "$@") ;;
	build-fuzz)
		cc=clang
		opts+=(-Dfuzz=true -Db_sanitize=address,undefined
		       -Db_lundef=false)
		env=("ASAN_OPTIONS=detect_leaks=1"
		     "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"
		     "LSAN_OPTIONS=suppressions=$supp/lsan.supp")
		targs=(--suite fuzz) ;;
	*)
		env=("ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99"
		     "LSAN_OPTIONS=suppressions=$supp/lsan.supp") ;;
	esac
	# meson configure, not setup --reconfigure: meson 1.0 ignores a
	# changed c_args there.
	if [ -d "$b" ]; then
		meson configure "$b" "${opts[@]}" >/dev/null
	else
		CC=$cc meson setup "$b" "${opts[@]}" >/dev/null
	fi || { echo "tests: meson setup $b failed"; exit 1; }
	meson compile -C "$b" || { echo "tests: build $b failed"; exit 1; }
	rm -rf "$logs"
	mkdir -p "$logs"
	echo "== $b: meson test ${targs[*]}"
	start=$SECONDS
	env "${env[@]}" meson test -C "$b" --print-errorlogs "${targs[@]}" ||
		status=1
	echo "== $b: $((SECONDS - start)) s"
	n=$(find "$logs" -type f | wc -l)
	if [ "$n" -gt 0 ]; then
		echo "== $b: sanitizer reports from $n processes ($logs):"
		# sed -n, not head: no writer is cut off (SIGPIPE, pipefail).
		grep -h "SUMMARY:" "$logs"/* | sort | uniq -c | sort -rn |
			sed -n 1,40p
		echo "-- the first report in full:"
		sed -n 1,80p "$(find "$logs" -type f | sort | sed -n 1p)"
		status=1
	fi
	reports+=("$b=$n")
done

# One closing line for all builds, from meson's own logs; each process
# with a sanitizer report counts as one more failure.
/usr/bin/python3 - "${reports[@]}" <<'PY'
import json, sys
ok = fail = skip = 0
for arg in sys.argv[1:]:
    b, _, n = arg.rpartition("=")
    fail += int(n)
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
