#!/usr/bin/env python3
"""Index and mount at scale: one flat directory of N synthetic keys.

Starts the test S3 server with a synthetic bucket of N RetinaNet-shaped keys
(train/img_<i>_of_<N>.jpeg, 322,624 bytes each), then measures:
  - bucketfs-index build: wall time and keys/s;
  - index bytes per key;
  - bucketfs start to ready mount with the index on disk (median of runs);
  - ls -f | wc -l of the directory;
  - stat of 10,000 random files, and the requests that reached the server;
  - the daemon's RSS after listing everything.
Prints a Markdown table.  Needs a build (BFS_BUILD_DIR, default build/) and
/dev/fuse.

  tools/bench/index_scale.py N [--runs 3] [--workers W]
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


def mount_timed(url, endpoint, index, mnt):
    """Starts bucketfs (daemonizing) and times it until the mount is up."""
    t0 = time.monotonic()
    r = subprocess.run([harness.binary("bucketfs"), "-o",
                        f"endpoint={endpoint},index={index}", url, mnt],
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
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="bfs-scale-")
    index = os.path.join(tmp, "dset.idx")
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    server = harness.TestServer("--synthetic", f"dset:{a.n}")
    rows = []
    try:
        cmd = [harness.binary("bucketfs-index"), "build", "-q", "-o",
               f"endpoint={server.url},index={index}", "s3://dset"]
        if a.workers:
            cmd[3:3] = ["-j", str(a.workers)]
        t0 = time.monotonic()
        r = harness.run(cmd, timeout=7200)
        build = time.monotonic() - t0
        if r.returncode:
            raise RuntimeError(r.stderr.decode())
        size = os.path.getsize(index)
        rows += [("index build", f"{build:.2f} s ({a.n / build:,.0f} keys/s)"),
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
        mount_timed("s3://dset", server.url, index, mnt)
        pid = daemon_pid(mnt)
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
                     f"{reqs} requests reached the server"))
        t0 = time.monotonic()
        out = subprocess.run(f"ls -f {mnt}/train | wc -l", shell=True,
                             capture_output=True, text=True).stdout.strip()
        rows.append(("ls -f \\| wc -l", f"{out} entries in "
                     f"{time.monotonic() - t0:.2f} s"))
        rows.append(("daemon RSS after listing everything",
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
