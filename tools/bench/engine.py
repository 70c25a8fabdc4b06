#!/usr/bin/python3
"""CPU per GET of the HTTP engine alone, for builds side by side.

  tools/bench/engine.py BUILD_DIR [BUILD_DIR...] [--runs N] [--files N]
                        [--depth D] [--latency MS] [--opts k=v,...]

Serves the RetinaNet-shaped dataset with the rig of run.py (4 nginx
endpoints, with a first-byte delay of --latency ms), then, --runs times,
for each build in turn: one `tests/s3-client parallel-get` of every file
in a shuffled order with --depth GETs in flight, under /usr/bin/time.
No FUSE, no readers: s3-client's done threads only count the bytes, so
its CPU is the engine's (event threads, SigV4, curl, the body buffers).
Each pass prints CPU per GET, GETs/s and minor page faults per GET; at
the end the medians, and each build against the first.  The most
precise way to compare engine changes on a small machine: a mount's
files/s moves with the readers and everything else on the cores.

A build directory is a meson build of any commit (see ab.py).  Needs
root, like run.py (the rig's nginx).  Measures only: no report.
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import rig  # noqa: E402
import run  # noqa: E402
from rig import CLEANUP, log  # noqa: E402


def one_pass(client, r, ds, a, seed):
    keys = list(ds.files)
    random.Random(seed).shuffle(keys)
    urls = r.endpoints.delay_urls[a.latency] if a.latency else r.endpoints.urls
    opts = ["endpoint=%s" % u for u in urls] + a.opts
    # The keys go on the command line: RetinaNet's names are short.
    cmd = ["/usr/bin/time", "-f", "TIME %U %S %R", client, "-o", ",".join(opts),
           "parallel-get", "s3://%s" % ds.name, str(a.depth)] + keys
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=r.client_env(), capture_output=True, text=True,
                       timeout=a.timeout)
    wall = time.monotonic() - t0
    times = [ln for ln in p.stderr.splitlines() if ln.startswith("TIME ")]
    if p.returncode != 0 or not times:
        raise SystemExit("engine.py: %s failed (exit %d): %s" %
                         (client, p.returncode, p.stderr.strip()[-800:]))
    user, sys_s, faults = (float(x) for x in times[-1].split()[1:])
    return {"cpu_ms": (user + sys_s) / len(keys) * 1e3, "gets_s": len(keys) / wall,
            "faults": faults / len(keys), "out": p.stdout.strip()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", help="meson build directories; the first is the "
                    "baseline")
    ap.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--files", type=int, default=16000, help="files (default 16,000)")
    ap.add_argument("--depth", type=int, default=64, help="GETs in flight (default 64)")
    ap.add_argument("--latency", type=int, default=0,
                    help="the endpoints' first-byte delay, ms (default 0)")
    ap.add_argument("--opts", default="", help="extra -o options for s3-client")
    ap.add_argument("--cache-dir", default="/var/tmp/bucketfs-bench",
                    help="where datasets live (default /var/tmp/bucketfs-bench)")
    ap.add_argument("--timeout", type=int, default=900, help="cut a pass off after (s)")
    a = ap.parse_args()
    a.opts = [o for o in a.opts.split(",") if o]
    if a.runs < 1 or a.files < 1 or a.depth < 1 or a.latency < 0:
        ap.error("--runs, --files and --depth must be at least 1, --latency at least 0")
    if os.geteuid() != 0:
        raise SystemExit("engine.py: needs root (the rig's nginx)")
    os.makedirs(a.cache_dir, exist_ok=True)
    lock_fd = run.one_at_a_time(a.cache_dir)  # noqa: F841 (held until exit)
    rig.clear_stale()
    labels = ["%d:%s" % (i, os.path.basename(os.path.normpath(b)))
              for i, b in enumerate(a.builds)]
    clients = [os.path.join(rig.snapshot_build(b, "tests/s3-client", str(i), "engine.py"),
                            "tests/s3-client") for i, b in enumerate(a.builds)]
    ds = rig.retina_dataset(a.cache_dir, a.files)
    r = rig.Rig(a.cache_dir, [ds], delays=(a.latency,) if a.latency else ())
    results = {lb: [] for lb in labels}
    try:
        rig.warm(ds.paths())
        for i in range(a.runs):
            for lb, client in zip(labels, clients):
                res = one_pass(client, r, ds, a, i)
                results[lb].append(res)
                log("%-24s %.3f ms CPU/GET  %6.0f GETs/s  %5.1f faults/GET  (%s)" % (
                    lb, res["cpu_ms"], res["gets_s"], res["faults"], res["out"]))
    finally:
        CLEANUP.run()
    base = None
    for lb in labels:
        cpu_ms = statistics.median(x["cpu_ms"] for x in results[lb])
        gets_s = statistics.median(x["gets_s"] for x in results[lb])
        base = base or cpu_ms
        print("%-24s median of %d: %.3f ms CPU/GET (%.2fx the first), %.0f GETs/s"
              % (lb, a.runs, cpu_ms, cpu_ms / base, gets_s))


if __name__ == "__main__":
    main()
