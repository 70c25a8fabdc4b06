#!/usr/bin/python3
"""Streaming multipart writes of new files (writable mode), on the test
server: a file of several parts written with 1 MiB writes and read back
byte-exact, through the mount and S3; a small file still one PUT; what a
writer may not do (out-of-order writes, a second writer, reading while
written) gets its errno and a log line; a part failing with 500 or a
reset is retried; a failing Complete fails close() and leaves no object
and no upload, one answered 200 with an <Error> is retried; an
interrupted close() aborts the upload; an endpoint that dies mid-file
leaves the parts to the others; a daemon killed mid-file leaves an upload
that `bucketfs-index uploads` lists and aborts."""

import ctypes
import errno
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

MiB = 1 << 20
PART = 8 * MiB
# 8 MiB parts, two in flight; files over 10 MB read through the readahead.
OPTS = ("writable", f"part_size={PART}", "write_parts=2", "write_max=10000000")


def write_mib(path, data, fsync=False):
    """Writes @data in 1 MiB write()s (as dd bs=1M), then closes."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        for off in range(0, len(data), MiB):
            os.write(fd, data[off:off + MiB])
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def uploads(signer, bucket, prefix=""):
    """The (key, upload id) of the uploads in progress, from S3."""
    q = "uploads=" + (f"&prefix={urllib.parse.quote(prefix)}" if prefix else "")
    _, _, text = signer.check("ListMultipartUploads",
                              signer.request("GET", "/" + bucket, query=q))
    out = []
    for u in ET.fromstring(text).iter():
        if u.tag.rpartition("}")[2] == "Upload":
            f = {c.tag.rpartition("}")[2]: c.text for c in u}
            out.append((f["Key"], f["UploadId"]))
    return out


def s3_get(signer, bucket, key):
    status, _, body = signer.request("GET", harness.key_path(bucket, key))
    return None if status == 404 else body


class MultipartCase(harness.MountCase):
    """Shared by the servers: set .url, .bucket, .ak, .sk in setUpClass."""

    ak, sk = harness.AK, harness.SK

    def mount(self, name, *opts):
        env = harness.client_env(AWS_ACCESS_KEY_ID=self.ak,
                                 AWS_SECRET_ACCESS_KEY=self.sk)
        m = Mount(f"s3://{self.bucket}", self.url,
                  os.path.join(self.tmp, name + ".idx"), *OPTS, *opts,
                  log=os.path.join(self.tmp, name + ".log"), env=env)
        self.mounts.append(m)
        return m

    def signer(self):
        s = harness.Signer(self.url, self.ak, self.sk)
        self.addCleanup(s.close)
        return s

    def check_on_s3(self, name, data):
        """@name on S3 holds @data, and no upload is left."""
        s = self.signer()
        got = s3_get(s, self.bucket, name)
        self.assertTrue(got == data, f"{name}: the bytes on S3 differ")
        self.assertEqual(uploads(s, self.bucket), [])

    def check_round_trip(self, m, name, data, fsync=False):
        write_mib(m.path(name), data, fsync)
        s = self.signer()
        got = s3_get(s, self.bucket, name)
        self.assertEqual(len(got), len(data))
        self.assertTrue(got == data, f"{name}: the bytes on S3 differ")
        with open(m.path(name), "rb") as f:
            self.assertTrue(f.read() == data, f"{name}: read back differs")
        self.assertEqual(uploads(s, self.bucket), [])


class TestServerMultipart(MultipartCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-mpu-")
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)
        cls.bucket = "ckpt"
        cls.server = harness.TestServer("--bucket", f"ckpt={cls.data}")
        cls.url = cls.server.url

    def ops(self):
        return self.server.stats()["requests"]

    def part_rss(self, m):
        """KiB resident in the daemon's part buffers: anonymous mappings
        of a multiple of PART (neighbours merge) mostly resident (a
        thread's stack, 8 MiB too, is mostly not)."""
        kib, size = 0, 0
        with open(f"/proc/{m.proc.pid}/smaps") as f:
            for line in f:
                w = line.split()
                if "-" in w[0] and not w[0].endswith(":"):
                    lo, hi = (int(x, 16) for x in w[0].split("-"))
                    size = (hi - lo) if len(w) == 5 else 0
                elif w[0] == "Rss:" and size and size % PART == 0 and \
                        int(w[1]) * 1024 >= PART // 2:
                    kib += int(w[1])
        return kib

    def test_part_buffers_kept_while_written_then_unmapped(self):
        # A part's buffer goes to the next part while the file is
        # written (never more than write_parts of them), and is unmapped
        # once the upload ends: every part distinct bytes, so a buffer
        # reused too early would show on S3.
        m = self.mount("reuse")
        data = os.urandom(PART * 6 + 12345)
        fd = os.open(m.path("reuse.pt"), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            for off in range(0, len(data), MiB):
                os.write(fd, data[off:off + MiB])
                self.assertLessEqual(self.part_rss(m), 2 * PART // 1024
                                     + 1024)
        finally:
            os.close(fd)
        self.check_on_s3("reuse.pt", data)
        self.assertEqual(self.part_rss(m), 0)

    def test_parts_small_files_and_limits(self):
        m = self.mount("basic")
        os.makedirs(m.path("ckpt"), exist_ok=True)  # as DLIO does
        before = self.ops()
        # 3.5 parts, fsync'ed before close: fsync completes it.
        self.check_round_trip(m, "ckpt/rank0.pt", os.urandom(PART * 7 // 2),
                              fsync=True)
        after = self.ops()
        self.assertEqual(after["UPLOADPART"] - before.get("UPLOADPART", 0), 4)
        self.assertEqual(after["COMPLETE"] - before.get("COMPLETE", 0), 1)
        # A file under a part: one PUT, no multipart upload.
        self.check_round_trip(m, "small.bin", os.urandom(3 * MiB))
        self.assertEqual(self.ops()["UPLOADPART"], after["UPLOADPART"])
        # Writes after fsync completed it: EBADF.
        fd = os.open(m.path("sealed"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, os.urandom(PART + MiB))
        os.fsync(fd)
        with self.assertRaises(OSError) as cm:
            os.write(fd, b"more")
        self.assertEqual(cm.exception.errno, errno.EBADF)
        with open(m.path("sealed"), "rb") as f:  # complete: readable
            self.assertEqual(len(f.read()), PART + MiB)
        os.close(fd)
        self.assertEqual(len(s3_get(self.signer(), self.bucket, "sealed")),
                         PART + MiB)
        # Out of order beyond what is buffered: EINVAL, close fails too,
        # nothing on S3, the upload aborted.
        fd = os.open(m.path("ooo"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, os.urandom(PART + 2 * MiB))
        # A second writer, and a reader, while it streams: EBUSY.
        for flags in (os.O_WRONLY | os.O_TRUNC, os.O_RDONLY):
            with self.assertRaises(OSError) as cm:
                os.open(m.path("ooo"), flags)
            self.assertEqual(cm.exception.errno, errno.EBUSY)
        with self.assertRaises(OSError) as cm:
            os.pwrite(fd, b"back", 0)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        with self.assertRaises(OSError) as cm:
            os.close(fd)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        s = self.signer()
        self.assertIsNone(s3_get(s, self.bucket, "ooo"))
        self.assertEqual(uploads(s, self.bucket), [])
        out = m.output()
        self.assertIn("write 'ooo'", out)
        self.assertIn("out-of-order write at 0", out)
        self.assertIn("multipart upload of 'ooo' aborted", out)
        self.assertIn("being written", out)

    def test_part_faults_are_retried(self):
        m = self.mount("faults")
        self.server.faults([
            {"op": "UPLOADPART", "kind": "status", "status": 500, "count": 2},
            {"op": "UPLOADPART", "kind": "drop", "count": 1}])
        try:
            self.check_round_trip(m, "retried.pt", os.urandom(PART * 3))
            rules = self.server.control("GET", "faults")["rules"]
            self.assertEqual([r["hits"] for r in rules], [2, 1])
            # A Complete done but its answer lost: the retry finds no
            # upload, and the object there with this upload's ETag.
            self.server.faults([{"op": "COMPLETE", "kind": "reset",
                                 "count": 1}])
            self.check_round_trip(m, "lost.pt", os.urandom(PART * 2))
            rules = self.server.control("GET", "faults")["rules"]
            self.assertEqual([r["hits"] for r in rules], [1])
        finally:
            self.server.clear_faults()

    def test_complete_fails(self):
        m = self.mount("complete", "max_attempts=2")
        self.server.faults([{"op": "COMPLETE", "kind": "status",
                             "status": 400, "code": "InvalidPart"}])
        try:
            with self.assertRaises(OSError) as cm:
                write_mib(m.path("never.pt"), os.urandom(PART * 2))
            self.assertEqual(cm.exception.errno, errno.EINVAL)
        finally:
            self.server.clear_faults()
        s = self.signer()
        self.assertIsNone(s3_get(s, self.bucket, "never.pt"))
        self.assertEqual(uploads(s, self.bucket), [])
        out = m.output()
        self.assertIn("close 'never.pt'", out)
        self.assertIn("CompleteMultipartUpload s3://ckpt/never.pt", out)
        self.assertIn("InvalidPart", out)
        self.assertIn("multipart upload of 'never.pt' aborted", out)
        # A name uploaded before, its next upload refused: the name is not
        # stuck, it can be written again.
        self.check_round_trip(m, "again.pt", os.urandom(MiB))
        self.server.faults([{"op": "COMPLETE", "kind": "status",
                             "status": 400, "code": "InvalidPart"}])
        try:
            with self.assertRaises(OSError):
                write_mib(m.path("again.pt"), os.urandom(PART * 2))
        finally:
            self.server.clear_faults()
        self.check_round_trip(m, "again.pt", os.urandom(PART + MiB))

    def test_killed_daemon_leaves_an_upload_to_abort(self):
        m = self.mount("killed")
        os.makedirs(m.path("ckpt"), exist_ok=True)
        fd = os.open(m.path("ckpt/dead.pt"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, os.urandom(PART + MiB))
        s = self.signer()
        deadline = time.monotonic() + 60
        while not uploads(s, self.bucket) and time.monotonic() < deadline:
            time.sleep(0.1)
        m.proc.send_signal(signal.SIGKILL)
        m.proc.wait()
        try:
            os.close(fd)
        except OSError:
            pass  # ENOTCONN: the daemon is gone
        subprocess.run(["fusermount3", "-uz", m.dir])
        self.assertEqual([k for k, _ in uploads(s, self.bucket)],
                         ["ckpt/dead.pt"])
        env = harness.client_env(AWS_ACCESS_KEY_ID=self.ak,
                                 AWS_SECRET_ACCESS_KEY=self.sk)
        tool = [harness.binary("bucketfs-index"), "uploads",
                f"s3://{self.bucket}/ckpt/", "-o", f"endpoint={self.url}"]
        r = subprocess.run(tool, env=env, capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ckpt/dead.pt", r.stdout)
        self.assertEqual(len(uploads(s, self.bucket)), 1)  # listed only
        r = subprocess.run(tool + ["--abort"], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("aborted", r.stdout)
        self.assertEqual(uploads(s, self.bucket), [])
        self.assertIsNone(s3_get(s, self.bucket, "ckpt/dead.pt"))

    def test_only_the_opener_closing_completes(self):
        m = self.mount("forked")
        data = os.urandom(PART * 2 + MiB)
        fd = os.open(m.path("forked.pt"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, data[:PART + MiB])
        pid = os.fork()
        if pid == 0:  # as a worker forked mid-write: closes, exits
            os.close(fd)
            os._exit(0)
        try:
            self.assertEqual(os.waitpid(pid, 0)[1], 0)
            for off in range(PART + MiB, len(data), MiB):
                os.write(fd, data[off:off + MiB])
        finally:
            os.close(fd)
        self.check_on_s3("forked.pt", data)

    def test_unlinked_while_written_stays_gone(self):
        m = self.mount("unlinked")
        s = self.signer()
        for name, size in (("gone.pt", PART + MiB), ("gone.small", MiB)):
            fd = os.open(m.path(name), os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                os.write(fd, os.urandom(size))
                os.unlink(m.path(name))
                os.write(fd, os.urandom(PART))  # fine, never visible
            finally:
                os.close(fd)  # succeeds: nothing to upload
            self.assertFalse(os.path.exists(m.path(name)))
            self.assertTrue(s3_get(s, self.bucket, name) is None,
                            f"{name}: unlinked, yet on S3")
        self.assertEqual(uploads(s, self.bucket), [])
        self.assertIn("'gone.pt' was unlinked while written: not uploaded",
                      m.output())

    def test_ftruncate_by_the_writer(self):
        m = self.mount("ftruncate")
        s = self.signer()
        data = os.urandom(1024)
        fd = os.open(m.path("cut.bin"), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.write(fd, data)
            os.ftruncate(fd, 512)
            os.ftruncate(fd, 512)  # the size it has
        finally:
            os.close(fd)
        self.assertTrue(s3_get(s, self.bucket, "cut.bin") == data[:512])
        with open(m.path("py.bin"), "wb") as f:  # Python's f.truncate()
            f.write(data)
            f.seek(100)
            f.truncate()
        self.assertTrue(s3_get(s, self.bucket, "py.bin") == data[:100])
        # Streamed: its size stays once a part is on S3.
        big = os.urandom(PART + MiB)
        fd = os.open(m.path("cut.pt"), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.write(fd, big)
            os.ftruncate(fd, len(big))
            with self.assertRaises(OSError) as cm:
                os.ftruncate(fd, MiB)
            self.assertEqual(cm.exception.errno, errno.EINVAL)
        finally:
            os.close(fd)
        self.assertTrue(s3_get(s, self.bucket, "cut.pt") == big)
        self.assertIn("truncate 'cut.pt'", m.output())

    def test_interrupted_wait_for_a_slot(self):
        m = self.mount("interrupted")
        libc = ctypes.CDLL(None, use_errno=True)
        chunk = ctypes.create_string_buffer(os.urandom(MiB), MiB)
        # Both slots taken by slow parts: the third part's write waits,
        # until a signal the writer catches ends it (FUSE INTERRUPT).
        # write(2) itself, not os.write(), which would retry on EINTR.
        self.server.faults([{"op": "UPLOADPART", "kind": "delay",
                             "seconds": 3, "count": 2}])
        old = signal.signal(signal.SIGALRM, lambda signum, frame: None)
        fd = os.open(m.path("intr.pt"), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.write(fd, os.urandom(2 * PART))  # both slots
            signal.setitimer(signal.ITIMER_REAL, 0.3, 0.3)
            for _ in range(PART // MiB):
                rc = libc.write(fd, chunk, ctypes.c_size_t(MiB))
                if rc != MiB:
                    break
            err = ctypes.get_errno()
            signal.setitimer(signal.ITIMER_REAL, 0)
            # Ended: EINTR, or short if the kernel's first pieces of it
            # were taken.
            self.assertTrue(rc == -1 and err == errno.EINTR or
                            0 <= rc < MiB, (rc, err))
            with self.assertRaises(OSError) as cm:
                closing, fd = fd, -1
                os.close(closing)
            self.assertEqual(cm.exception.errno, errno.EIO)
        finally:
            if fd >= 0:
                os.close(fd)
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            self.server.clear_faults()
        s = self.signer()
        self.assertTrue(s3_get(s, self.bucket, "intr.pt") is None)
        # Aborted on an abort thread once its parts let go, from the
        # interrupt on: the log says when.
        logged = "multipart upload of 'intr.pt' aborted after"
        deadline = time.monotonic() + 60
        while logged not in m.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertIn(logged, m.output())
        self.assertEqual(uploads(s, self.bucket), [])
        self.assertIn("interrupted while waiting for a part slot",
                      m.output())

    def test_interrupted_close(self):
        m = self.mount("intrclose")
        libc = ctypes.CDLL(None, use_errno=True)
        # Both parts slow: close() waits for them, until a signal the
        # closer catches ends the wait (FUSE INTERRUPT).  close(2) itself,
        # since os.close() hides EINTR.
        self.server.faults([{"op": "UPLOADPART", "kind": "delay",
                             "seconds": 3, "count": 2}])
        old = signal.signal(signal.SIGALRM, lambda signum, frame: None)
        try:
            fd = os.open(m.path("intr.close"), os.O_CREAT | os.O_WRONLY,
                         0o644)
            os.write(fd, os.urandom(2 * PART))
            signal.setitimer(signal.ITIMER_REAL, 0.3, 0.3)
            rc = libc.close(fd)  # the descriptor is gone whatever it says
            err = ctypes.get_errno()
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.assertEqual((rc, err), (-1, errno.EINTR))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            self.server.clear_faults()
        # Aborted once the slow parts ended, behind the closer's back
        # (logged once the server has answered the abort).
        s = self.signer()
        logged = ("multipart upload of 'intr.close' aborted after 2 parts: "
                  "its completion was interrupted by a signal: "
                  "interrupted while 2 parts were in flight")
        deadline = time.monotonic() + 120
        while ((uploads(s, self.bucket) or logged not in m.output())
               and time.monotonic() < deadline):
            time.sleep(0.2)
        self.assertEqual(uploads(s, self.bucket), [])
        self.assertTrue(s3_get(s, self.bucket, "intr.close") is None)
        out = m.output()
        self.assertIn("close 'intr.close'", out)
        self.assertIn(logged, out)
        # The name can be written again.
        self.check_round_trip(m, "intr.close", os.urandom(PART + MiB))

    def test_interrupted_close_sends_no_queued_part(self):
        # Two connections, six part slots, every part slow: two parts on
        # their way, four queued in the engine when close() is
        # interrupted.  The abort drops the queued ones (never sent) and
        # cuts short the two running, so no UploadPart reaches the
        # server after the interrupt and nothing is visible.
        m = self.mount("intrqueue", "max_connections=2", "write_parts=6")
        libc = ctypes.CDLL(None, use_errno=True)
        s = self.signer()
        # Longer than writing the file takes on a loaded machine: no
        # part ends before the interrupt (the running ones are cut short
        # after it, so the test does not wait for them).
        self.server.faults([{"op": "UPLOADPART", "kind": "delay",
                             "seconds": 120, "count": 100}])
        self.addCleanup(self.server.clear_faults)
        self.server.control("POST", "stats/reset")
        old = signal.signal(signal.SIGALRM, lambda signum, frame: None)
        try:
            fd = os.open(m.path("queued.pt"), os.O_CREAT | os.O_WRONLY,
                         0o644)
            os.write(fd, os.urandom(6 * PART))
            deadline = time.monotonic() + 60
            while (self.ops().get("UPLOADPART", 0) < 2 and
                   time.monotonic() < deadline):
                time.sleep(0.05)
            sent = self.ops().get("UPLOADPART", 0)
            self.assertEqual(sent, 2, "both connections carry a part")
            signal.setitimer(signal.ITIMER_REAL, 0.3, 0.3)
            rc = libc.close(fd)  # the descriptor is gone whatever it says
            err = ctypes.get_errno()
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.assertEqual((rc, err), (-1, errno.EINTR))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        logged = ("multipart upload of 'queued.pt' aborted after 6 parts: "
                  "its completion was interrupted by a signal: "
                  "interrupted while 6 parts were in flight")
        # Logged once every part has let go of its slot and the server
        # has answered the abort: no part can be sent after that.
        deadline = time.monotonic() + 120
        while logged not in m.output() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.server.clear_faults()
        self.assertIn(logged, m.output())
        self.assertEqual(self.ops().get("UPLOADPART", 0), sent)
        self.assertEqual(uploads(s, self.bucket), [])
        self.assertTrue(s3_get(s, self.bucket, "queued.pt") is None)
        # The slots are free again: the name can be written.
        self.check_round_trip(m, "queued.pt", os.urandom(2 * PART + MiB))

    def test_interrupted_write_cancels_its_parts_at_once(self):
        # Six part slots over two connections, every part slow: a write
        # that waits for a seventh slot is interrupted.  The file is
        # broken, so its four queued parts are dropped and the upload
        # aborted then, while the descriptor is still open, not at close.
        m = self.mount("intrwrite", "max_connections=2", "write_parts=6")
        libc = ctypes.CDLL(None, use_errno=True)
        s = self.signer()
        self.server.faults([{"op": "UPLOADPART", "kind": "delay",
                             "seconds": 120, "count": 100}])
        self.addCleanup(self.server.clear_faults)
        self.server.control("POST", "stats/reset")
        old = signal.signal(signal.SIGALRM, lambda signum, frame: None)
        fd = os.open(m.path("wqueued.pt"), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.write(fd, os.urandom(6 * PART))
            deadline = time.monotonic() + 60
            while (self.ops().get("UPLOADPART", 0) < 2 and
                   time.monotonic() < deadline):
                time.sleep(0.05)
            sent = self.ops().get("UPLOADPART", 0)
            self.assertEqual(sent, 2, "both connections carry a part")
            more = ctypes.create_string_buffer(os.urandom(PART + MiB))
            signal.setitimer(signal.ITIMER_REAL, 0.3, 0.3)
            rc = libc.write(fd, more, PART + MiB)
            err = ctypes.get_errno()
            signal.setitimer(signal.ITIMER_REAL, 0)
            # The kernel may have taken part of it before the interrupt.
            self.assertEqual(err, errno.EINTR, (rc, err))
            logged = ("multipart upload of 'wqueued.pt' aborted after 6 "
                      "parts: a write was interrupted: multipart upload: "
                      "interrupted while waiting for a part slot")
            deadline = time.monotonic() + 60
            while (logged not in m.output() and
                   time.monotonic() < deadline):
                time.sleep(0.2)
            self.assertIn(logged, m.output())
            self.assertEqual(self.ops().get("UPLOADPART", 0), sent)
            self.assertEqual(uploads(s, self.bucket), [])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            rc = libc.close(fd)
        self.assertEqual((rc, ctypes.get_errno()), (-1, errno.EIO))
        self.server.clear_faults()
        self.assertTrue(s3_get(s, self.bucket, "wqueued.pt") is None)
        self.check_round_trip(m, "wqueued.pt", os.urandom(2 * PART + MiB))

    def test_complete_error_in_a_200_is_retried(self):
        m = self.mount("error200")
        # AWS may send CompleteMultipartUpload's 200 before it fails, with
        # the <Error> in the body; and a body cut on the way is no result
        # either: both retried like a 500.
        self.server.faults([
            {"op": "COMPLETE", "kind": "error_200", "count": 1},
            {"op": "COMPLETE", "kind": "error_200", "count": 1,
             "body": "<?xml version=\"1.0\"?><CompleteMultipartUpload"}])
        try:
            self.check_round_trip(m, "err200.pt", os.urandom(PART * 2))
            rules = self.server.control("GET", "faults")["rules"]
            self.assertEqual([r["hits"] for r in rules], [1, 1])
        finally:
            self.server.clear_faults()

    def test_endpoint_dies_mid_file(self):
        # Three endpoints, relays to the one server (whose uploads they
        # share); the one a part is in flight through dies: that part and
        # the rest go to the others, and the file is right.
        proxies = [harness.CountingProxy(self.url) for _ in range(3)]
        live = list(proxies)
        try:
            m = self.mount("dies", *(f"endpoint={p.url}" for p in proxies))
            self.server.faults([{"op": "UPLOADPART", "kind": "delay",
                                 "seconds": 2, "count": 2}])
            data = os.urandom(PART * 5 + MiB)
            fd = os.open(m.path("dies.pt"), os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                os.write(fd, data[:2 * PART])
                deadline = time.monotonic() + 60
                while (not any(p.count("PUT") for p in proxies)
                       and time.monotonic() < deadline):
                    time.sleep(0.05)
                dead = next(p for p in proxies if p.count("PUT"))
                dead.stop()
                dead_puts = dead.count("PUT")
                live.remove(dead)
                before = {id(p): p.count("PUT") for p in live}
                for off in range(2 * PART, len(data), MiB):
                    os.write(fd, data[off:off + MiB])
            finally:
                os.close(fd)
            self.check_on_s3("dies.pt", data)
            # The parts after its death went to the others.
            self.assertEqual(dead.count("PUT"), dead_puts)
            self.assertGreater(
                sum(p.count("PUT") - before[id(p)] for p in live), 0)
        finally:
            self.server.clear_faults()
            for p in live:
                p.stop()

    def test_stopped_daemon_uploads_nothing_half_written(self):
        m = self.mount("stopped")
        s = self.signer()
        big = os.open(m.path("half.pt"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(big, os.urandom(PART + MiB))
        small = os.open(m.path("half.small"), os.O_CREAT | os.O_WRONLY,
                        0o644)
        os.write(small, b"x" * 1000)
        deadline = time.monotonic() + 60
        while not uploads(s, self.bucket) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual([k for k, _ in uploads(s, self.bucket)],
                         ["half.pt"])
        m.proc.send_signal(signal.SIGTERM)
        m.proc.wait(timeout=120)
        for fd in (big, small):
            try:
                os.close(fd)
            except OSError:
                pass  # ENOTCONN: the daemon is gone
        subprocess.run(["fusermount3", "-uz", m.dir])
        self.assertEqual(uploads(s, self.bucket), [])
        for k in ("half.pt", "half.small"):
            self.assertTrue(s3_get(s, self.bucket, k) is None,
                            f"{k}: half-written, yet on S3")
        out = m.output()
        self.assertIn("'half.pt' not on S3: the daemon stopped mid-file "
                      "(upload aborted)", out)
        self.assertIn("'half.small' not on S3: the daemon stopped mid-file",
                      out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
