#!/usr/bin/env python3
"""An index written by an earlier bucketfs still serves, byte for byte:
tests/unit/fixtures/index/compat-716b9a7.idx was built by bucketfs-index at
716b9a7 (whose xxHash64 was its own) from the bucket OBJECTS below, and
compat-716b9a7.tsv holds what that release's mount showed of each file
(size, mtime, inode, ETag).  Today's binaries must find every checksum
right (bucketfs-index verify), mount it without a single LIST, show the
same inodes, sizes and times, and read the same bytes.

To make the fixture again with another release's build:
  test_index_compat.py --make-fixture OLD_BUILD_DIR"""

import hashlib
import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

FIXTURES = os.path.join(harness.SRC, "tests", "unit", "fixtures", "index")
NAME = "compat-716b9a7"
BUCKET = "compat"


def objects():
    """The fixture's bucket: names of many lengths (the hash's every path:
    under 4, 8 and 32 bytes, whole stripes and tails), depth, a marker,
    unicode and specials."""
    objs = {"top.txt": b"top\n", "dir/": b"",
            "dir/inner.bin": bytes(range(256)) * 7,
            "a/b/c/d/deep.txt": b"deep\n",
            "uni/\u00fcmlaut \U0001f600.txt": "unicode\n".encode(),
            "sp ace/+plus%25": b"specials\n"}
    for n in (1, 3, 4, 7, 8, 15, 31, 32, 33, 63, 64, 65, 100, 255):
        name = ("n%d-" % n + "x" * n)[:n]
        objs["len/" + name] = hashlib.sha256(name.encode()).digest() * (n % 5)
    for i in range(40):
        objs["many/f%03d" % i] = b"%d\n" % i * i
    return objs


def read_manifest():
    rows = {}
    with open(os.path.join(FIXTURES, NAME + ".tsv"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                continue
            key, size, mtime, ino, etag = line.rstrip("\n").split("\t")
            rows[key] = (int(size), int(mtime), int(ino), etag)
    return rows


class IndexCompatTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-compat-")
        cls.server = harness.TestServer(
            "--bucket", f"{BUCKET}={cls.mkdir('data')}")
        harness.put_objects(cls.server.url, BUCKET, objects())
        cls.manifest = read_manifest()

    def copy(self):
        """A copy of the fixture: a mount may replace a bad index."""
        p = os.path.join(self.tmp, "copy-%d.idx" % time.monotonic_ns())
        shutil.copyfile(os.path.join(FIXTURES, NAME + ".idx"), p)
        return p

    def test_verify(self):
        p = self.copy()
        r = harness.run([harness.binary("bucketfs-index"), "verify", "-o",
                         f"endpoint={self.server.url},index={p}",
                         f"s3://{BUCKET}"])
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn(f"valid, {len(objects())} keys", r.stdout.decode())

    def test_mount_same_tree_no_list(self):
        p = self.copy()
        with open(p, "rb") as f:
            before = f.read()
        self.server.control("POST", "stats/reset")
        m = harness.Mount(f"s3://{BUCKET}", self.server.url, p,
                          log=os.path.join(self.tmp, "mount.log"))
        self.mounts.append(m)
        files = {k: v for k, v in objects().items() if not k.endswith("/")}
        self.assertEqual(set(self.manifest), set(files))
        for key, (size, mtime, ino, etag) in self.manifest.items():
            st = os.stat(m.path(key))
            self.assertEqual((st.st_size, int(st.st_mtime), st.st_ino),
                             (size, mtime, ino), key)
            self.assertEqual(os.getxattr(m.path(key), "user.s3.etag").decode(),
                             etag, key)
            with open(m.path(key), "rb") as f:
                self.assertEqual(f.read(), files[key], key)
        self.assertEqual(sorted(os.listdir(m.path("many"))),
                         ["f%03d" % i for i in range(40)])
        # Unmounting waits for the check of every checksum (bfs-verify).
        self.unmount(m)
        self.assertNotIn("corrupt", m.output())
        self.assertEqual(self.server.stats()["requests"].get("LIST", 0), 0,
                         m.output())
        with open(p, "rb") as f:
            self.assertEqual(f.read(), before, "the index was rewritten")


def make_fixture(old_build):
    """Builds the fixture with the binaries of @old_build."""
    os.environ["BFS_BUILD_DIR"] = harness.BUILD = old_build
    tmp = tempfile.mkdtemp(prefix="bfs-compat-make-")
    os.mkdir(os.path.join(tmp, "data"))
    server = harness.TestServer("--bucket",
                                f"{BUCKET}={os.path.join(tmp, 'data')}")
    try:
        harness.put_objects(server.url, BUCKET, objects())
        idx = os.path.join(FIXTURES, NAME + ".idx")
        os.makedirs(FIXTURES, exist_ok=True)
        r = harness.run([harness.binary("bucketfs-index"), "build", "-o",
                         f"endpoint={server.url},index={idx}",
                         f"s3://{BUCKET}"])
        assert r.returncode == 0, r.stderr
        m = harness.Mount(f"s3://{BUCKET}", server.url, idx,
                          log=os.path.join(tmp, "mount.log"))
        try:
            with open(os.path.join(FIXTURES, NAME + ".tsv"), "w",
                      encoding="utf-8") as out:
                out.write("# key\tsize\tmtime\tinode\tetag, as the mount "
                          "of %s showed them\n" % NAME)
                for key in sorted(k for k in objects() if not
                                  k.endswith("/")):
                    st = os.stat(m.path(key))
                    etag = os.getxattr(m.path(key), "user.s3.etag").decode()
                    out.write("%s\t%d\t%d\t%d\t%s\n" % (
                        key, st.st_size, int(st.st_mtime), st.st_ino, etag))
        finally:
            m.unmount()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--make-fixture":
        make_fixture(os.path.abspath(sys.argv[2]))
    else:
        if not os.path.exists("/dev/fuse"):
            print("no /dev/fuse: skipping")
            sys.exit(harness.SKIP)
        harness.main()
