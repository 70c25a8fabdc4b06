#!/usr/bin/env python3
"""The long soak: hours, not minutes.

RetinaNet-shaped load (files of 322,624 bytes, 32 readers reading random
files whole, every byte checked against the test server's synthetic
content) on one bucketfs mount, for --minutes (default 30), while the test
S3 server (tests/s3server/s3server.py) faults 1% of GETs, every kind mixed:
503 SlowDown, 500 InternalError, a reset after half the body, half the body
then a clean close, a stall of 5 s (stall_timeout=2), a connection closed
with no answer, and a body 7 bytes short.  One endpoint, the index built
beforehand.

Each minute it records the daemon's RSS (VmRSS), descriptors (/proc/PID/fd)
and threads, and the reads done and failed; and, of the RSS, the part in
glibc's thread arenas (the event threads' bodies) with those arenas'
extent (what they took from their heaps, a high-water mark).  Writes a JSON of the samples
and a plot (python3-matplotlib from Debian), and prints a Markdown table
for docs/BENCHMARKS.md.

  tools/bench/soak.py [--minutes 30] [--files 1000] [--procs 4]
                      [--threads 8] [--rate 0.01] [--out-json F]
                      [--out-png F] [--docs] [--note TEXT]

With --docs: docs/bench-soak.json and docs/bench-soak.png, and section 11 of
docs/BENCHMARKS.md rewritten from them by tools/bench/report.py (run.py's
rewrites of that file write the same section from the same JSON).

Not part of the test suite: it is a measurement.  The machine may be
shared; the report says how busy it was (/proc/loadavg each minute).
"""

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                "tests", "integration"))
import harness  # noqa: E402

sys.path.insert(0, os.path.join(harness.SRC, "tests", "s3server"))
import s3server  # noqa: E402

sys.path.insert(0, HERE)
from rig import RETINA_SIZE, log  # noqa: E402
import cpu  # noqa: E402
import report  # noqa: E402

BUCKET = "soak"


def key(i, n):
    return f"train/img_{i:0{len(str(n))}d}_of_{n}.jpeg"


def want_hash(args):
    k, size = args
    return k, hashlib.sha256(s3server.synthetic_bytes(BUCKET, k, size, 0)).hexdigest()


def fault_rules(rate, size):
    kinds = [dict(kind="status", status=503),
             dict(kind="status", status=500),
             dict(kind="reset", after_bytes=size // 2),
             dict(kind="truncate", after_bytes=size // 2),
             dict(kind="stall", after_bytes=size // 2, seconds=5),
             dict(kind="drop"),
             dict(kind="bad_length", delta=-7)]
    each = rate / len(kinds)
    rules, left = [], 1.0
    for k in kinds:
        # The rules are tried in order: each fires at `each` overall.
        rules.append(dict(k, op="GET", bucket=BUCKET,
                          probability=min(1.0, each / left)))
        left -= each
    return rules


def reader_proc(mnt, keys, hashes, threads, stop_at, q, seed):
    done = [0, 0]
    lock = threading.Lock()
    errors = []

    def reader(t):
        rng = random.Random(seed * 1000 + t)
        while time.monotonic() < stop_at:
            k = rng.choice(keys)
            ok = False
            try:
                with open(os.path.join(mnt, k), "rb") as f:
                    ok = hashlib.sha256(f.read()).hexdigest() == hashes[k]
                    # Out of the page cache, so every read reaches the
                    # daemon.
                    os.posix_fadvise(f.fileno(), 0, 0,
                                     os.POSIX_FADV_DONTNEED)
                if not ok:
                    errors.append(f"{k}: wrong bytes")
            except OSError as e:
                errors.append(f"{k}: {e}")
            with lock:
                done[0 if ok else 1] += 1

    ts = [threading.Thread(target=reader, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    last = time.monotonic()
    while any(t.is_alive() for t in ts):
        time.sleep(0.5)
        if time.monotonic() - last >= 10:
            with lock:
                q.put(("progress", done[0], done[1]))
                done[0] = done[1] = 0
            last = time.monotonic()
    for t in ts:
        t.join()
    q.put(("progress", done[0], done[1]))
    q.put(("errors", errors[:20]))


# glibc's thread arenas live in heaps of HEAP_MAX_SIZE (64 MiB on 64-bit),
# mapped aligned to it; the read-write part is what the arena has taken
# from its heap so far (its extent: it never gives the top of it back below
# M_TRIM_THRESHOLD, 128 MiB here), the rest is PROT_NONE.
ARENA_ALIGN = 64 << 20


def arenas(pid):
    """(RSS, extent) in KiB of the daemon's thread-arena heaps, from
    /proc/PID/smaps: anonymous rw-p mappings that start 64 MiB-aligned."""
    rss = size = 0
    cur = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                cur = (len(head) == 5 and head[1] == "rw-p"
                       and lo % ARENA_ALIGN == 0)
                if cur:
                    size += (hi - lo) // 1024
            elif cur and head[0] == "Rss:":
                rss += int(head[1])
    return rss, size


def sample(pid):
    with open(f"/proc/{pid}/status") as f:
        st = dict(line.split(":", 1) for line in f if ":" in line)
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    names = cpu.thread_counts(pid)
    arena_rss, arena_size = arenas(pid)
    return {"rss_mib": int(st["VmRSS"].split()[0]) / 1024,
            "arena_rss_mib": arena_rss / 1024,
            "arena_extent_mib": arena_size / 1024,
            "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "threads": int(st["Threads"]),
            "thread_names": names,
            "load1": load}


def plot(samples, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = [s["minute"] for s in samples]
    fig, ax = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    for a, k, lab in zip(ax, ("rss_mib", "fds", "threads"),
                         ("RSS (MiB)", "descriptors", "threads")):
        a.plot(t, [s[k] for s in samples], marker="o",
               label="VmRSS" if k == "rss_mib" else None)
        if k == "rss_mib" and all("arena_rss_mib" in s for s in samples):
            a.plot(t, [s["arena_extent_mib"] for s in samples], marker=".",
                   label="thread arenas: extent")
            a.plot(t, [s["arena_rss_mib"] for s in samples], marker=".",
                   label="thread arenas: RSS")
            a.plot(t, [s["rss_mib"] - s["arena_rss_mib"] for s in samples],
                   marker=".", label="the rest of VmRSS")
            a.legend(fontsize=7, loc="lower right")
        a.set_ylabel(lab)
        a.set_ylim(bottom=0, top=max(s[k] for s in samples) * 1.3 + 1)
        a.grid(True, alpha=0.3)
    ax[-1].set_xlabel("minute")
    ax[0].set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def plot_title(a, sm):
    return (f"bucketfs soak: {a['procs'] * a['threads']} readers, "
            f"{a['rate']:.0%} faults of 7 kinds, {sm['minutes']:.0f} min, "
            f"{sm['reads']} reads, {sm['failed']} failed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--size", type=int, default=RETINA_SIZE)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rate", type=float, default=0.01)
    ap.add_argument("--out-json")
    ap.add_argument("--out-png")
    ap.add_argument("--docs", action="store_true",
                    help="write docs/bench-soak.json and docs/bench-soak.png "
                    "and rewrite section 11 of docs/BENCHMARKS.md from them "
                    "(tools/bench/report.py, which run.py's rewrites also call)")
    ap.add_argument("--render-only", action="store_true",
                    help="no run: the plot (and with --docs section 11) "
                    "from --out-json's results")
    ap.add_argument("--note", default="",
                    help="a word on the machine, for the report")
    args = ap.parse_args()
    docs = os.path.join(harness.SRC, "docs")
    if args.docs:
        args.out_json = args.out_json or os.path.join(docs, report.SOAK_JSON)
        args.out_png = args.out_png or os.path.join(docs, "bench-soak.png")
    if args.render_only:
        # Plot and section 11 again from a run's JSON (e.g. under Debian's
        # /usr/bin/python3, which has python3-matplotlib).
        with open(args.out_json) as f:
            d = json.load(f)
        sm = d["summary"]
        plot(d["samples"], args.out_png, plot_title(d["args"], sm))
        if args.docs:
            report.replace_soak_section(os.path.join(docs, "BENCHMARKS.md"))
        return 0
    machine = {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "commit": subprocess.run(
                   ["git", "-C", harness.SRC, "rev-parse", "--short", "HEAD"],
                   capture_output=True, text=True).stdout.strip() or "?",
               "note": args.note}

    tmp = tempfile.mkdtemp(prefix="bfs-soak-", dir="/var/tmp")
    keys = [key(i, args.files) for i in range(args.files)]
    log(f"hashing {args.files} synthetic objects")
    with multiprocessing.Pool(2) as pool:
        hashes = dict(pool.map(want_hash, [(k, args.size) for k in keys]))
    server = harness.TestServer(
        "--synthetic", f"{BUCKET}:{args.files}:{args.size}")
    m = None
    try:
        index = os.path.join(tmp, "soak.idx")
        r = harness.run([harness.binary("bucketfs-index"), "build", "-q",
                         "-o", f"endpoint={server.url},index={index}",
                         f"s3://{BUCKET}"])
        if r.returncode != 0:
            raise SystemExit(f"index build failed: {r.stderr}")
        m = harness.Mount(f"s3://{BUCKET}", server.url, index,
                          "stall_timeout=2", "empty_dirs=valid", log=os.path.join(tmp, "mount.log"))
        pid = m.proc.pid
        server.faults(fault_rules(args.rate, args.size), seed=24)
        q = multiprocessing.Queue()
        t0 = time.monotonic()
        stop_at = t0 + args.minutes * 60
        procs = [multiprocessing.Process(
            target=reader_proc,
            args=(m.dir, keys, hashes, args.threads, stop_at, q, p))
            for p in range(args.procs)]
        for p in procs:
            p.start()
        samples, ok, failed, errors = [], 0, 0, []
        s = sample(pid)
        s.update(minute=0, reads=0, failed=0,
                 faults=server.stats()["faults_injected"])
        samples.append(s)
        next_sample = t0 + 60
        while any(p.is_alive() for p in procs) or not q.empty():
            try:
                msg = q.get(timeout=1)
                if msg[0] == "progress":
                    ok += msg[1]
                    failed += msg[2]
                else:
                    errors.extend(msg[1])
            except Exception:
                pass
            if time.monotonic() >= next_sample and time.monotonic() < stop_at + 30:
                s = sample(pid)
                s.update(minute=round((time.monotonic() - t0) / 60, 2),
                         reads=ok, failed=failed,
                         faults=server.stats()["faults_injected"])
                samples.append(s)
                log("minute %(minute)5.1f: RSS %(rss_mib)6.1f MiB (arenas "
                    "%(arena_rss_mib).1f of %(arena_extent_mib).1f), %(fds)3d fds, "
                    "%(threads)2d threads, %(reads)d reads, %(failed)d failed, "
                    "%(faults)d faults, load %(load1).1f; threads %(thread_names)s"
                    % s)
                next_sample += 60
        for p in procs:
            p.join()
        secs = time.monotonic() - t0
        faults = server.stats()["faults_injected"]
        hits = {f"{r['kind']}{r.get('status', '')}": r["hits"]
                for r in server.control("GET", "faults")["rules"]}
        warn = [ln for ln in m.output().splitlines()
                if ": warning:" in ln or ": error:" in ln]
        rc = m.unmount()
        m = None
    finally:
        if m is not None:
            m.unmount()
        server.stop()
    after = [s for s in samples if s["minute"] >= 1]
    summary = {
        "minutes": secs / 60, "reads": ok, "failed": failed,
        "reads_per_s": ok / secs, "faults_injected": faults,
        "fault_hits": hits, "errors": errors, "unmount": rc,
        "daemon_log_warnings": len(warn),
        "after_minute_1": {k: {"min": min(s[k] for s in after),
                               "max": max(s[k] for s in after),
                               "median": statistics.median(s[k] for s in after)}
                           for k in ("rss_mib", "arena_rss_mib",
                                     "arena_extent_mib", "fds", "threads")}
        if after else {},
        "load1_median": statistics.median(s["load1"] for s in samples),
    }
    print(json.dumps(summary, indent=1))
    print("\n| minute | RSS MiB | fds | threads | reads | failed | faults | load |")
    print("|---|---|---|---|---|---|---|---|")
    for s in samples:
        print("| %(minute).0f | %(rss_mib).1f | %(fds)d | %(threads)d | %(reads)d "
              "| %(failed)d | %(faults)d | %(load1).1f |" % s)
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump({"command": "tools/bench/soak.py " + shlex.join(sys.argv[1:]),
                       "machine": machine, "args": vars(args),
                       "summary": summary, "samples": samples}, f, indent=1)
    if args.out_png:
        plot(samples, args.out_png, plot_title(vars(args), summary))
    if args.docs:
        report.replace_soak_section(os.path.join(docs, "BENCHMARKS.md"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
