"""The measurements through endpoints with a fixed first-byte delay (the
latency rig), mixed into run.py's Bench:

  latency  RetinaNet files at each --latency (ms): three orders (random,
           DLIO's, announced) x two read styles (one whole read(), DLIO's
           chunks) through a fresh bucketfs mount, against the same reader
           processes doing keep-alive GETs themselves (same order) and
           curl -Z with as many in flight, in the same run
  large    dd bs=1M of the large file through bucketfs at each
           --large-latency, against 8 ranged GETs of it at once and against
           ranged GETs of the mount's part size with as many in flight as the
           mount had; s3fs, rclone and the local file at 0 ms
  fio      sequential reads (1 and 4 jobs) and random reads on the mount at
           each --large-latency, and on the local file
  npz      np.load() of UNet3D-shaped .npz files (DLIO's UNet3D reader)
           through bucketfs at each --large-latency, against the same
           readers GETting each object and loading it from memory

Every pass through a mount gives the daemon's CPU (from /proc/PID/stat,
per thread name from /proc/PID/task/*/stat) per file and per GB, its own
counters (user.bucketfs.stats) and how busy the whole machine was (from
/proc/stat).  Every bucketfs pass uses a fresh mount, so its page cache,
dentries and inodes start cold while the endpoints keep serving from memory.
"""

import json
import os
import random
import re
import subprocess
import threading
import time

import cpu
import readers
import rig
from rig import log

ORDERS = ["random", "dlio", "announced"]
# user.bucketfs.stats's readahead counters the report gives (those the
# daemon has): announced prefetches, and listing-order stream prefetches.
RA_COUNTERS = ("prefetch_hits", "prefetch_wasted", "prefetch_late", "stream_hits",
               "stream_wasted", "stream_late")
STYLES = ["whole", "dlio"]
HINT_CHUNK = 60_000   # bytes of paths per setxattr (the limit is 64 KiB)
XATTR_STATS = "user.bucketfs.stats"
XATTR_PREFETCH = "user.bucketfs.prefetch"
# DLIO on one host (MLPerf Storage RetinaNet): 4 ranks x 8 workers, batches of 24.
DLIO_RANKS, DLIO_WORKERS, DLIO_BATCH = 4, 8, 24


def dlio_shares(keys, ranks=DLIO_RANKS, workers=DLIO_WORKERS, batch=DLIO_BATCH):
    """DLIO's order: the keys sorted by name; each rank takes a contiguous
    slice; a rank's batches of @batch files go round-robin to its workers,
    so worker w reads batches w, w + workers, ...  One list per worker, in
    reading order: ranks x workers interleaved sequential streams."""
    order = sorted(keys)
    per_rank = -(-len(order) // ranks)
    shares = []
    for r in range(ranks):
        mine = order[r * per_rank:(r + 1) * per_rank]
        batches = [mine[i:i + batch] for i in range(0, len(mine), batch)]
        for w in range(workers):
            shares.append([k for b in batches[w::workers] for k in b])
    return [s for s in shares if s]


def shares_for(order, keys, procs, seed):
    """The readers' lists of keys for @order ("announced" reads the random
    order) and, for "announced", the whole order to announce."""
    if order == "dlio":
        return dlio_shares(keys), None
    shares = readers.random_shares(keys, procs, seed)
    if order == "announced":
        # The order the files will be taken in overall: reader i reads its
        # share's j-th file at about the time the others read theirs.
        longest = max(len(s) for s in shares)
        return shares, [s[j] for j in range(longest) for s in shares if j < len(s)]
    return shares, None


def announce(mnt, order):
    """setxattr(MNT, user.bucketfs.prefetch): what is queued is dropped,
    then @order is announced in chunks under the xattr size limit."""
    os.setxattr(mnt, XATTR_PREFETCH, b"")
    chunk, size = [], 0
    for k in order:
        if chunk and size + len(k) + 1 > HINT_CHUNK:
            os.setxattr(mnt, XATTR_PREFETCH, "\n".join(chunk).encode())
            chunk, size = [], 0
        chunk.append(k)
        size += len(k) + 1
    if chunk:
        os.setxattr(mnt, XATTR_PREFETCH, "\n".join(chunk).encode())


def daemon_stats(mnt):
    """The mount's user.bucketfs.stats (JSON), or None."""
    try:
        return json.loads(os.getxattr(mnt, XATTR_STATS))
    except (OSError, ValueError):
        return None


def stats_summary(before, after, files):
    """What the daemon's counters say about one pass: GETs (per file),
    hedges, errors, the readahead counters, the endpoints' p50."""
    if not after:
        return None
    eps0 = {e["url"]: e for e in (before or {}).get("endpoints", [])}
    req = hedges = errors = 0
    p50 = []
    for e in after.get("endpoints", []):
        b = eps0.get(e["url"], {})
        req += e.get("requests", 0) - b.get("requests", 0)
        hedges += e.get("hedges", 0) - b.get("hedges", 0)
        errors += e.get("errors", 0) - b.get("errors", 0)
        if e.get("p50_ms"):
            p50.append(e["p50_ms"])
    ra0 = (before or {}).get("readahead", {})
    ra = {k: v - ra0.get(k, 0) if isinstance(v, (int, float)) and k not in
          ("memory_max", "memory_used", "prefetch_queued", "prefetch_unopened") else v
          for k, v in after.get("readahead", {}).items()}
    return {"requests": req, "gets_per_file": req / files if files else None,
            "hedges": hedges, "errors": errors, "readahead": ra,
            "endpoint_p50_ms": sorted(p50)[len(p50) // 2] if p50 else None}


class InflightSampler(threading.Thread):
    """The daemon's GETs in flight (the endpoints' "inflight" summed) every
    20 ms: how many ranged GETs the reference should keep in flight."""

    def __init__(self, mnt):
        super().__init__(daemon=True)
        self.mnt = mnt
        self.samples = []
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            s = daemon_stats(self.mnt)
            if s:
                self.samples.append(sum(e.get("inflight", 0) for e in s.get("endpoints", [])))
            self.halt.wait(0.02)

    def stop(self):
        self.halt.set()
        self.join()
        busy = sorted(x for x in self.samples if x > 0)
        return {"max": max(self.samples) if self.samples else 0,
                "median_busy": busy[len(busy) // 2] if busy else 0,
                "samples": len(self.samples)}


def cell_key(delay, path, order="-", style="-"):
    return "%g|%s|%s|%s" % (delay, path, order, style)


class LatencyMixin:
    """Bench's measurements through the delayed endpoints (see above)."""

    def bucketfs_pass(self, ds, delay, fn, tag, sample_inflight=False):
        """A fresh bucketfs mount of @ds on the endpoints with @delay ms;
        @fn(mount) measures and returns a result with files, bytes and
        wall_s, to which the daemon's CPU, its counters and the machine's
        busy share are added."""
        self.build_index(ds)
        tls = ["ca_file=%s" % rig.TLS.ca] if rig.TLS else []
        with rig.Mount("bucketfs", self.rig, ds, tag=tag, extra_opts=self.a.opts + tls,
                       urls=self.rig.endpoints.urls_for(delay)) as m:
            before = daemon_stats(m.mnt)
            sampler = InflightSampler(m.mnt) if sample_inflight else None
            probe = cpu.CpuProbe(m.proc.pid, others=self.server_pids())
            if sampler:
                sampler.start()
            try:
                res = fn(m)
            finally:
                if sampler:
                    inflight = sampler.stop()
            res["cpu"] = probe.stop(files=res.get("files", 0), nbytes=res.get("bytes", 0),
                                    wall_s=res.get("wall_s", 0))
            res["daemon"] = stats_summary(before, daemon_stats(m.mnt), res.get("files", 0))
            if sampler:
                res["inflight"] = inflight
            if m.proc.poll() is not None:
                raise RuntimeError("bucketfs exited (status %s) during the pass: %s"
                                   % (m.proc.returncode, m.log_tail(800)))
        return res

    @staticmethod
    def pin_suffix():
        """The sections of a pinned pass (rig.pin()) are "latency-pinned"
        and "large-pinned"; those of a pass on the TLS ports
        (rig.use_tls()) end in "-tls": "latency-tls", "latency-pinned-tls"."""
        return ("-pinned" if rig.PIN else "") + ("-tls" if rig.TLS else "")

    def server_pids(self):
        """The endpoints' processes, whose CPU counts in a path's total."""
        eps = getattr(self.rig, "endpoints", None)
        return eps.pids() if hasattr(eps, "pids") else []

    def referenced(self, fn):
        """Runs a reference path @fn() and adds the machine's busy share and
        the CPU of every process of the path."""
        probe = cpu.CpuProbe(others=self.server_pids())
        res = fn()
        res["cpu"] = probe.stop(files=res.get("files", 0), nbytes=res.get("bytes", 0),
                                wall_s=res.get("wall_s", 0))
        return res

    def record(self, sec, key, res, label):
        for k in ("ends", "error_times", "t_start", "during"):
            res.pop(k, None)
        res["round"] = sec.get("round")
        sec["cells"].setdefault(key, {"runs": []})["runs"].append(res)
        extra = ""
        if res.get("daemon"):
            d = res["daemon"]
            ra = d.get("readahead", {})
            if "files_s" in res and res.get("files", 0) > 1:
                extra = "; %.2f GETs/file, prefetch hits %s wasted %s late %s" % (
                    d["gets_per_file"] or 0, ra.get("prefetch_hits", "?"),
                    ra.get("prefetch_wasted", "?"), ra.get("prefetch_late", "?"))
                if "stream_hits" in ra:
                    extra += ", stream hits %s wasted %s late %s" % (
                        ra["stream_hits"], ra.get("stream_wasted", "?"),
                        ra.get("stream_late", "?"))
            else:
                extra = "; %d GETs (%s parts)" % (d["requests"], ra.get("parts_fetched", "?"))
        if "files_s" in res:
            log("  %s: %.0f files/s, p50 %.1f ms, p99 %.1f ms, %d errors; %s%s"
                % (label, res["files_s"], res["p50_ms"] or 0, res["p99_ms"] or 0,
                   res["errors"], cpu.describe(res["cpu"]), extra))
        else:
            log("  %s: %.0f MB/s (%.2f s); %s%s" % (label, res["mb_s"], res["wall_s"],
                                                    cpu.describe(res["cpu"]), extra))
        if res.get("errors"):
            self.problem(sec["name"], "%s: %d failed reads, e.g. %s"
                         % (label, res["errors"], res.get("error_samples", [])[:3]))

    # ---- RetinaNet files at each latency -------------------------------------

    def m_latency(self):
        a = self.a
        ds = self.retina
        keys = list(ds.files)
        index_of = {k: i for i, k in enumerate(keys)}
        expect = lambda _: rig.RETINA_SIZE  # noqa: E731
        name = "latency" + self.pin_suffix()
        sec = self.res["sections"][name] = {
            "name": name, "pinned": bool(rig.PIN), "tls": bool(rig.TLS),
            "files": len(keys), "procs": a.procs,
            "latencies": a.latency, "orders": a.order, "styles": a.style,
            "opts": a.opts, "cells": {}, "dlio_streams": len(dlio_shares(keys)),
            # readers.py's "dlio" style goes through Python's buffered file
            # (results without this key made 4/60/64 KiB reads by hand).
            "dlio_style": "buffered"}
        ref_orders = sorted({"dlio" if o == "dlio" else "random" for o in a.order})

        def references(r, d, when):
            for order in ref_orders:
                shares, _ = shares_for(order, keys, a.procs, r)
                urls = [[self.rig.object_url(ds, k, index_of[k], d) for k in s]
                        for s in shares]
                res = self.referenced(lambda: readers.read_all(
                    None, 0, expect=expect, timeout=a.run_timeout, shares=urls))
                self.record(sec, cell_key(d, "py-gets", order), res,
                            "same readers doing GETs, %s order (%s)" % (order, when))
            res = self.referenced(lambda: self.curl_z(ds, keys, a.procs, r, d))
            self.record(sec, cell_key(d, "curl"), res, "curl -Z --parallel-max %d (%s)"
                        % (a.procs, when))

        for r in range(a.runs):
            sec["round"] = r
            for d in a.latency:
                log("latency: run %d/%d at %g ms" % (r + 1, a.runs, d))
                # The references before and after the mount's passes: each
                # run's ratio is against their mean, so load that drifts
                # during the run weighs on both sides alike.
                references(r, d, "before")
                for order in a.order:
                    shares, hint = shares_for(order, keys, a.procs, r)
                    for style in a.style:
                        def go(m):
                            paths = [[m.path(k) for k in s] for s in shares]
                            during = (lambda _t: announce(m.mnt, hint)) if hint else None
                            return readers.read_all(None, 0, expect=expect, during=during,
                                                    timeout=a.run_timeout, shares=paths,
                                                    style=style)
                        try:
                            res = self.bucketfs_pass(ds, d, go, "-lat")
                        except Exception as exc:
                            self.problem("latency", "bucketfs at %g ms, %s order, %s reads, "
                                         "run %d: %s" % (d, order, style, r + 1, exc))
                            continue
                        self.record(sec, cell_key(d, "bucketfs", order, style), res,
                                    "bucketfs, %s order, %s reads" % (order, style))
                references(r, d, "after")
        summarize_latency(sec)

    def curl_z(self, ds, keys, procs, seed, delay):
        """curl -Z over the keys shuffled, round-robin over the endpoints
        with @delay."""
        order = list(keys)
        random.Random(seed).shuffle(order)
        return readers.curl_z([self.rig.object_url(ds, k, i, delay) for i, k in enumerate(order)],
                              procs, os.path.join(self.rig.tmp, "curl-z.cfg"),
                              self.a.run_timeout, rig.RETINA_SIZE, rig.curl_tls_args())

    # ---- the large file ---------------------------------------------------------

    def dd(self, path):
        t0 = time.monotonic()
        p = subprocess.run(["dd", "if=%s" % path, "of=/dev/null", "bs=1M"],
                           capture_output=True, text=True, timeout=self.a.run_timeout)
        wall = time.monotonic() - t0
        if p.returncode:
            raise RuntimeError("dd: %s" % p.stderr.strip()[-300:])
        m = re.search(r"^(\d+) bytes", p.stderr, re.M)
        n = int(m.group(1)) if m else 0
        return {"bytes": n, "wall_s": wall, "mb_s": n / wall / 1e6, "files": 1}

    def ranged_gets(self, ds, key, size, part, inflight, delay):
        """The object in ranges of @part bytes, @inflight of them at a time
        (curl -Z --parallel-max), round-robin over the endpoints with @delay."""
        cfg = os.path.join(self.rig.tmp, "curl-ranges.cfg")
        n_parts = -(-size // part)
        # --cacert is an option of each operation too: on the command line
        # it would apply to the first range only.
        ca = 'cacert = "%s"\n' % rig.TLS.ca if rig.TLS else ""
        with open(cfg, "w") as f:
            for i in range(n_parts):
                lo, hi = i * part, min(size, (i + 1) * part) - 1
                # One operation per range ("next"): a range, like the
                # write-out format and -sS, is an option of its operation.
                f.write('%surl = "%s"\noutput = "/dev/null"\nrange = "%d-%d"\nsilent\n'
                        'show-error\nwrite-out = "%%{http_code} %%{size_download}\\n"\n%s'
                        % ("next\n" if i else "", self.rig.object_url(ds, key, i, delay),
                           lo, hi, ca))
        t0 = time.monotonic()
        p = subprocess.run(["curl", "-Z", "--parallel-max", str(max(1, inflight)),
                            "--parallel-immediate", "-K", cfg],
                           capture_output=True, text=True, timeout=self.a.run_timeout)
        wall = time.monotonic() - t0
        got, bad = 0, []
        for line in p.stdout.splitlines():
            code, n = (line.split() + ["", "0"])[:2]
            got += int(n or 0)
            if code != "206":
                bad.append(code)
        if bad or got != size or p.returncode:
            raise RuntimeError("ranged GETs: %d of %d bytes; statuses %s; %s"
                               % (got, size, bad[:5], p.stderr.strip()[-300:]))
        return {"bytes": got, "wall_s": wall, "mb_s": got / wall / 1e6, "parts": n_parts,
                "part": part, "inflight": inflight}

    def bucketfs_dd(self, ds, src, delay, sample_inflight=False):
        """dd of the large file through a fresh mount at @delay ms, its
        source warm on the server side; raises unless it read all of it."""
        rig.warm([src])
        res = self.bucketfs_pass(ds, delay, lambda m: self.dd(m.path("big.bin")), "-large",
                                 sample_inflight=sample_inflight)
        size = ds.total_bytes()
        if res["bytes"] != size:
            raise RuntimeError("dd read %d of %d bytes" % (res["bytes"], size))
        return res

    def large_warmup(self, ds, src, sec):
        """One untimed dd of the large file through a fresh mount, at the
        first delay, before the measured runs.  Pages this VM has handed
        back to its host cost a host fault at their first write; with only
        about a gigabyte backed, the first 2 GiB a run stored into the page
        cache paid them (docs/PERFORMANCE.md: 541 MB/s and 1.77 s of daemon
        CPU per GB, against 1,250-1,390 and 0.66-0.71 for the passes after
        it).  rig.back_memory() backs all but a margin; the pages the
        warm-up frees at its unmount are the ones the first measured pass
        gets, whatever the margin holds.  Its numbers go to the raw results
        only."""
        d = self.a.large_latency[0]
        log("large: warm-up, one untimed dd at %g ms" % d)
        try:
            res = self.bucketfs_dd(ds, src, d)
        except Exception as exc:
            self.problem("large", "warm-up dd at %g ms: %s" % (d, exc))
            return
        sec["warmup"] = {"delay_ms": d, "mb_s": res["mb_s"],
                         "daemon_s_per_gb": (res["cpu"] or {}).get("cpu_s_per_gb")}
        log("large:   warm-up: %.0f MB/s" % res["mb_s"])

    def m_large(self):
        a = self.a
        ds = self.large
        size = ds.total_bytes()
        src = os.path.join(ds.dir, "big.bin")
        part = a.part_mib << 20
        name = "large" + self.pin_suffix()
        sec = self.res["sections"][name] = {"name": name, "pinned": bool(rig.PIN),
                                            "tls": bool(rig.TLS), "size": size, "cells": {},
                                            "latencies": a.large_latency,
                                            "part": part, "opts": a.opts}
        # Pinned, only the mount and its references: a peer's daemon would
        # share CPU 0 with dd.  On TLS too: the peers are mounted on the
        # plain port only.
        peers = [p for p in ("s3fs", "rclone") if p not in a.peers_skip and not rig.PIN
                 and not rig.TLS]
        mounts = {}
        try:
            for kind in peers:
                try:
                    mounts[kind] = self.mount(kind, ds).__enter__()
                except Exception as exc:
                    self.problem("large", "%s: %s" % (kind, exc))
            self.large_warmup(ds, src, sec)
            for r in range(a.runs):
                sec["round"] = r
                for d in a.large_latency:
                    log("large: run %d/%d at %g ms, %d MiB" % (r + 1, a.runs, d, size >> 20))
                    try:
                        res = self.bucketfs_dd(ds, src, d, sample_inflight=True)
                    except Exception as exc:
                        self.problem("large", "bucketfs at %g ms run %d: %s" % (d, r + 1, exc))
                        continue
                    self.record(sec, cell_key(d, "bucketfs"), res, "bucketfs dd bs=1M at %g ms"
                                " (GETs in flight: max %d, median %d)"
                                % (d, res["inflight"]["max"], res["inflight"]["median_busy"]))
                    k = res["inflight"]["max"] or 1
                    for label, fn in (
                            ("8 ranged GETs at once", lambda: self.ranged_gets(
                                ds, "big.bin", size, -(-size // 8), 8, d)),
                            ("%d MiB ranged GETs, %d in flight (as the mount)" % (
                                a.part_mib, k), lambda: self.ranged_gets(
                                ds, "big.bin", size, part, k, d))):
                        try:
                            res = self.referenced(fn)
                        except Exception as exc:
                            self.problem("large", "%s at %g ms: %s" % (label, d, exc))
                            continue
                        self.record(sec, cell_key(d, "ranged8" if "8 ranged" in label
                                                  else "ranged-mount"), res, label)
                for kind in peers + ([] if rig.PIN or rig.TLS else ["local"]):
                    if kind != "local" and kind not in mounts:
                        continue
                    try:
                        if kind == "local":
                            rig.warm([src])
                            res = self.referenced(lambda: self.dd(src))
                        else:
                            rig.drop_caches()   # the peer's page cache
                            rig.warm([src])
                            res = self.referenced(lambda: self.dd(mounts[kind].path("big.bin")))
                    except Exception as exc:
                        self.problem("large", "%s run %d: %s" % (kind, r + 1, exc))
                        continue
                    self.record(sec, cell_key(0, kind), res, "%s dd bs=1M" % kind)
        finally:
            for m in mounts.values():
                m.close()
        summarize_throughput(sec)

    # ---- fio ----------------------------------------------------------------------

    FIO_JOBS = [("seq-1M", "read", "1M", 1), ("seq-1M-4jobs", "read", "1M", 4),
                ("rand-4k", "randread", "4k", 8), ("rand-128k", "randread", "128k", 8)]

    def fio(self, path, name, rw, bs, jobs, seconds, size):
        cmd = ["fio", "--name=%s" % name, "--filename=%s" % path, "--rw=%s" % rw,
               "--bs=%s" % bs, "--direct=0", "--readonly", "--ioengine=psync",
               "--numjobs=%d" % jobs, "--group_reporting", "--runtime=%d" % seconds,
               "--output-format=json"]
        if jobs > 1:
            # Disjoint regions, one per job: no job reads pages another one
            # already brought into the page cache.
            share = (size // jobs) & ~((1 << 20) - 1)
            cmd += ["--size=%d" % share, "--offset_increment=%d" % share]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 20 + 120)
        if p.returncode:
            raise RuntimeError("fio: %s" % (p.stderr.strip() or p.stdout.strip())[-400:])
        j = json.loads(p.stdout[p.stdout.index("{"):])
        job = j["jobs"][0]
        rd = job["read"]
        pct = rd.get("clat_ns", {}).get("percentile", {})
        return {"mb_s": rd["bw_bytes"] / 1e6, "iops": rd["iops"], "bytes": rd["io_bytes"],
                "wall_s": rd["runtime"] / 1e3, "files": 0,
                "p50_ms": pct.get("50.000000", 0) / 1e6,
                "p99_ms": pct.get("99.000000", 0) / 1e6,
                "errors": job.get("error", 0), "cmd": " ".join(cmd)}

    def m_fio(self):
        a = self.a
        ds = self.large
        src = os.path.join(ds.dir, "big.bin")
        size = ds.total_bytes()
        sec = self.res["sections"]["fio"] = {"name": "fio", "seconds": a.fio_seconds,
                                             "cells": {}, "latencies": a.large_latency,
                                             "jobs": list(a.fio_jobs)}
        for r in range(a.runs):
            sec["round"] = r
            for name, rw, bs, jobs in [j for j in self.FIO_JOBS if j[0] in a.fio_jobs]:
                rig.warm([src])
                for d in a.large_latency:
                    log("fio: run %d/%d: %s on bucketfs at %g ms" % (r + 1, a.runs, name, d))
                    try:
                        res = self.bucketfs_pass(ds, d, lambda m: self.fio(
                            m.path("big.bin"), name, rw, bs, jobs, a.fio_seconds, size), "-fio")
                    except Exception as exc:
                        self.problem("fio", "%s on bucketfs at %g ms: %s" % (name, d, exc))
                        continue
                    self.record(sec, cell_key(d, "bucketfs", name), res, "fio %s" % name)
                log("fio: run %d/%d: %s on the local file" % (r + 1, a.runs, name))
                try:
                    res = self.referenced(lambda: self.fio(src, name, rw, bs, jobs,
                                                           a.fio_seconds, size))
                except Exception as exc:
                    self.problem("fio", "%s on the local file: %s" % (name, exc))
                    continue
                self.record(sec, cell_key(0, "local", name), res, "fio %s, local" % name)
        summarize_throughput(sec)

    # ---- np.load of UNet3D-shaped .npz files -----------------------------------------

    def m_npz(self):
        a = self.a
        ds = self.npz
        keys = list(ds.files)
        index_of = {k: i for i, k in enumerate(keys)}
        procs = min(a.npz_procs, len(keys))
        record = ds.meta["record"]
        expect = lambda _: record  # noqa: E731
        sec = self.res["sections"]["npz"] = {
            "name": "npz", "files": len(keys), "procs": procs, "file_size": ds.meta["file_size"],
            "cells": {}, "latencies": a.large_latency, "opts": a.opts}
        for r in range(a.runs):
            sec["round"] = r
            shares = readers.random_shares(keys, procs, r)
            rig.warm(ds.paths())
            for d in a.large_latency:
                log("npz: run %d/%d at %g ms: %d files, %d readers" % (r + 1, a.runs, d,
                                                                       len(keys), procs))
                try:
                    res = self.bucketfs_pass(ds, d, lambda m: readers.read_all(
                        None, 0, expect=expect, timeout=a.run_timeout, style="npz",
                        shares=[[m.path(k) for k in s] for s in shares]), "-npz")
                    self.record(sec, cell_key(d, "bucketfs"), res, "np.load via bucketfs")
                except Exception as exc:
                    self.problem("npz", "bucketfs at %g ms run %d: %s" % (d, r + 1, exc))
                urls = [[self.rig.object_url(ds, k, index_of[k], d) for k in s] for s in shares]
                res = self.referenced(lambda: readers.read_all(
                    None, 0, expect=expect, timeout=a.run_timeout, style="npz", shares=urls))
                self.record(sec, cell_key(d, "py-gets"), res,
                            "same readers: one GET per file, np.load from memory")
            res = self.referenced(lambda: readers.read_all(
                None, 0, expect=expect, timeout=a.run_timeout, style="npz",
                shares=[[os.path.join(ds.dir, k) for k in s] for s in shares]))
            self.record(sec, cell_key(0, "local"), res, "np.load of the local files")
        summarize_throughput(sec)


# ---- medians and ratios (same run) ------------------------------------------------


def _median(vals):
    vals = sorted(v for v in vals if v is not None)
    if not vals:
        return None
    n = len(vals)
    return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2


def _cell_medians(cell, metric):
    runs = cell["runs"]
    cell["median_" + metric] = _median([x.get(metric) for x in runs])
    for k in ("p50_ms", "p99_ms", "max_ms", "mb_s", "files_s", "iops"):
        if any(k in x for x in runs):
            cell["median_" + k] = _median([x.get(k) for x in runs])
    cell["errors"] = sum(x.get("errors", 0) or 0 for x in runs)
    cell["median_busy_pct"] = _median([x["cpu"]["busy_pct"] for x in runs if x.get("cpu")])
    for k in ("cpu_ms_per_file", "cpu_s_per_gb", "core_pct", "total_ms_per_file",
              "total_s_per_gb"):
        cell["median_" + k] = _median([x["cpu"].get(k) for x in runs if x.get("cpu")])
    threads = {}
    for x in runs:
        for name, t in (x.get("cpu") or {}).get("threads", {}).items():
            threads.setdefault(name, []).append(t)
    cell["median_threads"] = {
        name: {k: _median([t.get(k) for t in ts]) for k in ("core_pct", "ms_per_file",
                                                             "s_per_gb", "count")}
        for name, ts in threads.items()}
    gets = [x["daemon"]["gets_per_file"] for x in runs if x.get("daemon")]
    cell["median_gets_per_file"] = _median(gets)
    ra = [x["daemon"]["readahead"] for x in runs if x.get("daemon")]
    for k in RA_COUNTERS:
        if ra and all(k in x for x in ra):
            cell["median_" + k] = _median([x[k] for x in ra])


def _by_round(cell, metric):
    """{round: the mean of the cell's values in that run}."""
    out = {}
    for i, x in enumerate(cell["runs"]):
        if x.get(metric):
            out.setdefault(x.get("round", i), []).append(x[metric])
    return {k: sum(v) / len(v) for k, v in out.items()}


def _run_ratios(num, den, metric):
    """Per run: num's value / den's of the same run (the mean of den's
    values in that run: a reference measured before and after); the median
    of those ratios, and the ratios."""
    a, b = _by_round(num, metric), _by_round(den, metric)
    rs = [a[k] / b[k] for k in sorted(a) if k in b]
    return _median(rs), rs


def summarize(sec, metric, refs):
    """Medians of every cell of @sec; then for each bucketfs cell, its
    same-run ratios against the cells refs(delay, order_or_job) names, as
    (name, key) pairs: ratio_<name> and ratios_<name>."""
    sec.pop("round", None)
    cells = sec["cells"]
    for cell in cells.values():
        _cell_medians(cell, metric)
    for key, cell in cells.items():
        d, path, order, _style = key.split("|")
        if path != "bucketfs":
            continue
        for name, ref_key in refs(d, order):
            ref = cells.get(ref_key)
            if ref:
                cell["ratio_" + name], cell["ratios_" + name] = _run_ratios(cell, ref, metric)


def summarize_latency(sec):
    summarize(sec, "files_s", lambda d, order: [
        ("py", "%s|py-gets|%s|-" % (d, "dlio" if order == "dlio" else "random")),
        ("curl", "%s|curl|-|-" % d)])


def summarize_throughput(sec):
    summarize(sec, "mb_s", lambda d, job: [
        (ref, "%s|%s|%s|-" % (d if ref != "local" else "0", ref, job))
        for ref in ("ranged8", "ranged-mount", "py-gets", "local")])
