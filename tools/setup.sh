#!/bin/bash
# Installs what bucketfs needs to build and test on Debian 12, as root:
# Debian packages through apt-get (Ceph RGW's among them, for
# tests/rgw/rgw.sh), and s3rver (the independent test S3
# server) from npm into tests/s3rver/node_modules.  Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang's sanitizer and libFuzzer runtimes (libclang-rt-14-dev) are only
# a recommendation of clang: named here, for the TSan and fuzz builds; llvm
# brings llvm-symbolizer, for sanitizer reports with function names.
packages=(
	build-essential meson ninja-build pkg-config clang libclang-rt-14-dev
	llvm libfuse3-dev fuse3 libcurl4-openssl-dev libssl-dev libxml2-dev
	libglib2.0-dev libjson-glib-dev libxxhash-dev python3 python3-botocore
	python3-numpy
	curl clang-format
	debhelper
	radosgw ceph-mon ceph-osd ceph-common
)
# Node.js may come from elsewhere (this machine's nodejs bundles npm, and
# Debian's npm then conflicts with it): Debian's only when npm is missing.
command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
	# A here-string, not a pipe: grep -q stops at the match, and under
	# pipefail a writer it left behind would fail the test (SIGPIPE).
	grep -q "ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" ||
		missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ] || [ "${BFS_APT_UPDATE:-0}" = 1 ]; then
	echo "setup: apt-get install ${missing[*]:-(refresh)}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

if [ ! -x tests/s3rver/node_modules/.bin/s3rver ]; then
	echo "setup: npm ci (s3rver)"
	(cd tests/s3rver && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "setup: done"
