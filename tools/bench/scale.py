#!/usr/bin/env python3
"""Listing at scale: ls, find, du, listdir, scandir and stat of N names,
through bucketfs and on tmpfs, with the requests and kernel memory each costs.

Starts the test S3 server with a synthetic bucket of N RetinaNet-shaped keys
in one flat directory (train/img_<i>_of_<N>.jpeg, 322,624 bytes each) and a
small one of 100, builds their indexes, mounts them, and makes a tmpfs
directory of the same N names (sparse files of the same size).  Then, for
each command, --runs times, alternating the tmpfs directory and the mount,
each time cold (`echo 3 > /proc/sys/vm/drop_caches` first):
  - the wall time (the table gives the median, and bucketfs / tmpfs);
  - the FUSE requests per entry, by kind (the mount's "ops" counters of
    user.bucketfs.stats, less what reading them costs);
  - the kernel slab grown, per entry: the fuse_inode, dentry and
    lsm_inode_cache caches of /proc/slabinfo, and /proc/meminfo's Slab.
The commands: ls -f, ls -l, find -name, find -size, du -s, os.listdir,
os.scandir (with is_file()), stat of all N names in a random order, and
ls -l of the 100-file directory (repeated, median).  Each command's timed
runs hold /work/wt/bench.lock (never more than one command's runs at once).
With --before BUILD_DIR, a mount from another build is measured in the same
invocation, alternating with this one; with --always, a mount of this build
with -o readdirplus=always too.  Needs root (drop_caches)
and /dev/fuse; the build is BFS_BUILD_DIR (default build/).

  tools/bench/scale.py N [--runs 3] [--only ls-f,ls-l] [--before DIR] [--always]
"""

import argparse
import fcntl
import json
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

LOCK = "/work/wt/bench.lock"
SIZE = 322624
SMALL = 100
SLABS = ("fuse_inode", "dentry", "lsm_inode_cache")
PY = sys.executable

# name -> (shell command on directory {d}, names file {names})
COMMANDS = {
    "ls-f": ("ls -f", "ls -f {d} | wc -l"),
    "ls-l": ("ls -l", "ls -l {d} | wc -l"),
    "find-name": ("find -name", "find {d} -name 'img_*7_of_*' | wc -l"),
    "find-size": ("find -size", "find {d} -type f -size +300k | wc -l"),
    "du": ("du -s", "du -s {d}"),
    "listdir": ("os.listdir",
                PY + " -c 'import os,sys; print(len(os.listdir(sys.argv[1])))'"
                " {d}"),
    "scandir": ("os.scandir",
                PY + " -c 'import os,sys; print(sum(1 for e in "
                "os.scandir(sys.argv[1]) if e.is_file()))' {d}"),
    "stat": ("stat of N names",
             PY + " -c 'import os,sys\nd=sys.argv[1]\nn=0\n"
             "for x in open(sys.argv[2]):\n os.stat(d+\"/\"+x[:-1]); n+=1\n"
             "print(n)' {d} {names}"),
}


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def slab():
    """Bytes in the caches of SLABS, and /proc/meminfo's Slab, in bytes."""
    out = {}
    with open("/proc/slabinfo") as f:
        for line in f:
            p = line.split()
            if p and p[0] in SLABS:
                out[p[0]] = int(p[1]) * int(p[3])
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Slab:"):
                out["Slab"] = int(line.split()[1]) * 1024
    return out


class Mount:
    """A bucketfs mount of one bucket, from build directory @build."""

    def __init__(self, build, url, endpoint, index, mnt, opts):
        self.mnt = mnt
        exe = os.path.join(build, "fs", "bucketfs")
        r = subprocess.run([exe, "-o", f"endpoint={endpoint},index={index}"
                            + opts, url, mnt], env=harness.client_env(),
                           capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.decode())
        while not os.path.ismount(mnt):
            time.sleep(0.01)
        self.snap_cost = {}
        a = self.ops()
        b = self.ops()
        self.snap_cost = {k: b[k] - a[k] for k in a}

    def ops(self):
        st = json.loads(os.getxattr(self.mnt, "user.bucketfs.stats"))
        return st.get("ops", {})

    def umount(self):
        subprocess.run(["fusermount3", "-u", self.mnt], check=True)


def run_one(cmd, target, n):
    """Runs @cmd cold on @target (a Mount or None for tmpfs); returns the
    seconds, its output, the requests by kind and the slab grown."""
    drop_caches()
    before = target.ops() if target else {}
    s0 = slab()
    t0 = time.monotonic()
    out = subprocess.run(cmd, shell=True, capture_output=True,
                         text=True).stdout.split()
    dt = time.monotonic() - t0
    s1 = slab()
    ops = {}
    if target:
        after = target.ops()
        for k in after:
            v = after[k] - before.get(k, 0) - target.snap_cost.get(k, 0)
            if v:
                ops[k] = v
    return dt, out[0] if out else "", ops, {k: s1[k] - s0.get(k, 0)
                                            for k in s1}


def per_entry(d, n):
    return ", ".join(f"{k} {v / n:.3g}" for k, v in sorted(d.items())) or "0"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="",
                    help="comma-separated commands (" + ",".join(COMMANDS) +
                    ",ls-l-small)")
    ap.add_argument("--before", default="",
                    help="another build directory, measured alternately")
    ap.add_argument("--always", action="store_true",
                    help="measure -o readdirplus=always too")
    a = ap.parse_args()
    only = [x for x in a.only.split(",") if x] or list(COMMANDS) + [
        "ls-l-small"]

    tmp = tempfile.mkdtemp(prefix="bfs-lscale-")
    mounts = {}
    tmpfs = os.path.join(tmp, "tmpfs")
    os.mkdir(tmpfs)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1g,nr_inodes=0",
                    "bfs-lscale", tmpfs], check=True)
    server = harness.TestServer("--synthetic", f"dset:{a.n}",
                                "--synthetic", f"small:{SMALL}")
    now = os.environ.get("BFS_BUILD_DIR", os.path.join(SRC, "build"))
    builds = {"now": (now, "")}
    if a.always:
        builds["always"] = (now, ",readdirplus=always")
    if a.before:
        builds["before"] = (a.before, "")
    try:
        w = len(str(a.n))
        names = [f"img_{i:0{w}d}_of_{a.n}.jpeg" for i in range(a.n)]
        ref = os.path.join(tmpfs, "train")
        os.mkdir(ref)
        for x in names:
            fd = os.open(os.path.join(ref, x), os.O_CREAT | os.O_WRONLY)
            os.ftruncate(fd, SIZE)
            os.close(fd)
        sref = os.path.join(tmpfs, "small")
        os.mkdir(sref)
        for i in range(SMALL):
            fd = os.open(os.path.join(sref, f"img_{i:03d}_of_{SMALL}.jpeg"),
                         os.O_CREAT | os.O_WRONLY)
            os.ftruncate(fd, SIZE)
            os.close(fd)
        random.Random(1).shuffle(names)
        names_file = os.path.join(tmp, "names")
        with open(names_file, "w") as f:
            f.writelines(x + "\n" for x in names)
        del names
        for bucket in ("dset", "small"):
            t0 = time.monotonic()
            r = harness.run([os.path.join(now, "tools",
                                          "bucketfs-index"), "build", "-q",
                             "-o", f"endpoint={server.url},index="
                             f"{tmp}/{bucket}.idx", f"s3://{bucket}"],
                            timeout=7200)
            if r.returncode:
                raise RuntimeError(r.stderr.decode())
            print(f"index of {bucket} built in "
                  f"{time.monotonic() - t0:.1f} s", file=sys.stderr)
        for tag, (build, opts) in builds.items():
            for bucket in ("dset", "small"):
                mnt = os.path.join(tmp, f"mnt-{tag}-{bucket}")
                os.mkdir(mnt)
                mounts[tag, bucket] = Mount(build, f"s3://{bucket}",
                                            server.url,
                                            f"{tmp}/{bucket}.idx", mnt,
                                            opts)
        print(f"| {a.n:,} names, cold | tmpfs s | " + " | ".join(
            f"bucketfs {t} s | ÷ tmpfs | requests per entry | "
            "slab grown per entry (bytes)" for t in builds) + " |")
        print("|---|---|" + "---|---|---|---|" * len(builds))
        for key in only:
            small = key == "ls-l-small"
            label, cmd = (("ls -l of a 100-file directory (20 in a row)",
                           "for i in $(seq 20); do ls -l {d} >/dev/null;"
                           " done; echo ok") if small else COMMANDS[key])
            n = SMALL * 20 if small else a.n
            bucket = "small" if small else "dset"
            res = {t: [] for t in ["tmpfs"] + list(builds)}
            with open(LOCK, "w") as lk:
                fcntl.flock(lk, fcntl.LOCK_EX)
                for _ in range(a.runs):
                    for t in res:
                        m = mounts.get((t, bucket))
                        d = (sref if small else ref) if t == "tmpfs" else (
                            os.path.join(m.mnt, "train"))
                        res[t].append(run_one(cmd.format(
                            d=d, names=names_file), m, n))
            outs = {t: {r[1] for r in v} for t, v in res.items()}
            tm = statistics.median(r[0] for r in res["tmpfs"])
            row = f"| {label} | {tm:.2f} |"
            for t in builds:
                v = res[t]
                med = statistics.median(r[0] for r in v)
                last = v[-1]
                row += (f" {med:.2f} ({' '.join(f'{r[0]:.2f}' for r in v)})"
                        f" | {med / tm:.1f}× | {per_entry(last[2], n)} | "
                        f"{per_entry(last[3], n)} |")
                if key != "du" and outs[t] != outs["tmpfs"]:
                    row += f" OUTPUT DIFFERS: {outs[t]} vs {outs['tmpfs']}"
            print(row, flush=True)
    finally:
        for m in mounts.values():
            if os.path.ismount(m.mnt):
                subprocess.run(["fusermount3", "-u", m.mnt])
            if os.path.ismount(m.mnt):
                subprocess.run(["fusermount3", "-uz", m.mnt])
        server.stop()
        subprocess.run(["umount", tmpfs])
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
