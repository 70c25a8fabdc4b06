"""DLIO-style readers: P processes (optionally each with T threads) doing
open(path, 'rb').read() on disjoint shares of a file list, all released at
once by a barrier; per-file latency and completion times come back to the
parent.

Three shapes:
  read_all(paths, procs)                   every file once (one epoch)
  read_all(None, 0, shares=[[...], ...])   every file once, each process
                                           reading its own list in its
                                           order (DLIO's worker streams)
  read_for(paths, procs, seconds)          loop until a deadline, dropping each
                                           file from the page cache after
                                           reading it (posix_fadvise DONTNEED),
                                           so every read reaches the daemon
  read_all(paths, procs, threads=T)        procs x T concurrent readers

Two read styles (style=):
  "whole"   open(path, 'rb').read(): one read() of the whole file
  "dlio"    what DLIO's reader does per file, PIL's way: open() (fstat,
            ioctl(TCGETS) for isatty, lseek), 16 bytes, seek(0), then 64 KiB
            reads until one returns nothing, through Python's buffered file
            (a 4 KiB st_blksize makes the reads 4 KiB, 60 KiB, then 64 KiB)
  "npz"     DLIO's UNet3D reader: np.load(path)["x"]; the bytes counted
            (and checked by expect) are those of the array x

A "path" that starts with http:// or https:// is fetched with a GET
instead (one keep-alive connection per process and endpoint, http.client):
the same readers going to the endpoints directly, without a mount.  The
style does not apply to those.  An https:// one verifies the endpoint's
certificate against CA_FILE (the rig's CA; the system's store if None),
with one ssl context per reader process, and the connection keeps its
TLS session across requests.
"""

import array
import http.client
import math
import multiprocessing
import os
import random
import signal
import ssl
import threading
import time
import urllib.parse

CTX = multiprocessing.get_context("fork")


def percentile(sorted_vals, q):
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_vals:
        return None
    k = max(1, math.ceil(q / 100.0 * len(sorted_vals)))
    return sorted_vals[min(k, len(sorted_vals)) - 1]


_CONNS = {}   # a reader process's connections, by scheme://host:port
CA_FILE = None   # the CA an https:// GET verifies with (set before the fork)
_SSL = {}     # a reader process's ssl contexts, by CA file


def ssl_context(cafile):
    """A client context that verifies the peer (certificate and host name)
    against @cafile, made once per process."""
    ctx = _SSL.get(cafile)
    if ctx is None:
        ctx = _SSL[cafile] = ssl.create_default_context(cafile=cafile)
    return ctx


def _connection(u):
    if u.scheme == "https":
        return http.client.HTTPSConnection(u.netloc, timeout=60,
                                           context=ssl_context(CA_FILE))
    return http.client.HTTPConnection(u.netloc, timeout=60)


def _npz_x(src):
    """np.load(@src)["x"] (a path or a file object): the array's bytes."""
    import numpy as np
    with np.load(src) as z:
        return z["x"].nbytes


def _get_one(url, expect, style="whole"):
    t0 = time.monotonic()
    err = None
    n = 0
    u = urllib.parse.urlsplit(url)
    where = u.scheme + "://" + u.netloc
    conn = _CONNS.get(where)
    try:
        if conn is None:
            conn = _CONNS[where] = _connection(u)
        conn.request("GET", u.path)
        resp = conn.getresponse()
        data = resp.read()
        n = len(data)
        if resp.status != 200:
            err = "HTTP %d" % resp.status
        elif style == "npz":
            import io
            n = _npz_x(io.BytesIO(data))
            if expect is not None and n != expect(url):
                err = "x has %d bytes" % n
        elif expect is not None and n != expect(url):
            err = "short body: %d bytes" % n
    except Exception as exc:   # OSError, HTTPException; for npz a bad archive
        err = "%s: %s" % (type(exc).__name__, exc)
        _CONNS.pop(where, None)
        if conn is not None:
            conn.close()
    return t0, time.monotonic(), n, err


def _read_dlio(path):
    """DLIO's loader opening an image as PIL does: open() (an fstat for the
    buffer's size, an lseek, isatty), 16 bytes, a seek back to 0, then
    64 KiB reads until one returns nothing, through Python's BufferedReader,
    which is as large as the file's st_blksize.  With a 4 KiB st_blksize
    the reads that reach the file are 4 KiB, 60 KiB, then 64 KiB ones; with
    a larger one, fewer.
    The bytes read."""
    with open(path, "rb") as f:
        f.read(16)
        f.seek(0)
        n = 0
        while True:
            b = f.read(65536)
            if not b:
                return n
            n += len(b)


def _read_one(path, expect, fadvise, style="whole"):
    if path.startswith(("http://", "https://")):
        return _get_one(path, expect, style)
    t0 = time.monotonic()
    err = None
    n = 0
    try:
        if style in ("dlio", "npz"):
            n = _read_dlio(path) if style == "dlio" else _npz_x(path)
            if expect is not None and n != expect(path):
                err = "short read: %d bytes" % n
            return t0, time.monotonic(), n, err
        with open(path, "rb") as f:
            data = f.read()
            n = len(data)
            if fadvise:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        if expect is not None and n != expect(path):
            err = "short read: %d bytes" % n
    except Exception as exc:   # OSError; for npz also a bad archive
        err = "%s: %s" % (type(exc).__name__, getattr(exc, "strerror", None) or exc)
    t1 = time.monotonic()
    return t0, t1, n, err


def _child(share, threads, barrier, conn, expect, deadline_s, fadvise, style):
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)   # not run.py's handlers
    lat = array.array("d")
    ends = array.array("d")
    nbytes = [0]
    errors = []
    lock = threading.Lock()
    go = threading.Event()
    t_start = [0.0]

    def work(paths):
        go.wait()
        my_lat, my_ends, my_bytes, my_err = array.array("d"), array.array("d"), 0, []
        if deadline_s is None:
            for p in paths:
                t0, t1, n, err = _read_one(p, expect, fadvise, style)
                my_lat.append(t1 - t0)
                my_ends.append(t1)
                my_bytes += n
                if err:
                    my_err.append((t1, p, err))
        else:
            end = t_start[0] + deadline_s
            i = 0
            while paths:
                p = paths[i % len(paths)]
                i += 1
                t0, t1, n, err = _read_one(p, expect, fadvise, style)
                if t1 > end:
                    break
                my_lat.append(t1 - t0)
                my_ends.append(t1)
                my_bytes += n
                if err:
                    my_err.append((t1, p, err))
        with lock:
            lat.extend(my_lat)
            ends.extend(my_ends)
            nbytes[0] += my_bytes
            errors.extend(my_err)

    if threads == 1:
        barrier.wait()
        t_start[0] = time.monotonic()
        go.set()
        work(share)
    else:
        threading.stack_size(256 * 1024)
        ts = [threading.Thread(target=work, args=(share[i::threads],), daemon=True)
              for i in range(threads)]
        for t in ts:
            t.start()
        barrier.wait()
        t_start[0] = time.monotonic()
        go.set()
        for t in ts:
            t.join()
    conn.send((t_start[0], lat.tobytes(), ends.tobytes(), nbytes[0], errors[:1000],
               len(errors)))
    conn.close()


class ReadTimeout(RuntimeError):
    pass


def _run(paths, procs, threads=1, seed=0, expect=None, seconds=None, fadvise=False,
         during=None, timeout=None, shares=None, style="whole"):
    if shares is None:
        shares = random_shares(paths, procs, seed)
    procs = len(shares)
    barrier = CTX.Barrier(procs + 1)
    children = []
    try:
        for share in shares:
            r, w = CTX.Pipe(duplex=False)
            p = CTX.Process(target=_child, args=(share, threads, barrier, w, expect,
                                                 seconds, fadvise, style))
            p.start()
            w.close()
            children.append((p, r))
        barrier.wait()
        extra = during(time.monotonic()) if during else None
        lat, ends, nbytes, errors, nerr = array.array("d"), array.array("d"), 0, [], 0
        starts = []
        deadline = time.monotonic() + timeout if timeout else None
        for p, r in children:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not r.poll(left):
                raise ReadTimeout("the readers had not finished after %d s (cut off)" % timeout)
            try:
                st, lb, eb, nb, er, ne = r.recv()
            except EOFError:
                raise RuntimeError("reader process %d died (exit %s)" % (p.pid, p.exitcode))
            starts.append(st)
            lat.frombytes(lb)
            ends.frombytes(eb)
            nbytes += nb
            errors += er
            nerr += ne
        for p, _ in children:
            p.join()
    finally:
        for p, r in children:
            if p.is_alive():
                p.terminate()
                p.join(5)
            r.close()
    # The clock starts when the first reader leaves the barrier (the parent
    # may be scheduled much later on a busy machine).
    t_start = min(starts)
    t_end = max(ends) if ends else time.monotonic()
    wall = seconds if seconds else t_end - t_start
    s = sorted(lat)
    nfiles = len(lat)
    return {
        "files": nfiles, "bytes": nbytes, "wall_s": wall,
        "files_s": nfiles / wall if wall > 0 else 0.0,
        "mb_s": nbytes / wall / 1e6 if wall > 0 else 0.0,
        "p50_ms": percentile(s, 50) * 1e3 if s else None,
        "p99_ms": percentile(s, 99) * 1e3 if s else None,
        "max_ms": s[-1] * 1e3 if s else None,
        "errors": nerr, "error_samples": [(round(t - t_start, 3), p, e) for t, p, e in errors[:20]],
        "error_times": sorted(t - t_start for t, _, _ in errors),
        "ends": sorted(t - t_start for t in ends),
        "t_start": t_start, "during": extra,
    }


def random_shares(paths, procs, seed):
    """@paths shuffled (seeded), dealt round-robin to @procs readers: reader
    i reads order[i], order[i + procs], ... so the files are taken in about
    the shuffled order overall."""
    order = list(paths)
    random.Random(seed).shuffle(order)
    return [order[i::procs] for i in range(procs)]


def read_all(paths, procs, threads=1, seed=0, expect=None, during=None, timeout=None,
             shares=None, style="whole"):
    return _run(paths, procs, threads, seed, expect, None, False, during, timeout,
                shares, style)


def read_for(paths, procs, seconds, seed=0, expect=None, during=None):
    return _run(paths, procs, 1, seed, expect, seconds, True, during, seconds * 4 + 120)


def per_second(ends, seconds):
    """Completions per 1-second bin, [0, seconds)."""
    bins = [0] * int(math.ceil(seconds))
    for t in ends:
        i = int(t)
        if 0 <= i < len(bins):
            bins[i] += 1
    return bins


def curl_z(urls, procs, cfg, timeout, size, extra=()):
    """`curl -Z --parallel-max procs` over @urls (written to the config file
    @cfg), each body to /dev/null; per-file latency from curl's own
    %{time_total}; a body that is not 200 with @size bytes is a failed read.
    @extra: more options (--cacert for https:// URLs)."""
    import subprocess
    with open(cfg, "w") as f:
        for u in urls:
            f.write('url = "%s"\noutput = "/dev/null"\n' % u)
    t0 = time.monotonic()
    p = subprocess.run(["curl", "-Z", "--parallel-max", str(procs), "--parallel-immediate",
                        "-s", "-S", *extra, "-K", cfg,
                        "-w", "%{http_code} %{size_download} %{time_total}\\n"],
                       capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    lat, nbytes, errors = [], 0, 0
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        code, got, tt = parts
        if code != "200" or int(got) != size:
            errors += 1
        nbytes += int(got)
        lat.append(float(tt))
    errors += len(urls) - len(lat)
    s = sorted(lat)
    return {"files": len(lat), "bytes": nbytes, "wall_s": wall,
            "files_s": len(lat) / wall, "mb_s": nbytes / wall / 1e6,
            "p50_ms": percentile(s, 50) * 1e3 if s else None,
            "p99_ms": percentile(s, 99) * 1e3 if s else None,
            "max_ms": s[-1] * 1e3 if s else None, "errors": errors,
            "error_samples": [p.stderr.strip()[:500]] if p.returncode else []}
