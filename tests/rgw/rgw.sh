#!/bin/bash
# A private Ceph RGW on loopback, for the tests: one mon, one bluestore OSD
# on a sparse file and radosgw (beast) on a free 127.0.0.1 port, every
# piece of state, log and pid file under DIR.  As root, with Debian's
# radosgw ceph-mon ceph-osd ceph-common (tools/setup.sh installs them).
#
#   tests/rgw/rgw.sh start DIR   brings it up; prints the endpoint and
#                                writes DIR/env (BFS_RGW_URL, BFS_RGW_AK,
#                                BFS_RGW_SK, BFS_RGW_DIR), shell syntax
#   tests/rgw/rgw.sh stop DIR    stops exactly the daemons started in DIR
#                                (by their pid files) and removes DIR
#
# DIR must not exist yet (or be empty) for start.  A failed start names the
# daemon that failed, shows its log tail, and stops what it had started.
# Facts: auth none needs "ms mon client mode = crc", or radosgw
# hangs on get_initial_auth_request returned -13; a single OSD needs pool
# size 1 and chooseleaf type 0.
set -uo pipefail

AK=${BFS_RGW_AK:-bucketfs-rgw-test}
SK=${BFS_RGW_SK:-bucketfs-rgw-test-secret}
DAEMONS=(mon.a osd.0 client.rgw.0)

die() {
	echo "rgw.sh: $*" >&2
	exit 1
}

# free_port: a loopback port that nothing listens on now.
free_port() {
	/usr/bin/python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The log of daemon $1 (mon.a, osd.0, client.rgw.0), and what it printed.
show_log() {
	local name=$1 f
	for f in "$dir/log/$name.log" "$dir/log/$name.out"; do
		[ -s "$f" ] || continue
		echo "---- last lines of $f:" >&2
		tail -n 25 "$f" >&2
	done
}

# fail DAEMON WHAT: names the daemon, shows its log, stops the rest.
fail() {
	local name=$1
	shift
	echo "rgw.sh: $name: $*" >&2
	show_log "$name"
	stop_daemons
	exit 1
}

# ceph CLI with a bound wait (it retries forever on a dead mon).
cephc() {
	timeout 60 ceph -c "$conf" --connect-timeout 30 "$@"
}

# alive PID: the process is ours (runs with this DIR's config).
alive() {
	local pid=$1
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] &&
		grep -qF -- "$conf" <<<"$(tr '\0' ' ' <"/proc/$pid/cmdline")"
}

stop_daemons() {
	local name pid pids=() i
	for name in "${DAEMONS[@]}"; do
		pid=$(cat "$dir/run/$name.pid" 2>/dev/null) || continue
		if alive "$pid"; then
			kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
		fi
	done
	for ((i = 0; i < 150; i++)); do
		local left=()
		# Ours when signalled; an exiting daemon's cmdline is empty
		# before it is gone, so from here on only whether it exists.
		for pid in "${pids[@]}"; do
			kill -0 "$pid" 2>/dev/null && left+=("$pid")
		done
		[ "${#left[@]}" = 0 ] && return 0
		pids=("${left[@]}")
		sleep 0.2
	done
	for pid in "${pids[@]}"; do
		echo "rgw.sh: pid $pid did not stop in 30 s: SIGKILL" >&2
		kill -KILL "$pid" 2>/dev/null
	done
	return 0
}

# wait_pid NAME: its pid file shows up (the daemon forked) within 30 s.
wait_pid() {
	local name=$1 i pid
	for ((i = 0; i < 150; i++)); do
		pid=$(cat "$dir/run/$name.pid" 2>/dev/null)
		alive "$pid" && return 0
		sleep 0.2
	done
	fail "$name" "did not start (no live process in $dir/run/$name.pid)"
}

write_conf() {
	cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$mon_port
mon initial members = a
public addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
osd pool default pg num = 8
osd pool default pgp num = 8
mon max pg per osd = 1000
run dir = $dir/run
pid file = $dir/run/\$name.pid
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
log to stderr = false
err to stderr = false
mon data = $dir/mon
osd data = $dir/osd
osd objectstore = bluestore
bluestore block path = $dir/osd-block.img
bluestore block create = true
bluestore block size = 21474836480
bluestore cache autotune = false
bluestore cache size = 268435456
osd memory target = 939524096
osd crush update on start = true
mon data avail warn = 1
mon data avail crit = 0
[client.rgw.0]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port
rgw data = $dir/rgw
rgw enable usage log = false
rgw thread pool size = 64
# Deleted objects' data is freed by RGW's garbage collector, by default
# only 2 hours after the delete: the 20 GiB OSD then fills up under the
# write bench (three 4 GiB files each way), and a full OSD blocks writes.
# Here it goes within seconds.
rgw gc obj min wait = 0
rgw gc processor period = 5
rgw gc processor max time = 5
# STS (AssumeRole) for the credential tests: a 16-byte key of this
# private cluster, and session tokens accepted as S3 credentials.
rgw sts key = bucketfsstskey16
rgw s3 auth use sts = true
EOF
}

start() {
	[ "$(id -u)" = 0 ] || die "must run as root (ceph-osd needs it)"
	local exe
	for exe in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph; do
		command -v "$exe" >/dev/null ||
			die "$exe not found: apt-get install --no-install-recommends radosgw ceph-mon ceph-osd ceph-common (tools/setup.sh)"
	done
	if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
		die "$dir exists and is not empty"
	fi
	mkdir -p "$dir"/{run,log,mon,osd,rgw} || die "cannot create $dir"
	dir=$(cd "$dir" && pwd)
	conf=$dir/ceph.conf
	fsid=$(cat /proc/sys/kernel/random/uuid)
	mon_port=$(free_port)
	rgw_port=$(free_port)
	write_conf

	monmaptool --create --fsid "$fsid" \
		--addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" \
		>"$dir/log/mon.a.out" 2>&1 ||
		fail mon.a "monmaptool --create failed"
	ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" \
		>>"$dir/log/mon.a.out" 2>&1 || fail mon.a "ceph-mon --mkfs failed"
	ceph-mon -c "$conf" -i a >>"$dir/log/mon.a.out" 2>&1 ||
		fail mon.a "ceph-mon exited $?"
	wait_pid mon.a
	cephc mon stat >>"$dir/log/mon.a.out" 2>&1 ||
		fail mon.a "does not answer on 127.0.0.1:$mon_port"

	local uuid id
	uuid=$(cat /proc/sys/kernel/random/uuid)
	id=$(cephc osd new "$uuid" 2>>"$dir/log/osd.0.out") ||
		fail osd.0 "ceph osd new failed"
	[ "$id" = 0 ] || fail osd.0 "ceph osd new gave id '$id', not 0"
	ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$uuid" \
		>>"$dir/log/osd.0.out" 2>&1 || fail osd.0 "ceph-osd --mkfs failed"
	ceph-osd -c "$conf" -i 0 >>"$dir/log/osd.0.out" 2>&1 ||
		fail osd.0 "ceph-osd exited $?"
	wait_pid osd.0
	local i
	for ((i = 0; i < 120; i++)); do
		alive "$(cat "$dir/run/osd.0.pid")" || fail osd.0 "died"
		# Not a pipe: grep -q stops at the match, and the rest of
		# the dump would then fail the pipeline (SIGPIPE, pipefail).
		grep -q '^osd\.0 up' <<<"$(cephc osd dump 2>/dev/null)" && break
		sleep 0.5
	done
	[ "$i" -lt 120 ] || fail osd.0 "not up after 60 s"

	radosgw -c "$conf" -n client.rgw.0 >"$dir/log/client.rgw.0.out" 2>&1 ||
		fail client.rgw.0 "radosgw exited $?"
	wait_pid client.rgw.0
	local url=http://127.0.0.1:$rgw_port code
	for ((i = 0; i < 300; i++)); do
		alive "$(cat "$dir/run/client.rgw.0.pid")" ||
			fail client.rgw.0 "died"
		code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$url/")
		[ "$code" = 200 ] && break
		sleep 0.2
	done
	[ "$i" -lt 300 ] || fail client.rgw.0 "$url does not answer (HTTP $code) after 60 s"

	timeout 60 radosgw-admin -c "$conf" user create --uid=bucketfs \
		--display-name=bucketfs --access-key="$AK" --secret-key="$SK" \
		>"$dir/log/radosgw-admin.out" 2>&1 ||
		fail radosgw-admin "user create failed"
	cat >"$dir/env" <<EOF
BFS_RGW_URL=$url
BFS_RGW_AK=$AK
BFS_RGW_SK=$SK
BFS_RGW_DIR=$dir
EOF
	echo "rgw.sh: endpoint $url (state in $dir)"
}

stop() {
	[ -d "$dir" ] || return 0
	dir=$(cd "$dir" && pwd)
	conf=$dir/ceph.conf
	[ -f "$conf" ] || die "$dir has no ceph.conf: not an rgw.sh directory"
	stop_daemons
	rm -rf "$dir"
}

[ $# = 2 ] || die "usage: rgw.sh start|stop DIR"
dir=$2
conf=
case "$1" in
start) start ;;
stop) stop ;;
*) die "usage: rgw.sh start|stop DIR" ;;
esac
