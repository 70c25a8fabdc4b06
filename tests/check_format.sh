#!/bin/bash
# The C sources match .clang-format (STYLE.md).  Skips (77) without
# clang-format.
cd "${BFS_SOURCE_DIR:-$(dirname "$0")/..}" || exit 1
command -v clang-format >/dev/null || { echo "no clang-format"; exit 77; }
bad=0
while IFS= read -r -d '' f; do
	if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
		echo "not formatted: $f (clang-format -i $f)"
		bad=1
	fi
done < <(find src fs tools tests -name '*.[ch]' -print0)
exit $bad
