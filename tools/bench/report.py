"""Writes docs/BENCHMARKS.md and the chart from run.py's results (and its
section 11 from soak.py's, docs/bench-soak.json)."""

import json
import os

LABEL = {
    "bucketfs": "bucketfs mount",
    "direct": "direct S3 path (curl -Z)",
    "direct-py": "direct S3 path, same readers (Python GETs)",
    "s3fs": "s3fs mount",
    "rclone": "rclone mount",
    "local": "local page cache (ceiling)",
}
LARGE_LABEL = dict(LABEL, direct="direct S3 path (8 ranged GETs in parallel)",
                   local="local page cache (dd of the file)")
# docs/ARCHITECTURE.md, section 1: what one host needs to keep 4 accelerators busy.
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


def latency_chart_path(out):
    return os.path.join(os.path.dirname(out), "bench-latency.png")


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


def row(w, cells):
    """One Markdown table row; an empty cell is written "| |"."""
    w("|" + "|".join(" %s " % c if c != "" else " " for c in cells) + "|")


def table(w, header, rows):
    """A Markdown table: the header, the separator, the rows (lists of
    already formatted cells)."""
    row(w, header)
    w("|" + "---|" * len(header))
    for r in rows:
        row(w, r)


def heading(w, title, s):
    """A section's title, then its status (why it did not run) if any."""
    w("## " + title)
    w("")
    if s.get("status"):
        w("**%s**" % s["status"])
        w("")


def status_note(row):
    s = row.get("status")
    if s and not row.get("runs"):
        return s
    if s:
        return "partial: " + s
    return ""


def merge(results):
    """One report's results from several invocations' (run.py --render
    A.json,B.json): each measurement from the last invocation that ran it.
    Every ratio stays within one invocation."""
    def ran(r):
        """The measurements @r ran ("large" for "large-pinned-tls" too)."""
        return {name.split("-")[0] for name, sec in r.get("sections", {}).items()
                if not sec.get("status", "").startswith("not selected")}

    def problems(i):
        """Invocation @i's problems, but those of a measurement that a later
        invocation ran again (the report gives the later one's numbers)."""
        later = set().union(*[ran(r) for r in results[i + 1:]])
        return [p for p in results[i].get("problems", []) if p[0] not in later]
    if len({bool(r.get("wire")) for r in results}) > 1:
        raise ValueError("runs over the wire (--wire) and on loopback measure different "
                         "hosts; render them into separate reports")
    out = dict(results[0])
    out["sections"] = dict(results[0].get("sections", {}))
    out["problems"] = problems(0)
    out["datasets"] = dict(results[0].get("datasets", {}))
    out["delay_endpoints"] = dict(results[0].get("delay_endpoints") or {})
    out["tls_endpoints"] = dict(results[0].get("tls_endpoints") or {})
    out["parts"] = [{k: r.get(k) for k in ("command", "started", "elapsed_s", "raw_path",
                                           "machine")} for r in results]
    for i, r in enumerate(results[1:], 1):
        for name, sec in r.get("sections", {}).items():
            if sec.get("status", "").startswith("not selected") and name in out["sections"]:
                continue
            old = out["sections"].get(name, {})
            if old.get("cells") and sec.get("cells"):
                # The latency rig's cells: those of other delays are kept (a
                # delay's ratios come from the invocation that measured it).
                sec = dict(sec, cells=dict(old["cells"], **sec["cells"]))
                for k in ("latencies",):
                    if k in sec or k in old:
                        sec[k] = sorted(set(old.get(k, [])) | set(sec.get(k, [])))
            out["sections"][name] = sec
        out["problems"] += problems(i)
        out["datasets"].update(r.get("datasets", {}))
        out["delay_endpoints"].update(r.get("delay_endpoints") or {})
        out["tls_endpoints"].update(r.get("tls_endpoints") or {})
        out["tls"] = r.get("tls") or out.get("tls")
        out["elapsed_s"] = out.get("elapsed_s", 0) + r.get("elapsed_s", 0)
    out["command"] = " ; ".join(r.get("command", "?") for r in results)
    # The software: a version any invocation could read (a peer installed
    # only for a later one is "unavailable" in the earlier ones).
    versions = {}
    for r in results:
        for k, v in (r.get("machine") or {}).get("versions", {}).items():
            if k not in versions or versions[k].startswith("unavailable"):
                versions[k] = v
    out["machine"] = dict(out.get("machine") or {}, versions=versions)
    return out


def write(res, out):
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write(render(res, out))
    os.replace(tmp, out)


def render(res, out, charts=True):
    """The report as Markdown; with @charts, the charts are drawn next to
    @out."""
    chart = chart_path(out)
    chart_note = make_chart(res, chart) if charts else "--print draws no chart"
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
    if len(res.get("parts", [])) > 1:
        w("- **Commands:** %d invocations, listed below" % len(res["parts"]))
    else:
        w("- **Command:** `%s`" % res.get("command"))
    w("- **Date:** %s; the whole run took %d min %02d s" % (
        res.get("started"), res.get("elapsed_s", 0) // 60, res.get("elapsed_s", 0) % 60))
    w("- **Machine:** %s, %s cores (`nproc`), %.1f GiB RAM, kernel %s, %s; load average "
      "before the start %s (1, 5, 15 min), CPUs %s busy over 2 s before the start (other "
      "work on the machine)"
      % (m.get("cpu"), m.get("nproc"), m.get("mem_bytes", 0) / 2**30, m.get("kernel"),
         m.get("os"), " ".join(m.get("loadavg_start", [])),
         pct(m.get("cpu_busy_start"), 1) if m.get("cpu_busy_start") is not None else "?"))
    vm = res.get("vm_memory")
    if vm:
        w("- **Memory:** %s (`--vm-memory %s`)%s" % (
            vm.get("note"), vm.get("mode"),
            "; %.1f GiB written once in %.0f s before the measurements" % (
                vm["touched_bytes"] / 2**30, vm["touch_s"]) if vm.get("touched_bytes") else ""))
    w("- **bucketfs build:** commit %s, binary built %s" % (m.get("commit"),
                                                          m.get("binary_built")))
    if len(res.get("parts", [])) > 1:
        w("- **Invocations** (each measurement comes from one of them, with its ratios "
          "measured within it):")
        for part in res["parts"]:
            pm = part.get("machine") or {}
            w("  - `%s`: started %s, %d min %02d s, commit %s, load average %s and CPUs %s "
              "busy before the start; raw numbers `%s`"
              % (part.get("command"), part.get("started"), (part.get("elapsed_s") or 0) // 60,
                 (part.get("elapsed_s") or 0) % 60, pm.get("commit"),
                 " ".join(pm.get("loadavg_start", [])),
                 pct(pm.get("cpu_busy_start"), 1) if pm.get("cpu_busy_start") is not None
                 else "?", part.get("raw_path")))
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
        elif meta.get("kind") == "remote":
            w("  - `%s`: %s objects the mount shows as files%s, %.2f GB, on the endpoints "
              "below (not generated by the rig%s)"
              % (name, n0(meta["files"]), " (the first --files in listing order)"
                 if meta.get("limited") else "", meta["bytes"] / 1e9,
                 "; uploaded with --upload" if res.get("upload") else ""))
        elif meta.get("kind") == "npz":
            w("  - `%s`: %s `.npz` files of %s bytes (`np.savez` of x, %s random bytes as "
              "uint8, and a label y), `train/img_<i>_of_%d.npz`, as DLIO writes UNet3D data"
              % (name, n0(meta["files"]), n0(meta["file_size"]), n0(meta["record"]),
                 meta["files"]))
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
    lchart = latency_chart_path(out)
    sec_latency(secs.get("latency", {}), w, lchart, make_latency_chart(res, lchart) if charts
                else "--print draws no chart", out)
    for name in ("latency-pinned", "latency-tls", "latency-pinned-tls"):
        if secs.get(name):
            sec_latency(secs[name], w, None, None, out)
    sec_dlio(secs.get("dlio", {}), w, chart, chart_note, out)
    sec_large(secs.get("large", {}), w)
    for name in ("large-pinned", "large-tls", "large-pinned-tls"):
        if secs.get(name):
            sec_large(secs[name], w)
    sec_fio(secs.get("fio", {}), w)
    sec_npz(secs.get("npz", {}), w)
    sec_tree(secs.get("tree", {}), w)
    sec_mount(secs.get("mount", {}), w)
    sec_concurrency(secs.get("concurrency", {}), w)
    sec_failover(secs.get("failover", {}), w)
    if secs.get("compare"):
        sec_compare(secs["compare"], w)
    sec_soak(load_soak(out), w)
    return "\n".join(lines).rstrip() + "\n"


def summary(res, w):
    secs = res.get("sections", {})
    d = secs.get("dlio", {}).get("paths", {})
    lg = secs.get("large", {}).get("cells", {})
    tr = secs.get("tree", {}).get("paths", {})

    def med(rows, path, key):
        return rows.get(path, {}).get(key)
    if d or lg or tr:
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
        v = {k: lg.get("0|%s|-|-" % k, {}).get("median_mb_s")
             for k in ("bucketfs", "ranged8", "s3fs", "rclone", "local")}
        w("| Large file sequential read at 0 ms, MB/s (direct: 8 ranged GETs) | %s | %s | %s | "
          "%s | %s | **%s** | %s | %s |"
          % (n0(v["bucketfs"]), n0(v["ranged8"]), n0(v["s3fs"]), n0(v["rclone"]),
             n0(v["local"]), pct(v["bucketfs"], v["ranged8"]), ratio(v["bucketfs"], v["s3fs"]),
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
    if d or lg or tr:
        w("")
    targets(secs, w)
    targets_pinned(secs, w)
    targets_pinned(secs, w, tls=True)
    for name, what in (("large", ""), ("large-tls", "TLS, ")):
        for dl, _p, o, st, c in cells_of(secs.get(name, {}), "bucketfs"):
            summary_large(w, what + large_label(secs, name), dl, c)
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
    cmp = secs.get("compare", {})
    if cmp.get("runs"):
        w("- **bucketfs-compare** (the mount and bucketfs's own S3 client in one process, "
          "%s reads in flight each): the mount %s files/s, S3 %s files/s; mount ÷ S3 **%s**."
          % (cmp["procs"], n0(cmp["median_mount"]["files_per_s"]),
             n0(cmp["median_s3"]["files_per_s"]),
             "{:.2f}×".format(cmp["median_ratio"]) if cmp.get("median_ratio") else "–"))
    if d.get("bucketfs", {}).get("median_files_s") is not None:
        v = d["bucketfs"]["median_files_s"]
        w("- The target for one host (docs/ARCHITECTURE.md, section 1) is %s files/s (pass line %s) and at least 85%% "
          "of the direct S3 path; bucketfs delivered %s files/s, %s of the direct S3 path "
          "(`curl -Z`) and %s of the same %s Python readers fetching with GETs themselves."
          % (n0(NEED_FILES_S), n0(PASS_FILES_S), n0(v),
             pct(v, d.get("direct", {}).get("median_files_s")),
             pct(v, d.get("direct-py", {}).get("median_files_s")),
             secs["dlio"].get("procs")))


def summary_large(w, what, dl, c):
    w("- **%s at %s ms:** %s MB/s, %s of 8 ranged GETs and %s of part-sized "
      "ranged GETs with as many in flight; daemon CPU %s s per GB."
      % (what, fmt_ms(dl), n0(c.get("median_mb_s")),
         "{:.0%}".format(c["ratio_ranged8"]) if c.get("ratio_ranged8") else "–",
         "{:.0%}".format(c["ratio_ranged-mount"]) if c.get("ratio_ranged-mount") else "–",
         n2(c.get("median_cpu_s_per_gb"))))


# The targets at 20 ms, unpinned, as (order, minimum ratio against the
# same readers doing GETs, minimum files/s).
TARGETS_20MS = {"random": (0.97, None), "dlio": (2.0, NEED_FILES_S), "announced": (2.5, None)}
CPU_MS_PER_FILE_MAX = 0.3
LARGE_MIN = 0.85


def targets(secs, w):
    """The unpinned targets against this run's medians (same-run ratios)."""
    rows = []
    for dl, _p, o, st, c in cells_of(secs.get("latency", {}), "bucketfs"):
        if dl != 20 or o not in TARGETS_20MS:
            continue
        need, files = TARGETS_20MS[o]
        r = c.get("ratio_py")
        ok = r is not None and r >= need and (files is None or (c.get("median_files_s") or 0)
                                              >= files)
        rows.append(["20 ms, %s order, %s: ≥ %.2f× the same readers doing GETs%s"
                     % (ORDER_LABEL[o], STYLE_LABEL.get(st, st), need,
                        " and ≥ %s files/s" % n0(files) if files else ""),
                     "%s× (%s files/s)" % (n2(r), n0(c.get("median_files_s"))),
                     "yes" if ok else "**no**"])
        v = c.get("median_cpu_ms_per_file")
        rows.append(["20 ms, %s order, %s: daemon CPU ≤ %.1f ms per file"
                     % (ORDER_LABEL[o], STYLE_LABEL.get(st, st), CPU_MS_PER_FILE_MAX),
                     "%s ms" % ("{:.3f}".format(v) if v is not None else "–"),
                     "yes" if v is not None and v <= CPU_MS_PER_FILE_MAX else "**no**"])
    for dl, _p, o, st, c in cells_of(secs.get("large", {}), "bucketfs"):
        for ref, what in (("ranged8", "8 ranged GETs at once"),
                          ("ranged-mount", "part-sized ranged GETs with as many in flight")):
            r = c.get("ratio_" + ref)
            rows.append(["%s at %s ms: ≥ %.0f%% of %s"
                         % (large_label(secs, "large"), fmt_ms(dl), LARGE_MIN * 100, what),
                         "{:.0%}".format(r) if r is not None else "–",
                         "yes" if r is not None and r >= LARGE_MIN else "**no**"])
    if not rows:
        return
    w("Against the targets (medians of the runs' same-run ratios):")
    w("")
    table(w, ["Target", "Measured", "Met"], rows)
    w("")


# Pinned: (delay, order) -> (the least ratio to the same readers doing
# GETs, the least files/s); and the daemon's CPU, unpinned.
TARGETS_PINNED = {(0, "random"): (1.0, None), (20, "random"): (0.97, None),
                  (20, "dlio"): (2.0, NEED_FILES_S), (20, "announced"): (2.0, None),
                  (50, "dlio"): (4.0, None), (50, "announced"): (4.0, None)}
CPU_MS_PER_FILE_MAX_PINNED = 0.25
CPU_S_PER_GB_MAX_PINNED = 0.5
# On the TLS ports: (delay, order) -> as above, against the same readers
# doing HTTPS GETs; and the daemon's CPU unpinned, which has the TLS
# records to decrypt on top.
TARGETS_TLS = {(20, "random"): (0.97, None), (20, "dlio"): (2.0, NEED_FILES_S)}
CPU_MS_PER_FILE_MAX_TLS = 0.30
CPU_S_PER_GB_MAX_TLS = 0.6


def large_label(secs, name):
    """ "2 GiB `dd`": the large file's size in section @name."""
    size = secs.get(name, {}).get("size") or 0
    return ("%s GiB" % "{:g}".format(size / 2**30) if size >= 2**30
            else "%s MiB" % n0(size / 2**20)) + " `dd`"


def targets_pinned(secs, w, tls=False):
    """The pinned targets and the daemon's CPU unpinned; with @tls, those
    of the TLS ports' sections."""
    sfx = "-tls" if tls else ""
    goals = TARGETS_TLS if tls else TARGETS_PINNED
    per_file = CPU_MS_PER_FILE_MAX_TLS if tls else CPU_MS_PER_FILE_MAX_PINNED
    per_gb = CPU_S_PER_GB_MAX_TLS if tls else CPU_S_PER_GB_MAX_PINNED
    readers = "the same readers doing %sGETs" % ("HTTPS " if tls else "")
    rows = []
    for dl, _p, o, st, c in cells_of(secs.get("latency-pinned" + sfx, {}), "bucketfs"):
        if (dl, o) not in goals:
            continue
        need, files = goals[(dl, o)]
        r = c.get("ratio_py")
        ok = r is not None and r >= need and (files is None or (c.get("median_files_s") or 0)
                                              >= files)
        rows.append(["pinned, %s ms, %s order, %s: ≥ %.2f× %s%s"
                     % (fmt_ms(dl), ORDER_LABEL[o], STYLE_LABEL.get(st, st), need, readers,
                        " and ≥ %s files/s" % n0(files) if files else ""),
                     "%s× (%s files/s)" % (n2(r), n0(c.get("median_files_s"))),
                     "yes" if ok else "**no**"])
    if not tls:
        for dl, _p, o, st, c in cells_of(secs.get("large-pinned", {}), "bucketfs"):
            r = c.get("ratio_ranged8")
            rows.append(["pinned, %s at %s ms: ≥ %.2f× of 8 ranged GETs"
                         % (large_label(secs, "large-pinned"), fmt_ms(dl), LARGE_MIN),
                         "%s×" % n2(r),
                         "yes" if r is not None and r >= LARGE_MIN else "**no**"])
    for dl, _p, o, st, c in cells_of(secs.get("latency" + sfx, {}), "bucketfs"):
        if dl not in (0, 20):
            continue
        v = c.get("median_cpu_ms_per_file")
        rows.append(["unpinned, %s ms, %s order, %s: daemon CPU ≤ %.2f ms per file"
                     % (fmt_ms(dl), ORDER_LABEL[o], STYLE_LABEL.get(st, st), per_file),
                     "%s ms" % ("{:.3f}".format(v) if v is not None else "–"),
                     "yes" if v is not None and v <= per_file else "**no**"])
    for dl, _p, o, st, c in cells_of(secs.get("large" + sfx, {}), "bucketfs"):
        v = c.get("median_cpu_s_per_gb")
        rows.append(["unpinned, %s at %s ms: daemon CPU ≤ %.1f s per GB"
                     % (large_label(secs, "large" + sfx), fmt_ms(dl), per_gb), "%s s" % n2(v),
                     "yes" if v is not None and v <= per_gb else "**no**"])
    if not rows:
        return
    if tls:
        w("Against the targets on the TLS ports (medians of the runs' same-run ratios, "
          "against the same readers doing HTTPS GETs; *pinned* is a model of a host with a "
          "spare core, section 1d):")
    else:
        w("Against the targets, pinned and the daemon's CPU (medians of the runs' same-run "
          "ratios; *pinned* is a model of a host with a spare core, section 1b):")
    w("")
    table(w, ["Target", "Measured", "Met"], rows)
    w("")


def len_files(res):
    return res.get("sections", {}).get("dlio", {}).get("files") or \
        res.get("params", {}).get("files")


def how_remote(res, w):
    p = res.get("params", {})
    r = res.get("remote", {})
    w("- **Endpoints:** a real object store, given with `--endpoint`: %s; the objects under "
      "`%s`. Every bucketfs tool got `-o %s` and the credentials of the environment the rig "
      "ran in (`AWS_*` or the profile), as a mount would. Nothing is known of the servers' "
      "caches or of other load on them."
      % (", ".join(res.get("endpoints", [])), r.get("bucket"),
         ",".join(["endpoint=…"] + r.get("mount_opts", []))))
    w("- **Cold client:** before every run through the mount the page cache is dropped "
      "(`sync; echo 3 > /proc/sys/vm/drop_caches`).")
    w("- **DLIO-style reads:** %s processes, each `open(path,'rb').read()` on a disjoint share "
      "of the files in a shuffled order, all released by one barrier; every read is checked "
      "for the size the listing gave. Only the bucketfs path runs here: the direct S3 path "
      "against a real store is the `bucketfs-compare` measurement." % p.get("procs", 0))
    w("- **bucketfs-compare:** see its section: the same files through the mount and through "
      "bucketfs's own S3 client, the same concurrency, in one process.")


# The "dlio" read style, as readers.py makes it, and as older results made
# it (runs whose latency section has no "dlio_style").
DLIO_BUFFERED = (
    "PIL's way of opening an image, as DLIO's loader does: `open(path,'rb')` (`fstat`, "
    "`isatty`, `lseek`), 16 bytes, `seek(0)`, then 64 KiB reads until one returns "
    "nothing, through Python's BufferedReader, which is st_blksize large: with 4 KiB "
    "the reads that reach the file would be 4 KiB, 60 KiB, then 64 KiB; bucketfs "
    "reports a file's size rounded up to a power of two (at most 1 MiB) as its "
    "st_blksize, so a RetinaNet file is one read and two at end of file.")
DLIO_BY_HAND = (
    "`os.open`, `fstat`, `isatty` (ioctl TCGETS), two `lseek`s, reads of 4 KiB and "
    "60 KiB, then 64 KiB until a read returns 0, `close`: DLIO's system calls on a mount "
    "whose st_blksize is 4 KiB, made by hand.")


def how(res, w):
    if res.get("remote"):
        how_remote(res, w)
        return
    p = res.get("params", {})
    eps = res.get("endpoints", [])
    w("- **Endpoints:** 4 nginx instances (one process each, `master_process off`, "
      "`sendfile on`, `access_log off`, `keepalive_requests` 10⁸, `open_file_cache`) on "
      "%s ports %s serve GET/HEAD/Range straight from the dataset directory. Any "
      "request with `list-type=` in its query, any non-GET/HEAD request and any request "
      "for a directory is passed (`proxy_pass`, with the client's `Host` and URI) to the "
      "project's test S3 server (`tests/s3server/s3server.py --etag-style nginx`), so "
      "every client uses the same 4 URLs. nginx ignores the S3 `Authorization` header; "
      "the test server checks SigV4 on the listings. With `--etag-style nginx` the "
      "listing's ETags are nginx's own (`\"<hex mtime>-<hex size>\"`), so bucketfs's "
      "`If-Match` on every GET is honoured (see the self-check)." % (
          "the wire's" if res.get("wire") else "loopback",
          ", ".join(u.rsplit(":", 1)[1] for u in eps)))
    if res.get("wire"):
        w("- **Wire:** the endpoints (nginx and the test S3 server) run in a network "
          "namespace of their own, at %s, reached over a pair of tap devices that "
          "`tools/bench/wire.c` joins (virtio-net headers, checksum and TSO offloads, "
          "MTU 1500), not over loopback. On loopback each side's system calls run the "
          "other's TCP work (an ACK's sending runs the server's receipt of it and its "
          "next segments); over the wire a frame is received in the wire's process, as "
          "a NIC's interrupt takes it, and the wire's CPU is counted with the "
          "endpoints'. A model of a store on another host; it costs the machine the "
          "wire's CPU, so its files/s are not comparable with a loopback run's."
          % (res.get("endpoints") or ["?"])[0].split("//")[-1].rsplit(":", 1)[0])
    de = res.get("delay_endpoints") or {}
    if len(de) > 1:
        w("- **Latency rig:** each of the 4 nginx endpoints also listens on one port per "
          "first-byte delay (%s ms: ports %s). On those, an object GET first waits "
          "(`echo_sleep`, Debian's `libnginx-mod-http-echo`: a timer, no CPU), then is handed "
          "to the static-file location (`echo_exec`), which answers `If-Match` and `Range` "
          "as the plain port does; listings still go to the test S3 server undelayed. Every "
          "bucketfs pass through them is a fresh mount (`-o endpoint=` the 4 ports of that "
          "delay, the same persisted index), so the client starts cold without dropping "
          "the page cache, and the endpoints keep serving from memory."
          % (", ".join(k for k in sorted(de, key=float) if float(k)),
             "; ".join("%s ms: %s" % (k, ", ".join(u.rsplit(":", 1)[1] for u in v))
                       for k, v in sorted(de.items(), key=lambda kv: float(kv[0]))
                       if float(k))))
        w("- **Orders** (latency rig): *random* deals a shuffle (reseeded per run) "
          "round-robin to the readers; *DLIO's* is DLIO's sampler on one host: the names "
          "sorted, 4 ranks with a contiguous quarter each, batches of 24 dealt round-robin "
          "to a rank's 8 workers (worker w reads batches w, w+8, …), each worker one reader "
          "process: 32 interleaved sequential streams; *announced* is the random order, "
          "announced whole (`setxattr(MNT, \"user.bucketfs.prefetch\", …)` in 60 kB "
          "chunks) by the parent at the moment the readers are released, not before. "
          "**Read styles:** *one read()* is `open(path,'rb').read()`; *DLIO's chunks* is "
          + (DLIO_BUFFERED if any(s.get("dlio_style") == "buffered"
                                  for s in res.get("sections", {}).values())
             else DLIO_BY_HAND))
        te = res.get("tls_endpoints") or {}
        if te:
            w("- **TLS ports:** each nginx endpoint also listens with TLS on one port per "
              "first-byte delay (%s), the same locations behind them, `ssl_session_cache` "
              "shared by its ports, keep-alive as on the plain ones. The server certificate "
              "(%s) is signed by a CA made with `openssl` when the rig starts, in its "
              "temporary directory (removed at the end; never in the tree). bucketfs gets "
              "`-o ca_file=` that CA, the HTTPS readers an `ssl` context that loads it "
              "(verify on), curl `--cacert`. The self-check verifies each TLS port, that a "
              "second connection resumes the session, and that a client without the CA is "
              "refused."
              % ("; ".join("%s ms: %s" % (k, ", ".join(u.rsplit(":", 1)[1] for u in v))
                           for k, v in sorted(te.items(), key=lambda kv: float(kv[0]))),
                 (res.get("tls") or {}).get("certificate", "?")))
        w("- **Machine share:** every pass records how busy both CPUs were (`/proc/stat`, "
          "all processes: the readers, the daemon, nginx, and other work on this shared "
          "machine) in the *busy* column; compare rows by their same-run ratios.")
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
      "`%%{time_total}`. The **same readers, direct** path runs the same %d reader "
      "processes, each fetching its share with `http.client` GETs (one keep-alive "
      "connection per endpoint, round-robin as above) instead of `open().read()`: what a "
      "loader that speaks S3 itself would cost on this machine. s3fs is mounted with `url=<endpoint 1>,use_path_request_style,"
      "passwd_file=…,ro` (it takes one URL and HEADs every file); rclone with an `s3` "
      "remote (provider Other, endpoint 1, `AWS_*` unset), `--read-only --vfs-cache-mode "
      "off --dir-cache-time 1000h`, and one `ls` of `train/` first so its listing is "
      "cached. Each mount stays up across the runs (like epochs); the kernel cache is "
      "dropped before each run. bucketfs gets all 4 endpoints and a persisted index "
      "(built once per run of the rig with `bucketfs-index build`)."
      % (p.get("procs", 0), p.get("procs", 0), p.get("procs", 0)))
    w("- The hand-measured table of docs/ARCHITECTURE.md, section 1, was taken by hand with one nginx "
      "endpoint and 4,000 files; compare bucketfs with the rows of this report, measured the "
      "same way in the same run, not with that table.")
    w("- Runs of the different paths are interleaved (run 1 of every path, then run 2, …) "
      "so drifting background load spreads over all of them. This machine has 2 cores "
      "shared by the readers, the FUSE daemon, nginx and curl, so expect noise; the "
      "medians and ratios are what matter.")


def sec_rig(s, w):
    heading(w, "Rig self-check", s)
    if s.get("checks"):
        table(w, ["Check", "Result", ""],
              [[what, "`%s`" % got, ok] for what, got, ok in s["checks"]])
        w("")


def sec_dlio(s, w, chart, chart_note, out):
    heading(w, "2. DLIO-style random whole-file reads (RetinaNet shape)", s)
    if not s.get("paths"):
        return
    w("%s files of 322,624 bytes, %s reader processes, each file read once per run."
      % (n0(s["files"]), s["procs"]))
    w("")
    direct = s["paths"].get("direct", {}).get("median_files_s")
    rows = []
    for k, r in s["paths"].items():
        if not r.get("runs"):
            rows.append([LABEL[k], status_note(r) or "no data"] + [""] * 7)
            continue
        cpu_ms = median_of([x["cpu"]["cpu_ms_per_file"] for x in r["runs"]
                            if (x.get("cpu") or {}).get("cpu_ms_per_file") is not None])
        busy = median_of([x["cpu"]["busy_pct"] for x in r["runs"] if x.get("cpu")])
        rows.append([LABEL[k], "**%s**" % n0(r["median_files_s"]), n0(r["median_mb_s"]),
                     ms(r["median_p50_ms"]), ms(r["median_p99_ms"]), ms(r["median_max_ms"]),
                     n0(r["errors"]), runs_of([x["files_s"] for x in r["runs"]]),
                     pct(r["median_files_s"], direct),
                     "{:.3f}".format(cpu_ms) if cpu_ms is not None else "",
                     pct(busy, 100) if busy is not None else ""])
    table(w, ["Path", "files/s", "MB/s", "p50 ms", "p99 ms", "max ms", "failed reads",
              "files/s per run", "vs direct S3", "daemon CPU ms/file", "machine busy"], rows)
    w("")
    notes = [(k, r.get("note")) for k, r in s["paths"].items() if r.get("note")]
    notes += [(k, status_note(r)) for k, r in s["paths"].items()
              if r.get("runs") and status_note(r)]
    for k, note in notes:
        w("- %s: %s" % (LABEL[k], note))
    b = s["paths"].get("bucketfs", {}).get("median_files_s")
    for peer in ("direct-py", "s3fs", "rclone", "local"):
        v = s["paths"].get(peer, {}).get("median_files_s")
        if b is not None and v:
            w("- bucketfs ÷ %s: %s" % (LABEL[peer], ratio(b, v)))
    w("")
    if chart_note:
        w("Chart not drawn: %s" % chart_note)
    else:
        w("![files/s per path](%s)" % os.path.relpath(chart, os.path.dirname(out)))
    w("")


def cells_of(s, path=None):
    """The cells of a latency-rig section: (delay, path, order/job, style,
    cell), in the order delays, then as recorded."""
    out = []
    for key, cell in s.get("cells", {}).items():
        d, p, o, st = key.split("|")
        if path is None or p == path:
            out.append((float(d), p, o, st, cell))
    return sorted(out, key=lambda x: x[0])


def fmt_ms(v):
    return "{:g}".format(v)


def cpu_cells(cell, per="file"):
    """The daemon's CPU (median): per file or per GB, and its threads."""
    if cell.get("median_core_pct") is None:
        return ["", ""]
    if per == "file":
        main = "%s ms/file" % ("{:.3f}".format(cell["median_cpu_ms_per_file"])
                               if cell.get("median_cpu_ms_per_file") is not None else "–")
    else:
        main = "%s s/GB" % n2(cell.get("median_cpu_s_per_gb"))

    def nm(k, v):
        return k + ("×%d" % v["count"] if (v.get("count") or 1) > 1 else "")
    th = ", ".join(("%s %.0f%% (%.3f ms/file)" % (nm(k, v), v["core_pct"], v["ms_per_file"])
                    if per == "file" and v.get("ms_per_file") is not None
                    else "%s %.0f%%" % (nm(k, v), v["core_pct"])) for k, v in sorted(
        cell.get("median_threads", {}).items(), key=lambda kv: -(kv[1]["core_pct"] or 0))
        if v.get("core_pct") and v["core_pct"] >= 1)
    return ["%s (%s of a core)" % (main, pct(cell["median_core_pct"], 100)), th or "–"]


def runs_ratio(cell, key):
    v = cell.get("ratio_" + key)
    if v is None:
        return "–"
    return "**{:.2f}×** ({})".format(v, " / ".join("{:.2f}".format(x)
                                                   for x in cell.get("ratios_" + key, [])))


LAT_PATH = {"py-gets": "same readers doing GETs", "curl": "curl -Z"}
ORDER_LABEL = {"random": "random", "dlio": "DLIO's", "announced": "announced random"}
STYLE_LABEL = {"whole": "one read()", "dlio": "DLIO's chunks"}


PINNED_NOTE = (
    "**Pinned: a model of a host with a spare core.** `run.py --pin pinned` (or `both`): "
    "the readers, curl, dd, the 4 nginx endpoints and the test S3 server run on CPU 0 only "
    "(`sched_setaffinity`), the bucketfs daemon on CPU 1 only (`taskset -c 1`); the "
    "references get the same CPU 0, and their CPU 1 stays idle (but for other work on the "
    "machine, which *busy* per CPU shows). ")
TOTAL_NOTE = (
    "*Every process* is the CPU of all the processes of the path over the pass, per file "
    "(per GB for the large file): the daemon, the endpoints, the readers (or curl, dd) and "
    "the bench itself (`/proc/PID/stat` and `getrusage`), so the cost of a path shows apart "
    "from its speed. ")


def total_cell(c, per="file"):
    v = c.get("median_total_ms_per_file" if per == "file" else "median_total_s_per_gb")
    if v is None:
        return "–"
    return ("%.3f ms" if per == "file" else "%.2f s") % v


def busy_cell(c):
    runs = [x["cpu"]["busy_per_cpu"] for x in c.get("runs", [])
            if (x.get("cpu") or {}).get("busy_per_cpu")]
    b = "%s%%" % n0(c.get("median_busy_pct"))
    if runs and len(runs[0]) > 1:
        b += " (%s)" % " / ".join("%.0f%%" % _med([r[i] for r in runs if len(r) > i])
                                  for i in range(len(runs[0])))
    return b


def _med(vals):
    vals = sorted(vals)
    n = len(vals)
    return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2


LATENCY_TITLES = {
    (False, False): "1. Through a remote store's latency (the latency rig)",
    (True, False): "1b. Pinned, through a remote store's latency (a model of a host with a "
                   "spare core)",
    (False, True): "1c. TLS: through a remote store's latency over HTTPS",
    (True, True): "1d. TLS, pinned: through a remote store's latency over HTTPS (a model "
                  "of a host with a spare core)"}
LARGE_TITLES = {
    (False, False): "3. Large file, sequential, at each latency",
    (True, False): "3b. Pinned, large file, sequential (a model of a host with a spare core)",
    (False, True): "3c. TLS: large file, sequential, over HTTPS",
    (True, True): "3d. TLS, pinned: large file, sequential, over HTTPS (a model of a host "
                  "with a spare core)"}
TLS_NOTE = (
    "**TLS: the same endpoints over HTTPS.** `run.py --scheme tls` (or `both`): the same 4 "
    "nginx processes, the same dataset and first-byte delays, on their TLS ports "
    "(`listen … ssl`, TLS 1.2 and 1.3, `ssl_session_cache`, the same keep-alive), with a "
    "server certificate for 127.0.0.1 signed by a CA that the rig makes with `openssl` at "
    "set-up, in its temporary directory. bucketfs mounts them with `-o ca_file=` that CA; "
    "the same readers doing GETs use `http.client.HTTPSConnection` with an `ssl` context "
    "that loads it (verification and host name check on), one keep-alive connection per "
    "process and endpoint; curl gets `--cacert`. Every ratio here is against these HTTPS "
    "references, in the same run. ")


def sec_latency(s, w, chart, chart_note, out):
    pinned = s.get("pinned")
    heading(w, LATENCY_TITLES[(bool(pinned), bool(s.get("tls")))], s)
    if not s.get("cells"):
        return
    if s.get("tls") or pinned:
        w((TLS_NOTE if s.get("tls") else "") + (PINNED_NOTE if pinned else ""))
        w("")
    w("%s RetinaNet files of 322,624 bytes, %s reader processes (DLIO's order: %s streams), "
      "each file read once per run, at each first-byte delay; every bucketfs row is a fresh "
      "mount%s. Each run measures the references just before and just after the mount's "
      "passes at that delay (so their *per run* lists two values a run), and each ratio is "
      "against the mean of the two, in the same run (the table gives the median of the "
      "runs' ratios, each run's in brackets): **÷ GETs** against the same "
      "reader processes doing keep-alive GETs themselves in the same order (the random "
      "order for announced), **÷ curl** against `curl -Z --parallel-max %s`. CPU is the "
      "daemon's own (utime + stime from `/proc/PID/stat`, threads from "
      "`/proc/PID/task/*/stat`); *busy* is the whole machine over the pass (`/proc/stat`), "
      "other work on the machine included, then each CPU's. %s"
      % (n0(s["files"]), s["procs"], s.get("dlio_streams"),
         " with `-o %s`" % ",".join(s["opts"]) if s.get("opts") else "", s["procs"],
         TOTAL_NOTE))
    w("")
    rows = []
    for d, p, o, st, c in cells_of(s):
        if p == "bucketfs":
            what = "**bucketfs**, %s order, %s" % (ORDER_LABEL.get(o, o), STYLE_LABEL.get(st, st))
        else:
            what = LAT_PATH.get(p, p) + (", %s order" % ORDER_LABEL.get(o, o)
                                          if o != "-" else "")
        ra = []
        for kind in ("prefetch", "stream"):
            if c.get("median_%s_hits" % kind) is not None:
                ra.append("%s %s / %s / %s" % (kind, n0(c["median_%s_hits" % kind]),
                                               n0(c.get("median_%s_wasted" % kind)),
                                               n0(c.get("median_%s_late" % kind))))
        ra = "; ".join(ra)
        rows.append([fmt_ms(d), what, "**%s**" % n0(c.get("median_files_s")),
                     runs_of([x.get("files_s") for x in c["runs"]]),
                     ms(c.get("median_p50_ms")), ms(c.get("median_p99_ms")),
                     runs_ratio(c, "py") if p == "bucketfs" else "",
                     runs_ratio(c, "curl") if p == "bucketfs" else ""]
                    + (cpu_cells(c) if p == "bucketfs" else ["", ""])
                    + [total_cell(c), n2(c.get("median_gets_per_file")) if p == "bucketfs"
                       else "", ra, n0(c.get("errors")), busy_cell(c)])
    table(w, ["ms", "Path", "files/s", "per run", "p50 ms", "p99 ms", "÷ GETs", "÷ curl",
              "daemon CPU", "daemon threads, % of a core", "every process, CPU/file",
              "GETs/file", "readahead hits / wasted / late", "failed", "busy"], rows)
    w("")
    if chart is None:
        pass
    elif chart_note:
        w("Chart not drawn: %s" % chart_note)
    else:
        w("![files/s against latency](%s)" % os.path.relpath(chart, os.path.dirname(out)))
    w("")


def sec_throughput(s, w, title, intro, key_label, refs, per="GB"):
    """A section of MB/s cells: @intro(s) is its text (only called when
    there are cells); @refs the (ratio name, column label) of the
    references."""
    heading(w, title, s)
    if not s.get("cells"):
        return
    w(intro(s))
    w("")
    rows = []
    for d, p, o, st, c in cells_of(s):
        label = key_label(p, o)
        rows.append([fmt_ms(d) if p not in ("local", "s3fs", "rclone") or d else "0",
                     label, "**%s**" % n0(c.get("median_mb_s")),
                     runs_of([x.get("mb_s") for x in c["runs"]])]
                    + [runs_ratio(c, r) if p == "bucketfs" else "" for r, _ in refs]
                    + (cpu_cells(c, per) if p == "bucketfs" else ["", ""])
                    + [total_cell(c, per), n0(c.get("errors")), busy_cell(c)])
    table(w, ["ms", "Path", "MB/s", "per run"] + ["÷ " + lbl for _, lbl in refs]
          + ["daemon CPU", "daemon threads, % of a core", "every process, CPU/%s" % per,
             "failed", "busy"], rows)
    w("")


LARGE_PATH = {"bucketfs": "**bucketfs** `dd bs=1M`", "ranged8": "8 ranged GETs at once (curl)",
              "ranged-mount": "part-sized ranged GETs, as many in flight as the mount (curl -Z)",
              "s3fs": "s3fs `dd bs=1M`", "rclone": "rclone `dd bs=1M`",
              "local": "local file `dd bs=1M` (page cache)"}


def sec_large(s, w):
    sec_throughput(
        s, w, LARGE_TITLES[(bool(s.get("pinned")), bool(s.get("tls")))],
        lambda s: (TLS_NOTE if s.get("tls") else "") + (PINNED_NOTE if s.get("pinned") else "")
        + TOTAL_NOTE + (
            "`dd if=MNT/big.bin of=/dev/null bs=1M` of one %s MiB file through a fresh bucketfs "
            "mount per run%s, at each first-byte delay, against the same object read with ranged "
            "GETs over the same 4 endpoints in the same run: 8 ranges of an eighth at once, and "
            "ranges of %s MiB (the mount's part size) with as many in flight as the mount had "
            "at most (its endpoints' `inflight`, sampled every 20 ms; in each bucketfs run's "
            "raw numbers). s3fs, rclone and the local file at 0 ms only. CPU per GB is the "
            "daemon's.%s%s"
            % (n0(s["size"] / 2**20), " with `-o %s`" % ",".join(s["opts"]) if s.get("opts")
               else "", n0(s.get("part", 0) / 2**20),
               (" Before the runs, one untimed `dd` through a fresh mount at %s ms (%s MB/s) "
                "warms up the memory the page cache takes (this VM's host faults, "
                "`latency.large_warmup()`)." % (n0(s["warmup"]["delay_ms"]),
                                                n0(s["warmup"]["mb_s"])))
               if s.get("warmup") else "",
               " On the TLS ports only the mount and its references run." if s.get("tls")
               else "")),
        lambda p, o: LARGE_PATH.get(p, p),
        [("ranged8", "8 ranged"), ("ranged-mount", "ranged as the mount")])
    bf = [c for d, p, o, st, c in cells_of(s, "bucketfs")]
    if bf:
        w("GETs in flight in the daemon (max per run): %s" % "; ".join(
            "%s ms: %s" % (fmt_ms(d), " / ".join(str(x["inflight"]["max"]) for x in c["runs"]))
            for d, p, o, st, c in cells_of(s, "bucketfs")))
        w("")


def sec_fio(s, w):
    sec_throughput(
        s, w, "4. fio on the mount, at each latency",
        lambda s: (
            "`fio --direct=0 --readonly --ioengine=psync --runtime=%d` on the large file through "
            "a fresh bucketfs mount per job and run, at each first-byte delay, and on the local "
            "file (page cache warm). Sequential 1M reads with 1 job and with 4 jobs (each on its "
            "own quarter, `--offset_increment`); random 4k and 128k reads with 8 jobs on "
            "disjoint eighths; a job stops at the end of its region or after %d s."
            % (s["seconds"], s["seconds"])),
        lambda p, o: ("**%s** on bucketfs" if p == "bucketfs" else "%s, local file") % o,
        [("local", "local file")])


def sec_npz(s, w):
    sec_throughput(
        s, w, "5. np.load of UNet3D-shaped .npz files, at each latency",
        lambda s: (
            "%s files of %s bytes (`np.savez` of x, one UNet3D sample of 146,600,628 random "
            "bytes, and a label y), %s reader processes each doing `np.load(path)[\"x\"]` on "
            "its share (DLIO's UNet3D reader), through a fresh bucketfs mount per run%s, "
            "against the same readers fetching each object with one keep-alive GET and loading "
            "it from memory (`np.load(io.BytesIO(body))`), and against the local files. MB/s "
            "counts the bytes of x."
            % (n0(s["files"]), n0(s["file_size"]), s["procs"],
               " with `-o %s`" % ",".join(s["opts"]) if s.get("opts") else "")),
        lambda p, o: {"bucketfs": "**bucketfs**", "py-gets": "same readers, one GET per file",
                      "local": "local files (page cache)"}.get(p, p),
        [("py-gets", "GETs")])


def sec_tree(s, w):
    heading(w, "6. find and ls -lR of the deep tree", s)
    if not s.get("paths"):
        return
    w("%s files in %s directories. Each walk runs on a fresh mount with the page, dentry and "
      "inode caches dropped: `find MNT -type f | wc -l` and `ls -lR MNT | grep -c '^-'` "
      "(both must count every file)." % (n0(s["files"]), n0(s["dirs"])))
    w("")
    table(w, ["Path", "find, s", "ls -lR, s", "find per run", "ls -lR per run"], [
        [LABEL[k], n2(r.get("median_find")) if r.get("find") else r.get("status") or "–",
         n2(r.get("median_ls")) if r.get("ls") else r.get("status") or "–",
         runs_of(r.get("find"), n2), runs_of(r.get("ls"), n2)]
        for k, r in s["paths"].items()])
    w("")


def sec_mount(s, w):
    heading(w, "7. Mount time with a persisted index", s)
    if not s.get("runs"):
        return
    w("`bucketfs -o endpoint=…×4,index=PATH s3://BUCKET MNT` (daemon mode) from exec to the "
      "mount point being a mount, with the index (%s keys) already on disk: first with the "
      "page cache dropped before each mount (the binary, its libraries and the index come "
      "from disk), then with it warm." % n0((s["runs"] or s.get("warm_runs"))[0]["entries"]))
    w("")
    rows = []
    for key, what in (("runs", "page cache dropped"), ("warm_runs", "page cache warm")):
        rs = s.get(key) or []
        if not rs:
            continue
        ready = [r["ready_s"] * 1e3 for r in rs]
        ret = [r["return_s"] * 1e3 for r in rs]
        rows.append(["start to ready mount, %s, ms" % what, "**%s**" % n1(median_of(ready)),
                     runs_of(ready, n1)])
        rows.append(["the command returned, %s, ms" % what, n1(median_of(ret)),
                     runs_of(ret, n1)])
    if s.get("index_build_s") is not None:
        rows.append(["for reference: `bucketfs-index build` (listing the bucket), s",
                     n2(s["index_build_s"]), "once"])
        rows.append(["index file size, bytes", n0(s.get("index_bytes")), ""])
    table(w, ["", "median", "per run"], rows)
    w("")


def sec_concurrency(s, w):
    heading(w, "8. 2,048 concurrent readers, daemon under `ulimit -n 1024`", s)
    if not s.get("runs"):
        return
    w("bucketfs started as `prlimit --nofile=1024:1024 bucketfs -f …` (the daemon's limit "
      "read back from /proc: %s); %d readers (%d processes × %d threads) released at once, "
      "each reading its share of the RetinaNet files whole; `/proc/PID/fd` of the daemon "
      "sampled every 100 ms." % (s.get("daemon_limit"), s["readers"], s["procs"],
                                 s["threads"]))
    w("")
    rows = [[str(i + 1), n0(r["files"]), n0(r["errors"]), n0(r["files_s"]), ms(r["p50_ms"]),
             ms(r["p99_ms"]), ms(r["max_ms"]), n0(r["fd_max"]), n0(r["threads_max"])]
            for i, r in enumerate(s["runs"])]
    rows.append(["**median**", "", n0(s.get("median_errors")), n0(s.get("median_files_s")),
                 ms(s.get("median_p50_ms")), ms(s.get("median_p99_ms")),
                 ms(s.get("median_max_ms")), n0(s.get("median_fd_max")), ""])
    table(w, ["Run", "reads", "failed", "files/s", "p50 ms", "p99 ms", "max ms",
              "max fds in daemon", "max threads in daemon"], rows)
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
    heading(w, "9. One of 4 endpoints killed mid-run", s)
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
    table(w, ["Phase", "from s", "to s", "files/s", "failed reads"],
          [[name, "%.1f" % lo, "%.1f" % hi, "**%s**" % n0(rate), n0(errs)]
           for name, lo, hi, rate, errs in s["phases"]])
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


def sec_compare(s, w):
    heading(w, "10. bucketfs-compare: the mount against bucketfs's own S3 client", s)
    if not s.get("runs"):
        return
    ns = s.get("namespace") or {}
    w("`bucketfs-compare --bench --procs %s --files %s --runs 1` on the mounted dataset, once "
      "per run: the same files read through the mount (%s threads, each open, read to the "
      "end, close, the file's pages dropped first) and with bucketfs's own S3 client (%s "
      "blocking GETs in flight, with `If-Match` as the mount sends them), over the same "
      "endpoints with the same credentials, in one process; mount first in odd runs, S3 "
      "first in even ones. Its check of names and sizes (%s keys against %s files on the "
      "mount) found %s differences."
      % (s["procs"], n0(s["files"]), s["procs"], s["procs"], n0(ns.get("keys")),
         n0(ns.get("mount_files")), n0((ns.get("differences") or {}).get("count"))))
    w("")
    rows = []
    for side, label in (("mount", "bucketfs mount"), ("s3", "bucketfs's S3 client")):
        m = s["median_" + side]
        rows.append([label, "**%s**" % n0(m["files_per_s"]), n0(m["mb_per_s"]),
                     ms(m["p50_ms"]), ms(m["p99_ms"]), ms(m["max_ms"]),
                     n0(s["errors_" + side]),
                     runs_of([x[side]["files_per_s"] for x in s["runs"]])])
    table(w, ["Path", "files/s", "MB/s", "p50 ms", "p99 ms", "max ms", "failed reads",
              "files/s per run"], rows)
    w("")
    w("- mount ÷ S3, files/s: **%s** (median of the runs' ratios; per run: %s)"
      % ("{:.2f}×".format(s["median_ratio"]) if s.get("median_ratio") else "–",
         runs_of([x["ratio_files_per_s"] for x in s["runs"]], n2)))
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
    colors = {"bucketfs": "#d62728", "direct": "#1f77b4", "direct-py": "#17becf",
              "s3fs": "#7f7f7f",
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


def make_latency_chart(res, path):
    """docs/bench-latency.png: files/s against the first-byte delay, one
    panel per read style: a line per order through bucketfs and per
    reference (medians; runs as dots), with Little's law's ceiling for the
    readers alone (readers / delay).  Returns None, or why not."""
    s = res.get("sections", {}).get("latency", {})
    if not s.get("cells"):
        return "no latency results"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError as exc:
        return "matplotlib is not installed (%s)" % exc
    styles = [st for st in ("whole", "dlio") if any(
        p == "bucketfs" and x == st for _, p, _, x, _ in cells_of(s))]
    fig, axes = plt.subplots(1, len(styles), figsize=(6.2 * len(styles), 5.2), dpi=110,
                             sharey=True, squeeze=False)
    colors = {"random": "#d62728", "dlio": "#1f77b4", "announced": "#2ca02c"}
    refs = [("py-gets", "random", "--", "#e377c2"), ("py-gets", "dlio", "--", "#17becf"),
            ("curl", "-", ":", "#7f7f7f")]
    allv = []
    delays = sorted({d for d, *_ in cells_of(s)})

    def line(ax, pts, label, fmt, color, width):
        if not pts:
            return
        ax.plot([d for d, _ in pts], [c.get("median_files_s") for _, c in pts], fmt,
                marker="o", markersize=4, color=color, label=label, linewidth=width)
        for d, c in pts:
            vals = [x.get("files_s") for x in c["runs"] if x.get("files_s")]
            allv.extend(vals)
            ax.plot([d] * len(vals), vals, ".", color=color, markersize=3)

    for ax, st in zip(axes[0], styles):
        for o in ("random", "dlio", "announced"):
            line(ax, [(d, c) for d, p, oo, x, c in cells_of(s, "bucketfs")
                      if oo == o and x == st],
                 "bucketfs, %s order" % ORDER_LABEL[o], "-", colors[o], 1.8)
        for p, o, fmt, color in refs:
            line(ax, [(d, c) for d, pp, oo, _, c in cells_of(s, p) if oo == o],
                 LAT_PATH[p] + (", %s order" % ORDER_LABEL[o] if o != "-" else ""),
                 fmt, color, 1.1)
        pos = [d for d in delays if d > 0]
        if pos:
            xs = [pos[0] + (pos[-1] - pos[0]) * i / 100.0 for i in range(101)]
            ax.plot(xs, [s["procs"] / (x / 1e3) for x in xs], color="#bbb", linewidth=1,
                    label="%s readers ÷ delay (one file each in flight)" % s["procs"])
        ax.axhline(NEED_FILES_S, color="#444", linestyle="--", linewidth=0.8,
                   label="needed per host (%s files/s)" % "{:,}".format(NEED_FILES_S))
        ax.set_title("bucketfs read style: %s" % STYLE_LABEL.get(st, st), fontsize=10)
        ax.set_xlabel("first-byte delay of every object GET, ms")
        ax.set_xticks(delays)
        ax.legend(loc="lower left", fontsize=7, frameon=False)
    ax0 = axes[0][0]
    ax0.set_yscale("log")
    fmt = matplotlib.ticker.FuncFormatter(lambda v, _pos: "{:,.0f}".format(v))
    ax0.yaxis.set_major_formatter(fmt)
    ax0.yaxis.set_minor_formatter(fmt)
    ax0.tick_params(axis="y", which="minor", labelsize=7)
    ax0.set_ylabel("files/s, log scale (line: median; dots: runs)")
    if allv:
        ax0.set_ylim(max(10.0, min(allv) / 2.5), max(allv) * 1.6)
    fig.suptitle("%s RetinaNet files, %s reader processes, 4 endpoints with a first-byte "
                 "delay" % ("{:,}".format(s["files"]), s["procs"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None


# ---- 11. the soak: written from tools/bench/soak.py's JSON, kept
# next to the report (docs/bench-soak.json), so a run.py rewrite keeps it and
# soak.py --doc rewrites only this section.

SOAK_JSON = "bench-soak.json"
SOAK_TITLE = "11. Soak: 30 minutes of RetinaNet reads with 1% faults of every kind"


def load_soak(out):
    """soak.py's results next to @out, or None."""
    path = os.path.join(os.path.dirname(out), SOAK_JSON)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def slope(samples, key):
    """Least-squares slope of @key per minute over @samples, or None."""
    if len(samples) < 2:
        return None
    xs = [x["minute"] for x in samples]
    ys = [x[key] for x in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    d = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / d if d else None


def sec_soak(d, w):
    title = SOAK_TITLE
    if d:
        title = ("11. Soak: %.0f minutes of RetinaNet reads with %s faults of every kind"
                 % (d["summary"]["minutes"], "{:g}%".format(d["args"]["rate"] * 100)))
    heading(w, title, {} if d else
            {"status": "not measured: no docs/%s (run tools/bench/soak.py)" % SOAK_JSON})
    if not d:
        return
    a, sm, samples = d["args"], d["summary"], d["samples"]
    m = d.get("machine") or {}
    w("Written by `tools/bench/report.py` from `docs/%s`, the output of `%s`, "
      "on commit %s's binaries, started %s. One mount of the test S3 server "
      "(`tests/s3server/s3server.py`, one endpoint, index built beforehand, "
      "`-o stall_timeout=2`); %s synthetic objects of %s bytes; %d readers (%d processes "
      "× %d threads) read random files whole, every byte checked against the server's "
      "content (SHA-256), each file dropped from the page cache after its read so every "
      "read reaches the daemon. The server faults %s of GETs, seven kinds mixed about "
      "equally: 503 SlowDown, 500 InternalError, a reset after half the body, half the "
      "body then a clean close, a stall of 5 s after half the body, a close with no "
      "answer, a body 7 bytes short. Each minute: the daemon's VmRSS, `/proc/PID/fd` and "
      "threads (by name)."
      % (SOAK_JSON, d.get("command") or "tools/bench/soak.py", m.get("commit", "?"),
         m.get("started", "?"), n0(a["files"]), n0(a["size"]), a["procs"] * a["threads"],
         a["procs"], a["threads"], "{:g}%".format(a["rate"] * 100)))
    w("")
    loads = [x["load1"] for x in samples]
    w("**Load:** the 1-minute load average was %.1f–%.1f (median %.1f) during the run%s; "
      "the read rate depends on it, the flatness is the point."
      % (min(loads), max(loads), sm.get("load1_median", 0),
         (" (%s)" % m["note"]) if m.get("note") else ""))
    w("")
    hits = sm.get("fault_hits") or {}
    order = ["status503", "status500", "reset", "truncate", "stall", "drop", "bad_length"]
    table(w, ["", "reads", "failed", "faults injected (503 / 500 / reset / truncate / "
              "stall / drop / short)", "reads/s", "daemon warnings or errors"],
          [["%.1f min" % sm["minutes"], "**%s**" % n0(sm["reads"]),
            "**%s**" % n0(sm["failed"]),
            "%s (%s)" % (n0(sm["faults_injected"]),
                         " / ".join(n0(hits.get(k, 0)) for k in order)),
            n0(sm["reads_per_s"]), n0(sm.get("daemon_log_warnings"))]])
    w("")
    after = [x for x in samples if x["minute"] >= 1]
    rows = []
    if after and all("arena_rss_mib" in x for x in after):
        for x in after:
            x["rest_rss_mib"] = x["rss_mib"] - x["arena_rss_mib"]
    for k, label, f in (("rss_mib", "RSS (MiB)", n1),
                        ("arena_rss_mib", "of it, in the thread arenas (MiB)", n1),
                        ("rest_rss_mib", "of it, the rest (MiB)", n1),
                        ("arena_extent_mib", "the thread arenas' extent (MiB)", n1),
                        ("fds", "descriptors", n0),
                        ("threads", "threads", n0)):
        if not after or any(k not in x for x in after):
            continue
        v = [x[k] for x in after]
        sl = slope(after, k)
        half = [x for x in after if x["minute"] >= (after[0]["minute"] + after[-1]["minute"]) / 2]
        sl2 = slope(half, k)
        rows.append([label, f(min(v)), f(median_of(v)), f(max(v)), f(after[0][k]),
                     f(after[-1][k]), "%+.3f" % sl if sl is not None else "–",
                     "%+.3f" % sl2 if sl2 is not None else "–"])
    table(w, ["after the first minute", "min", "median", "max", "at minute 1", "at the end",
              "slope per minute (least squares)", "slope, second half"], rows)
    w("")
    w("![RSS, descriptors and threads each minute](bench-soak.png)")
    w("")
    first, last = (after[0], after[-1]) if after else (None, None)
    if first and first.get("thread_names") and last.get("thread_names"):
        names = sorted(set(first["thread_names"]) | set(last["thread_names"]))
        w("- **Threads by name**, minute %.0f → the end: %s. `bucketfs` is the main thread "
          "and libfuse's workers: libfuse starts a worker when a request arrives and none is "
          "idle, up to `max_threads`, and keeps every idle one (its default "
          "`max_idle_threads` of −1; upstream discourages destroying them), so their count "
          "is the largest number of requests handled at once so far. A read-only mount "
          "bounds them at 2 per CPU, at least 8 (`fuse_workers()` in `fs/main.c`: no "
          "handler there waits for the network), a bound the first seconds reach; with "
          "the old bound of 64 the count kept climbing, 23 → 36 threads over 30 minutes."
          % (first["minute"], ", ".join("%s %d → %d" % (n, first["thread_names"].get(n, 0),
                                                        last["thread_names"].get(n, 0))
                                        for n in names)))
    w("- **RSS.** Bodies (one object's bytes each, %s bytes here) allocated by the "
      "two `bfs-http` threads in their glibc arenas would make those arenas grow: an "
      "arena keeps its high-water mark and fragments (`tune_malloc()` keeps freed memory "
      "mapped, and `malloc_trim()` never shrinks a thread arena's heap); a soak with "
      "them there grew by +0.128 MiB per minute, all of it in the arenas. So a body of "
      "64 KiB or more comes from the daemon's own pool (`src/bufpool.c`, docs/ARCHITECTURE.md \"The heap\"): mapped "
      "size classes recycled with their pages faulted in, at most 64 MiB kept idle. "
      "So the arenas hold only the small allocations, and the pool's memory is in "
      "\"the rest\", bounded by the bodies in flight at the peak plus the idle cap." %
      n0(a["size"]))
    if sm.get("errors"):
        w("- **Failed reads** (first ones): %s" % "; ".join(sm["errors"][:5]))
    w("")


def replace_soak_section(md_path):
    """Rewrites only section 11 of @md_path from the JSON next to it (as
    soak.py --doc does after a run); appends it when it is missing."""
    with open(md_path) as f:
        text = f.read()
    lines = []
    sec_soak(load_soak(md_path), lines.append)
    new = "\n".join(lines).rstrip() + "\n"
    head = "## " + SOAK_TITLE.split(":")[0] + ":"
    start = text.find(head)
    if start < 0:
        text = text.rstrip() + "\n\n" + new
    else:
        end = text.find("\n## ", start + 1)
        text = text[:start] + new + (text[end + 1:] if end >= 0 else "")
    tmp = md_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, md_path)
