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
    of /proc/slabinfo) and the daemon's RSS.
Each of the last three starts cold (echo 3 > /proc/sys/vm/drop_caches,
so root).  Prints a Markdown table.  Needs a build (BFS_BUILD_DIR, default
build/) and /dev/fuse.  Hold /work/wt/bench.lock around it.

  tools/bench/index_scale.py N [--runs 3] [--workers W] [--du] [-o OPT]
"""

import argparse
import os
import random
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


def daemon_pid(mnt):
    r = subprocess.run(["pgrep", "-f", f"bucketfs .* {mnt}$"],
                       capture_output=True, text=True)
    return int(r.stdout.split()[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--du", action="store_true",
                    help="du -s too: a kernel inode per name (1.1 KiB)")
    ap.add_argument("-o", dest="opts", default="",
                    help="more mount options, e.g. readdirplus=always")
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="bfs-scale-")
    index = os.path.join(tmp, "dset.idx")
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    server = harness.TestServer("--synthetic", f"dset:{a.n}")
    rows = []
    try:
        cmd = ["/usr/bin/time", "-f", "%M", harness.binary("bucketfs-index"),
               "build", "-q", "-o",
               f"endpoint={server.url},index={index}", "s3://dset"]
        if a.workers:
            cmd[6:6] = ["-j", str(a.workers)]
        t0 = time.monotonic()
        r = harness.run(cmd, timeout=7200)
        build = time.monotonic() - t0
        if r.returncode:
            raise RuntimeError(r.stderr.decode())
        size = os.path.getsize(index)
        peak = int(r.stderr.decode().split()[-1])
        rows += [("index build", f"{build:.2f} s ({a.n / build:,.0f} keys/s)"
                  f", peak RSS {peak / 1024:.0f} MiB"),
                 ("index size", f"{size:,} bytes ({size / a.n:.1f} per key, "
                  f"names {len(f'img_{0:0{len(str(a.n))}d}_of_{a.n}.jpeg')}"
                  " bytes)")]
        times = []
        for _ in range(a.runs):
            times.append(mount_timed("s3://dset", server.url, index, mnt))
            subprocess.run(["fusermount3", "-u", mnt], check=True)
            time.sleep(0.2)
        rows.append(("start to ready mount (index on disk)",
                     f"median {statistics.median(times) * 1000:.0f} ms of "
                     f"{a.runs} ({', '.join(f'{t*1000:.0f}' for t in times)})"))
        opts = "," + a.opts if a.opts else ""
        mount_timed("s3://dset", server.url, index, mnt, opts)
        pid = daemon_pid(mnt)
        rows.append(("daemon RSS when ready",
                     f"{rss_kib(pid) / 1024:.1f} MiB"))
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
            drop_caches()
            s0 = slab_bytes()
            t0 = time.monotonic()
            out = subprocess.run(c, shell=True, capture_output=True,
                                 text=True).stdout.split()[0]
            dt = time.monotonic() - t0
            grown = slab_bytes() - s0
            rows.append((label, f"{out} in {dt:.2f} s; kernel slab "
                         f"+{grown / 2**20:.1f} MiB ({grown / a.n:.0f} "
                         f"bytes per entry), daemon RSS "
                         f"{rss_kib(pid) / 1024:.1f} MiB"))
        subprocess.run(["fusermount3", "-u", mnt], check=True)
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-uz", mnt])
        server.stop()
        subprocess.run(["rm", "-rf", tmp])
    print(f"| {a.n:,} keys, one flat directory | |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
