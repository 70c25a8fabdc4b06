#!/usr/bin/env python3
"""What a fault costs: the table of docs/RELIABILITY.md, "Fault
cost", measured again.

The set-up: a mount with two endpoints, one that refuses every connection
and the test S3 server (tests/s3server/s3server.py) whose GETs are faulted
at a rate (30% by default): 503 SlowDown, a connection reset after half the
body, or half the body then a clean close (truncated).  The load: one
reader walks N small files (stat, read whole, hash) in listing order, on a
mount whose index was built beforehand against the healthy server, so the
mount sends no LIST.  Every byte is compared with the server's synthetic
content.

Two schedules:
  fresh   one new mount per mode (none, slowdown, reset, truncate), a
          clean one before each faulted one, the faulted walk compared
          with the clean walk just before it;
  history the modes in turn on one mount, each after a clean walk, then
          the first faulted mode again, so a cost that grows with the
          mount's history shows; each compared with the clean walk just
          before it (not with the first walk: later walks of a mount
          fetch at open, one at a time).

  tools/bench/faults.py [--files 2500] [--size 3750] [--rate 0.3]
                        [--schedule fresh,history] [--runs 1] [--opts k=v,...]
                        [--json OUT]

Prints one line per walk and a table of medians, ratios to clean and
the cost per fault.
Not part of the test suite: it is a measurement.
"""

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                "tests", "integration"))
import harness  # noqa: E402

sys.path.insert(0, os.path.join(harness.SRC, "tests", "s3server"))
import s3server  # noqa: E402

sys.path.insert(0, HERE)
from rig import log  # noqa: E402

MODES = ("none", "slowdown", "reset", "truncate")
BUCKET = "many"


def rules(mode, rate, size):
    """The fault rules of @mode at @rate on every GET of the bucket."""
    if mode in ("none", "none-again"):
        return []
    base = {"op": "GET", "bucket": BUCKET, "probability": rate}
    if mode == "slowdown":
        return [dict(base, kind="status", status=503)]
    if mode == "mixed":
        # Every kind at @rate / 4 each: SlowDown, 500, reset, truncate.
        # (A stall costs stall_timeout each; the soak mixes it in.)
        each = rate / 4
        return [dict(base, kind="status", status=503, probability=each),
                dict(base, kind="reset", after_bytes=size // 2,
                     probability=each / (1 - each)),
                dict(base, kind="truncate", after_bytes=size // 2,
                     probability=each / (1 - 2 * each)),
                dict(base, kind="status", status=500,
                     probability=each / (1 - 3 * each))]
    return [dict(base, kind=mode, after_bytes=size // 2)]


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="bfs-faults-", dir="/var/tmp")
        self.server = harness.TestServer(
            "--synthetic", f"{BUCKET}:{args.files}:{args.size}:many/")
        self.index = os.path.join(self.tmp, "many.idx")
        r = harness.run([harness.binary("bucketfs-index"), "build", "-q",
                         "-o", f"endpoint={self.server.url},index={self.index}",
                         f"s3://{BUCKET}"])
        if r.returncode != 0:
            raise SystemExit(f"index build failed: {r.stderr}")
        self.keys = sorted(
            f"many/img_{i:0{len(str(args.files))}d}_of_{args.files}.jpeg"
            for i in range(args.files))
        self.want = {k: hashlib.sha256(s3server.synthetic_bytes(
            BUCKET, k, args.size, 0)).digest() for k in self.keys}
        self.dead = f"http://127.0.0.1:{harness.free_port()}"
        self.n = 0
        self.run = 0

    def mount(self):
        self.n += 1
        log_path = os.path.join(self.tmp, f"mount{self.n}.log")
        opts = [o for o in self.args.opts.split(",") if o]
        return harness.Mount(f"s3://{BUCKET}", self.dead, self.index,
                             f"endpoint={self.server.url}", *opts,
                             log=log_path)

    def walk(self, m, mode):
        """One reader over every file; the seconds and the failures."""
        self.server.faults(rules(mode, self.args.rate, self.args.size),
                           seed=self.n * 100 + MODES.index(mode)
                           if mode in MODES else self.n)
        before = self.server.control("GET", "stats")["faults_injected"]
        failed = 0
        t0 = time.monotonic()
        for k in self.keys:
            p = m.path(k)
            try:
                os.stat(p)
                with open(p, "rb") as f:
                    h = hashlib.sha256(f.read()).digest()
                if h != self.want[k]:
                    failed += 1
            except OSError:
                failed += 1
        secs = time.monotonic() - t0
        faults = self.server.control("GET", "stats")["faults_injected"] - before
        self.server.clear_faults()
        return secs, failed, faults

    def stats(self, m):
        s = json.loads(os.getxattr(m.dir, "user.bucketfs.stats"))
        return {e["url"]: e for e in s["endpoints"]}

    def run_one(self, m, mode, sched, results):
        secs, failed, faults = self.walk(m, mode)
        eps = self.stats(m)
        live = eps[self.server.url]
        line = (f"{sched:8s} {mode:9s} {secs:7.2f} s  failed {failed}  "
                f"faults {faults}  live: {live['requests']} attempts, "
                f"{live['ejections']} ejections; dead: "
                f"{eps[self.dead]['requests']} attempts")
        log(line)
        results.append({"schedule": sched, "run": self.run,
                        "mode": mode, "seconds": secs,
                        "failed": failed, "faults": faults,
                        "live_requests": live["requests"],
                        "live_ejections": live["ejections"],
                        "dead_requests": eps[self.dead]["requests"]})

    def fresh(self, results, modes):
        """A new mount per mode, a clean one before each faulted one (its
        reference: the load of a shared machine drifts)."""
        faulted = [x for x in modes if x != "none"]
        order = []
        for x in faulted:
            order += ["none", x] if "none" in modes else [x]
        if not faulted:
            order = modes
        for mode in order:
            m = self.mount()
            try:
                self.run_one(m, mode, "fresh", results)
            finally:
                m.unmount()

    def history(self, results, modes):
        """The modes in turn on one mount, each after a clean walk, then
        the first faulted mode again.  The first walk of a mount is the
        one whose listing-order prefetch runs ahead of the reader; later
        walks fetch each file at its open, one at a time, so each faulted
        walk is compared with the clean walks after the first
        ("none-again")."""
        faulted = [x for x in modes if x != "none"]
        order = ["none"]
        for x in faulted + faulted[:1]:
            order += ["none-again", x]
        m = self.mount()
        try:
            for mode in order:
                self.run_one(m, mode, "history", results)
        finally:
            m.unmount()

    def close(self):
        self.server.stop()


def paired(rows, sched):
    """Each walk with the clean walk it is compared with: on a fresh
    mount the clean mount of the same run; on the history mount the
    clean walk just before it.  Pairs, not one median of every clean
    walk, so that a load that changes during the run (the machine is
    shared) moves both sides of a ratio."""
    base_mode = "none-again" if sched == "history" else "none"
    ref, pairs = {}, []
    for r in rows:
        if r["mode"] == base_mode:
            ref[r["run"]] = r
        pairs.append((r, ref.get(r["run"])))
    return base_mode, pairs


def table(results):
    out = []
    for sched in ("fresh", "history"):
        rows = [r for r in results if r["schedule"] == sched]
        if not rows:
            continue
        base_mode, pairs = paired(rows, sched)
        out.append(f"\n{sched}: medians of runs; the ratio is the median "
                   f"of each walk over its clean walk ('{base_mode}'), "
                   f"the cost per fault its extra time over its faults")
        seen = []
        for r in rows:
            if r["mode"] not in seen:
                seen.append(r["mode"])
        for mode in seen:
            mine = [(r, c) for r, c in pairs if r["mode"] == mode]
            med = statistics.median(r["seconds"] for r, _ in mine)
            ratios = [r["seconds"] / c["seconds"] for r, c in mine if c]
            ratio = f"{statistics.median(ratios):5.2f}x" if ratios else "  -  "
            costs = [(r["seconds"] - c["seconds"]) / r["faults"] * 1e3
                     for r, c in mine if c and r["faults"]]
            cost = (f"  {statistics.median(costs):6.2f} ms/fault"
                    if costs else "")
            failed = sum(r["failed"] for r, _ in mine)
            out.append(f"  {mode:10s} {med:7.2f} s  {ratio}{cost}  "
                       f"(n={len(mine)}, failed reads {failed})")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=2500)
    ap.add_argument("--size", type=int, default=3750)
    ap.add_argument("--rate", type=float, default=0.3)
    ap.add_argument("--schedule", default="fresh,history")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--opts", default="")
    ap.add_argument("--json")
    args = ap.parse_args()
    modes = args.modes.split(",")
    b = Bench(args)
    results = []
    try:
        for run in range(args.runs):
            b.run = run
            if "fresh" in args.schedule:
                b.fresh(results, modes)
            if "history" in args.schedule:
                b.history(results, modes)
    finally:
        b.close()
    print(f"{args.files} files of {args.size} B, faults at "
          f"{args.rate:.0%} of GETs, one refused endpoint beside")
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
    return 1 if any(r["failed"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
