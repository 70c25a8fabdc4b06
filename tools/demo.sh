#!/bin/bash
# Sets up and builds bucketfs, starts the bundled test S3 server on
# loopback with a sample dataset (1,000 RetinaNet-shaped objects of
# 322,624 bytes under train/), and runs the main job against it:
# bucketfs-doctor (the preflight of every endpoint), then a real mount that
# lists the bucket once into an index, and ls, stat and cat through it.
# Unmounts and stops the server after, also when a step fails.
#
#   tools/demo.sh [--no-setup] [--build DIR]
#
# --no-setup skips tools/setup.sh.  --build DIR runs the binaries of the
# meson build DIR as they are (the test suite's own build, e.g. an ASan
# one); without it, build/ is set up if missing and compiled.
set -euo pipefail
cd "$(dirname "$0")/.."

setup=1 build=
while [ $# -gt 0 ]; do
	case "$1" in
	--no-setup) setup=0 ;;
	--build) build=${2:?demo: --build needs a directory}; shift ;;
	*) echo "usage: tools/demo.sh [--no-setup] [--build DIR]" >&2; exit 2 ;;
	esac
	shift
done
[ "$setup" = 0 ] || tools/setup.sh
if [ -z "$build" ]; then
	build=build
	[ -d build ] || meson setup build >/dev/null
	meson compile -C build >/dev/null
fi
[ -x "$build/fs/bucketfs" ] || { echo "demo: no bucketfs in $build" >&2; exit 1; }

tmp=$(mktemp -d)
server_pid=
cleanup() {
	mountpoint -q "$tmp/mnt" 2>/dev/null && fusermount3 -u "$tmp/mnt"
	[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

/usr/bin/python3 tests/s3server/s3server.py --port 0 --port-file "$tmp/port" \
	--quiet --synthetic demo:1000:322624 >/dev/null &
server_pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || { echo "demo: the test S3 server did not start" >&2; exit 1; }
endpoint="http://127.0.0.1:$(cat "$tmp/port")"

export AWS_ACCESS_KEY_ID=bucketfs-test AWS_SECRET_ACCESS_KEY=bucketfs-test-secret
echo "demo: test S3 server at $endpoint, bucket 'demo' (1,000 objects)"
run() { echo "\$ $*"; "$@"; }
run "$build/tools/bucketfs-doctor" -o "endpoint=$endpoint" s3://demo/train/
echo
mkdir "$tmp/mnt"
run "$build/fs/bucketfs" -o "endpoint=$endpoint,index=$tmp/demo.idx" s3://demo "$tmp/mnt"
run ls "$tmp/mnt"
# sed, not head: head would exit after 4 lines and ls die of SIGPIPE,
# which pipefail makes the script's exit status (141).
echo "\$ ls -l $tmp/mnt/train | sed -n 1,4p"
ls -l "$tmp/mnt/train" | sed -n 1,4p
echo "\$ ls $tmp/mnt/train | wc -l"
ls "$tmp/mnt/train" | wc -l
run stat -c '%n: %s bytes, inode %i' "$tmp/mnt/train/img_0042_of_1000.jpeg"
echo "\$ cat $tmp/mnt/train/img_0042_of_1000.jpeg | md5sum"
cat "$tmp/mnt/train/img_0042_of_1000.jpeg" | md5sum
run "$build/tools/bucketfs-index" info -o "endpoint=$endpoint,index=$tmp/demo.idx" s3://demo
run fusermount3 -u "$tmp/mnt"
