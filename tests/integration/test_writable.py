#!/usr/bin/python3
"""Writable mode (-o writable): what MLPerf Storage's pre-flight checks do on
a data directory, on real mounts of the test server, two at a time standing
for two hosts: statvfs, a probe dot-file created, stat'ed (same st_ino on
both hosts) and unlinked, mkdir of train/valid/test, link giving EXDEV; and
the limits: indexed objects stay read-only, write_max, an upload failing at
close(), a -o ro mount refusing all of it."""

import errno
import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

IMG = 322_624
DATA = {f"train/img_{i}_of_4.jpeg": bytes([i]) * IMG for i in range(4)}


class WritableTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-writable-")
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)
        cls.server = harness.TestServer("--bucket", f"mlds={cls.data}")
        for k, v in DATA.items():
            harness.put_object(cls.server.url, "mlds", k, v)

    def mount(self, name, *opts):
        m = Mount("s3://mlds", self.server.url,
                  os.path.join(self.tmp, name + ".idx"), *opts,
                  log=os.path.join(self.tmp, name + ".log"))
        self.mounts.append(m)
        self.addCleanup(self.unmount, m)
        return m

    def unmount(self, m):
        if m.proc.poll() is None:
            rc, status = m.unmount()
            self.assertEqual((rc, status), (0, 0), m.output())

    def s3_get(self, key):
        """The object's bytes through the server's S3 API (signed with
        botocore), or None on 404."""
        import http.client
        import urllib.parse
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        path = "/mlds/" + urllib.parse.quote(key, safe="/~")
        req = AWSRequest(method="GET", url=self.server.url + path,
                         headers={"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"})
        S3SigV4Auth(Credentials(harness.AK, harness.SK), "s3",
                    "us-east-1").add_auth(req)
        u = urllib.parse.urlsplit(self.server.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("GET", path, headers=dict(req.headers.items()))
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        if resp.status == 404:
            return None
        self.assertEqual(resp.status, 200, body)
        return body

    def server_has(self, key):
        return self.s3_get(key) is not None

    def test_mlperf_checks_across_two_hosts(self):
        a = self.mount("host-a", "writable")
        b = self.mount("host-b", "writable")
        # statvfs: free space at least the dataset's size.
        st = os.statvfs(a.path("train"))
        self.assertGreaterEqual(st.f_bavail * st.f_frsize, IMG * len(DATA))

        # A probe dot-file: created and written on A, uploaded at close.
        probe = "train/.probe-host-a"
        with open(a.path(probe), "wb") as f:
            f.write(b"probe\n")
        self.assertTrue(self.server_has(probe))
        sa = os.stat(a.path(probe))
        self.assertEqual(sa.st_size, 6)
        # Host B finds it on S3 (not in its index), same st_ino, same bytes.
        sb = os.stat(b.path(probe))
        self.assertEqual(sb.st_ino, sa.st_ino)
        self.assertEqual(sb.st_size, 6)
        with open(b.path(probe), "rb") as f:
            self.assertEqual(f.read(), b"probe\n")
        self.assertIn(".probe-host-a", os.listdir(a.path("train")))
        # The dataset is still whole, and listed once per name.
        names = os.listdir(a.path("train"))
        self.assertEqual(len(names), len(set(names)))
        for k in DATA:
            self.assertIn(os.path.basename(k), names)
        # Unlinked on A: gone on S3, on A at once, on B after its
        # attribute timeout (1 s).
        os.unlink(a.path(probe))
        self.assertFalse(self.server_has(probe))
        self.assertFalse(os.path.exists(a.path(probe)))
        time.sleep(1.5)
        self.assertFalse(os.path.exists(b.path(probe)))

        # mkdir train/valid/test as the benchmark does.
        for d in ("train", "valid", "test"):
            os.makedirs(a.path(d), exist_ok=True)
        with self.assertRaises(FileExistsError):
            os.mkdir(a.path("train"))
        self.assertTrue(os.path.isdir(a.path("valid")))
        self.assertEqual(self.s3_get("valid/"), b"")
        self.assertTrue(os.path.isdir(b.path("test")))
        for d in ("train", "valid", "test"):
            os.makedirs(b.path(d), exist_ok=True)
        self.assertIn("valid", os.listdir(a.path()))
        # A file in a new directory, then rmdir refused until it's gone.
        with open(a.path("valid/.x"), "wb") as f:
            f.write(b"x")
        with self.assertRaises(OSError) as cm:
            os.rmdir(a.path("valid"))
        self.assertEqual(cm.exception.errno, errno.ENOTEMPTY)
        os.unlink(a.path("valid/.x"))
        os.rmdir(a.path("valid"))
        self.assertFalse(os.path.exists(a.path("valid")))

        # link: EXDEV into another filesystem (the kernel's) and inside
        # the mount (ours).
        img = a.path("train/img_0_of_4.jpeg")
        with self.assertRaises(OSError) as cm:
            os.link(img, os.path.join(self.tmp, "sentinel"))
        self.assertEqual(cm.exception.errno, errno.EXDEV)
        with self.assertRaises(OSError) as cm:
            os.link(img, a.path("train/.sentinel"))
        self.assertEqual(cm.exception.errno, errno.EXDEV)

    def test_indexed_objects_stay_read_only(self):
        m = self.mount("ro-objects", "writable")
        img = m.path("train/img_1_of_4.jpeg")
        for fn in (lambda: open(img, "r+b"), lambda: os.unlink(img),
                   lambda: os.truncate(img, 0)):
            with self.assertRaises(OSError) as cm:
                fn()
            self.assertEqual(cm.exception.errno, errno.EROFS)
        with self.assertRaises(FileExistsError):
            os.open(img, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        with self.assertRaises(OSError) as cm:
            os.rename(img, m.path("train/moved"))
        self.assertEqual(cm.exception.errno, errno.EXDEV)
        with open(img, "rb") as f:
            self.assertEqual(f.read(), DATA["train/img_1_of_4.jpeg"])

    def test_rewrite_truncate_and_write_max(self):
        m = self.mount("limits", "writable", "write_max=1000")
        p = m.path(".scratch")
        with open(p, "wb") as f:
            f.write(b"a" * 600)
        with open(p, "r+b") as f:
            f.seek(100)
            f.write(b"B" * 10)
        with open(p, "rb") as f:
            self.assertEqual(f.read(), b"a" * 100 + b"B" * 10 + b"a" * 490)
        os.truncate(p, 50)
        self.assertEqual(os.stat(p).st_size, 50)
        # Another host truncates it by opening with O_TRUNC, without
        # ever having read it.
        other = self.mount("limits-b", "writable")
        with open(other.path(".made-elsewhere"), "wb") as f:
            f.write(b"12345")
        with open(m.path(".made-elsewhere"), "wb") as f:
            pass
        self.assertEqual(self.s3_get(".made-elsewhere"), b"")
        os.unlink(m.path(".made-elsewhere"))
        self.assertEqual(self.s3_get(".scratch"), b"a" * 50)
        with self.assertRaises(OSError) as cm:
            with open(p, "ab") as f:
                f.write(b"z" * 2000)
        self.assertEqual(cm.exception.errno, errno.EFBIG)
        self.assertEqual(self.s3_get(".scratch"), b"a" * 50)
        os.unlink(p)

    def test_failed_write_is_never_uploaded(self):
        # A file changed in place (buffered whole) written past
        # write_max: the write fails, and so does close(); S3 keeps what
        # it had, never the prefix that was buffered, or a cut-short
        # checkpoint would look complete to every reader.
        m = self.mount("cut", "writable", "write_max=3000000")
        with open(m.path(".ckpt"), "wb") as f:
            f.write(b"x" * 1_000_000)
        fd = os.open(m.path(".ckpt"), os.O_WRONLY)
        os.pwrite(fd, b"y" * 1_000_000, 1_000_000)
        with self.assertRaises(OSError) as cm:
            os.pwrite(fd, b"y" * 2_000_000, 2_000_000)
        self.assertEqual(cm.exception.errno, errno.EFBIG)
        with self.assertRaises(OSError) as cm:
            os.close(fd)
        self.assertEqual(cm.exception.errno, errno.EFBIG)
        self.assertEqual(self.s3_get(".ckpt"), b"x" * 1_000_000)
        out = m.output()
        self.assertIn("write '.ckpt'", out)
        self.assertIn("close '.ckpt'", out)
        self.assertIn("not uploaded: an earlier write failed", out)
        # Emptied and written again, whole this time.
        with open(m.path(".ckpt"), "wb") as f:
            f.write(b"z" * 1000)
        self.assertEqual(self.s3_get(".ckpt"), b"z" * 1000)
        os.unlink(m.path(".ckpt"))

    def test_reopened_before_release(self):
        # close() ends the opener's write at once, though the kernel
        # releases the handle later (here: never, while a copy of the
        # descriptor stays open). Opening the name for writing again
        # must not find it busy, and the old handle must not write
        # into the new upload.
        m = self.mount("again", "writable")
        p = m.path(".again")
        fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"first")
            os.close(os.dup(fd))
            self.assertEqual(self.s3_get(".again"), b"first")
            with open(p, "wb") as f:
                f.write(b"second")
                f.flush()
                # Neither written, synced nor cut through it: that is
                # the other handle's file now.
                for act in (lambda: os.write(fd, b"old handle"),
                            lambda: os.fsync(fd),
                            lambda: os.ftruncate(fd, 0)):
                    with self.assertRaises(OSError) as cm:
                        act()
                    self.assertEqual(cm.exception.errno, errno.EBADF)
                f.write(b" and more")
        finally:
            os.close(fd)
        self.assertEqual(self.s3_get(".again"), b"second and more")
        with open(p, "rb") as f:
            self.assertEqual(f.read(), b"second and more")
        os.unlink(p)

    def test_holes_large_files_and_other_users(self):
        m = self.mount("holes", "writable", "write_max=100000000",
                       "allow_other", "dir_mode=0777", "file_mode=0666")
        # A write past the end leaves zeros, never old heap bytes.
        fd = os.open(m.path(".sparse"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.pwrite(fd, b"end", 70_000)
        os.close(fd)
        self.assertEqual(self.s3_get(".sparse"), bytes(70_000) + b"end")
        os.unlink(m.path(".sparse"))
        # Over 64 MiB (the default body limit): reopened and read back.
        big = os.urandom(1 << 20) * 70
        with open(m.path(".big"), "wb") as f:
            f.write(big)
        with open(m.path(".big"), "rb") as f:
            self.assertEqual(f.read(), big)
        os.unlink(m.path(".big"))
        # With allow_other and modes that let them in (by default they
        # do not: test_ownership.py), a user other than root may make
        # names.
        import subprocess
        nobody = ["setpriv", "--reuid=65534", "--regid=65534",
                  "--clear-groups"]
        r = subprocess.run(nobody + ["sh", "-c",
                                     f"echo hi > {m.path('.by-nobody')} && "
                                     f"mkdir {m.path('nobodys')} && "
                                     f"rmdir {m.path('nobodys')}"],
                           capture_output=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.s3_get(".by-nobody"), b"hi\n")
        os.unlink(m.path(".by-nobody"))

    def test_upload_failure_reaches_close(self):
        m = self.mount("fail", "writable", "max_attempts=2")
        self.server.faults([{"op": "PUT", "kind": "status", "status": 403,
                             "code": "AccessDenied"}])
        try:
            f = open(m.path(".denied"), "wb")
            f.write(b"nope")
            with self.assertRaises(OSError) as cm:
                f.close()
            self.assertEqual(cm.exception.errno, errno.EACCES)
        finally:
            self.server.clear_faults()
        self.assertFalse(self.server_has(".denied"))
        time.sleep(1.5)  # the kernel's attribute cache of the name
        self.assertFalse(os.path.exists(m.path(".denied")))
        out = m.output()
        self.assertIn("close '.denied'", out)
        self.assertIn("PUT s3://mlds/.denied", out)
        self.assertIn("403", out)

    def test_read_only_mount_refuses(self):
        m = self.mount("readonly", "ro")
        for fn in (lambda: open(m.path(".probe"), "wb"),
                   lambda: os.mkdir(m.path("valid"))):
            with self.assertRaises(OSError) as cm:
                fn()
            self.assertEqual(cm.exception.errno, errno.EROFS)
        with self.assertRaises(OSError) as cm:
            os.link(m.path("train/img_2_of_4.jpeg"), m.path("x"))
        self.assertEqual(cm.exception.errno, errno.EXDEV)
        self.assertFalse(os.path.exists(m.path("no-such-name")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
