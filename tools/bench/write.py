#!/usr/bin/python3
"""Write benchmark: one large new file written through a writable mount with
`dd bs=1M` (streamed as a multipart upload) against the same multipart
upload done directly (CreateMultipartUpload, the parts with this many in
flight, CompleteMultipartUpload; SigV4 with the payload's SHA-256 signed,
as bucketfs signs), alternating, medians of --reps.  The daemon's peak RSS
is sampled every 50 ms while dd runs, and its VmHWM read at the end; the
CPU its threads spent during each dd is printed by thread name.  At the
end a verdict line says whether the peak stayed within the daemon's
memory bound (bound_kib() below) and by how much, from what was measured:
the idle RSS, the peak, and the FUSE workers and event threads counted in
/proc/PID/task.

Against Ceph RGW on loopback (its own, or the suite's with BFS_RGW_URL);
run it inside the machine-wide lock:

  flock /var/tmp/bucketfs-bench/run.lock /usr/bin/python3 tools/bench/write.py \\
      [--size 4G] [--part-size 16M] [--parts 4] [--reps 3] [--json OUT]

Both sides write zeros: dd from /dev/zero, the direct side one zero part
buffer reused (RGW does not compress by default).  The direct side is
Python (http.client, one connection per part slot, hashlib's SHA-256);
bucketfs pays the FUSE copies and its own SHA-256 (GLib) per part.
"""

import argparse
import hashlib
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                "tests", "integration"))
import harness  # noqa: E402

sys.path.insert(0, HERE)
import cpu as bench_cpu  # noqa: E402

MiB = 1 << 20


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("IB")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


class Direct:
    """A multipart upload with @parts in flight, signed like bucketfs's."""

    def __init__(self, url, ak, sk, bucket):
        self.url, self.ak, self.sk, self.bucket = url, ak, sk, bucket
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port

    def signed(self, method, path, query, body):
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        h = {"X-Amz-Content-SHA256": hashlib.sha256(body).hexdigest()}
        req = AWSRequest(method=method, url=self.url + path + "?" + query,
                         data=body, headers=h)
        S3SigV4Auth(Credentials(self.ak, self.sk), "s3",
                    "us-east-1").add_auth(req)
        return dict(req.headers.items())

    def call(self, conn, method, path, query, body=b""):
        for attempt in (1, 2, 3):
            try:
                conn.request(method, path + "?" + query, body=body,
                             headers=self.signed(method, path, query, body))
                resp = conn.getresponse()
                data = resp.read()
                break
            except (http.client.HTTPException, ConnectionError):
                # RGW closes kept-alive connections now and then: as
                # bucketfs's engine does, a new connection and again.
                conn.close()
                if attempt == 3:
                    raise
        if resp.getheader("connection", "").lower() == "close":
            conn.close()
        if resp.status // 100 != 2:
            raise RuntimeError(f"{method} {path}?{query}: {resp.status} "
                               f"{data[:300]!r}")
        return resp, data

    def upload(self, key, size, part_size, parts):
        path = harness.key_path(self.bucket, key)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        _, text = self.call(conn, "POST", path, "uploads=")
        uid = next(e.text for e in ET.fromstring(text).iter()
                   if e.tag.rpartition("}")[2] == "UploadId")
        q = urllib.parse.quote(uid, safe="")
        n = (size + part_size - 1) // part_size
        etags = [None] * n
        zero = bytes(part_size)
        todo = list(range(n))
        lock = threading.Lock()
        errors = []

        def worker():
            c = http.client.HTTPConnection(self.host, self.port, timeout=300)
            while True:
                with lock:
                    if not todo or errors:
                        break
                    i = todo.pop(0)
                body = zero if (i + 1) * part_size <= size else \
                    zero[:size - i * part_size]
                try:
                    resp, _ = self.call(c, "PUT", path,
                                        f"partNumber={i + 1}&uploadId={q}",
                                        body)
                    etags[i] = resp.getheader("etag")
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(e)
            c.close()

        threads = [threading.Thread(target=worker) for _ in range(parts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        xml = "<CompleteMultipartUpload>" + "".join(
            f"<Part><PartNumber>{i + 1}</PartNumber><ETag>{e}</ETag></Part>"
            for i, e in enumerate(etags)) + "</CompleteMultipartUpload>"
        self.call(conn, "POST", path, f"uploadId={q}", xml.encode())
        conn.close()


def rss_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_by_mapping(pid):
    """The daemon's resident memory by kind of mapping, in KiB: an
    anonymous one by its size (a part is its own part_size mapping,
    unless the kernel merged neighbours), a file by its name."""
    out = {}
    cur = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            w = line.split()
            if "-" in w[0] and not w[0].endswith(":"):
                lo, hi = (int(x, 16) for x in w[0].split("-"))
                name = os.path.basename(w[5]) if len(w) > 5 else "anon"
                cur = f"{name} {(hi - lo) >> 20} MiB" if name in (
                    "anon", "[heap]") else name
            elif w[0] == "Rss:" and int(w[1]):
                out[cur] = out.get(cur, 0) + int(w[1])
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:12])


def thread_cpu(pid):
    """CPU seconds (user + system) of the daemon's threads, summed by
    thread name ({name: seconds})."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                text = f.read()
        except OSError:
            continue  # the thread ended meanwhile
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        out[name] = out.get(name, 0) + (int(fields[11]) +
                                        int(fields[12])) / tick
    return out


def fuse_workers(pid):
    """libfuse's worker threads: those named like the main thread, less
    it.  A writable mount starts up to 64 and never stops one, and idle
    workers take FUSE requests in turn, so each worker alive takes 1 MiB
    writes sooner or later."""
    with open(f"/proc/{pid}/comm") as f:
        main = f.read().strip()
    return bench_cpu.thread_counts(pid).get(main, 1) - 1


# libfuse 3.14's request buffer: max_write (1 MiB) + a page of header,
# malloc'ed by each worker at its first request and kept.
FUSE_BUF_KIB = 1024 + 4
# curl keeps a 64 KiB upload buffer (CURLOPT_UPLOAD_BUFFERSIZE's default,
# which the part's bytes are copied through) and a 128 KiB receive buffer
# (CURLOPT_BUFFERSIZE, src/http.c) on each easy handle, and src/http.c
# keeps the handles on their event thread for later transfers: each
# event thread ends up with up to write_parts handles that carried a
# part.
CURL_HANDLE_KIB = 64 + 128


def bound_kib(part, parts, files, workers, loops):
    """The daemon's resident memory over its idle self while @files files
    are written (KiB), by term: the write_parts parts in flight (each its
    own populated mapping); each file's buffer (a part and the write that
    filled it, in pages the stream maps itself); each FUSE worker's
    request buffer; and curl's buffers of the handles that carried
    parts.  The mapped pages of the daemon's code and data are resident
    already once it has mounted."""
    terms = {"parts": parts * part // 1024,
             "file buffers": files * (part + MiB) // 1024,
             "FUSE request buffers": workers * FUSE_BUF_KIB,
             "curl handles' buffers": loops * parts * CURL_HANDLE_KIB}
    return sum(terms.values()), terms


def dd_through(mount, name, size, pid, cpu=None, where=None):
    """Seconds for dd of @size bytes into the mount (close included) and the
    daemon's peak RSS sampled meanwhile (KiB); @cpu (a dict), if given,
    gets the CPU seconds each thread name spent meanwhile, and @where (a
    dict) the RSS by mapping at the peak (read at each new peak)."""
    count = size // MiB
    before = thread_cpu(pid) if cpu is not None else None
    peak = [rss_kib(pid, "VmRSS")]
    stop = threading.Event()

    def sample():
        while not stop.wait(0.05):
            now = rss_kib(pid, "VmRSS")
            if where is not None and now > peak[0] + 1024:
                where.clear()
                where.update(rss_by_mapping(pid))
            peak[0] = max(peak[0], now)

    t = threading.Thread(target=sample)
    t.start()
    t0 = time.monotonic()
    r = subprocess.run(["dd", "if=/dev/zero", f"of={mount.path(name)}",
                        "bs=1M", f"count={count}"], capture_output=True,
                       text=True)
    secs = time.monotonic() - t0
    stop.set()
    t.join()
    if r.returncode != 0:
        raise RuntimeError(f"dd failed: {r.stderr}\n{mount.output()[-2000:]}")
    if cpu is not None:
        for k, v in thread_cpu(pid).items():
            cpu[k] = round(v - before.get(k, 0), 2)
    return secs, peak[0]


def verdict(res, part, parts):
    """Sets res's bound and its verdict line: the peak (the larger of the
    sampled RSS and VmHWM) against idle + the bound for one file."""
    if "mount_vmhwm_kib" not in res:
        res["verdict"] = "memory: no verdict (the daemon was not read)"
        return
    peak = max(res["mount_peak_rss_kib"] + [res["mount_vmhwm_kib"]])
    idle = res["idle_rss_kib"]
    bound, terms = bound_kib(part, parts, 1, res["fuse_workers"],
                             res["event_threads"])
    res["bound_over_idle_kib"] = bound
    res["bound_terms_kib"] = terms
    res["peak_over_idle_kib"] = peak - idle
    margin = idle + bound - peak
    res["verdict"] = (
        f"memory: peak {peak} KiB = idle {idle} + {peak - idle} KiB; "
        f"bound over idle {bound} KiB ("
        + ", ".join(f"{k} {v}" for k, v in terms.items())
        + f"; {res['fuse_workers']} FUSE workers, {res['event_threads']} "
        f"event threads seen): "
        + (f"WITHIN the bound by {margin} KiB" if margin >= 0 else
           f"OVER the bound by {-margin} KiB"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="4G", help="file size (default 4G)")
    ap.add_argument("--part-size", default="16M")
    ap.add_argument("--parts", type=int, default=4, help="parts in flight")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds: start no rep that would end past it "
                         "(judged by the last rep's time); the medians "
                         "are then of the reps done (0: none)")
    a = ap.parse_args()
    # A timeout's TERM still unmounts and stops RGW (the finally below).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    started = time.monotonic()
    size, part = parse_size(a.size), parse_size(a.part_size)
    size -= size % MiB
    rgw = harness.RGW("wbench")
    tmp = tempfile.mkdtemp(prefix="bfs-wbench-")
    d = Direct(rgw.url, rgw.AK, rgw.SK, rgw.bucket)
    sig = harness.Signer(rgw.url, rgw.AK, rgw.SK)
    env = harness.client_env(AWS_ACCESS_KEY_ID=rgw.AK,
                             AWS_SECRET_ACCESS_KEY=rgw.SK)
    m = harness.Mount(f"s3://{rgw.bucket}", rgw.url,
                      os.path.join(tmp, "idx"), "writable",
                      f"part_size={part}", f"write_parts={a.parts}",
                      log=os.path.join(tmp, "mount.log"), env=env)
    res = {"idle_rss_kib": rss_kib(m.proc.pid, "VmRSS"), "size": size, "part_size": part, "parts_in_flight": a.parts,
           "server": "Ceph RGW (loopback, one bluestore OSD)",
           "direct_s": [], "mount_s": [], "mount_peak_rss_kib": []}
    try:
        for rep in range(a.reps):
            spent = time.monotonic() - started
            last = (res["direct_s"][-1] + res["mount_s"][-1]
                    if res["mount_s"] else 0)
            if a.deadline and rep and spent + last > a.deadline:
                print(f"deadline: {rep} of {a.reps} reps done in "
                      f"{spent:.0f} s", flush=True)
                break
            t0 = time.monotonic()
            d.upload(f"direct-{rep}", size, part, a.parts)
            res["direct_s"].append(time.monotonic() - t0)
            cpu, where = {}, {}
            secs, peak = dd_through(m, f"mount-{rep}", size, m.proc.pid, cpu,
                                    where)
            res.setdefault("mount_peak_rss_by_mapping_kib", []).append(where)
            res["mount_s"].append(secs)
            res.setdefault("mount_thread_cpu_s", []).append(cpu)
            res["mount_peak_rss_kib"].append(peak)
            res.setdefault("fuse_workers_after_rep", []).append(
                fuse_workers(m.proc.pid))
            for k in (f"direct-{rep}", f"mount-{rep}"):
                sig.delete(rgw.bucket, k)
            print(f"rep {rep + 1}: direct {size / MiB / res['direct_s'][-1]:.0f}"
                  f" MiB/s, mount {size / MiB / secs:.0f} MiB/s, peak RSS "
                  f"{peak / 1024:.0f} MiB (by mapping, KiB: {where}; "
                  f"{res['fuse_workers_after_rep'][-1]} FUSE workers); "
                  f"daemon CPU s by thread "
                  f"{dict(sorted(cpu.items(), key=lambda kv: -kv[1]))}",
                  flush=True)
        res["mount_vmhwm_kib"] = rss_kib(m.proc.pid, "VmHWM")
        # Workers are never stopped: those alive now are all that took
        # any request during the reps.
        res["fuse_workers"] = fuse_workers(m.proc.pid)
        res["event_threads"] = bench_cpu.thread_counts(m.proc.pid).get("bfs-http", 0)
    finally:
        sig.close()
        m.unmount()
        rgw.stop()
    res["reps_done"] = len(res["mount_s"])
    verdict(res, part, a.parts)
    md, mm = statistics.median(res["direct_s"]), statistics.median(res["mount_s"])
    res["direct_mib_s"] = size / MiB / md
    res["mount_mib_s"] = size / MiB / mm
    res["ratio"] = md / mm
    print(f"median of {res['reps_done']}: direct {res['direct_mib_s']:.0f} MiB/s, "
          f"mount {res['mount_mib_s']:.0f} MiB/s, ratio {res['ratio']:.2f}; "
          f"daemon peak RSS {max(res['mount_peak_rss_kib']) / 1024:.0f} MiB "
          f"(VmHWM {res['mount_vmhwm_kib'] / 1024:.0f} MiB); idle "
          f"{res['idle_rss_kib'] / 1024:.0f} MiB")
    print(res["verdict"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
