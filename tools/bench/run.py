#!/usr/bin/python3
"""bucketfs benchmark rig: one command, all measurements, docs/BENCHMARKS.md.

  tools/bench/run.py [--quick] [--files N] [--procs P] [--runs R]
                     [--out docs/BENCHMARKS.md] [--only M,...] [--skip M,...]
                     [--no-setup] [--build] [--cache-dir DIR] [...]
  tools/bench/run.py --endpoint URL [--endpoint URL...] --bucket s3://B[/P]
                     [--upload] [--region R] [--ca-file PEM] [--files N] [...]

Serves datasets (written once under the cache directory) with nginx on 4
loopback ports, listings through the test S3 server behind the same ports,
and measures bucketfs against the direct S3 path (curl), s3fs, rclone and
the local page cache.  With --endpoint/--bucket it measures a real object
store instead (mount, dlio and compare only; see tools/bench/README.md).
Progress goes to stderr; the report to --out, the
chart next to it (bench-dlio.png), the raw numbers to the cache directory
(results/*.json).  See tools/bench/README.md.

Measurements (--only/--skip names): rig, mount, latency, dlio, compare,
large, fio, npz, tree, concurrency, failover.

The latency rig on the TLS ports too (the same endpoints over HTTPS, with
the rig's own CA), pinned and unpinned, in one invocation:
  run.py --no-setup --only rig,latency,large --scheme both --pin both

One slice of the latency rig, quickly (for an A/B), tables to stdout:
  run.py --no-setup --only latency --latency 20 --order dlio --style dlio
         --runs 3 --files 8000 --print
"""

import argparse
import datetime
import json
import os
import platform
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cpu  # noqa: E402
import latency  # noqa: E402
import readers  # noqa: E402
import remote  # noqa: E402
import report  # noqa: E402
import rig  # noqa: E402
from rig import CLEANUP, log  # noqa: E402

MEASUREMENTS = ["rig", "mount", "latency", "dlio", "compare", "large", "fio", "npz", "tree",
                "concurrency", "failover"]
# The measurements that use the delayed endpoints (nginx's echo module).
DELAYED = {"latency": "latency", "large": "large_latency", "fio": "large_latency",
           "npz": "large_latency"}
# What --pin may run pinned (rig.pin()): readers and endpoints on CPU 0, the
# daemon on CPU 1.  The same ones run on the TLS ports with --scheme.
PINNABLE = ("latency", "large")
# What runs against a real endpoint (--endpoint): the others need the local
# rig (nginx to kill, datasets on disk, peers configured for it).
REMOTE_MEASUREMENTS = ["mount", "dlio", "compare"]


class Skip(Exception):
    """A measurement (or one path of it) that could not run, with the reason."""


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def version_of(cmd, pattern=None):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "unavailable (%s)" % exc
    text = (r.stdout + r.stderr).strip()
    line = text.splitlines()[0] if text else ""
    if pattern:
        m = re.search(pattern, text)
        line = m.group(0) if m else line
    return line


def cold(paths_to_warm, what):
    """Drops the page cache (so the mount's side is cold), then reads the
    backing files again so the endpoints serve from memory."""
    if not rig.can_drop_caches():
        raise Skip("cannot drop the page cache (not root?)")
    t = time.monotonic()
    rig.drop_caches()
    if paths_to_warm:
        rig.warm(paths_to_warm)
        log("  page cache dropped, %s re-warmed on the server side in %.1f s"
            % (what, time.monotonic() - t))
    else:
        log("  page cache dropped")


# --------------------------------------------------------------------------


def curl_direct(the_rig, ds, procs, seed, timeout, delay=0):
    """curl -Z over the same shuffled files, round-robin over the 4 URLs of
    @the_rig (those with @delay ms); per-file latency from curl's own
    timing."""
    order = list(ds.files)
    random.Random(seed).shuffle(order)
    return readers.curl_z([the_rig.object_url(ds, k, i, delay) for i, k in enumerate(order)],
                          procs, os.path.join(the_rig.tmp, "curl-direct.cfg"), timeout,
                          rig.RETINA_SIZE, rig.curl_tls_args())


class Bench(latency.LatencyMixin):
    def __init__(self, a):
        self.a = a
        self.res = {"sections": {}, "problems": []}
        self.cache = a.cache_dir

    def problem(self, section, msg):
        log("PROBLEM %s: %s" % (section, msg))
        self.res["problems"].append((section, msg))

    # ---- set-up ----------------------------------------------------------

    def prepare(self):
        a = self.a
        self.retina = rig.retina_dataset(self.cache, a.files)
        datasets = [self.retina]
        if a.selected & {"large", "fio"}:
            self.large = rig.large_dataset(self.cache, a.large_mib)
            datasets.append(self.large)
        if "tree" in a.selected:
            self.tree = rig.tree_dataset(self.cache, a.tree_fanout)
            datasets.append(self.tree)
        if "npz" in a.selected:
            self.npz = rig.npz_dataset(self.cache, a.npz_files)
            datasets.append(self.npz)
        delays = set()
        for name, attr in DELAYED.items():
            if name in a.selected:
                delays |= set(getattr(a, attr))
        self.rig = rig.Rig(self.cache, datasets, delays=sorted(delays),
                           tls=True in a.scheme, wire=a.wire)
        if self.rig.wire:
            self.res["wire"] = rig.WIRE_LABEL
            log(rig.WIRE_LABEL)
        self.rig.logs_dir = self.res["logs_dir"] = os.path.join(
            self.cache, "results", self.a.stamp + "-logs")
        log("endpoints: %s (listings via the test S3 server on port %d)"
            % (", ".join(self.rig.endpoints.urls), self.rig.endpoints.s3.port))
        self.res["datasets"] = {ds.name: ds.meta for ds in datasets}
        self.res["endpoints"] = self.rig.endpoints.urls
        self.res["delay_endpoints"] = {"%g" % d: u for d, u in
                                       self.rig.endpoints.delay_urls.items()}
        if self.rig.tls:
            self.res["tls_endpoints"] = {"%g" % d: u for d, u in
                                         self.rig.endpoints.tls_delay_urls.items()}
            self.res["tls"] = {"certificate": self.rig.tls.describe}
            log("TLS endpoints: %s (%s)" % (", ".join(self.rig.endpoints.tls_delay_urls[0]),
                                            self.rig.tls.describe))

    # What differs between the local rig and a real endpoint (RemoteBench).
    def client_env(self):
        return self.rig.client_env()

    @staticmethod
    def bucket_url(ds):
        return getattr(ds, "url", "s3://%s" % ds.name)

    def s3_opts(self):
        """The -o options every bucketfs tool gets: endpoints and the like."""
        return ["endpoint=%s" % u for u in self.rig.endpoints.urls] + \
            getattr(self.rig, "mount_opts", [])

    def build_index(self, ds):
        """bucketfs-index build of ds into the run's index file; the time."""
        idx = self.rig.index_path(ds)
        if os.path.exists(idx):
            return None
        opts = ",".join(self.s3_opts() + ["index=%s" % idx])
        t = time.monotonic()
        r = subprocess.run([rig.binary("bucketfs-index"), "build", "-q", "-o", opts,
                            self.bucket_url(ds)], env=self.client_env(),
                           capture_output=True, text=True, timeout=3600)
        dt = time.monotonic() - t
        if r.returncode:
            raise RuntimeError("bucketfs-index build %s: %s" % (self.bucket_url(ds),
                                                                r.stderr.strip()))
        return dt

    def mount(self, kind, ds, **kw):
        if kind == "bucketfs":
            self.build_index(ds)
        return rig.Mount(kind, self.rig, ds, **kw)

    # ---- rig self-check ----------------------------------------------------

    def m_rig(self):
        sec = self.res["sections"]["rig"] = {"checks": []}
        ck = sec["checks"]
        ds = self.retina
        key = ds.files[0]
        path = os.path.join(ds.dir, key)
        st = os.stat(path)
        etag = '"%x-%x"' % (int(st.st_mtime), st.st_size)
        ok_all = True
        for i, u in enumerate(self.rig.endpoints.urls):
            url = "%s/%s/%s" % (u, ds.name, key)
            good = sh(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                       "-H", "If-Match: %s" % etag, url]).stdout
            bad = sh(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                      "-H", 'If-Match: "0-0"', url]).stdout
            hdr = sh(["curl", "-sI", url]).stdout
            m = re.search(r'(?im)^etag:\s*(\S+)', hdr)
            ok = good == "200" and bad == "412" and m and m.group(1) == etag
            ok_all &= bool(ok)
            ck.append(("endpoint %d: GET with If-Match: %s / with a wrong one; nginx's ETag"
                       % (i + 1, etag), "%s / %s; %s" % (good, bad, m.group(1) if m else "none"),
                       "ok" if ok else "FAILED"))
        # The delayed ports: the same answers, the first byte no sooner than
        # the delay.
        for d, urls in sorted(self.rig.endpoints.delay_urls.items()):
            if not d:
                continue
            for i, u in enumerate(urls):
                url = "%s/%s/%s" % (u, ds.name, key)
                fmt = "%{http_code} %{time_starttransfer}"
                good = sh(["curl", "-s", "-o", "/dev/null", "-w", fmt,
                           "-H", "If-Match: %s" % etag, url]).stdout.split()
                bad = sh(["curl", "-s", "-o", "/dev/null", "-w", fmt,
                          "-H", 'If-Match: "0-0"', url]).stdout.split()
                rng = sh(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                          "-r", "0-99", url]).stdout.split()
                ok = (len(good) == 2 and len(bad) == 2 and good[0] == "200" and
                      bad[0] == "412" and float(good[1]) * 1e3 >= d and rng == ["206", "100"])
                ok_all &= ok
                ck.append(("endpoint %d, %g ms port: If-Match right / wrong, first byte after; "
                           "Range 0-99" % (i + 1, d),
                           "%s / %s after %s ms; %s" % (
                               good[0] if good else "?", bad[0] if bad else "?",
                               "%.1f" % (float(good[1]) * 1e3) if len(good) == 2 else "?",
                               " ".join(rng)), "ok" if ok else "FAILED"))
        # The TLS ports: the same answers, verified against the rig's CA;
        # nginx's session cache resumes a second handshake.
        eps = self.rig.endpoints
        for d, urls in sorted(eps.tls_delay_urls.items()):
            for i, u in enumerate(urls):
                url = "%s/%s/%s" % (u, ds.name, key)
                ca = ["--cacert", eps.tls.ca]
                fmt = "%{http_code} %{time_starttransfer}"
                good = sh(["curl", "-s", *ca, "-o", "/dev/null", "-w", fmt,
                           "-H", "If-Match: %s" % etag, url]).stdout.split()
                bad = sh(["curl", "-s", *ca, "-o", "/dev/null", "-w", fmt,
                          "-H", 'If-Match: "0-0"', url]).stdout.split()
                rng = sh(["curl", "-s", *ca, "-o", "/dev/null", "-w",
                          "%{http_code} %{size_download}", "-r", "0-99", url]).stdout.split()
                ok = (len(good) == 2 and len(bad) == 2 and good[0] == "200" and
                      bad[0] == "412" and float(good[1]) * 1e3 >= d and rng == ["206", "100"])
                ok_all &= ok
                ck.append(("endpoint %d, TLS %g ms port: If-Match right / wrong, first byte "
                           "after; Range 0-99" % (i + 1, d),
                           "%s / %s after %s ms; %s" % (
                               good[0] if good else "?", bad[0] if bad else "?",
                               "%.1f" % (float(good[1]) * 1e3) if len(good) == 2 else "?",
                               " ".join(rng)), "ok" if ok else "FAILED"))
        if eps.tls:
            ok, got = tls_checks(eps.tls, eps.tls_delay_urls[0][0])
            ok_all &= ok
            ck.append(("TLS port of endpoint 1: certificate verified against the rig's CA, "
                       "a second connection resumes the session, no CA fails",
                       got, "ok" if ok else "FAILED"))
        # A signed listing through nginx (proxied to the test S3 server).
        u = self.rig.endpoints.urls[1]
        r = sh(["curl", "-s", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                "%s:%s" % (rig.AK, rig.SK), "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                "%s/%s?list-type=2&max-keys=1&prefix=%s" % (u, ds.name, "train%2F")])
        m = re.search(r"<Key>([^<]*)</Key>.*?<ETag>&quot;([^&]*)&quot;</ETag>", r.stdout)
        ok = bool(m) and m.group(1) == key and '"%s"' % m.group(2) == etag
        ok_all &= ok
        ck.append(("signed ListObjectsV2 through nginx port 2 (proxied to the test S3 server): "
                   "first key and ETag", "%s %s" % (m.group(1), m.group(2)) if m else
                   r.stdout[:200], "ok" if ok else "FAILED"))
        if not ok_all:
            self.problem("rig", "the rig self-check failed: %s" % ck)
            raise RuntimeError("rig self-check failed; see the table")
        log("rig: nginx answers If-Match with 200/412 and its ETags equal the listing's")

    # ---- mount time --------------------------------------------------------

    def m_mount(self):
        a = self.a
        sec = self.res["sections"]["mount"] = {"rows": []}
        ds = self.retina
        idx = self.rig.index_path(ds)
        if os.path.exists(idx):
            os.unlink(idx)
        log("mount: bucketfs-index build %s (%d keys%s)"
            % (self.bucket_url(ds), len(ds.files),
               ", listed through nginx" if self.rig.endpoints.nginx else ""))
        build = self.build_index(ds)
        sec["index_build_s"] = build
        sec["index_bytes"] = os.path.getsize(idx)
        times = []
        mnt = os.path.join(self.rig.tmp, "mnt-mounttime")
        os.makedirs(mnt, exist_ok=True)
        opts = ",".join(self.s3_opts() + ["index=%s" % idx])
        plan = [("cold", r) for r in range(a.runs)] + [("warm", r) for r in range(a.runs)]
        if not rig.can_drop_caches():
            plan = [("warm", r) for r in range(a.runs)]
        for mode, r in plan:
            if mode == "cold":
                rig.drop_caches()
            t0 = time.monotonic()
            undo = CLEANUP.push("unmount %s" % mnt, lambda: rig.unmount(mnt))
            p = subprocess.run([rig.binary("bucketfs"), "-o", opts, self.bucket_url(ds), mnt],
                               env=self.client_env(), capture_output=True, text=True,
                               timeout=600)
            t_ret = time.monotonic() - t0
            if p.returncode:
                CLEANUP.remove(undo)
                raise RuntimeError("bucketfs (daemon mode) failed: %s" % p.stderr.strip())
            while not rig.is_mount(mnt):
                time.sleep(0.0005)
                if time.monotonic() - t0 > 60:
                    raise RuntimeError("bucketfs returned but %s is not mounted" % mnt)
            t_ready = time.monotonic() - t0
            n = len(os.listdir(os.path.join(mnt, getattr(ds, "list_dir", "train"))))
            pid = self._daemon_pid(mnt)
            rig.unmount(mnt)
            CLEANUP.remove(undo)
            self._wait_gone(pid)
            times.append({"return_s": t_ret, "ready_s": t_ready, "entries": n, "mode": mode})
            log("mount: run %d (%s page cache): ready in %.1f ms (%d entries in %s/)"
                % (r + 1, mode, t_ready * 1e3, n, getattr(ds, "list_dir", "train")))
        sec["runs"] = [t for t in times if t["mode"] == "cold"]
        sec["warm_runs"] = [t for t in times if t["mode"] == "warm"]
        sec["median_ready_s"] = median([t["ready_s"] for t in sec["runs"]])
        sec["median_warm_ready_s"] = median([t["ready_s"] for t in sec["warm_runs"]])

    @staticmethod
    def _daemon_pid(mnt):
        """The daemonized bucketfs serving mnt (its argv names our unique
        mountpoint), to wait for its exit after the unmount."""
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                argv = open("/proc/%s/cmdline" % d, "rb").read().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"bucketfs") and os.fsencode(mnt) in argv:
                return int(d)
        return None

    @staticmethod
    def _wait_gone(pid, timeout=20):
        if pid is None:
            return
        deadline = time.monotonic() + timeout
        while os.path.exists("/proc/%d" % pid) and time.monotonic() < deadline:
            try:
                if open("/proc/%d/stat" % pid).read().split(")")[-1].split()[0] == "Z":
                    return
            except OSError:
                return
            time.sleep(0.02)
        if os.path.exists("/proc/%d" % pid):
            log("bucketfs daemon %d still alive after unmount; SIGTERM" % pid)
            os.kill(pid, signal.SIGTERM)

    # ---- DLIO-style random whole-file reads --------------------------------

    def dlio_mount(self, m, r):
        ds = self.retina
        cold(ds.paths(), ds.name)
        paths = [m.path(k) for k in ds.files]
        probe = cpu.CpuProbe(m.proc.pid)
        res = readers.read_all(paths, self.a.procs, seed=r, expect=lambda p: rig.RETINA_SIZE,
                               timeout=self.a.run_timeout)
        res["cpu"] = probe.stop(files=res["files"], nbytes=res["bytes"], wall_s=res["wall_s"])
        return res

    def mount_all(self, section, ds, paths, mounts):
        """Mounts bucketfs and the peers not skipped, recording each into
        @mounts (or the failure into paths[kind]["status"]); yields
        (kind, mount) for each one that mounted."""
        for kind in ("bucketfs", "s3fs", "rclone"):
            if kind in self.a.peers_skip:
                paths[kind]["status"] = "skipped (--skip-peer)"
                continue
            try:
                mounts[kind] = self.mount(kind, ds).__enter__()
            except Exception as exc:
                paths[kind]["status"] = "failed to mount: %s" % exc
                self.problem(section, "%s: %s" % (kind, exc))
                continue
            yield kind, mounts[kind]

    def m_dlio(self):
        a = self.a
        ds = self.retina
        sec = self.res["sections"]["dlio"] = {"paths": {}, "files": len(ds.files),
                                              "procs": a.procs}
        paths = sec["paths"]
        order = ["bucketfs", "direct", "direct-py", "s3fs", "rclone", "local"]
        for p in order:
            paths[p] = {"runs": [], "status": None}
        mounts = {}
        try:
            for kind, m in self.mount_all("dlio", ds, paths, mounts):
                log("dlio: %s mounted in %.2f s" % (kind, m.ready_s))
                if kind != "rclone":
                    continue
                try:
                    t = time.monotonic()
                    n = len(os.listdir(m.path("train")))
                except Exception as exc:
                    paths[kind]["status"] = "failed to mount: %s" % exc
                    self.problem("dlio", "%s: %s" % (kind, exc))
                    continue
                paths[kind]["note"] = ("directory listing cached first by one ls "
                                       "(%d entries, %.1f s)" % (n, time.monotonic() - t))
                log("dlio: rclone: %s" % paths[kind]["note"])
            for r in range(a.runs):
                for p in order:
                    if paths[p]["status"] is not None:
                        continue
                    log("dlio: run %d/%d: %s, %d files, %d processes"
                        % (r + 1, a.runs, p, len(ds.files), a.procs))
                    try:
                        if p in mounts:
                            res = self.dlio_mount(mounts[p], r)
                        elif p == "direct":
                            rig.warm(ds.paths())
                            res = self.referenced(lambda: curl_direct(
                                self.rig, ds, a.procs, r, a.run_timeout))
                        elif p == "direct-py":
                            rig.warm(ds.paths())
                            urls = [self.rig.object_url(ds, k, i)
                                    for i, k in enumerate(ds.files)]
                            res = self.referenced(lambda: readers.read_all(
                                urls, a.procs, seed=r, expect=lambda _: rig.RETINA_SIZE,
                                timeout=a.run_timeout))
                        else:
                            rig.warm(ds.paths())
                            res = self.referenced(lambda: readers.read_all(
                                ds.paths(), a.procs, seed=r, expect=lambda _: rig.RETINA_SIZE,
                                timeout=a.run_timeout))
                    except Skip as exc:
                        paths[p]["status"] = "skipped: %s" % exc
                        continue
                    except Exception as exc:
                        paths[p]["status"] = "failed: %s" % exc
                        self.problem("dlio", "%s run %d: %s" % (p, r + 1, exc))
                        continue
                    res.pop("ends", None)
                    res.pop("error_times", None)
                    paths[p]["runs"].append(res)
                    log("dlio:   %s: %.0f files/s, %.0f MB/s, p50 %.1f ms, p99 %.1f ms, "
                        "%d errors" % (p, res["files_s"], res["mb_s"], res["p50_ms"] or 0,
                                       res["p99_ms"] or 0, res["errors"]))
                    if res["errors"]:
                        self.problem("dlio", "%s run %d: %d failed reads, e.g. %s"
                                     % (p, r + 1, res["errors"], res["error_samples"][:3]))
        finally:
            for m in mounts.values():
                m.close()
        for p in order:
            runs = paths[p]["runs"]
            if runs:
                for k in ("files_s", "mb_s", "p50_ms", "p99_ms", "max_ms", "wall_s"):
                    paths[p]["median_" + k] = median([x[k] for x in runs])
                paths[p]["errors"] = sum(x["errors"] for x in runs)

    # ---- bucketfs-compare: the mount against our own S3 client ---------------

    def m_compare(self):
        """bucketfs-compare --bench on the mounted dataset: the same files
        read through the mount and with bucketfs's own S3 client (the same
        endpoints and credentials), --procs in flight on each side, in one
        process; one invocation per run, the order alternating.  Its
        namespace check comes for free and must find nothing."""
        a = self.a
        ds = self.retina
        try:
            exe = rig.binary("bucketfs-compare")
        except FileNotFoundError as exc:
            raise Skip("bucketfs-compare is not built (%s)" % exc)
        sec = self.res["sections"]["compare"] = {"files": len(ds.files), "procs": a.procs,
                                                 "runs": []}
        with self.mount("bucketfs", ds) as m:
            for r in range(a.runs):
                cold(ds.paths(), ds.name)
                order = "mount-first" if r % 2 == 0 else "s3-first"
                cmd = [exe, m.mnt, self.bucket_url(ds), "-o", ",".join(self.s3_opts()),
                       "--bench", "--procs", str(a.procs), "--files", str(len(ds.files)),
                       "--runs", "1", "--order", order, "--seed", str(r), "--json", "-q"]
                log("compare: run %d/%d: %d files, %d in flight per side, %s"
                    % (r + 1, a.runs, len(ds.files), a.procs, order))
                p = subprocess.run(cmd, env=self.client_env(), capture_output=True, text=True,
                                   timeout=a.run_timeout)
                if p.returncode not in (0, 1) or not p.stdout.strip():
                    raise RuntimeError("bucketfs-compare exited %d: %s"
                                       % (p.returncode, p.stderr.strip()[-600:]))
                j = json.loads(p.stdout)
                b = j["bench"]
                b["order"] = order
                sec["runs"].append(b)
                sec["namespace"] = {k: j["namespace"][k] for k in
                                    ("keys", "expected_files", "mount_files", "differences")}
                if p.returncode == 1:
                    firsts = [d for part in ("namespace", "bench")
                              for d in j[part]["differences"]["first"]][:3]
                    self.problem("compare", "run %d: bucketfs-compare found %d differences, "
                                 "e.g. %s" % (r + 1, j["total_differences"], firsts))
                log("compare:   mount %.0f files/s (p99 %.1f ms), S3 %.0f files/s (p99 %.1f "
                    "ms): mount/S3 %.2f" % (b["mount"]["files_per_s"], b["mount"]["p99_ms"],
                                            b["s3"]["files_per_s"], b["s3"]["p99_ms"],
                                            b["ratio_files_per_s"]))
        for side in ("mount", "s3"):
            sec["median_" + side] = {k: median([x[side][k] for x in sec["runs"]]) for k in
                                     ("files_per_s", "mb_per_s", "p50_ms", "p99_ms",
                                      "max_ms")}
            sec["errors_" + side] = sum(x[side]["errors"] for x in sec["runs"])
        sec["median_ratio"] = median([x["ratio_files_per_s"] for x in sec["runs"]])

    # ---- deep tree -------------------------------------------------------------

    def m_tree(self):
        a = self.a
        ds = self.tree
        sec = self.res["sections"]["tree"] = {"files": len(ds.files), "dirs": ds.meta["dirs"],
                                              "paths": {}}
        order = ["bucketfs", "s3fs", "rclone", "local"]
        for p in order:
            sec["paths"][p] = {"find": [], "ls": [], "status": None}
            if p in a.peers_skip:
                sec["paths"][p]["status"] = "skipped (--skip-peer)"
        for r in range(a.runs):
            for p in order:
                row = sec["paths"][p]
                if row["status"] is not None:
                    continue
                for what, cmd in (("find", "find %s -type f | wc -l"),
                                  ("ls", "ls -lR %s | grep -c '^-'")):
                    log("tree: run %d/%d: %s on %s" % (r + 1, a.runs, what, p))
                    try:
                        if p == "local":
                            top = ds.dir
                            res = self._timed_walk(cmd % shlex.quote(top), a.tree_timeout)
                        else:
                            with self.mount(p, ds) as m:
                                cold(None, "nothing")
                                res = self._timed_walk(cmd % shlex.quote(m.mnt),
                                                       a.tree_timeout)
                        if res["count"] != len(ds.files):
                            raise RuntimeError("%s saw %d files, expected %d"
                                               % (what, res["count"], len(ds.files)))
                    except Skip as exc:
                        row["status"] = "skipped: %s" % exc
                        break
                    except Exception as exc:
                        row["status"] = "failed: %s" % exc
                        self.problem("tree", "%s %s: %s" % (p, what, exc))
                        break
                    row[what].append(res["wall_s"])
                    log("tree:   %.2f s" % res["wall_s"])
        for p in order:
            row = sec["paths"][p]
            row["median_find"] = median(row["find"])
            row["median_ls"] = median(row["ls"])

    @staticmethod
    def _timed_walk(cmd, timeout):
        t0 = time.monotonic()
        try:
            p = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], capture_output=True,
                               text=True, timeout=timeout, start_new_session=True)
        except subprocess.TimeoutExpired:
            raise Skip("took longer than %d s (cut off; --tree-timeout)" % timeout)
        wall = time.monotonic() - t0
        if p.returncode not in (0,):
            raise RuntimeError("%s: status %d: %s" % (cmd, p.returncode, p.stderr.strip()[-300:]))
        return {"wall_s": wall, "count": int(p.stdout.strip() or 0)}

    # ---- 2,048 concurrent readers ---------------------------------------------------

    def m_concurrency(self):
        a = self.a
        ds = self.retina
        readers_n = a.concurrency
        procs = max(1, min(16, readers_n))
        threads = max(1, readers_n // procs)
        sec = self.res["sections"]["concurrency"] = {
            "readers": procs * threads, "procs": procs, "threads": threads,
            "nofile": 1024, "runs": []}
        files = list(ds.files)
        while len(files) < procs * threads:
            files += ds.files
        with self.mount("bucketfs", ds, tag="-nofile", nofile=1024) as m:
            pid = m.proc.pid
            lim = open("/proc/%d/limits" % pid).read()
            mm = re.search(r"Max open files\s+(\d+)\s+(\d+)", lim)
            sec["daemon_limit"] = "%s/%s" % mm.groups() if mm else "?"
            paths = [m.path(k) for k in files]
            for r in range(a.runs):
                log("concurrency: run %d/%d: %d readers (%d processes x %d threads), %d reads, "
                    "daemon pid %d with RLIMIT_NOFILE %s"
                    % (r + 1, a.runs, procs * threads, procs, threads, len(paths), pid,
                       sec["daemon_limit"]))
                try:
                    cold(ds.paths(), ds.name)
                except Skip as exc:
                    sec["status"] = "skipped: %s" % exc
                    return
                sampler = FdSampler(pid)

                def during(t_start):
                    sampler.start()
                try:
                    res = readers.read_all(paths, procs, threads=threads, seed=100 + r,
                                           expect=lambda _: rig.RETINA_SIZE, during=during,
                                           timeout=a.run_timeout)
                finally:
                    sampler.stop()
                res.pop("ends", None)
                res.pop("error_times", None)
                res["fd_max"] = sampler.max_fds
                res["threads_max"] = sampler.max_threads
                res["daemon_alive"] = m.proc.poll() is None
                sec["runs"].append(res)
                log("concurrency:   %.0f files/s, %d errors, max %d fds, max %d threads in the "
                    "daemon" % (res["files_s"], res["errors"], sampler.max_fds,
                                sampler.max_threads))
                if res["errors"]:
                    self.problem("concurrency", "run %d: %d failed reads, e.g. %s"
                                 % (r + 1, res["errors"], res["error_samples"][:3]))
                if not res["daemon_alive"]:
                    self.problem("concurrency", "the daemon died: %s" % m.log_tail(800))
                    break
            sec["log_excerpt"] = _log_lines(m.log_path, r"descriptor|budget|EMFILE|"
                                            r"Too many open|queue", 8)
        for k in ("files_s", "mb_s", "p50_ms", "p99_ms", "max_ms", "fd_max", "errors"):
            sec["median_" + k] = median([x[k] for x in sec["runs"]])

    # ---- one endpoint killed mid-run --------------------------------------------------

    def m_failover(self):
        a = self.a
        ds = self.retina
        T = a.failover_seconds
        victim = self.rig.endpoints.nginx[1]
        sec = self.res["sections"]["failover"] = {"seconds": T, "procs": a.procs,
                                                  "victim": victim.url}
        with self.mount("bucketfs", ds, tag="-failover") as m:
            paths = [m.path(k) for k in ds.files]
            cold(ds.paths(), ds.name)
            events = []

            def during(t_start):
                time.sleep(max(0, t_start + T / 3 - time.monotonic()))
                pid = victim.proc.pid
                victim.kill()
                events.append(("killed the nginx of endpoint %s (SIGKILL to pid %d)"
                               % (victim.url, pid), time.monotonic()))
                log("failover: killed %s" % victim.url)
                time.sleep(max(0, t_start + 2 * T / 3 - time.monotonic()))
                victim.start()
                events.append(("restarted %s (pid %d)" % (victim.url, victim.proc.pid),
                               time.monotonic()))
                log("failover: restarted %s" % victim.url)
                return events

            log("failover: %d processes read for %d s; endpoint %s dies at %d s and comes "
                "back at %d s" % (a.procs, T, victim.url, T // 3, 2 * T // 3))
            res = readers.read_for(paths, a.procs, T, seed=7,
                                   expect=lambda _: rig.RETINA_SIZE, during=during)
            sec["per_second"] = readers.per_second(res["ends"], T)
            sec["errors_per_second"] = readers.per_second(res["error_times"], T)
            events = [(what, t - res["t_start"]) for what, t in events]
            sec["events"] = events
            for k in ("files", "files_s", "mb_s", "p50_ms", "p99_ms", "max_ms", "errors",
                      "error_samples"):
                sec[k] = res[k]
            k1, k2 = events[0][1], events[1][1]
            phases = []
            for name, lo, hi in (("before", 0, k1), ("endpoint down", k1, k2),
                                 ("after restart", k2, T)):
                n = sum(1 for t in res["ends"] if lo <= t < hi)
                e = sum(1 for t in res["error_times"] if lo <= t < hi)
                phases.append((name, lo, hi, n / (hi - lo) if hi > lo else 0, e))
            sec["phases"] = phases
            sec["daemon_alive"] = m.proc.poll() is None
            log("failover: %d reads, %d failed; %s" % (res["files"], res["errors"], ", ".join(
                "%s %.0f files/s" % (p[0], p[3]) for p in phases)))
            if res["errors"]:
                self.problem("failover", "%d failed reads while an endpoint was down, e.g. %s"
                             % (res["errors"], res["error_samples"][:3]))
        # After the unmount, so the daemon's closing per-endpoint lines are in.
        port = victim.url.rsplit(":", 1)[1]
        sec["log_lines"] = _log_lines(m.log_path, r"127\.0\.0\.1:%s" % port, 12)
        if not sec["log_lines"]:
            self.problem("failover", "no bucketfs log line names %s" % victim.url)
        if not sec.get("daemon_alive", True):
            self.problem("failover", "the bucketfs daemon died: %s" % m.log_tail(800))

    # ---- driver ---------------------------------------------------------------

    measurements = MEASUREMENTS

    def run(self, selected):
        for name in MEASUREMENTS:
            if name not in self.measurements:
                self.res["sections"].setdefault(name, {})["status"] = \
                    "not selected: it needs the local rig, not a real endpoint"
                continue
            if name not in selected:
                self.res["sections"].setdefault(name, {})["status"] = "not selected (--only/--skip)"
                continue
            t = time.monotonic()
            try:
                for tls in (self.a.scheme if name in PINNABLE else [False]):
                    for pinned in (self.a.pin if name in PINNABLE else [False]):
                        log("== %s%s" % (name, "".join(
                            " (%s)" % label for on, label in ((tls, rig.TLS_LABEL),
                                                              (pinned, rig.PINNED_LABEL))
                            if on)))
                        rig.use_tls(self.rig, tls)
                        rig.pin(self.rig.endpoints, pinned)
                        try:
                            getattr(self, "m_" + name)()
                        finally:
                            if pinned:
                                rig.pin(self.rig.endpoints, False)
                            if tls:
                                rig.use_tls(self.rig, False)
            except Skip as exc:
                self.res["sections"].setdefault(name, {})["status"] = "skipped: %s" % exc
                self.problem(name, "skipped: %s" % exc)
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                import traceback
                traceback.print_exc()
                self.res["sections"].setdefault(name, {})["status"] = "failed: %s" % exc
                self.problem(name, "failed: %s" % exc)
            self.res["sections"].setdefault(name, {})["elapsed_s"] = time.monotonic() - t
            self.check_endpoint_logs(name)

    def check_endpoint_logs(self, name):
        """nginx's own errors (crit/alert/emerg) during a measurement mean the
        rig, not the client, failed: report them."""
        if not hasattr(self, "_log_pos"):
            self._log_pos = {}
        for x in self.rig.endpoints.nginx:
            path = os.path.join(self.rig.tmp, "nginx-%d.error.log" % x.i)
            try:
                with open(path, errors="replace") as f:
                    f.seek(self._log_pos.get(path, 0))
                    text = f.read()
                    self._log_pos[path] = f.tell()
            except OSError:
                continue
            bad = [ln for ln in text.splitlines()
                   if re.search(r"\[(crit|alert|emerg)\]", ln)]
            if bad:
                self.problem(name, "the rig's nginx on %s logged %d critical errors, so the "
                             "numbers of this measurement are suspect; first: %s"
                             % (x.url, len(bad), bad[0]))


def tls_checks(tls, url):
    """Python's ssl against one TLS port: the certificate verifies against
    the rig's CA (host name 127.0.0.1 included), a second connection
    resumes the first one's session (nginx's ssl_session_cache; for TLS
    1.3 after a request, when the ticket has come), and a context without
    the CA refuses the endpoint.  (ok, what was seen)."""
    import socket
    import ssl
    import urllib.parse
    u = urllib.parse.urlsplit(url)
    ctx = ssl.create_default_context(cafile=tls.ca)
    seen = []
    ok = True
    try:
        with socket.create_connection((u.hostname, u.port), 10) as raw:
            with ctx.wrap_socket(raw, server_hostname=u.hostname) as s1:
                s1.sendall(b"HEAD / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                           % u.netloc.encode())
                while s1.recv(4096):
                    pass
                session = s1.session
                seen.append("%s %s" % (s1.version(), s1.cipher()[0]))
        with socket.create_connection((u.hostname, u.port), 10) as raw:
            with ctx.wrap_socket(raw, server_hostname=u.hostname, session=session) as s2:
                seen.append("resumed" if s2.session_reused else "not resumed")
                ok &= s2.session_reused
    except (OSError, ssl.SSLError) as exc:
        return False, "%s: %s" % (type(exc).__name__, exc)
    try:
        with socket.create_connection((u.hostname, u.port), 10) as raw:
            with ssl.create_default_context(cafile=None).wrap_socket(
                    raw, server_hostname=u.hostname):
                seen.append("verified without the CA")
                ok = False
    except ssl.SSLCertVerificationError:
        seen.append("refused without the CA")
    except (OSError, ssl.SSLError) as exc:
        seen.append("without the CA: %s" % exc)
        ok = False
    return ok, "; ".join(seen)


class RemoteBench(Bench):
    """The measurements that make sense against a real object store: the
    user's endpoints, credentials from the environment or the profile, the
    objects already under the prefix (or uploaded with --upload)."""

    measurements = REMOTE_MEASUREMENTS

    def prepare(self):
        a = self.a
        self.rig = remote.RemoteRig(a)
        self.rig.logs_dir = self.res["logs_dir"] = os.path.join(
            self.cache, "results", a.stamp + "-logs")
        bucket, prefix = remote.parse_bucket(a.bucket)
        client = remote.s3_client(a)
        if a.upload:
            t = time.monotonic()
            n = remote.upload_retina(client, bucket, prefix, a.files)
            self.res["upload"] = {"objects": n, "seconds": time.monotonic() - t}
        ds = remote.RemoteDataset(bucket, prefix)
        t = time.monotonic()
        remote.list_dataset(client, ds, limit=a.files)
        if not ds.files:
            raise RuntimeError("no object under %s that the mount shows as a file" % ds.url)
        # m_mount counts the entries of one directory to prove the mount
        # serves: the first file's.
        ds.list_dir = os.path.dirname(ds.files[0])
        self.retina = ds
        self.res["datasets"] = {ds.url: ds.meta}
        self.res["endpoints"] = list(a.endpoint)
        self.res["remote"] = {"bucket": ds.url, "mount_opts": self.rig.mount_opts}
        log("remote: %s: %d files, %.1f MB (listed in %.1f s%s); endpoints %s"
            % (ds.url, len(ds.files), ds.meta["bytes"] / 1e6, time.monotonic() - t,
               ", the first --files only" if ds.meta["limited"] else "",
               ", ".join(a.endpoint)))

    def m_dlio(self):
        """Only the bucketfs path: the direct S3 path is m_compare's."""
        a = self.a
        ds = self.retina
        sec = self.res["sections"]["dlio"] = {"paths": {"bucketfs": {"runs": [],
                                                                     "status": None}},
                                              "files": len(ds.files), "procs": a.procs}
        row = sec["paths"]["bucketfs"]
        with self.mount("bucketfs", ds) as m:
            sizes = {m.path(k): size for k, size in ds.sizes.items()}
            for r in range(a.runs):
                log("dlio: run %d/%d: bucketfs, %d files, %d processes"
                    % (r + 1, a.runs, len(sizes), a.procs))
                cold(None, "nothing")
                res = readers.read_all(list(sizes), a.procs, seed=r, expect=sizes.__getitem__,
                                       timeout=a.run_timeout)
                res.pop("ends", None)
                res.pop("error_times", None)
                row["runs"].append(res)
                log("dlio:   bucketfs: %.0f files/s, %.0f MB/s, p50 %.1f ms, p99 %.1f ms, "
                    "%d errors" % (res["files_s"], res["mb_s"], res["p50_ms"] or 0,
                                   res["p99_ms"] or 0, res["errors"]))
                if res["errors"]:
                    self.problem("dlio", "bucketfs run %d: %d failed reads, e.g. %s"
                                 % (r + 1, res["errors"], res["error_samples"][:3]))
        for k in ("files_s", "mb_s", "p50_ms", "p99_ms", "max_ms", "wall_s"):
            row["median_" + k] = median([x[k] for x in row["runs"]])
        row["errors"] = sum(x["errors"] for x in row["runs"])


class FdSampler(threading.Thread):
    """Counts /proc/PID/fd (and threads) every 100 ms."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.max_fds = 0
        self.max_threads = 0
        self.samples = 0
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            try:
                n = len(os.listdir("/proc/%d/fd" % self.pid))
                th = int(re.search(r"Threads:\s+(\d+)",
                                   open("/proc/%d/status" % self.pid).read()).group(1))
            except (OSError, AttributeError):
                break
            self.max_fds = max(self.max_fds, n)
            self.max_threads = max(self.max_threads, th)
            self.samples += 1
            self.halt.wait(0.1)

    def stop(self):
        self.halt.set()
        if self.is_alive():
            self.join()


def _log_lines(path, pattern, n):
    try:
        with open(path, errors="replace") as f:
            lines = [ln.rstrip("\n") for ln in f if re.search(pattern, ln)]
    except OSError:
        return []
    if len(lines) <= n:
        return lines
    return lines[:n // 2] + ["… (%d more lines)" % (len(lines) - n)] + lines[-(n - n // 2):]


def machine_info():
    mem = rig.meminfo("MemTotal")
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = sh(["git", "-C", rig.SRC, "rev-parse", "--short", "HEAD"]).stdout.strip()
    dirty = sh(["git", "-C", rig.SRC, "status", "--porcelain", "--", "src", "fs",
                "meson.build"]).stdout.strip()
    try:
        built = datetime.datetime.fromtimestamp(os.path.getmtime(rig.binary("bucketfs")))  # copy2 keeps it
        built = built.strftime("%Y-%m-%d %H:%M")
    except FileNotFoundError:
        built = "?"
    return {
        "nproc": os.cpu_count(), "mem_bytes": mem, "kernel": platform.release(),
        "cpu": cpu, "os": _os_release(), "loadavg_start": open("/proc/loadavg").read().split()[:3],
        "cpu_busy_start": cpu_busy(),
        "commit": commit + (" with uncommitted changes in src/ fs/" if dirty else ""),
        "binary_built": built,
        "versions": {
            "bucketfs": version_of([rig.binary("bucketfs"), "--version"]),
            "nginx": version_of(["nginx", "-v"]),
            "s3fs": version_of(["s3fs", "--version"], r"V[\d.]+"),
            "rclone": version_of(["rclone", "version"]),
            "curl": version_of(["curl", "--version"]),
            "fio": version_of(["fio", "--version"]),
            "python": sys.version.split()[0],
        }}


def cpu_busy(seconds=2.0):
    """The share of all CPUs busy over a short interval, from /proc/stat:
    other work on the machine before the rig starts."""
    before = cpu.machine_idle()
    time.sleep(seconds)
    return cpu.busy_since(before) / 100.0


def _os_release():
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def one_at_a_time(cache_dir):
    """Holds an exclusive lock on <cache>/run.lock for the whole run: two rigs
    at once would spoil each other's numbers (each drops the page cache and
    loads both cores) and could write the same dataset twice.  A second run
    waits for the first, saying so."""
    import fcntl
    path = os.path.join(cache_dir, "run.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        log("another tools/bench/run.py (pid %s) is measuring on this machine; waiting for "
            "it to finish, since two runs at once would spoil each other's numbers" % other)
        fcntl.flock(fd, fcntl.LOCK_EX)
    os.ftruncate(fd, 0)
    os.pwrite(fd, b"%d\n" % os.getpid(), 0)
    return fd


def _ms_list(text):
    """ "0,5,20" -> [0, 5, 20]: delays in ms, each 0 to 10,000."""
    out = []
    for x in text.split(","):
        v = float(x)
        if not 0 <= v <= 10000:
            raise ValueError("%s ms is out of range (0 to 10000)" % x)
        out.append(int(v) if v == int(v) else v)
    if not out:
        raise ValueError("no delay given")
    return sorted(set(out))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true",
                    help="small and short: 2,000 files, 256 MiB large file, 5 s fio, "
                         "a smaller tree")
    ap.add_argument("--files", type=int, help="RetinaNet files (default 20,000; --quick 2,000)")
    ap.add_argument("--procs", type=int, default=32, help="reader processes (default 32)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions, median reported "
                    "(default 3)")
    ap.add_argument("--out", default=os.path.join(rig.SRC, "docs", "BENCHMARKS.md"),
                    help="the report (default docs/BENCHMARKS.md); the chart goes next to it")
    ap.add_argument("--only", help="comma list of measurements to run: " + ",".join(MEASUREMENTS))
    ap.add_argument("--skip", default="", help="comma list of measurements to leave out")
    ap.add_argument("--skip-peer", default="", help="comma list of s3fs,rclone to leave out")
    ap.add_argument("--large-mib", type=int, help="large file size (default 2048; --quick 256)")
    ap.add_argument("--tree-fanout", type=int, help="deep tree fan-out, 4 levels, 4 files per "
                    "leaf directory (default 6: 5,184 files; --quick 4: 1,024)")
    ap.add_argument("--fio-seconds", type=int, help="fio time bound (default 20; --quick 5)")
    ap.add_argument("--fio-jobs", default=",".join(j[0] for j in latency.LatencyMixin.FIO_JOBS),
                    metavar="JOB[,...]", help="the fio jobs to run (default all: %(default)s)")
    ap.add_argument("--failover-seconds", type=int, help="length of the endpoint-kill run "
                    "(default 45; --quick 15)")
    ap.add_argument("--concurrency", type=int, default=2048, help="concurrent readers "
                    "(default 2048)")
    ap.add_argument("--run-timeout", type=int, default=900,
                    help="cut one run of readers off after this many seconds (default 900)")
    ap.add_argument("--tree-timeout", type=int, default=300,
                    help="cut a find/ls -lR off after this many seconds (default 300)")
    ap.add_argument("--cache-dir", default=os.environ.get("BFS_BENCH_CACHE",
                                                          "/var/tmp/bucketfs-bench"),
                    help="where datasets live (default /var/tmp/bucketfs-bench)")
    ap.add_argument("--render", metavar="RESULTS.json[,...]",
                    help="measure nothing: rewrite --out from the raw results of an earlier "
                         "run (results/*.json under the cache directory); of several runs, "
                         "each measurement from the last one that ran it")
    g = ap.add_argument_group(
        "latency rig", "endpoints that answer each object GET after a fixed first-byte "
        "delay (nginx's echo module: echo_sleep, then the static file)")
    g.add_argument("--latency", default="0,5,20,50", metavar="MS[,MS...]",
                   help="first-byte delays of the latency measurement (default 0,5,20,50)")
    g.add_argument("--order", default=",".join(latency.ORDERS), metavar="ORDER[,...]",
                   help="reading orders: random (reshuffled per run), dlio (sorted names, "
                        "4 ranks x 8 workers, batches of 24), announced (random, the whole "
                        "order announced by setxattr user.bucketfs.prefetch at the start); "
                        "default all three")
    g.add_argument("--style", default=",".join(latency.STYLES), metavar="STYLE[,...]",
                   help="read styles: whole (one read()), dlio (DLIO's, PIL's way: open(), "
                        "16 bytes, seek(0), 64 KiB reads through Python's buffered file, "
                        "sized by st_blksize); default both")
    g.add_argument("--large-latency", default="0,20", metavar="MS[,MS...]",
                   help="first-byte delays of the large, fio and npz measurements "
                        "(default 0,20)")
    g.add_argument("--part-mib", type=int, default=8,
                   help="the ranged-GET reference's part size, as the mount's part_size "
                        "(default 8)")
    g.add_argument("--pin", default="unpinned", choices=("unpinned", "pinned", "both"),
                   help="latency and large: as they are (unpinned, the default), "
                   "pinned (readers, endpoints and references on CPU 0, the daemon on "
                   "CPU 1: a model of a host with a spare core), or both, unpinned first")
    g.add_argument("--scheme", default="plain", choices=("plain", "tls", "both"),
                   help="latency and large: on the plain ports (the default), on the TLS "
                   "ports (the same endpoints over HTTPS with the rig's own CA: bucketfs "
                   "-o ca_file=, the readers and curl verify with it), or both, plain "
                   "first; each with every --pin mode")
    g.add_argument("--wire", action="store_true",
                   help="serve the endpoints from a network namespace of their own, over "
                   "the rig's wire (tools/bench/wire.c), not loopback: a model of a store "
                   "on another host, where each side's TCP work is its own (unpinned only)")
    g.add_argument("--opts", default="", metavar="K=V[,K=V...]",
                   help="extra -o options for bucketfs in latency, large, fio and npz")
    g.add_argument("--vm-memory", default="backed", choices=("backed", "as-is"),
                   help="backed (the default): where this VM hands free memory back to "
                   "its host (free page reporting), pause that for the run and write the "
                   "free memory once, a model of a host's memory; as-is: measure the VM "
                   "as it is")
    g.add_argument("--npz-files", type=int, help="UNet3D-shaped .npz files of ~147 MB "
                   "(default 8; --quick 2)")
    g.add_argument("--npz-procs", type=int, default=4, help="np.load readers (default 4)")
    ap.add_argument("--print", action="store_true",
                    help="print the selected measurements' tables to stdout and write no "
                         "report (for an A/B of one slice)")
    ap.add_argument("--no-setup", action="store_true",
                    help="do not run tools/bench/setup.sh (apt-get) first")
    ap.add_argument("--build", action="store_true",
                    help="meson compile -C build first (it is built anyway if missing)")
    g = ap.add_argument_group(
        "real endpoint", "measure an object store you give instead of the local rig "
        "(measurements %s only; no setup.sh, no dataset generated unless --upload); "
        "credentials as the mount takes them: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        "/AWS_SESSION_TOKEN or AWS_PROFILE" % ",".join(REMOTE_MEASUREMENTS))
    g.add_argument("--endpoint", action="append", default=[], metavar="URL",
                   help="an S3 endpoint, repeatable (all are given to bucketfs)")
    g.add_argument("--bucket", metavar="s3://BUCKET[/PREFIX]",
                   help="the objects to read: every file under the prefix, or the first "
                        "--files of them in listing order")
    g.add_argument("--upload", action="store_true",
                   help="first PUT the RetinaNet shape under the prefix: --files (default "
                        "2,000) objects of 322,624 random bytes, train/img_<i>_of_<N>.jpeg; "
                        "objects already there with that size are kept")
    g.add_argument("--region", help="the signing region (default: AWS_REGION, the profile, "
                                    "us-east-1)")
    g.add_argument("--ca-file", help="CA certificates for https endpoints")
    a = ap.parse_args(argv)
    q = a.quick
    a.remote = bool(a.endpoint or a.bucket)
    a.opts = [o for o in a.opts.split(",") if o]
    try:
        a.latency = _ms_list(a.latency)
        a.large_latency = _ms_list(a.large_latency)
    except ValueError as exc:
        ap.error("--latency/--large-latency: %s" % exc)
    if a.wire and a.pin != "unpinned":
        ap.error(rig.WIRE_UNPINNED)
    a.pin = {"unpinned": [False], "pinned": [True], "both": [False, True]}[a.pin]
    a.scheme = {"plain": [False], "tls": [True], "both": [False, True]}[a.scheme]
    a.order = [o for o in a.order.split(",") if o]
    a.style = [o for o in a.style.split(",") if o]
    for what, got, known in (("--order", a.order, latency.ORDERS),
                             ("--style", a.style, latency.STYLES)):
        bad = [x for x in got if x not in known] or ([] if got else ["(none)"])
        if bad:
            ap.error("%s: unknown %s (known: %s)" % (what, ", ".join(bad), ", ".join(known)))
    a.npz_files = a.npz_files or (2 if q else 8)
    a.fio_jobs = [j for j in a.fio_jobs.split(",") if j]
    known = [j[0] for j in latency.LatencyMixin.FIO_JOBS]
    if not a.fio_jobs or set(a.fio_jobs) - set(known):
        ap.error("--fio-jobs: unknown job in %s (known: %s)"
                 % (",".join(a.fio_jobs) or "(none)", ", ".join(known)))
    if a.remote:
        if not a.endpoint or not a.bucket:
            ap.error("a real endpoint needs both --endpoint and --bucket")
        try:
            remote.parse_bucket(a.bucket)
        except ValueError as exc:
            ap.error(str(exc))
        if True in a.scheme:
            ap.error("--scheme tls/both is the local rig's (a real endpoint's scheme is "
                     "its URL's; --ca-file gives its CA)")
        if a.upload and not a.files:
            a.files = 2000
        a.peers_skip = set()
        sel = set(a.only.split(",")) if a.only else set(REMOTE_MEASUREMENTS)
        sel -= set(s for s in a.skip.split(",") if s)
        bad = sel - set(REMOTE_MEASUREMENTS)
        if bad:
            ap.error("against a real endpoint only %s run, not %s"
                     % (",".join(REMOTE_MEASUREMENTS), ",".join(sorted(bad))))
        a.selected = sel
        return a
    if a.upload or a.region or a.ca_file:
        ap.error("--upload, --region and --ca-file go with --endpoint and --bucket")
    a.files = a.files or (2000 if q else 20000)
    a.large_mib = a.large_mib or (256 if q else 2048)
    a.tree_fanout = a.tree_fanout or (4 if q else 6)
    a.fio_seconds = a.fio_seconds or (5 if q else 20)
    a.failover_seconds = a.failover_seconds or (15 if q else 45)
    a.peers_skip = {p for p in a.skip_peer.split(",") if p}
    sel = set(a.only.split(",")) if a.only else set(MEASUREMENTS)
    sel -= set(s for s in a.skip.split(",") if s)
    bad = sel - set(MEASUREMENTS)
    if bad:
        ap.error("unknown measurement(s): %s" % ", ".join(sorted(bad)))
    a.selected = sel
    return a


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # Debian's python3-matplotlib lives under /usr/bin/python3 only.
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") \
            and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3", os.path.abspath(__file__), *argv])
    a = parse_args(argv)
    if a.render:
        parts = []
        for path in a.render.split(","):
            with open(path) as f:
                parts.append(json.load(f))
                parts[-1].setdefault("raw_path", path)
        try:
            res = parts[0] if len(parts) == 1 else report.merge(parts)
        except ValueError as exc:
            sys.exit("run.py: --render %s: %s" % (a.render, exc))
        out = os.path.abspath(a.out)
        report.write(res, out)
        log("wrote %s and %s from %s" % (out, report.chart_path(out), a.render))
        return 0
    if os.geteuid() != 0:
        sys.exit("run.py: needs root (FUSE mounts, drop_caches, apt-get)")
    if not a.no_setup and not a.remote:
        log("setup: tools/bench/setup.sh")
        r = subprocess.run([os.path.join(HERE, "setup.sh")], stdout=sys.stderr)
        if r.returncode:
            sys.exit("run.py: setup failed (status %d)" % r.returncode)
    if a.build or not os.path.exists(os.path.join(rig.BUILD, "fs", "bucketfs")):
        if not os.path.exists(os.path.join(rig.BUILD, "build.ninja")):
            subprocess.run(["meson", "setup", rig.BUILD], cwd=rig.SRC, check=True,
                           stdout=sys.stderr)
        log("build: meson compile -C %s" % rig.BUILD)
        r = subprocess.run(["meson", "compile", "-C", rig.BUILD], stdout=sys.stderr)
        if r.returncode:
            sys.exit("run.py: the build failed")

    # Signals: SIGTERM/SIGHUP unwind like Ctrl-C, so every mount is unmounted
    # and every server stopped.
    def on_signal(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGINT, signal.default_int_handler)   # even if started ignored
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    os.makedirs(a.cache_dir, exist_ok=True)
    lock_fd = one_at_a_time(a.cache_dir)
    rig.clear_stale()

    started = datetime.datetime.now().astimezone()
    a.stamp = started.strftime("%Y%m%d-%H%M%S") + ("-quick" if a.quick else "") + \
        ("-remote" if a.remote else "")
    t0 = time.monotonic()
    bench = RemoteBench(a) if a.remote else Bench(a)
    status = 0
    try:
        rig.snapshot_binaries()
        bench.res["machine"] = machine_info()
        bench.prepare()
        if not a.remote:
            bench.res["vm_memory"] = rig.back_memory(a.vm_memory)
        bench.run(a.selected)
    except KeyboardInterrupt:
        log("interrupted: unmounting and stopping everything")
        status = 130
    except Exception:
        import traceback
        traceback.print_exc()
        status = 1
    finally:
        CLEANUP.run()
    os.close(lock_fd)
    if status == 130:
        return status
    res = bench.res
    res["command"] = "tools/bench/run.py" + ("" if not argv else " " + " ".join(
        shlex.quote(x) for x in argv))
    res["started"] = started.strftime("%Y-%m-%d %H:%M %Z")
    res["elapsed_s"] = time.monotonic() - t0
    res["params"] = {k: getattr(a, k) for k in ("quick", "files", "procs", "runs", "large_mib",
                                                "tree_fanout", "fio_seconds", "failover_seconds",
                                                "concurrency", "latency", "order", "style",
                                                "large_latency", "part_mib", "opts",
                                                "npz_files", "npz_procs", "fio_jobs", "pin",
                                                "scheme", "vm_memory")}
    if a.remote:
        res["params"]["files"] = len(bench.retina.files) if hasattr(bench, "retina") else None
    if status:
        res["problems"].append(("run", "the run stopped early (status %d); see stderr" % status))
    os.makedirs(os.path.join(a.cache_dir, "results"), exist_ok=True)
    raw = os.path.join(a.cache_dir, "results", a.stamp + ".json")
    with open(raw, "w") as f:
        json.dump(res, f, indent=1, default=lambda o: repr(o))
    res["raw_path"] = raw
    out = os.path.abspath(a.out)
    if a.print:
        sys.stdout.write(report.render(res, out, charts=False))
        log("raw numbers: %s; %d:%02d elapsed" % (raw, res["elapsed_s"] // 60,
                                                  res["elapsed_s"] % 60))
        return status
    report.write(res, out)
    log("wrote %s and %s (raw numbers: %s); %d:%02d elapsed"
        % (out, report.chart_path(out), raw, res["elapsed_s"] // 60, res["elapsed_s"] % 60))
    return status


if __name__ == "__main__":
    sys.exit(main())
