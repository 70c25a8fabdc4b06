#!/bin/bash
# Builds the Debian package of bucketfs from this source tree:
#
#   packaging/build-deb.sh [OUTDIR]      (default OUTDIR: the current dir)
#
# dpkg-buildpackage wants debian/ at the root of the source, and writes next
# to it: so this copies the tree (the files git knows and new ones not
# ignored, or without git the tree minus build directories) into a
# temporary directory, puts packaging/debian there as debian/, runs
# dpkg-buildpackage -us -uc -b, and moves the .deb into OUTDIR.
# DEB_BUILD_OPTIONS=nocheck skips the unit tests.  Needs debhelper,
# dpkg-dev and the Build-Depends of packaging/debian/control
# (dpkg-checkbuilddeps says which are missing).
set -euo pipefail

src="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mkdir -p "${1:-.}" && cd "${1:-.}" && pwd)"
tmp="$(mktemp -d /tmp/bucketfs-deb.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

mkdir "$tmp/bucketfs"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	# Files deleted in the working tree but still in the index are skipped.
	(cd "$src" && git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do
			[ -e "$f" ] && printf '%s\0' "$f"
		done | tar --null -T - -cf -) | tar -xf - -C "$tmp/bucketfs"
else
	tar -C "$src" --exclude=./.git --exclude='./build*' \
		--exclude=./tests/s3rver/node_modules -cf - . |
		tar -xf - -C "$tmp/bucketfs"
fi
rm -rf "$tmp/bucketfs/debian"
cp -a "$src/packaging/debian" "$tmp/bucketfs/debian"

(cd "$tmp/bucketfs" && dpkg-checkbuilddeps && dpkg-buildpackage -us -uc -b)
for f in "$tmp"/*.deb; do
	mv "$f" "$out/"
	echo "built $out/$(basename "$f")"
done
