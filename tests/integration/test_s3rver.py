#!/usr/bin/env python3
"""The S3 client against s3rver from npm: an S3 implementation we did not
write (it does not verify signatures, and lists slowly); and a mount of a
bucket of 5,000+ keys on it, whose listing comes out of byte order."""

import errno
import hashlib
import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_client import SPECIAL_KEYS, esc  # noqa: E402
from test_conformance import shown_tree, walk  # noqa: E402


class S3rverTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = harness.S3rver("bkt")
        cls.client = harness.binary("s3-client")
        cls.env = harness.client_env(AWS_ACCESS_KEY_ID=harness.S3rver.AK,
                                     AWS_SECRET_ACCESS_KEY=harness.S3rver.SK)
        rnd = random.Random(3)
        cls.objects = {f"d/obj{i:03d}": rnd.randbytes(rnd.randrange(0, 5000))
                       for i in range(25)}
        cls.objects["big.bin"] = rnd.randbytes(2_000_000)
        cls.special = s3rver_special_keys()
        for i, k in enumerate(cls.special):
            cls.objects["sp/" + k] = f"special {i}".encode()
        for k, v in cls.objects.items():
            harness.put_object(cls.server.url, "bkt", k, v,
                               ak=harness.S3rver.AK, sk=harness.S3rver.SK)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def c(self, *args):
        return harness.run([self.client, "-o",
                            f"endpoint={self.server.url}", *args],
                           env=self.env)

    def test_get_every_object(self):
        for k, v in self.objects.items():
            r = self.c("get", f"s3://bkt/{esc(k)}")
            self.assertEqual(r.returncode, 0, (k, r.stderr))
            self.assertEqual(r.stdout, v, k)

    def test_ranges(self):
        big = self.objects["big.bin"]
        for off, ln in [(0, 100), (1_999_000, 1000), (1_000_000, 0),
                        (7, 1_048_576)]:
            r = self.c("get", "s3://bkt/big.bin", str(off), str(ln))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, big[off:off + ln] if ln else big[off:])

    def test_paginated_listing(self):
        r = self.c("listall", "s3://bkt/d/", "-", "7")
        self.assertEqual(r.returncode, 0, r.stderr)
        keys = [bytes.fromhex(l.split()[1]).decode()
                for l in r.stdout.decode().splitlines()
                if l.startswith("obj ")]
        self.assertEqual(keys, sorted(k for k in self.objects
                                      if k.startswith("d/")))
        self.assertEqual(r.stdout.count(b"page "), 4)

    def test_listing_sizes_and_special_keys(self):
        r = self.c("listall", "s3://bkt")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = {}
        for line in r.stdout.decode().splitlines():
            if line.startswith("obj "):
                f = line.split()
                got[bytes.fromhex(f[1]).decode()] = int(f[2])
        self.assertEqual(got, {k: len(v) for k, v in self.objects.items()})

    def test_delimiter_under_a_prefix(self):
        r = self.c("list", "s3://bkt/sp/", "/")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.decode().splitlines()
        objs = {bytes.fromhex(l.split()[1]).decode() for l in lines
                if l.startswith("obj ")}
        prefixes = {bytes.fromhex(l.split()[1]).decode() for l in lines
                    if l.startswith("prefix ")}
        self.assertEqual(objs, {"sp/" + k for k in self.special
                                if "/" not in k})
        # s3rver 3.7 returns only one of several CommonPrefixes (seen
        # here); what it returns must still be right.
        self.assertTrue(prefixes)
        self.assertLessEqual(prefixes, {"sp/unicode/", "sp/trailing/"})

    def test_missing_and_head(self):
        r = self.c("get", "s3://bkt/absent")
        self.assertEqual(r.returncode, errno.ENOENT, r.stderr)
        self.assertIn(b"HTTP 404 NoSuchKey", r.stderr)
        r = self.c("head", "s3://bkt/big.bin")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"size=2000000", r.stdout)
        r = self.c("head", "s3://bkt/absent")
        self.assertEqual(r.returncode, errno.ENOENT, r.stderr)

    def test_if_match(self):
        r = self.c("head", "s3://bkt/big.bin")
        etag = r.stdout.decode().split("etag=")[1].split()[0]
        r = self.c("get", "s3://bkt/big.bin", "0", "10", etag)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.c("get", "s3://bkt/big.bin", "0", "10", "ffff")
        self.assertEqual(r.returncode, errno.ESTALE, r.stderr)


def s3rver_special_keys():
    """SPECIAL_KEYS that s3rver can store: it keeps keys as file names, so
    '//', './' and '../' are out of its reach, and it ignores
    encoding-type=url, so a control character would make its listing
    invalid XML (which our parser rightly refuses)."""
    return [k for k in SPECIAL_KEYS
            if "//" not in k and "/." not in k
            and not any(ord(c) < 32 for c in k)]


class S3rverScaleTest(harness.MountCase):
    """5,000+ keys (6 pages of s3rver's slow listing), the special keys it
    can store, an object/prefix collision and astral-plane names beside
    U+E000..U+FFFD ones: s3rver compares UTF-16 code units, so it lists
    'collide/child.bin' before 'collide' and an emoji before U+E000.  The
    index must still come out in byte order, and the tree right."""

    reset_faults = False
    TRAIN = 5200
    ODD = ["collide", "collide/child.bin", "collide.txt",
           "astral/\U0001F600.bin", "astral/\ue000.bin",
           "astral/\ufffd.bin", "astral/\uff5e.bin",
           "astral/\U00010348-gothic.bin", "astral/z.bin"]

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-s3rver-scale-")
        cls.server = harness.S3rver("scale")
        rnd = random.Random(8)
        cls.objects = {f"train/img_{i:05d}.jpg": rnd.randbytes(
            rnd.randrange(1, 200)) for i in range(cls.TRAIN)}
        for i, k in enumerate(s3rver_special_keys()):
            cls.objects["sp/" + k] = f"special {i}".encode()
        for i, k in enumerate(cls.ODD):
            cls.objects[k] = f"odd {i}: {k}".encode()
        harness.put_objects(cls.server.url, "scale", cls.objects,
                            ak=harness.S3rver.AK, sk=harness.S3rver.SK,
                            workers=8)
        cls.env = harness.client_env(AWS_ACCESS_KEY_ID=harness.S3rver.AK,
                                     AWS_SECRET_ACCESS_KEY=harness.S3rver.SK)

    def mount(self, *opts, index=None):
        n = len(os.listdir(self.tmp))
        m = harness.Mount("s3://scale", self.server.url,
                          index or os.path.join(self.tmp, f"{n}.idx"),
                          *opts, log=os.path.join(
                              self.tmp, f"{n}.log"),
                          env=self.env)
        self.mounts.append(m)
        return m

    def test_server_lists_out_of_byte_order(self):
        """The premise: s3rver's own order is not S3's."""
        r = harness.run([harness.binary("s3-client"), "-o",
                         f"endpoint={self.server.url}", "listall",
                         "s3://scale"], env=self.env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        keys = [bytes.fromhex(l.split()[1]) for l in
                r.stdout.decode().splitlines() if l.startswith("obj ")]
        self.assertEqual(sorted(keys), sorted(k.encode()
                                              for k in self.objects))
        self.assertGreaterEqual(r.stdout.count(b"page "), 6)
        self.assertNotEqual(keys, sorted(keys), "s3rver listed in byte "
                            "order: this test no longer covers the case")

    def check_tree(self, m):
        want = shown_tree({k: len(v) for k, v in self.objects.items()})
        self.assertEqual(walk(m.dir), want)
        # The collision: the directory wins.
        self.assertTrue(os.path.isdir(m.path("collide")))
        with open(m.path("collide", "child.bin"), "rb") as f:
            self.assertEqual(f.read(), self.objects["collide/child.bin"])
        # readdir in byte order: U+E000.. (EE..) before the emoji (F0..).
        names = os.listdir(m.path("astral"))
        self.assertEqual(names, sorted(names, key=str.encode))
        for p in [p for p, size in want.items() if size is not None
                  and not p.startswith("train/")] + \
                random.Random(2).sample(sorted(
                    p for p in want if p.startswith("train/")), 100):
            with open(m.path(p), "rb") as f:
                self.assertEqual(hashlib.sha256(f.read()).digest(),
                                 hashlib.sha256(self.objects[p]).digest(),
                                 p)

    def test_mount_parallel_listing(self):
        m = self.mount("list_workers=8")
        self.check_tree(m)
        self.unmount(m)

    def test_mount_sequential_listing(self):
        m = self.mount("list_workers=1")
        self.check_tree(m)
        self.unmount(m)

    def test_index_build_and_compare(self):
        idx = os.path.join(self.tmp, "built.idx")
        opts = f"endpoint={self.server.url},index={idx}"
        r = harness.run([harness.binary("bucketfs-index"), "build", "-o",
                         opts, "s3://scale"], env=self.env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertRegex(r.stdout.decode(),
                         rf"keys:\s+{len(self.objects)}\n")
        m = self.mount(index=idx)
        self.assertNotIn("listing", m.output())
        r = harness.run([harness.binary("bucketfs-compare"), m.dir,
                         "s3://scale", "-o", f"endpoint={self.server.url}",
                         "--content"], env=self.env, timeout=600)
        out = r.stdout.decode()
        self.assertEqual(r.returncode, 0, out + r.stderr.decode())
        self.assertIn("result: the two sides match", out)
        self.unmount(m)


if __name__ == "__main__":
    harness.main()
