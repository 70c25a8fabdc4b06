"""Writes docs/BENCHMARKS.md and the chart from run.py's results."""

import os

LABEL = {
    "bucketfs": "bucketfs mount",
    "direct": "direct S3 path (curl -Z)",
    "s3fs": "s3fs mount",
    "rclone": "rclone mount",
    "local": "local page cache (ceiling)",
}
LARGE_LABEL = dict(LABEL, direct="direct S3 path (8 ranged GETs in parallel)",
                   local="local page cache (dd of the file)")
# DESIGN.md: what one host needs to keep 4 accelerators busy.
NEED_FILES_S = 2019
PASS_FILES_S = 1716


def median_of(vals):
    import statistics
    return statistics.median(vals) if vals else None


def ms(v):
    """A latency in ms: 2 decimals below 10 ms, else 1."""
    if v is None:
        return "–"
    return "{:,.2f}".format(v) if v < 10 else "{:,.1f}".format(v)


def chart_path(out):
    return os.path.join(os.path.dirname(out), "bench-dlio.png")


def n0(v):
    return "–" if v is None else "{:,.0f}".format(v)


def n1(v):
    return "–" if v is None else "{:,.1f}".format(v)


def n2(v):
    return "–" if v is None else "{:,.2f}".format(v)


def ratio(a, b):
    if a is None or not b:
        return "–"
    return "{:.2f}×".format(a / b)


def pct(a, b):
    if a is None or not b:
        return "–"
    return "{:.0f}%".format(100.0 * a / b)


def runs_of(vals, f=n0):
    return " / ".join(f(v) for v in vals) if vals else "–"


def status_note(row):
    s = row.get("status")
    if s and not row.get("runs"):
        return s
    if s:
        return "partial: " + s
    return ""


def write(res, out):
    os.makedirs(os.path.dirname(out), exist_ok=True)
    chart = chart_path(out)
    chart_note = make_chart(res, chart)
    lines = []
    w = lines.append
    m = res.get("machine", {})
    p = res.get("params", {})
    secs = res.get("sections", {})
    w("# bucketfs benchmarks")
    w("")
    w("Written by `tools/bench/run.py`; do not edit by hand, re-run it (see "
      "`tools/bench/README.md`). Every number below was measured by that run; medians of "
      "%d runs unless a table says otherwise, with the individual runs alongside."
      % p.get("runs", 0))
    w("")
    w("- **Command:** `%s`" % res.get("command"))
    w("- **Date:** %s; the whole run took %d min %02d s" % (
        res.get("started"), res.get("elapsed_s", 0) // 60, res.get("elapsed_s", 0) % 60))
    w("- **Machine:** %s, %s cores (`nproc`), %.1f GiB RAM, kernel %s, %s; load average "
      "before the start %s (1, 5, 15 min), CPUs %s busy over 2 s before the start (other "
      "work on the machine)"
      % (m.get("cpu"), m.get("nproc"), m.get("mem_bytes", 0) / 2**30, m.get("kernel"),
         m.get("os"), " ".join(m.get("loadavg_start", [])),
         pct(m.get("cpu_busy_start"), 1) if m.get("cpu_busy_start") is not None else "?"))
    w("- **bucketfs build:** commit %s, binary built %s" % (m.get("commit"),
                                                          m.get("binary_built")))
    w("- **Datasets** (under `%s`, written once and reused):" % os.path.dirname(
        os.path.dirname(res.get("raw_path", "/x/y"))))
    for name, meta in res.get("datasets", {}).items():
        if not meta:
            continue
        if meta.get("kind") == "retina":
            w("  - `%s`: %s files of %s random bytes in one flat directory "
              "`train/img_<i>_of_%d.jpeg` (%.2f GB)" % (name, n0(meta["files"]),
                                                       n0(meta["file_size"]), meta["files"],
                                                       meta["bytes"] / 1e9))
        elif meta.get("kind") == "large":
            w("  - `%s`: one file `big.bin` of %s MiB of random bytes"
              % (name, n0(meta["bytes"] / 2**20)))
        else:
            w("  - `%s`: a deep tree, %d directory levels × fan-out %d, %d files of 4–64 KiB "
              "per leaf directory: %s files, %s directories, %.0f MB"
              % (name, meta["levels"], meta["fanout"], meta["per_leaf"], n0(meta["files"]),
                 n0(meta["dirs"]), meta["bytes"] / 1e6))
    w("- **Raw numbers:** `%s`; the daemons' and servers' logs: `%s/`"
      % (res.get("raw_path"), res.get("logs_dir")))
    w("")
    w("| Software | Version |")
    w("|---|---|")
    for k, v in m.get("versions", {}).items():
        w("| %s | %s |" % (k, v.replace("|", "\\|")))
    w("")

    # ---- summary
    w("## Summary")
    w("")
    summary(res, w)
    w("")
    probs = res.get("problems", [])
    w("## What failed or was skipped")
    w("")
    if not probs:
        w("Nothing failed: every selected measurement ran, with no failed reads.")
    for sec, msg in probs:
        w("- **%s:** %s" % (sec, msg.replace("\n", " ")))
    for name, s in secs.items():
        if s.get("status") and "not selected" in s["status"]:
            w("- **%s:** %s" % (name, s["status"]))
    w("")
    w("## How it is measured")
    w("")
    how(res, w)
    w("")
    sec_rig(secs.get("rig", {}), w)
    sec_dlio(secs.get("dlio", {}), w, chart, chart_note, out)
    sec_large(secs.get("large", {}), w)
    sec_fio(secs.get("fio", {}), w)
    sec_tree(secs.get("tree", {}), w)
    sec_mount(secs.get("mount", {}), w)
    sec_concurrency(secs.get("concurrency", {}), w)
    sec_failover(secs.get("failover", {}), w)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    os.replace(tmp, out)


def summary(res, w):
    secs = res.get("sections", {})
    d = secs.get("dlio", {}).get("paths", {})
    lg = secs.get("large", {}).get("paths", {})
    tr = secs.get("tree", {}).get("paths", {})

    def med(rows, path, key):
        return rows.get(path, {}).get(key)
    w("| Measurement | bucketfs | direct S3 path | s3fs | rclone | local page cache | "
      "bucketfs ÷ direct S3 | bucketfs ÷ s3fs | bucketfs ÷ rclone |")
    w("|---|---|---|---|---|---|---|---|---|")
    if d:
        v = {k: med(d, k, "median_files_s") for k in LABEL}
        w("| DLIO random whole-file reads, files/s (%s procs) | %s | %s | %s | %s | %s | "
          "**%s** | %s | %s |" % (secs["dlio"].get("procs"), n0(v["bucketfs"]), n0(v["direct"]),
                                  n0(v["s3fs"]), n0(v["rclone"]), n0(v["local"]),
                                  pct(v["bucketfs"], v["direct"]),
                                  ratio(v["bucketfs"], v["s3fs"]),
                                  ratio(v["bucketfs"], v["rclone"])))
        v = {k: med(d, k, "median_p99_ms") for k in LABEL}
        w("| DLIO p99 per-file latency, ms (lower is better) | %s | %s | %s | %s | %s | | | |"
          % tuple(ms(v[k]) for k in ("bucketfs", "direct", "s3fs", "rclone", "local")))
    if lg:
        v = {k: med(lg, k, "median_mb_s") for k in LABEL}
        w("| Large file sequential read, MB/s | %s | %s | %s | %s | %s | **%s** | %s | %s |"
          % (n0(v["bucketfs"]), n0(v["direct"]), n0(v["s3fs"]), n0(v["rclone"]),
             n0(v["local"]), pct(v["bucketfs"], v["direct"]), ratio(v["bucketfs"], v["s3fs"]),
             ratio(v["bucketfs"], v["rclone"])))
    if tr:
        for key, what in (("median_find", "`find` of the deep tree, s (lower is better)"),
                          ("median_ls", "`ls -lR` of the deep tree, s (lower is better)")):
            v = {k: med(tr, k, key) for k in LABEL}
            # a time: the ratio is peer time / bucketfs time ("×faster")
            w("| %s | %s | | %s | %s | %s | | %s | %s |"
              % (what, n2(v["bucketfs"]), n2(v["s3fs"]), n2(v["rclone"]), n2(v["local"]),
                 ratio(v["s3fs"], v["bucketfs"]) + " faster" if v["s3fs"] and v["bucketfs"]
                 else "–",
                 ratio(v["rclone"], v["bucketfs"]) + " faster" if v["rclone"] and v["bucketfs"]
                 else "–"))
    w("")
    mt = secs.get("mount", {})
    if mt.get("median_ready_s") is not None or mt.get("median_warm_ready_s") is not None:
        w("- **Mount with a persisted index** (%s keys): ready in **%s ms** with the page cache "
          "dropped, %s ms warm (medians); building that index by listing took %s s." % (
              n0(len_files(res)), n1(mt["median_ready_s"] * 1e3 if mt.get("median_ready_s")
                                     is not None else None),
              n1(mt["median_warm_ready_s"] * 1e3 if mt.get("median_warm_ready_s") is not None
                 else None), n2(mt.get("index_build_s"))))
    c = secs.get("concurrency", {})
    if c.get("runs"):
        w("- **%s concurrent readers**, daemon under `ulimit -n %d`: %s failed reads in total, "
          "at most %s open descriptors in the daemon, %s files/s (median)."
          % (n0(c["readers"]), c["nofile"], n0(sum(r["errors"] for r in c["runs"])),
             n0(max(r["fd_max"] for r in c["runs"])), n0(c.get("median_files_s"))))
    f = secs.get("failover", {})
    if f.get("phases"):
        w("- **One of 4 endpoints killed mid-run:** %s failed reads of %s; files/s %s."
          % (n0(f["errors"]), n0(f["files"]),
             ", ".join("%s %s" % (ph[0], n0(ph[3])) for ph in f["phases"])))
    if d.get("bucketfs", {}).get("median_files_s") is not None:
        v = d["bucketfs"]["median_files_s"]
        w("- DESIGN.md's target for one host is %s files/s (pass line %s) and at least 85%% "
          "of the direct S3 path; bucketfs delivered %s files/s, %s of the direct S3 path."
          % (n0(NEED_FILES_S), n0(PASS_FILES_S), n0(v),
             pct(v, d.get("direct", {}).get("median_files_s"))))


def len_files(res):
    return res.get("sections", {}).get("dlio", {}).get("files") or \
        res.get("params", {}).get("files")


def how(res, w):
    p = res.get("params", {})
    eps = res.get("endpoints", [])
    w("- **Endpoints:** 4 nginx instances (one process each, `master_process off`, "
      "`sendfile on`, `access_log off`, `keepalive_requests` 10⁸, `open_file_cache`) on "
      "loopback ports %s serve GET/HEAD/Range straight from the dataset directory. Any "
      "request with `list-type=` in its query, any non-GET/HEAD request and any request "
      "for a directory is passed (`proxy_pass`, with the client's `Host` and URI) to the "
      "project's test S3 server (`tests/s3server/s3server.py --etag-style nginx`), so "
      "every client uses the same 4 URLs. nginx ignores the S3 `Authorization` header; "
      "the test server checks SigV4 on the listings. With `--etag-style nginx` the "
      "listing's ETags are nginx's own (`\"<hex mtime>-<hex size>\"`), so bucketfs's "
      "`If-Match` on every GET is honoured (see the self-check)." % ", ".join(
          u.rsplit(":", 1)[1] for u in eps))
    w("- **Cold client, warm server:** before every run through a mount the page cache is "
      "dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`), which also evicts the files "
      "nginx serves; the rig then reads the dataset's backing files once (8 threads) so "
      "the endpoints serve from memory, as a real object store's servers would, while the "
      "mount's own page cache, dentries and inodes stay cold. That re-warm is not timed.")
    w("- **DLIO-style reads:** %d processes, each `open(path,'rb').read()` on a disjoint share "
      "of the files in a shuffled order (reshuffled every run), all released by one "
      "barrier; files/s = files ÷ (last completion − release); MB/s in 10⁶ bytes; "
      "latency = open+read+close of one file (nearest-rank percentiles). Every read is "
      "checked for the full 322,624 bytes. The **direct S3 path** is one `curl -Z "
      "--parallel-max %d --parallel-immediate` over the same shuffled URLs round-robin on "
      "the 4 endpoints (unsigned: nginx does not check), per-file latency from "
      "`%%{time_total}`. s3fs is mounted with `url=<endpoint 1>,use_path_request_style,"
      "passwd_file=…,ro` (it takes one URL and HEADs every file); rclone with an `s3` "
      "remote (provider Other, endpoint 1, `AWS_*` unset), `--read-only --vfs-cache-mode "
      "off --dir-cache-time 1000h`, and one `ls` of `train/` first so its listing is "
      "cached. Each mount stays up across the runs (like epochs); the kernel cache is "
      "dropped before each run. bucketfs gets all 4 endpoints and a persisted index "
      "(built once per run of the rig with `bucketfs-index build`)."
      % (p.get("procs", 0), p.get("procs", 0)))
    w("- DESIGN.md's \"Measured on this machine\" table was taken by hand with one nginx "
      "endpoint and 4,000 files; compare bucketfs with the rows of this report, measured the "
      "same way in the same run, not with that table.")
    w("- Runs of the different paths are interleaved (run 1 of every path, then run 2, …) "
      "so drifting background load spreads over all of them. This machine has 2 cores "
      "shared by the readers, the FUSE daemon, nginx and curl, so expect noise; the "
      "medians and ratios are what matter.")


def sec_rig(s, w):
    w("## Rig self-check")
    w("")
    if s.get("status"):
        w("**%s**" % s["status"])
        w("")
    if s.get("checks"):
        w("| Check | Result | |")
        w("|---|---|---|")
        for what, got, ok in s["checks"]:
            w("| %s | `%s` | %s |" % (what, got, ok))
        w("")


def sec_dlio(s, w, chart, chart_note, out):
    w("## 1. DLIO-style random whole-file reads (RetinaNet shape)")
    w("")
    if s.get("status"):
        w("**%s**" % s["status"])
        w("")
    if not s.get("paths"):
        return
    w("%s files of 322,624 bytes, %s reader processes, each file read once per run."
      % (n0(s["files"]), s["procs"]))
    w("")
    direct = s["paths"].get("direct", {}).get("median_files_s")
    w("| Path | files/s | MB/s | p50 ms | p99 ms | max ms | failed reads | files/s per run "
      "| vs direct S3 |")
    w("|---|---|---|---|---|---|---|---|---|")
    for k, row in s["paths"].items():
        note = status_note(row)
        if not row.get("runs"):
            w("| %s | %s | | | | | | | |" % (LABEL[k], note or "no data"))
            continue
        w("| %s | **%s** | %s | %s | %s | %s | %s | %s | %s |" % (
            LABEL[k], n0(row["median_files_s"]), n0(row["median_mb_s"]),
            ms(row["median_p50_ms"]), ms(row["median_p99_ms"]), ms(row["median_max_ms"]),
            n0(row["errors"]), runs_of([r["files_s"] for r in row["runs"]]),
            pct(row["median_files_s"], direct)))
    w("")
    notes = [(k, r.get("note")) for k, r in s["paths"].items() if r.get("note")]
    notes += [(k, status_note(r)) for k, r in s["paths"].items()
              if r.get("runs") and status_note(r)]
    for k, note in notes:
        w("- %s: %s" % (LABEL[k], note))
    b = s["paths"].get("bucketfs", {}).get("median_files_s")
    for peer in ("s3fs", "rclone", "local"):
        v = s["paths"].get(peer, {}).get("median_files_s")
        if b is not None and v:
            w("- bucketfs ÷ %s: %s" % (LABEL[peer], ratio(b, v)))
    w("")
    if chart_note:
        w("Chart not drawn: %s" % chart_note)
    else:
        w("![files/s per path](%s)" % os.path.relpath(chart, os.path.dirname(out)))
    w("")


def sec_large(s, w):
    w("## 2. Large file, sequential")
    w("")
    if s.get("status"):
        w("**%s**" % s["status"])
        w("")
    if not s.get("paths"):
        return
    w("`dd if=MNT/big.bin of=/dev/null bs=1M` of one %s MiB file through each mount (cold "
      "client cache), against a parallel ranged GET of the same object: 8 `curl -r` "
      "processes at once, round-robin over the 4 endpoints." % n0(s["size"] / 2**20))
    w("")
    direct = s["paths"].get("direct", {}).get("median_mb_s")
    w("| Path | MB/s | MB/s per run | vs direct S3 |")
    w("|---|---|---|---|")
    for k, row in s["paths"].items():
        if not row.get("runs"):
            w("| %s | %s | | |" % (LARGE_LABEL[k], status_note(row) or "no data"))
            continue
        w("| %s | **%s** | %s | %s |" % (LARGE_LABEL[k], n0(row["median_mb_s"]),
                                         runs_of([r["mb_s"] for r in row["runs"]]),
                                         pct(row["median_mb_s"], direct)))
    w("")


def sec_fio(s, w):
    w("## 3. fio on the mount")
    w("")
    if s.get("status"):
        w("**%s**" % s["status"])
        w("")
    if not s.get("jobs"):
        return
    w("`fio --direct=0 --readonly --ioengine=psync --runtime=%d` (a time bound: a job stops "
      "at the end of the file or after %d s), on the large file through bucketfs (page "
      "cache dropped first) and on the local file (cache warm). Sequential: 1 job, bs=1M; "
      "random: 8 jobs (`--numjobs=8 --group_reporting`)." % (s["seconds"], s["seconds"]))
    w("")
    w("| Job | Target | MB/s | IOPS | p50 ms | p99 ms | MB/s per run |")
    w("|---|---|---|---|---|---|---|")
    for key, job in s["jobs"].items():
        name, target = key.split("|")
        if not job.get("runs"):
            w("| %s | %s | %s | | | | |" % (name, target, status_note(job) or "no data"))
            continue
        w("| %s | %s | **%s** | %s | %s | %s | %s |" % (
            name, target, n0(job["median_mb_s"]), n0(job["median_iops"]),
            n2(job["median_p50_ms"]), n2(job["median_p99_ms"]),
            runs_of([r["mb_s"] for r in job["runs"]])))
    w("")


def sec_tree(s, w):
    w("## 4. find and ls -lR of the deep tree")
    w("")
    if s.get("status"):
        w("**%s**" % s["status"])
        w("")
    if not s.get("paths"):
        return
    w("%s files in %s directories. Each walk runs on a fresh mount with the page, dentry and "
      "inode caches dropped: `find MNT -type f | wc -l` and `ls -lR MNT | grep -c '^-'` "
      "(both must count every file)." % (n0(s["files"]), n0(s["dirs"])))
    w("")
    w("| Path | find, s | ls -lR, s | find per run | ls -lR per run |")
    w("|---|---|---|---|---|")
    for k, row in s["paths"].items():
        note = row.get("status") or ""
        w("| %s | %s | %s | %s | %s |" % (
            LABEL[k], n2(row.get("median_find")) if row.get("find") else note or "–",
            n2(row.get("median_ls")) if row.get("ls") else note or "–",
            runs_of(row.get("find"), n2), runs_of(row.get("ls"), n2)))
    w("")


def sec_mount(s, w):
    w("## 5. Mount time with a persisted index")
    w("")
    if s.get("status"):
        w("**%s**" % s["status"])
        w("")
    if not s.get("runs"):
        return
    w("`bucketfs -o endpoint=…×4,index=PATH s3://BUCKET MNT` (daemon mode) from exec to the "
      "mount point being a mount, with the index (%s keys) already on disk: first with the "
      "page cache dropped before each mount (the binary, its libraries and the index come "
      "from disk), then with it warm." % n0((s["runs"] or s.get("warm_runs"))[0]["entries"]))
    w("")
    w("| | median | per run |")
    w("|---|---|---|")
    for key, what in (("runs", "page cache dropped"), ("warm_runs", "page cache warm")):
        rs = s.get(key) or []
        if not rs:
            continue
        w("| start to ready mount, %s, ms | **%s** | %s |" % (
            what, n1(median_of([r["ready_s"] * 1e3 for r in rs])),
            runs_of([r["ready_s"] * 1e3 for r in rs], n1)))
        w("| the command returned, %s, ms | %s | %s |" % (
            what, n1(median_of([r["return_s"] * 1e3 for r in rs])),
            runs_of([r["return_s"] * 1e3 for r in rs], n1)))
    if s.get("index_build_s") is not None:
        w("| for reference: `bucketfs-index build` (listing the bucket), s | %s | once |"
          % n2(s["index_build_s"]))
        w("| index file size, bytes | %s | |" % n0(s.get("index_bytes")))
    w("")


def sec_concurrency(s, w):
    w("## 6. 2,048 concurrent readers, daemon under `ulimit -n 1024`")
    w("")
    if s.get("status"):
        w("**%s**" % s["status"])
        w("")
    if not s.get("runs"):
        return
    w("bucketfs started as `prlimit --nofile=1024:1024 bucketfs -f …` (the daemon's limit "
      "read back from /proc: %s); %d readers (%d processes × %d threads) released at once, "
      "each reading its share of the RetinaNet files whole; `/proc/PID/fd` of the daemon "
      "sampled every 100 ms." % (s.get("daemon_limit"), s["readers"], s["procs"],
                                 s["threads"]))
    w("")
    w("| Run | reads | failed | files/s | p50 ms | p99 ms | max ms | max fds in daemon | "
      "max threads in daemon |")
    w("|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(s["runs"]):
        w("| %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            i + 1, n0(r["files"]), n0(r["errors"]), n0(r["files_s"]), ms(r["p50_ms"]),
            ms(r["p99_ms"]), ms(r["max_ms"]), n0(r["fd_max"]), n0(r["threads_max"])))
    w("| **median** | | %s | %s | %s | %s | %s | %s | |" % (
        n0(s.get("median_errors")), n0(s.get("median_files_s")), ms(s.get("median_p50_ms")),
        ms(s.get("median_p99_ms")), ms(s.get("median_max_ms")), n0(s.get("median_fd_max"))))
    w("")
    samples = [e for r in s["runs"] for e in r.get("error_samples", [])][:5]
    if samples:
        w("Failed reads (first few: seconds after the start, path, error):")
        w("")
        w("```")
        for t, p, e in samples:
            w("%s %s %s" % (t, p, e))
        w("```")
        w("")
    if s.get("log_excerpt"):
        w("Daemon log lines about descriptors or queueing:")
        w("")
        w("```")
        for line in s["log_excerpt"]:
            w(line)
        w("```")
        w("")


def sec_failover(s, w):
    w("## 7. One of 4 endpoints killed mid-run")
    w("")
    if s.get("status"):
        w("**%s**" % s["status"])
        w("")
    if not s.get("phases"):
        return
    w("%d reader processes read RetinaNet files for %d s (each file dropped from the page "
      "cache after it is read, `posix_fadvise(DONTNEED)`, so every read reaches the "
      "daemon). The nginx instance behind %s is killed with SIGKILL at about %d s and started "
      "again at about %d s." % (s["procs"], s["seconds"], s["victim"], s["seconds"] // 3,
                                2 * s["seconds"] // 3))
    w("")
    w("- **Failed reads: %s** of %s (%s files/s overall, p99 %s ms, max %s ms)."
      % (n0(s["errors"]), n0(s["files"]), n0(s["files_s"]), n1(s["p99_ms"]),
         n1(s["max_ms"])))
    for what, t in s.get("events", []):
        w("- t = %.1f s: %s" % (t, what))
    w("")
    w("| Phase | from s | to s | files/s | failed reads |")
    w("|---|---|---|---|---|")
    for name, lo, hi, rate, errs in s["phases"]:
        w("| %s | %.1f | %.1f | **%s** | %s |" % (name, lo, hi, n0(rate), n0(errs)))
    w("")
    w("Completed reads per second:")
    w("")
    w("```")
    ps = s.get("per_second", [])
    es = s.get("errors_per_second", [])
    top = max(ps) if ps else 1
    kill_t = [t for _, t in s.get("events", [])]
    for i, v in enumerate(ps):
        mark = ""
        for (what, t) in s.get("events", []):
            if int(t) == i:
                mark += "  <- " + what
        bar = "#" * int(round(40.0 * v / top)) if top else ""
        err = " (%d failed)" % es[i] if i < len(es) and es[i] else ""
        w("%3d s %6d %s%s%s" % (i, v, bar, err, mark))
    del kill_t
    w("```")
    w("")
    if s.get("error_samples"):
        w("Failed reads (first few):")
        w("")
        w("```")
        for t, p, e in s["error_samples"][:5]:
            w("%s %s %s" % (t, p, e))
        w("```")
        w("")
    w("bucketfs log lines naming the killed endpoint (`bucketfs -f`, stderr):")
    w("")
    w("```")
    for line in s.get("log_lines") or ["(none)"]:
        w(line)
    w("```")
    w("")


def make_chart(res, path):
    """docs/bench-dlio.png: files/s per path (median bar, runs as dots).
    Returns None, or why there is no chart."""
    d = res.get("sections", {}).get("dlio", {}).get("paths", {})
    rows = [(k, r) for k, r in d.items() if r.get("runs")]
    if not rows:
        return "no DLIO results"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError as exc:
        return "matplotlib is not installed (%s)" % exc
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    names = [LABEL[k].replace(" (", "\n(") for k, _ in rows]
    meds = [r["median_files_s"] for _, r in rows]
    colors = {"bucketfs": "#d62728", "direct": "#1f77b4", "s3fs": "#7f7f7f",
              "rclone": "#9467bd", "local": "#2ca02c"}
    xs = range(len(rows))
    bars = ax.bar(xs, meds, color=[colors.get(k, "#888") for k, _ in rows], width=0.6)
    for i, (_, r) in enumerate(rows):
        vals = [x["files_s"] for x in r["runs"]]
        ax.plot([i] * len(vals), vals, "k.", markersize=6, zorder=3)
    for b, v in zip(bars, meds):
        ax.annotate("{:,.0f}".format(v), (b.get_x() + b.get_width() / 2, v),
                    ha="center", va="bottom", fontsize=9, xytext=(0, 3),
                    textcoords="offset points")
    ax.axhline(NEED_FILES_S, color="#444", linestyle="--", linewidth=1,
               label="needed per host, 4 accelerators (%s files/s)" % "{:,}".format(NEED_FILES_S))
    ax.axhline(PASS_FILES_S, color="#999", linestyle=":", linewidth=1,
               label="85%% pass line (%s files/s)" % "{:,}".format(PASS_FILES_S))
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, fontsize=8)
    # A log scale: the page-cache ceiling is an order of magnitude above the rest.
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda v, _pos: "{:,.0f}".format(v)))
    ax.set_ylabel("files/s, log scale (bar: median; dots: runs)")
    s = res["sections"]["dlio"]
    ax.set_title("Random whole-file reads: %s files of 322,624 B, %s processes"
                 % ("{:,}".format(s["files"]), s["procs"]), fontsize=10)
    lo = min(min(x["files_s"] for _, r in rows for x in r["runs"]), PASS_FILES_S)
    ax.set_ylim(max(1.0, lo / 3), max(max(meds), NEED_FILES_S) * 2.5)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None
