#!/bin/bash
# The shipped binaries carry no test-only code: no test hook of the core
# (module_testing_*(), see src/log.h) and no test helper (tests/*.c).
#   tests/check_test_hooks.sh BINARY...
set -euo pipefail
status=0
for b in "$@"; do
	syms=$(nm "$b") || { echo "check_test_hooks: nm $b failed" >&2; exit 1; }
	[ -n "$syms" ] || { echo "check_test_hooks: $b has no symbols" >&2; exit 1; }
	# Sanity: the check sees the core's functions at all.
	grep -qw log_msg <<<"$syms" || { echo "check_test_hooks: $b: no log_msg?" >&2; exit 1; }
	if hooks=$(grep -E '_testing_|index_reseal' <<<"$syms"); then
		echo "$b carries test-only code:"
		echo "$hooks"
		status=1
	fi
done
exit $status
