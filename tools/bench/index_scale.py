#!/usr/bin/env python3
"""Index and mount at scale: one flat directory of N synthetic keys.

Starts the test S3 server with a synthetic bucket of N RetinaNet-shaped keys
(train/img_<i>_of_<N>.jpeg, 322,624 bytes each), then measures:
  - bucketfs-index build: wall time, keys/s and peak RSS;
  - index bytes per key;
  - bucketfs start to ready mount with the index on disk (median of runs),
    and the daemon's RSS then;
  - stat of 10,000 random files, and the requests that reached the server;
  - ls -f | wc -l, find -name and (with --du) du -s of the directory;
  - after each, the kernel slab it grew (the fuse_inode and dentry caches
    of /proc/slabinfo) and the daemon's RSS;
  - with --compare, bucketfs-compare of the whole bucket (mount against a
    listing of the bucket): its verdict, time and peak RSS.
Each listing command starts cold (echo 3 > /proc/sys/vm/drop_caches, so
root).  Each phase (the build, the mounts and stats, each listing command,
the compare) takes the bench lock (--lock, default the rig's
/var/tmp/bucketfs-bench/run.lock) by itself and lets it go after, so no
hold lasts the whole run; the load average at each phase's start is
printed with it.  Prints a Markdown table.  Needs a build (BFS_BUILD_DIR,
default build/) and /dev/fuse.

  tools/bench/index_scale.py N [--runs 3] [--workers W] [--du] [--compare]
                             [-o OPT] [--lock PATH]
"""

import argparse
import contextlib
import fcntl
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))
import harness  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def slab_bytes():
    """Bytes in the fuse_inode and dentry slab caches."""
    total = 0
    with open("/proc/slabinfo") as f:
        for line in f:
            p = line.split()
            if p and p[0] in ("fuse_inode", "dentry"):
                total += int(p[1]) * int(p[3])
    return total


@contextlib.contextmanager
def bench_lock(path):
    """Holds @path exclusively (flock, as tools/bench/run.py does)."""
    if not path:
        yield
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        t0 = time.monotonic()
        fcntl.flock(fd, fcntl.LOCK_EX)
        waited = time.monotonic() - t0
        if waited > 1:
            print(f"waited {waited:.0f} s for {path}", file=sys.stderr)
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"%d\n" % os.getpid(), 0)
        yield
    finally:
        os.close(fd)


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def room_for_inodes(n, what, rows):
    """Whether @what, which makes a kernel inode and dentry of each of @n
    names (about 1.2 KiB), fits in the free memory with 6 GiB to spare
    for everyone else; if not, says so in @rows."""
    need = n * 1200 + 6 * 2**30
    if mem_available() >= need:
        return True
    rows.append((what, f"not run: it needs about {need / 2**30:.1f} GiB "
                 f"free, {mem_available() / 2**30:.1f} GiB is available"))
    return False


def load():
    with open("/proc/loadavg") as f:
        return "load " + " ".join(f.read().split()[:3])


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def mount_timed(url, endpoint, index, mnt, opts=""):
    """Starts bucketfs (daemonizing) and times it until the mount is up."""
    t0 = time.monotonic()
    r = subprocess.run([harness.binary("bucketfs"), "-o",
                        f"endpoint={endpoint},index={index}" + opts, url,
                        mnt],
                       env=harness.client_env(), capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.decode())
    while not os.path.ismount(mnt):
        time.sleep(0.001)
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--du", action="store_true",
                    help="du -s too: a kernel inode per name (1.1 KiB)")
    ap.add_argument("--compare", action="store_true",
                    help="bucketfs-compare of the whole bucket too")
    ap.add_argument("--lock", default="/var/tmp/bucketfs-bench/run.lock",
                    help="the bench lock each phase holds ('' for none)")
    ap.add_argument("-o", dest="opts", default="",
                    help="more mount options, e.g. readdirplus=always")
    a = ap.parse_args()

    def stopped(sig, frame):
        raise SystemExit(f"stopped by signal {sig}")

    # timeout(1) and kill: the finally below unmounts and stops the server.
    signal.signal(signal.SIGTERM, stopped)

    tmp = tempfile.mkdtemp(prefix="bfs-scale-")
    index = os.path.join(tmp, "dset.idx")
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    server = harness.TestServer("--synthetic", f"dset:{a.n}")
    rows = []
    daemon = None

    def daemon_log():
        with open(os.path.join(tmp, "daemon.log")) as f:
            return f.read()[-2000:]

    def daemon_rss():
        if daemon.poll() is not None:
            raise RuntimeError(f"bucketfs exited ({daemon.returncode}): "
                               + daemon_log())
        return rss_kib(daemon.pid)
    try:
        cmd = ["/usr/bin/time", "-f", "%M", harness.binary("bucketfs-index"),
               "build", "-q", "-o",
               f"endpoint={server.url},index={index}", "s3://dset"]
        if a.workers:
            cmd[6:6] = ["-j", str(a.workers)]
        with bench_lock(a.lock):
            ld = load()
            t0 = time.monotonic()
            r = harness.run(cmd, timeout=7200)
            build = time.monotonic() - t0
        if r.returncode:
            raise RuntimeError(r.stderr.decode())
        size = os.path.getsize(index)
        peak = int(r.stderr.decode().split()[-1])
        rows += [("index build", f"{build:.2f} s ({a.n / build:,.0f} keys/s)"
                  f", peak RSS {peak / 1024:.0f} MiB; {ld}"),
                 ("index size", f"{size:,} bytes ({size / a.n:.1f} per key, "
                  f"names {len(f'img_{0:0{len(str(a.n))}d}_of_{a.n}.jpeg')}"
                  " bytes)")]
        with bench_lock(a.lock):
            ld = load()
            times = []
            for _ in range(a.runs):
                times.append(mount_timed("s3://dset", server.url, index, mnt))
                subprocess.run(["fusermount3", "-u", mnt], check=True)
                time.sleep(0.2)
            rows.append(("start to ready mount (index on disk)",
                         f"median {statistics.median(times) * 1000:.0f} ms of "
                         f"{a.runs} ({', '.join(f'{t*1000:.0f}' for t in times)}); {ld}"))
            opts = "," + a.opts if a.opts else ""
            # In the foreground, its log kept: the pid is ours, and a
            # daemon that dies says why.
            daemon = subprocess.Popen(
                [harness.binary("bucketfs"), "-f", "-o",
                 f"endpoint={server.url},index={index}" + opts, "s3://dset",
                 mnt], env=harness.client_env(),
                stderr=open(os.path.join(tmp, "daemon.log"), "w"))
            while not os.path.ismount(mnt):
                if daemon.poll() is not None:
                    raise RuntimeError("bucketfs exited: " + daemon_log())
                time.sleep(0.001)
            pid = daemon.pid
            rows.append(("daemon RSS when ready",
                         f"{daemon_rss() / 1024:.1f} MiB"))
            drop_caches()
            slab0 = slab_bytes()
            server.control("POST", "stats/reset")
            w = len(str(a.n))
            picks = random.Random(1).sample(range(a.n), min(10000, a.n))
            t0 = time.monotonic()
            for i in picks:
                os.stat(f"{mnt}/train/img_{i:0{w}d}_of_{a.n}.jpeg")
            dt = time.monotonic() - t0
            reqs = sum(server.stats()["requests"].values())
            rows.append((f"stat of {len(picks):,} random files",
                         f"{dt:.2f} s ({len(picks) / dt:,.0f}/s, cold "
                         "lookups), "
                         f"{reqs} requests reached the server; kernel slab "
                         f"+{(slab_bytes() - slab0) / 2**20:.1f} MiB"))
        cmds = [("ls -f \\| wc -l", f"ls -f {mnt}/train | wc -l"),
                ("find -name", f"find {mnt}/train -name 'img_*7_of_*' "
                 "| wc -l")]
        if a.du:
            cmds.append(("du -s", f"du -s {mnt}/train"))
        for label, c in cmds:
            if label == "du -s" and not room_for_inodes(a.n, label, rows):
                continue
            with bench_lock(a.lock):
                ld = load()
                drop_caches()
                s0 = slab_bytes()
                t0 = time.monotonic()
                out = subprocess.run(c, shell=True, capture_output=True,
                                     text=True).stdout.split()[0]
                dt = time.monotonic() - t0
                grown = slab_bytes() - s0
                if label == "du -s":
                    # The inodes du made go; the others' tests need it.
                    drop_caches()
            rows.append((label, f"{out} in {dt:.2f} s; kernel slab "
                         f"+{grown / 2**20:.1f} MiB ({grown / a.n:.0f} "
                         f"bytes per entry), daemon RSS "
                         f"{daemon_rss() / 1024:.1f} MiB; {ld}"))
            print(f"{label}: {rows[-1][1]}", file=sys.stderr)
        if a.compare and room_for_inodes(a.n, "bucketfs-compare", rows):
            with bench_lock(a.lock):
                ld = load()
                drop_caches()
                s0 = slab_bytes()
                t0 = time.monotonic()
                r = harness.run(
                    ["/usr/bin/time", "-f", "%M",
                     harness.binary("bucketfs-compare"), "-q",
                     "-o", f"endpoint={server.url}", mnt, "s3://dset"],
                    timeout=7200)
                dt = time.monotonic() - t0
                grown = slab_bytes() - s0
                drop_caches()
            err = r.stderr.decode().split()
            verdict = r.stdout.decode().strip().splitlines()
            rows.append(("bucketfs-compare of the whole bucket",
                         f"exit {r.returncode} ({verdict[-1] if verdict else ''}"
                         f") in {dt:.2f} s, peak RSS "
                         f"{int(err[-1]) / 1024 if err else 0:.0f} MiB; "
                         f"kernel slab +{grown / 2**20:.1f} MiB; daemon RSS "
                         f"{daemon_rss() / 1024:.1f} MiB; {ld}"))
            print(r.stdout.decode(), file=sys.stderr)
        subprocess.run(["fusermount3", "-u", mnt], check=True)
        daemon.wait(60)
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-uz", mnt])
        if daemon is not None and daemon.poll() is None:
            daemon.terminate()
            daemon.wait(60)
        server.stop()
        subprocess.run(["rm", "-rf", tmp])
        for k, v in rows:
            print(f"| {k} | {v} |", file=sys.stderr)
    print(f"| {a.n:,} keys, one flat directory | |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
