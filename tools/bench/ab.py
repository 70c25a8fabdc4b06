#!/usr/bin/python3
"""A/B two bucketfs builds on the DLIO load, in one sitting.

  tools/bench/ab.py A_BUILD_DIR B_BUILD_DIR [--runs N] [--files N]
                    [--procs P] [--opts k=v,...] [--direct] [--hint] [--pin]
                    [--latency MS] [--b-opts k=v,...] [--list]
                    [--vm-memory backed|as-is] [--style whole|dlio]
                    [--scheme plain|tls] [--wire]

Serves the RetinaNet-shaped dataset with the rig of run.py (4 nginx
endpoints, listings from the test S3 server), then, --runs times: mounts
build A, one DLIO pass (--procs reader processes, each file read once in a
shuffled order, the page cache dropped first), unmounts; the same with
build B.  Each pass prints files/s, p50/p99, the daemon's CPU per thread
name (% of one core) and how busy the whole machine was; at the end the
medians and B / A.  --direct adds, per round, the two direct S3 paths of
run.py's dlio measurement (curl -Z, and the same readers doing GETs) as
references.  --hint announces each pass's order (user.bucketfs.prefetch)
before it starts.  --pin runs everything pinned (rig.pin(): readers and
endpoints on CPU 0, the daemon on CPU 1).  --latency MS serves every path
(both mounts and the direct references) through endpoints that answer
after MS ms, as run.py's latency rig does.  Each pass also gives the CPU per
file of every process of its path.  --b-opts adds -o options to build B's
mounts only, so that one build can be A/B'ed against itself with an option
(give the same directory twice).  --vm-memory: as run.py's (the
memory model; backed by default, rig.back_memory()).  --style picks the mounts' read style
(the references read whole objects).  --list lists the dataset's directories
(os.listdir) after the mount and before the pass, as DLIO's readers do when
they start.  --scheme tls serves every path over HTTPS, from the TLS
ports of run.py's rig (its own CA, which the mounts get as ca_file= and
the references verify with).  --wire serves from the rig's wire
(rig.Wire: the endpoints in a network namespace of their own, not on
loopback).  Measures only: no report is written.

A build directory is a meson build of any commit (for example
`git worktree add /tmp/old HEAD~3 && meson setup /tmp/old/build /tmp/old
&& meson compile -C /tmp/old/build`).  Needs root, like run.py.
"""

import argparse
import json
import os
import random
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cpu  # noqa: E402
import readers  # noqa: E402
import rig  # noqa: E402
from latency import announce  # noqa: E402
import run  # noqa: E402
from rig import CLEANUP, log  # noqa: E402

def mount_pass(r, ds, build, a, seed, opts):
    rig.BUILD = build  # rig.binary() looks there
    run.cold(ds.paths(), ds.name)
    if rig.TLS:
        opts = opts + ["ca_file=%s" % rig.TLS.ca]
    with rig.Mount("bucketfs", r, ds, tag="-ab", extra_opts=opts,
                   urls=r.endpoints.urls_for(a.latency)) as m:
        if a.list:
            for d in sorted({os.path.dirname(k) for k in ds.files}):
                os.listdir(m.path(d))
        order = list(ds.files)
        random.Random(seed).shuffle(order)  # the order read_all() will use
        if a.hint:
            announce(m.mnt, order)
        probe = cpu.CpuProbe(m.proc.pid, others=r.endpoints.pids())
        res = readers.read_all([m.path(k) for k in ds.files], a.procs, seed=seed,
                               expect=lambda _: rig.RETINA_SIZE, timeout=a.timeout,
                               style=a.style)
        cost = probe.stop(files=res["files"], nbytes=res["bytes"], wall_s=res["wall_s"])
        res["cpu"] = {k: v["core_pct"] for k, v in cost.get("threads", {}).items()}
        res["cpu_ms_per_file"] = cost.get("cpu_ms_per_file")
        res["total_ms_per_file"] = cost.get("total_ms_per_file")
        res["busy"] = cost["busy_pct"]
        stats = mount_stats(m.mnt)
        res["stages"] = stage_p50s(stats)
        res["direct_share"] = direct_share(stats)
        res["connects"] = connects(stats)
    return res


def mount_stats(mnt):
    """The mount's user.bucketfs.stats, parsed; {} when it cannot be read."""
    try:
        return json.loads(os.getxattr(mnt, "user.bucketfs.stats"))
    except (OSError, ValueError):
        return {}


def direct_share(stats):
    """The share of the responses that took the direct receive path, over
    all the endpoints of @stats (mount_stats()), or None."""
    eps = stats.get("endpoints", [])
    asked = sum(e.get("requests", 0) for e in eps)
    return sum(e.get("direct", 0) for e in eps) / asked if asked else None


def connects(stats):
    """The connections the direct path opened, the ones of those that
    resumed a TLS session and the hedged GETs, over all the endpoints of
    @stats (mount_stats()), or None."""
    eps = stats.get("endpoints", [])
    if not eps or "connects" not in eps[0]:
        return None
    return (sum(e.get("connects", 0) for e in eps),
            sum(e.get("tls_resumed", 0) for e in eps),
            sum(e.get("hedges", 0) for e in eps))


def stage_p50s(stats):
    """The recent GETs' p50 per stage of @stats (mount_stats()), ms."""
    st = stats.get("stages")
    if not isinstance(st, dict):
        return None
    return {k: v["p50_ms"] for k, v in st.items() if isinstance(v, dict)}


def line(label, res):
    s = "%-9s %7.0f files/s  p50 %5.1f ms  p99 %5.1f ms  errors %d" % (
        label, res["files_s"], res["p50_ms"] or 0, res["p99_ms"] or 0, res["errors"])
    if "busy" in res:
        s += "  machine %3.0f%% busy" % res["busy"]
    if res.get("cpu_ms_per_file") is not None:
        s += "  daemon %.3f ms CPU/file" % res["cpu_ms_per_file"]
    if res.get("total_ms_per_file") is not None:
        s += "  every process %.3f ms CPU/file" % res["total_ms_per_file"]
    if res.get("direct_share") is not None:
        s += "  direct %.0f%%" % (100 * res["direct_share"])
    if res.get("connects") is not None:
        s += "  connections %d (%d resumed), hedges %d" % res["connects"]
    if res.get("stages"):
        s += "  GET p50 ms: %s" % ", ".join(
            "%s %.2f" % kv for kv in res["stages"].items())
    if res.get("cpu"):
        s += "  threads CPU%%: %s" % ", ".join(
            "%s %.0f" % (k, v) for k, v in res["cpu"].items() if v >= 0.5)
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a_build", help="build directory of the baseline")
    ap.add_argument("b_build", help="build directory of the candidate")
    ap.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--files", type=int, default=20000, help="files (default 20,000)")
    ap.add_argument("--procs", type=int, default=32, help="reader processes (default 32)")
    ap.add_argument("--opts", default="", help="extra -o options for both mounts")
    ap.add_argument("--b-opts", default="", help="extra -o options for B's mounts only")
    ap.add_argument("--style", default="whole", choices=("whole", "dlio"),
                    help="the mounts' read style: whole (one read(), the default) or "
                    "dlio (DLIO's, PIL's way: open(), 16 bytes, seek(0), 64 KiB reads "
                    "through Python's buffered file, sized by st_blksize)")
    ap.add_argument("--list", action="store_true",
                    help="list the dataset's directories before each pass, as DLIO does")
    ap.add_argument("--direct", action="store_true",
                    help="also run the direct S3 paths each round")
    ap.add_argument("--hint", action="store_true",
                    help="announce each pass's order before it starts")
    ap.add_argument("--pin", action="store_true",
                    help="readers and endpoints on CPU 0, the daemon on CPU 1")
    ap.add_argument("--latency", type=int, default=0,
                    help="first-byte delay of every endpoint, ms (default 0)")
    ap.add_argument("--vm-memory", default="backed", choices=("backed", "as-is"),
                    help="backed (default): free page reporting paused and free memory "
                    "written once (rig.back_memory()); as-is: the VM as it is")
    ap.add_argument("--scheme", default="plain", choices=("plain", "tls"),
                    help="plain (default): http:// endpoints; tls: the same endpoints "
                    "over https://, verified with the rig's own CA")
    ap.add_argument("--wire", action="store_true",
                    help="the endpoints behind the rig's wire, not on loopback")
    ap.add_argument("--cache-dir", default="/var/tmp/bucketfs-bench",
                    help="where datasets live (default /var/tmp/bucketfs-bench)")
    ap.add_argument("--timeout", type=int, default=900, help="cut a pass off after (s)")
    a = ap.parse_args()
    if a.wire and a.pin:
        ap.error(rig.WIRE_UNPINNED)
    a.opts = [o for o in a.opts.split(",") if o]
    b_opts = a.opts + [o for o in a.b_opts.split(",") if o]
    if os.geteuid() != 0:
        raise SystemExit("ab.py: needs root (it drops the page cache and mounts)")
    os.makedirs(a.cache_dir, exist_ok=True)
    lock_fd = run.one_at_a_time(a.cache_dir)  # noqa: F841 (held until exit)
    rig.clear_stale()
    builds = {"A": rig.snapshot_build(a.a_build, "fs/bucketfs", "a", "ab.py"),
              "B": rig.snapshot_build(a.b_build, "fs/bucketfs", "b", "ab.py")}
    ds = rig.retina_dataset(a.cache_dir, a.files)
    r = rig.Rig(a.cache_dir, [ds], delays=(a.latency,) if a.latency else (),
                tls=a.scheme == "tls", wire=a.wire)
    rig.use_tls(r, a.scheme == "tls")
    results = {"A": [], "B": [], "curl -Z": [], "py GETs": []}
    try:
        rig.model_host(r, a.vm_memory, a.pin)
        for i in range(a.runs):
            for label in ("A", "B"):
                res = mount_pass(r, ds, builds[label], a, i,
                                 b_opts if label == "B" else a.opts)
                results[label].append(res)
                log(line(label, res))
            if a.direct:
                rig.warm(ds.paths())
                probe = cpu.CpuProbe(others=r.endpoints.pids())
                res = run.curl_direct(r, ds, a.procs, i, a.timeout, delay=a.latency)
                cost = probe.stop(files=res.get("files", 0))
                res["busy"], res["total_ms_per_file"] = cost["busy_pct"], cost["total_ms_per_file"]
                results["curl -Z"].append(res)
                log(line("curl -Z", res))
                urls = [r.object_url(ds, k, j, a.latency) for j, k in enumerate(ds.files)]
                probe = cpu.CpuProbe(others=r.endpoints.pids())
                res = readers.read_all(urls, a.procs, seed=i,
                                       expect=lambda _: rig.RETINA_SIZE, timeout=a.timeout)
                cost = probe.stop(files=res.get("files", 0))
                res["busy"], res["total_ms_per_file"] = cost["busy_pct"], cost["total_ms_per_file"]
                results["py GETs"].append(res)
                log(line("py GETs", res))
    finally:
        CLEANUP.run()
    med = {k: statistics.median(x["files_s"] for x in v) for k, v in results.items() if v}
    print("medians of %d: %s" % (a.runs, ", ".join("%s %.0f files/s" % kv for kv in med.items())))
    print("B / A = %.2f" % (med["B"] / med["A"]))
    for ref in ("curl -Z", "py GETs"):
        if ref in med:
            print("A / %s = %.2f, B / %s = %.2f" % (ref, med["A"] / med[ref], ref,
                                                    med["B"] / med[ref]))


if __name__ == "__main__":
    main()
