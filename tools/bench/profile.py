#!/usr/bin/python3
"""The daemon's CPU per GB of a large file, read over and over through one
mount, with an optional perf profile of the daemon.

  tools/bench/profile.py [BUILD_DIR] [--scheme plain|tls] [--latency MS]
                         [--runs N] [--mib MIB] [--pin] [--opts k=v,...]
                         [--perf FILE] [--perf-seconds S] [--wire]
                         [--vm-memory backed|as-is]

Serves the large file of run.py's rig (one object of --mib MiB, on the 4
nginx endpoints, over HTTPS with --scheme tls), mounts BUILD_DIR's
bucketfs once, then --runs times: drops the page cache, reads the file
once on the endpoints' side (so nginx serves it from memory) and then
through the mount with `dd bs=1M`.  Each run prints its MB/s, the daemon's CPU per GB (its
utime and stime from /proc/PID/stat around the dd) and the TCP segments
the machine sent per GB (/proc/net/snmp's OutSegs: data and ACKs of both
ends, on loopback all of them are this machine's); at the end the medians.
Unlike run.py's large measurement, the mount stays up between runs, so
after the first run its buffers are warm and a profile shows the steady
state.

--perf FILE records the daemon with `perf record --call-graph dwarf` for
--perf-seconds (default 3) during the second run (the first with one run)
into FILE; read it with `perf report -i FILE --children --sort sym`.
--pin: the endpoints and dd on CPU 0, the daemon on CPU 1 (rig.pin()).
--wire: the endpoints in a network namespace of their own, reached over
the rig's wire (rig.Wire, tools/bench/wire.c), so that the daemon's
system calls no longer run the endpoints' TCP work as they do on
loopback; the TCP segments then count this side's only.
docs/PERFORMANCE.md ("Where a GB's CPU goes over HTTPS") was measured
with it.  Measures only: no report is written.  Needs root, like run.py.
"""

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cpu  # noqa: E402
import rig  # noqa: E402
import run  # noqa: E402
from rig import CLEANUP, log  # noqa: E402


def tcp_out_segments():
    """The machine's TCP segments sent so far (/proc/net/snmp OutSegs)."""
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("OutSegs")])


def perf_record(pid, out, seconds):
    """Starts perf recording @pid's threads into @out for @seconds; returns
    the thread that waits for it."""
    cmd = ["perf", "record", "--call-graph", "dwarf,16384", "-p", str(pid),
           "-o", out, "--", "sleep", str(seconds)]

    def go():
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            log("perf record failed (status %d): %s" % (p.returncode, p.stderr.strip()[-300:]))
        else:
            log("perf: wrote %s (perf report -i %s --children --sort sym)" % (out, out))

    t = threading.Thread(target=go)
    t.start()
    return t


def one_dd(m, ds, pin, perf):
    """One dd of the large file through mount @m, with the mount's page
    cache dropped and the endpoints' copy warm; its MB/s, the daemon's CPU
    per GB and the TCP segments per GB."""
    rig.drop_caches()
    rig.warm([os.path.join(ds.dir, "big.bin")])
    path = m.path("big.bin")
    size = ds.total_bytes()
    ticks0, seg0 = cpu.process_ticks(m.proc.pid), tcp_out_segments()
    t0 = time.monotonic()
    rec = perf_record(m.proc.pid, *perf) if perf else None
    cmd = ["dd", "if=%s" % path, "of=/dev/null", "bs=1M"]
    p = subprocess.run((["taskset", "-c", "0"] if pin else []) + cmd,
                       capture_output=True, text=True)
    wall = time.monotonic() - t0
    cpu_s = (cpu.process_ticks(m.proc.pid) - ticks0) / cpu.HZ
    segs = tcp_out_segments() - seg0
    if rec:
        rec.join()
    if p.returncode:
        raise RuntimeError("dd: %s" % p.stderr.strip()[-300:])
    gb = size / 1e9
    return {"mb_s": size / wall / 1e6, "s_per_gb": cpu_s / gb, "segments_per_gb": segs / gb}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", nargs="?", default=rig.BUILD,
                    help="build directory (default: the checkout's build/)")
    ap.add_argument("--scheme", default="plain", choices=("plain", "tls"),
                    help="plain (default): http:// endpoints; tls: the same endpoints "
                    "over https://, verified with the rig's own CA")
    ap.add_argument("--latency", type=int, default=0,
                    help="first-byte delay of every endpoint, ms (default 0)")
    ap.add_argument("--runs", type=int, default=5, help="dd runs (default 5)")
    ap.add_argument("--mib", type=int, default=2048, help="the file's size (default 2048)")
    ap.add_argument("--pin", action="store_true",
                    help="endpoints and dd on CPU 0, the daemon on CPU 1")
    ap.add_argument("--wire", action="store_true",
                    help="the endpoints behind the rig's wire, not on loopback")
    ap.add_argument("--opts", default="", help="extra -o options for the mount")
    ap.add_argument("--perf", metavar="FILE",
                    help="record the daemon with perf during the second run into FILE")
    ap.add_argument("--perf-seconds", type=float, default=3,
                    help="how long perf records (default 3)")
    ap.add_argument("--vm-memory", default="backed", choices=("backed", "as-is"),
                    help="as run.py's (rig.back_memory())")
    ap.add_argument("--cache-dir", default="/var/tmp/bucketfs-bench",
                    help="where datasets live (default /var/tmp/bucketfs-bench)")
    a = ap.parse_args()
    if a.wire and a.pin:
        ap.error(rig.WIRE_UNPINNED)
    if os.geteuid() != 0:
        raise SystemExit("profile.py: needs root (it drops the page cache and mounts)")
    if a.runs < 1 or a.mib < 1:
        raise SystemExit("profile.py: --runs and --mib must be at least 1")
    if a.perf and subprocess.run(["perf", "--version"], capture_output=True).returncode:
        raise SystemExit("profile.py: --perf needs perf (Debian's linux-perf)")
    os.makedirs(a.cache_dir, exist_ok=True)
    lock_fd = run.one_at_a_time(a.cache_dir)  # noqa: F841 (held until exit)
    rig.clear_stale()
    rig.BUILD = rig.snapshot_build(a.build, "fs/bucketfs", "p", "profile.py")
    ds = rig.large_dataset(a.cache_dir, a.mib)
    r = rig.Rig(a.cache_dir, [ds], delays=(a.latency,) if a.latency else (),
                tls=a.scheme == "tls", wire=a.wire)
    rig.use_tls(r, a.scheme == "tls")
    opts = [o for o in a.opts.split(",") if o]
    if rig.TLS:
        opts.append("ca_file=%s" % rig.TLS.ca)
    results = []
    try:
        rig.model_host(r, a.vm_memory, a.pin)
        with rig.Mount("bucketfs", r, ds, tag="-profile", extra_opts=opts,
                       urls=r.endpoints.urls_for(a.latency)) as m:
            for i in range(a.runs):
                perf = (a.perf, a.perf_seconds) if a.perf and i == min(1, a.runs - 1) else None
                res = one_dd(m, ds, a.pin, perf)
                results.append(res)
                log("run %d/%d: %5.0f MB/s  daemon %.3f s CPU/GB  %6.0f TCP segments/GB"
                    % (i + 1, a.runs, res["mb_s"], res["s_per_gb"], res["segments_per_gb"]))
    finally:
        CLEANUP.run()
    med = {k: statistics.median(x[k] for x in results) for k in results[0]}
    print("medians of %d (%s, %d ms%s%s): %.0f MB/s, daemon %.3f s CPU/GB, %.0f TCP segments/GB"
          % (len(results), a.scheme, a.latency, ", pinned" if a.pin else "",
             ", wire" if a.wire else "",
             med["mb_s"], med["s_per_gb"], med["segments_per_gb"]))


if __name__ == "__main__":
    main()
