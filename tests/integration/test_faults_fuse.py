#!/usr/bin/env python3
"""The fault matrix, part 2: the FUSE side (see docs/RELIABILITY.md).

- unmount (fusermount3 -u, -uz, SIGTERM) while readers are blocked on a
  stalled server: nothing hangs beyond a bound, the daemon exits, the
  readers get an error (which one is asserted), no mount is left;
- a daemon killed with SIGKILL: ENOTCONN, and `fusermount3 -u` clears it;
- a reader blocked on a stalled GET gets SIGALRM or SIGINT: it returns or
  dies within a bound, the mount stays healthy and later reads work;
- every endpoint dead (refused, or a black hole that accepts and never
  answers): stat, readdir, statfs and getxattr answer from the index at
  once; the open of a file fetched whole (or its first read, under the
  default direct_io=auto) fails with an errno and a log line within the
  bound the
  retry options set.
"""

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402

sys.path.insert(0, os.path.join(harness.SRC, "tests", "s3server"))
import s3server  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

N = 200
SIZE = 65536
# Reads against a stalled or dead server give up after about
# max_attempts x (stall_timeout + backoff) with retry_deadline=0 (by
# default a silent or unreachable store is waited for 60 s); BOUND is a
# generous "doesn't hang" bound over that, not a performance figure.
RETRY = "max_attempts=2,stall_timeout=2,connect_timeout=1,retry_deadline=0"
BOUND = 60
# Metadata is answered from the mapped index: "at once" is checked with a
# bound that only a request to the dead endpoint could exceed.
META_BOUND = 5


def key(i):
    return f"train/img_{i:03d}_of_{N}.jpeg"


def expected(i):
    return s3server.synthetic_bytes("syn", key(i).encode(), SIZE)


# One reader: opens, then reads the whole file; prints one JSON line.  A
# stalled GET of a file fetched whole blocks its open (direct_io=none: the
# open waits for the bytes, which then go to the page cache) or its first
# read (the default, direct_io=auto, where direct_io files map: the open
# returns with the GET under way).
READER = r"""
import hashlib, json, os, signal, sys, time
path, mode = sys.argv[1], sys.argv[2]
class Alarm(Exception):
    pass
def on_alarm(sig, frame):
    raise Alarm()
if mode == "alarm":
    signal.signal(signal.SIGALRM, on_alarm)
print(json.dumps({"started": True}), flush=True)
t0 = time.monotonic()
res = {}
fd = None
try:
    fd = os.open(path, os.O_RDONLY)
    data = b""
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        data += b
    res = {"ok": len(data), "sha": hashlib.sha256(data).hexdigest()}
except Alarm:
    res = {"alarm": True}
except OSError as e:
    res = {"errno": e.errno}
res["secs"] = time.monotonic() - t0
try:
    if fd is not None:
        os.close(fd)
except OSError as e:
    res["close_errno"] = e.errno
print(json.dumps(res), flush=True)
"""


class Reader:
    def __init__(self, path, mode="plain"):
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", "-c", READER, path, mode],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("reader failed to start: " +
                               self.proc.stderr.read())
        assert json.loads(line) == {"started": True}

    def result(self, timeout=BOUND):
        """The reader's JSON result, {"signal": N} if a signal killed it,
        or {"exit": N, "stderr": ...} if it died otherwise."""
        out, err = self.proc.communicate(timeout=timeout)
        if self.proc.returncode < 0:
            return {"signal": -self.proc.returncode}
        lines = out.strip().splitlines()
        if len(lines) < 1 or not lines[-1].startswith("{"):
            return {"exit": self.proc.returncode, "stderr": err[-600:]}
        return json.loads(lines[-1])

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class BlackHole:
    """A listener that never accepts and never answers: connects complete
    in the kernel's backlog and requests go nowhere."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self):
        self.sock.close()


class FuseFaults(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-faults-fuse-")
        cls.server = harness.TestServer("--synthetic",
                                        f"syn:{N}:{SIZE}")
        cls.idx = os.path.join(cls.tmp, "syn.idx")
        r = harness.run([harness.binary("bucketfs-index"), "build", "-q",
                         "-o", f"endpoint={cls.server.url},index={cls.idx}",
                         "s3://syn"])
        if r.returncode != 0:
            raise RuntimeError(r.stderr)

    def setUp(self):
        super().setUp()
        self.readers = []

    def tearDown(self):
        self.server.clear_faults()
        for r in self.readers:
            r.kill()
        super().tearDown()

    def mount(self, *opts, endpoint=None):
        log = os.path.join(self.tmp, f"mount-{time.monotonic_ns()}.log")
        m = Mount("s3://syn", endpoint or self.server.url, self.idx, RETRY,
                  *opts, log=log)
        self.mounts.append(m)
        return m

    def stall_gets(self, count=None):
        rule = {"op": "GET", "kind": "stall", "seconds": 3600}
        if count is not None:
            rule["count"] = count
        self.server.faults([rule])

    def blocked_readers(self, m, n, mode="plain", first=0):
        """@n readers of distinct files, each blocked in open() or its
        first read() on a stalled GET (the server has seen every GET)."""
        self.server.control("POST", "stats/reset")
        rs = [Reader(m.path(key(first + i)), mode) for i in range(n)]
        self.readers += rs
        deadline = time.monotonic() + 20
        while self.server.stats()["requests"]["GET"] < n:
            self.assertLess(time.monotonic(), deadline, m.output())
            time.sleep(0.05)
        time.sleep(0.3)
        for r in rs:
            self.assertIsNone(r.proc.poll(), "a reader was not blocked")
        return rs

    def assert_healthy(self, m, i):
        with open(m.path(key(i)), "rb") as f:
            self.assertEqual(f.read(), expected(i))
        self.assertEqual(len(os.listdir(m.path("train"))), N)

    def finish(self, m, rc=0):
        """The daemon exits within the bound, with status @rc, and no
        mount is left."""
        try:
            status = m.proc.wait(BOUND)
        except subprocess.TimeoutExpired:
            self.fail("the daemon did not exit: " + m.output())
        self.assertEqual(status, rc, m.output())
        self.assertFalse(os.path.ismount(m.dir))
        with open("/proc/mounts") as f:
            self.assertNotIn(m.dir, f.read())
        m.logf.close()

    # -- unmount with reads in flight -------------------------------------

    def test_fusermount_u_with_reads_in_flight(self):
        m = self.mount()
        self.stall_gets()
        rs = self.blocked_readers(m, 4)
        # Files are open: a plain unmount is refused, and changes nothing.
        r = subprocess.run(["fusermount3", "-u", m.dir], capture_output=True,
                           timeout=BOUND)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"Device or resource busy", r.stderr)
        self.assertTrue(os.path.ismount(m.dir))
        # The stalled reads fail by themselves within the retry bound:
        # ETIMEDOUT, with the cause chain in the log.
        for rd in rs:
            res = rd.result()
            self.assertEqual(res.get("errno"), errno.ETIMEDOUT, res)
        self.assertRegex(m.output(), r"read 'train/img_\d+_of_200.jpeg': GET "
                         r"s3://syn/train/img_\d+_of_200.jpeg via \S+ "
                         r"\(attempt 2/2, [\d.]+ s\): ")
        self.server.clear_faults()
        self.assert_healthy(m, 100)
        r = subprocess.run(["fusermount3", "-u", m.dir], timeout=BOUND)
        self.assertEqual(r.returncode, 0)
        self.finish(m)

    def test_lazy_unmount_with_reads_in_flight(self):
        m = self.mount()
        self.stall_gets()
        rs = self.blocked_readers(m, 4)
        t0 = time.monotonic()
        r = subprocess.run(["fusermount3", "-uz", m.dir], timeout=BOUND)
        self.assertEqual(r.returncode, 0)
        self.assertFalse(os.path.ismount(m.dir))
        # The readers still hold the detached mount: their reads end with
        # the retry bound, and then the daemon goes.
        results = [rd.result() for rd in rs]
        for res in results:
            self.assertIn(res.get("errno"), (errno.ETIMEDOUT,
                                              errno.ECONNABORTED,
                                              errno.ENOTCONN), res)
        self.finish(m)
        self.assertLess(time.monotonic() - t0, BOUND)
        self.report("fusermount3 -uz", results)

    def test_sigterm_with_reads_in_flight(self):
        m = self.mount()
        self.stall_gets()
        rs = self.blocked_readers(m, 4)
        t0 = time.monotonic()
        m.proc.send_signal(signal.SIGTERM)
        self.finish(m)
        self.assertLess(time.monotonic() - t0, BOUND)
        self.assertIn("unmounting", m.output())
        results = [rd.result() for rd in rs]
        for res in results:
            self.assertIn("errno", res)
            self.assertIn(res["errno"], (errno.ECANCELED, errno.EIO,
                                         errno.ECONNABORTED, errno.ENOTCONN,
                                         errno.EINTR), res)
        self.report("SIGTERM", results)

    def report(self, what, results):
        codes = sorted({errno.errorcode.get(r.get("errno"), str(r))
                        for r in results})
        print(f"\n    {what}: readers got {', '.join(codes)}",
              file=sys.stderr)

    # -- SIGKILL -----------------------------------------------------------

    def test_sigkill_gives_enotconn_and_fusermount_clears_it(self):
        m = self.mount()
        self.stall_gets()
        rs = self.blocked_readers(m, 2)
        m.proc.kill()
        m.proc.wait(BOUND)
        for rd in rs:
            res = rd.result()
            self.assertIn(res.get("errno"), (errno.ECONNABORTED,
                                             errno.ENOTCONN), res)
        # (A name the readers never looked up: the kernel may answer a
        # known one from its attribute cache.)
        for op in (lambda: os.stat(m.path(key(9))),
                   lambda: os.listdir(m.dir),
                   lambda: open(m.path(key(2)), "rb")):
            with self.assertRaises(OSError) as cm:
                op()
            self.assertEqual(cm.exception.errno, errno.ENOTCONN)
        # The documented recovery.
        r = subprocess.run(["fusermount3", "-u", m.dir], capture_output=True,
                           timeout=BOUND)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.ismount(m.dir))
        with open("/proc/mounts") as f:
            self.assertNotIn(m.dir, f.read())
        self.assertEqual(os.listdir(m.dir), [])
        m.logf.close()
        # And a new mount on the same directory works.
        self.server.clear_faults()
        m2 = Mount("s3://syn", self.server.url, self.idx, RETRY,
                   log=os.path.join(self.tmp, "remount.log"))
        self.mounts.append(m2)
        self.assert_healthy(m2, 7)

    # -- signals to a blocked reader ----------------------------------------

    def test_sigalrm_to_a_blocked_reader(self):
        # FUSE INTERRUPT: the kernel passes on the signal the reader
        # catches; the daemon answers that open EINTR at once and the
        # reader's handler runs (it raises), instead of the open waiting
        # for the stalled GET to give up (2 attempts of stall_timeout 2 s,
        # every GET stalled).  The GET goes on and serves the next open.
        m = self.mount()
        self.stall_gets()
        (rd,) = self.blocked_readers(m, 1, mode="alarm", first=10)
        t0 = time.monotonic()
        rd.proc.send_signal(signal.SIGALRM)
        res = rd.result()
        secs = time.monotonic() - t0
        print(f"\n    SIGALRM: {res}, {secs:.2f} s after it", file=sys.stderr)
        self.assertTrue(res.get("alarm"), res)
        self.assertLess(secs, 1.9, res)
        self.server.clear_faults()
        self.assert_healthy(m, 10)
        self.assert_healthy(m, 11)

    def test_sigint_to_a_blocked_reader(self):
        m = self.mount()
        self.stall_gets()
        (rd,) = self.blocked_readers(m, 1, first=20)
        t0 = time.monotonic()
        rd.proc.send_signal(signal.SIGINT)
        res = rd.result()
        self.assertLess(time.monotonic() - t0, BOUND)
        # Python turns SIGINT into KeyboardInterrupt: the reader dies with
        # a traceback (status 1) or by the signal.
        self.assertTrue(res.get("signal") == signal.SIGINT or
                        rd.proc.returncode == 1 or "errno" in res, res)
        self.server.clear_faults()
        self.assert_healthy(m, 21)
        # The abandoned GET fails in the background, logged; the mount is
        # unaffected and unmounts cleanly.
        r = subprocess.run(["fusermount3", "-u", m.dir], timeout=BOUND)
        self.assertEqual(r.returncode, 0)
        self.finish(m)

    # -- every endpoint dead -------------------------------------------------

    def check_dead(self, m, cause):
        t0 = time.monotonic()
        st = os.stat(m.path(key(3)))
        self.assertEqual(st.st_size, SIZE)
        self.assertEqual(len(os.listdir(m.path("train"))), N)
        os.statvfs(m.dir)
        self.assertEqual(os.getxattr(m.path(key(3)), "user.s3.uri"),
                         f"s3://syn/{key(3)}".encode())
        self.assertLess(time.monotonic() - t0, META_BOUND)
        # The file is fetched whole, at open: the open fails (direct_io=
        # none, or a kernel that cannot map direct_io files), else its
        # first read (the default, direct_io=auto: the open returns with
        # the GET under way).
        t0 = time.monotonic()
        with self.assertRaises(OSError) as cm:
            fd = os.open(m.path(key(4)), os.O_RDONLY)
            try:
                os.read(fd, SIZE)
            finally:
                os.close(fd)
        secs = time.monotonic() - t0
        self.assertLess(secs, BOUND)
        self.assertIn(cm.exception.errno, (errno.EIO, errno.ETIMEDOUT,
                                           errno.ECONNREFUSED,
                                           errno.EHOSTUNREACH))
        self.assertRegex(m.output(), r"read 'train/img_004_of_200.jpeg': GET "
                         r"s3://syn/train/img_004_of_200.jpeg via \S+ "
                         r"\(attempt 2/2, [\d.]+ s\): " + cause)
        print(f"\n    dead endpoint: open and read gave "
              f"{errno.errorcode[cm.exception.errno]} after {secs:.1f} s",
              file=sys.stderr)

    def test_every_endpoint_refused(self):
        dead = f"http://127.0.0.1:{harness.free_port()}"
        m = self.mount(endpoint=dead)
        self.check_dead(m, r"curl 7 \(Couldn't connect to server\).*"
                        r"Connection refused")
        r = subprocess.run(["fusermount3", "-u", m.dir], timeout=BOUND)
        self.assertEqual(r.returncode, 0)
        self.finish(m)

    def test_every_endpoint_a_black_hole(self):
        holes = [BlackHole(), BlackHole()]
        try:
            log = os.path.join(self.tmp, "hole.log")
            m = Mount("s3://syn", holes[0].url, self.idx, RETRY,
                      f"endpoint={holes[1].url}", log=log)
            self.mounts.append(m)
            self.check_dead(m, r"stalled: no byte moved for \d+\.\d s "
                            r"\(stall_timeout\), 0 body bytes in")
            r = subprocess.run(["fusermount3", "-u", m.dir], timeout=BOUND)
            self.assertEqual(r.returncode, 0)
            self.finish(m)
        finally:
            for h in holes:
                h.close()


if __name__ == "__main__":
    harness.main()
