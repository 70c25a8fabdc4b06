#!/usr/bin/python3
"""Two default mounts of one bucket standing for two hosts, as MLPerf
Storage's pre-run checks use them, on the test server, s3rver and Ceph RGW:

- The data directory holds more keys than one LIST page (1,000), as a
  dataset does, so each server's index is built over several pages.
- CAP-02: rank 0 writes a 64-byte sentinel into the data directory through
  its mount, waits 5 s, and every rank on both mounts reads exactly those
  bytes; then rank 0 unlinks it and the key is gone from the store.  The
  other mount looked the name up (and was told ENOENT) before it existed.
- CAP-03: link() between the data directory and a results directory gives
  EXDEV, the results directory on local disk or on the mount.
- The dataset (the index's objects) stays read-only: EROFS for writes,
  unlink and truncate; an object the index lacks is found by lookup.
- A stat storm of missing names costs one HEAD (and one one-key LIST) per
  name while negative_timeout holds, counted by a relay in front of the
  server; -o ro mounts see other hosts' files and write nothing.
On the test server only (it injects faults): a PUT that fails reaches
close()."""

import errno
import os
import subprocess
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

# An awkward dataset: a space, UTF-8 and a '+' in the names, a nested
# directory, and enough files per directory to be a directory of several.
DATA = {f"train/img {i}+é_of_6.jpeg": os.urandom(1000 + i) for i in range(6)}
DATA["train/sub/deep.npz"] = os.urandom(5000)
# Beside them, more keys than one LIST page holds (servers answer 1,000 at
# most), so that every server's listing of the data directory pages.
FILLER = {f"train/f{i:04d}.bin": b"%d" % i for i in range(1100)}
RANKS_PER_HOST = 2
SENTINEL_WAIT = 5  # mlpstorage's CAP-02: seconds between write and read

# One rank of CAP-02's read step: reads the sentinel, prints its bytes.
RANK_READ = """
import sys
with open(sys.argv[1], "rb") as f:
    sys.stdout.buffer.write(f.read())
"""


class MultiHost:
    """The checks, for any server; subclasses start one in setUpClass and
    set cls.server (with .url), cls.bucket, cls.ak and cls.sk."""

    reset_faults = False

    @classmethod
    def seed(cls):
        for k, v in DATA.items():
            harness.put_object(cls.server.url, cls.bucket, k, v,
                               ak=cls.ak, sk=cls.sk)
        harness.put_objects(cls.server.url, cls.bucket, FILLER, ak=cls.ak,
                            sk=cls.sk, workers=8)
        cls.proxy = harness.CountingProxy(cls.server.url)
        cls.env = harness.client_env(AWS_ACCESS_KEY_ID=cls.ak,
                                     AWS_SECRET_ACCESS_KEY=cls.sk)

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        super().tearDownClass()

    def mount(self, name, *opts):
        m = Mount(f"s3://{self.bucket}", self.proxy.url,
                  os.path.join(self.tmp, f"{name}.idx"), *opts,
                  log=os.path.join(self.tmp, f"{name}.log"), env=self.env)
        self.mounts.append(m)
        return m

    def on_store(self, key):
        s = harness.Signer(self.server.url, self.ak, self.sk)
        try:
            r = s.request("HEAD", harness.key_path(self.bucket, key))
            return r[0] if isinstance(r, tuple) else r.status
        finally:
            s.close()

    def assert_errno(self, code, fn, *args):
        with self.assertRaises(OSError) as cm:
            fn(*args)
        self.assertEqual(cm.exception.errno, code, cm.exception)

    def test_cap02_sentinel_across_hosts(self):
        a = self.mount("host-a")
        b = self.mount("host-b")
        data_dir = "train"
        name = f".mlps-sentinel-{os.getpid()}-{time.time_ns()}"
        # Both indexes hold every key of the paged data directory.
        train = {k.split("/")[1] for k in list(DATA) + list(FILLER)}
        for m in (a, b):
            self.assertEqual(set(os.listdir(m.path(data_dir))), train)
        # Host B asks first: nothing yet (and that answer is cached).
        self.assertFalse(os.path.exists(b.path(data_dir, name)))
        payload = os.urandom(64)
        # Rank 0 (host A) writes the sentinel.
        with open(a.path(data_dir, name), "wb") as f:
            f.write(payload)
        self.assertEqual(self.on_store(f"{data_dir}/{name}"), 200)
        time.sleep(SENTINEL_WAIT)
        # Every rank on every host reads it back.
        ranks = [subprocess.Popen([sys.executable, "-c", RANK_READ,
                                   m.path(data_dir, name)],
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
                 for m in (a, b) for _ in range(RANKS_PER_HOST)]
        for i, r in enumerate(ranks):
            out, err = r.communicate(timeout=60)
            self.assertEqual(r.returncode, 0, f"rank {i}: {err!r}")
            self.assertEqual(out, payload, f"rank {i} read other bytes")
        self.assertEqual(os.stat(b.path(data_dir, name)).st_ino,
                         os.stat(a.path(data_dir, name)).st_ino)
        # Rank 0 removes it: gone from the store, and from both hosts
        # (B's kernel keeps the name for at most its 1 s timeout).
        os.unlink(a.path(data_dir, name))
        self.assertEqual(self.on_store(f"{data_dir}/{name}"), 404)
        self.assertFalse(os.path.exists(a.path(data_dir, name)))
        time.sleep(1.5)
        self.assertFalse(os.path.exists(b.path(data_dir, name)))
        # The dataset is untouched.
        for k, v in DATA.items():
            with open(b.path(*k.split("/")), "rb") as f:
                self.assertEqual(f.read(), v, k)

    def test_cap03_link_gives_exdev(self):
        m = self.mount("cap03")
        results = tempfile.mkdtemp(dir=self.tmp, prefix="results-")
        src = m.path("train", "img 0+é_of_6.jpeg")
        self.assert_errno(errno.EXDEV, os.link, src,
                          os.path.join(results, "x"))
        self.assert_errno(errno.EXDEV, os.link, src, m.path("results-x"))
        # And from a new file of the mount's own.
        with open(m.path("train", ".cap03"), "wb") as f:
            f.write(b"x")
        self.assert_errno(errno.EXDEV, os.link, m.path("train", ".cap03"),
                          os.path.join(results, "y"))
        os.unlink(m.path("train", ".cap03"))

    def test_dataset_read_only_and_new_names(self):
        m = self.mount("dataset")
        img = m.path("train", "img 1+é_of_6.jpeg")
        for fn in (lambda: open(img, "r+b"), lambda: open(img, "wb"),
                   lambda: os.unlink(img), lambda: os.truncate(img, 0)):
            self.assert_errno(errno.EROFS, fn)
        self.assert_errno(errno.EXDEV, os.rename, img, m.path("moved"))
        with open(img, "rb") as f:
            self.assertEqual(f.read(), DATA["train/img 1+é_of_6.jpeg"])
        # An object put on the store after the index was built: found by
        # lookup, read, and removable (it is not the index's).
        key = "train/late +ü.bin"
        body = os.urandom(3000)
        harness.put_object(self.server.url, self.bucket, key, body,
                           ak=self.ak, sk=self.sk)
        with open(m.path(*key.split("/")), "rb") as f:
            self.assertEqual(f.read(), body)
        os.unlink(m.path(*key.split("/")))
        self.assertEqual(self.on_store(key), 404)
        # A new directory, a file in it, both removed again.
        os.mkdir(m.path("valid"))
        with open(m.path("valid", "f"), "wb") as f:
            f.write(b"v")
        self.assert_errno(errno.ENOTEMPTY, os.rmdir, m.path("valid"))
        os.unlink(m.path("valid", "f"))
        os.rmdir(m.path("valid"))
        self.assertEqual(self.on_store("valid/"), 404)

    def test_stat_storm_of_missing_names(self):
        m = self.mount("storm", "negative_timeout=60")
        names = [m.path("train", f".missing-{i}") for i in range(100)]
        self.proxy.reset()
        for _ in range(5):
            for p in names:
                self.assertFalse(os.path.exists(p))
        # One HEAD and one LIST per name, however often it was asked.
        self.assertEqual(self.proxy.count("HEAD"), len(names))
        self.assertEqual(self.proxy.count("LIST"), len(names))
        # negative_timeout=0: every lookup asks, and the kernel keeps
        # no negative entry either.
        z = self.mount("storm-0", "negative_timeout=0")
        self.proxy.reset()
        for _ in range(3):
            self.assertFalse(os.path.exists(z.path("train", ".missing-0")))
        self.assertEqual(self.proxy.count("HEAD"), 3)

    def test_read_only_mount_sees_and_refuses(self):
        w = self.mount("writer")
        r = self.mount("reader", "ro")
        self.assert_errno(errno.EROFS, open, r.path("train", ".ro"), "wb")
        self.assert_errno(errno.EROFS, os.mkdir, r.path("valid"))
        with open(w.path("train", ".from-w"), "wb") as f:
            f.write(b"seen")
        with open(r.path("train", ".from-w"), "rb") as f:
            self.assertEqual(f.read(), b"seen")
        self.assert_errno(errno.EROFS, open, r.path("train", ".from-w"),
                          "r+b")
        self.assert_errno(errno.EROFS, os.unlink, r.path("train", ".from-w"))
        self.assertEqual(os.stat(r.path("train")).st_mode & 0o222, 0)
        os.unlink(w.path("train", ".from-w"))


class TestServerHosts(MultiHost, harness.MountCase):
    reset_faults = True

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-multihost-")
        data = cls.mkdir("data")
        cls.bucket = "mlds"
        cls.ak, cls.sk = harness.AK, harness.SK
        cls.server = harness.TestServer("--bucket", f"mlds={data}")
        cls.seed()

    def test_put_error_reaches_close(self):
        m = self.mount("fail", "max_attempts=2")
        self.server.faults([{"op": "PUT", "kind": "status", "status": 403,
                             "code": "AccessDenied"}])
        try:
            f = open(m.path("train", ".denied"), "wb")
            f.write(b"nope")
            self.assert_errno(errno.EACCES, f.close)
        finally:
            self.server.clear_faults()
        self.assertEqual(self.on_store("train/.denied"), 404)
        self.assertIn("close 'train/.denied'", m.output())
        self.assertIn("403", m.output())


class S3rverHosts(MultiHost, harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-multihost-s3rver-")
        cls.bucket = "mlds"
        cls.ak, cls.sk = harness.S3rver.AK, harness.S3rver.SK
        cls.server = harness.S3rver(cls.bucket)
        cls.seed()


class RGWHosts(MultiHost, harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-multihost-rgw-")
        cls.server = harness.RGW("multihost")
        cls.bucket = cls.server.bucket
        cls.ak, cls.sk = cls.server.AK, cls.server.SK
        cls.seed()


if __name__ == "__main__":
    unittest.main(verbosity=2)
