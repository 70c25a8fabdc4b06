#!/bin/bash
# Installs what the benchmark rig (tools/bench/run.py) needs on Debian 12, as
# root: the project's own build and test dependencies (tools/setup.sh), then
# nginx (the fast GET path) with its echo module (the latency rig's
# first-byte delay), the peers s3fs and rclone, fio, numpy (np.load of .npz
# files, as DLIO's UNet3D reader), matplotlib for the charts, gnuplot,
# prlimit (util-linux), curl and iproute2 (the wire's network namespace).
# Safe to run again: it only calls apt-get when something is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

tools/setup.sh

packages=(nginx libnginx-mod-http-echo s3fs rclone fio python3-matplotlib python3-numpy
	gnuplot-nox curl util-linux fuse3 iproute2)
missing=()
for p in "${packages[@]}"; do
	# A here-string, not a pipe: grep -q stops at the match, and under
	# pipefail a writer it left behind would fail the test (SIGPIPE).
	grep -q "ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" ||
		missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
	echo "bench setup: apt-get install ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# policy-rc.d keeps the nginx package from starting a system nginx on :80.
	rc_created=0
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		rc_created=1
	fi
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		status=$?
	[ "$rc_created" = 1 ] && rm -f /usr/sbin/policy-rc.d
	[ "${status:-0}" = 0 ] || exit "$status"
fi
echo "bench setup: done"
