#!/usr/bin/env python3
"""Real mounts of bucketfs against the test S3 server and s3rver: the tree
matches the listing, bytes match, metadata sends no request, the index
persists, bad index files are rebuilt, SIGHUP switches a live mount, and
read failures log their cause."""

import errno
import os
import random
import shutil
import signal
import stat
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

# Keys and what the tree must make of them (see bucketfs(1), KEYS AND PATHS).
TREE_KEYS = {
    "top.txt": b"top\n",
    "dir/": b"",                        # a marker: the directory exists
    "dir/inner.bin": bytes(range(256)) * 40,
    "deep/a/b/c/d.txt": b"deep\n",      # implied directories
    "both": b"file and prefix",         # hidden by the directory 'both'
    "both/child": b"child\n",
    "a//b": b"empty component",         # not shown
    "x/./y": b"dot",                    # not shown
    "x/../y": b"dotdot",                # not shown
    "n" * 300: b"long",                 # not shown (name > 255 bytes)
    "ctrl\x01name": b"control",         # shown as is
    "uni/ümlaut 😀.txt": b"unicode\n",
    "sp ace/+plus%25": b"specials\n",
}
SHOWN = {k: v for k, v in TREE_KEYS.items()
         if k not in ("dir/", "both", "a//b", "x/./y", "x/../y", "n" * 300)}


def walk(root):
    """Every file under root as {relative path: bytes}, via os.walk."""
    out = {}
    for d, dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


class MountTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-mount-")
        cls.server = harness.TestServer("--synthetic", "syn:3000:2048",
                                        "--bucket",
                                        f"tree={cls.mkdir('tree-data')}",
                                        "--bucket",
                                        f"hup={cls.mkdir('hup-data')}",
                                        "--bucket",
                                        f"age={cls.mkdir('age-data')}",
                                        "--bucket",
                                        f"deep={cls.deep_tree()}")
        for k, v in TREE_KEYS.items():
            harness.put_object(cls.server.url, "tree", k, v)

    @classmethod
    def deep_tree(cls):
        """4 levels x fan-out 6 x 4 files: 5,184 keys, several listing
        pages, so the parallel lister cuts the key space."""
        root = cls.mkdir("deep-data")
        cls.deep = {}
        for a in range(6):
            for b in range(6):
                for c in range(6):
                    for d in range(6):
                        path = f"d{a}/e{b}/f{c}/g{d}"
                        os.makedirs(os.path.join(root, path))
                        for i in range(4):
                            key = f"{path}/k{i}.txt"
                            cls.deep[key] = key.encode()
                            with open(os.path.join(root, key), "wb") as f:
                                f.write(key.encode())
        return root

    def mount(self, url, index, *opts, **kw):
        log = os.path.join(self.tmp, f"mount-{time.monotonic_ns()}.log")
        m = Mount(url, self.server.url, index, *opts, log=log, **kw)
        self.mounts.append(m)
        return m

    def index(self, name):
        return os.path.join(self.tmp, name + ".idx")

    # -- the tree --------------------------------------------------------

    def test_tree_matches_listing(self):
        m = self.mount("s3://tree", self.index("tree"))
        self.assertEqual(walk(m.dir), SHOWN)
        self.assertTrue(os.path.isdir(m.path("dir")))
        self.assertTrue(os.path.isdir(m.path("both")))
        self.assertEqual(sorted(os.listdir(m.path("deep", "a", "b"))), ["c"])
        out = m.output()
        self.assertIn("5 of 13 keys cannot be shown as paths", out)
        # find and ls agree with os.walk.
        r = subprocess.run(["find", m.dir, "-type", "f"],
                           capture_output=True)
        self.assertEqual(r.returncode, 0)
        found = sorted(os.path.relpath(p, m.dir.encode())
                       for p in r.stdout.splitlines())
        self.assertEqual(found, sorted(k.encode() for k in SHOWN))
        r = subprocess.run(["ls", "-la", m.dir], capture_output=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"top.txt", r.stdout)
        r = subprocess.run(["cat", m.path("deep/a/b/c/d.txt")],
                           capture_output=True)
        self.assertEqual(r.stdout, b"deep\n")
        self.unmount(m)

    def test_stat_and_xattrs(self):
        m = self.mount("s3://tree", self.index("tree-stat"))
        st = os.stat(m.path("dir", "inner.bin"))
        self.assertTrue(stat.S_ISREG(st.st_mode))
        self.assertEqual(st.st_size, 256 * 40)
        self.assertEqual(st.st_mode & 0o777, 0o444)
        self.assertTrue(stat.S_ISDIR(os.stat(m.path("dir")).st_mode))
        etag = os.getxattr(m.path("top.txt"), "user.s3.etag").decode()
        self.assertRegex(etag, r"^[0-9a-f]{32}$")
        self.assertEqual(os.getxattr(m.path("top.txt"), "user.s3.uri"),
                         b"s3://tree/top.txt")
        vfs = os.statvfs(m.dir)
        self.assertGreaterEqual(vfs.f_bavail * vfs.f_frsize, 1 << 50)
        self.assertEqual(vfs.f_namemax, 255)
        self.unmount(m)

    def test_read_only(self):
        # -o ro: every write refused, new names too.
        m = self.mount("s3://tree", self.index("tree-ro"), "ro")
        for op in (lambda: open(m.path("new"), "w"),
                   lambda: open(m.path("top.txt"), "r+b"),
                   lambda: os.mkdir(m.path("train")),
                   lambda: os.unlink(m.path("top.txt")),
                   lambda: os.rename(m.path("top.txt"), m.path("t2"))):
            with self.assertRaises(OSError) as cm:
                op()
            self.assertEqual(cm.exception.errno, errno.EROFS)
        self.unmount(m)
        # By default the index's objects stay read-only all the same.
        m = self.mount("s3://tree", self.index("tree-ro"))
        for op, code in ((lambda: open(m.path("top.txt"), "r+b"), errno.EROFS),
                         (lambda: open(m.path("top.txt"), "w"), errno.EROFS),
                         (lambda: os.unlink(m.path("top.txt")), errno.EROFS),
                         (lambda: os.truncate(m.path("top.txt"), 0),
                          errno.EROFS),
                         (lambda: os.rename(m.path("top.txt"), m.path("t2")),
                          errno.EXDEV)):
            with self.assertRaises(OSError) as cm:
                op()
            self.assertEqual(cm.exception.errno, code)
        with open(m.path("top.txt"), "rb") as f:
            self.assertEqual(f.read(), b"top\n")
        self.unmount(m)

    def test_stable_inodes_across_remounts(self):
        idx = self.index("tree-ino")
        m = self.mount("s3://tree", idx)
        first = {p: os.stat(m.path(p)).st_ino for p in SHOWN}
        self.unmount(m)
        os.unlink(idx)      # a fresh build gives the same numbers
        m = self.mount("s3://tree", idx)
        again = {p: os.stat(m.path(p)).st_ino for p in SHOWN}
        self.unmount(m)
        self.assertEqual(first, again)
        self.assertEqual(len(set(first.values())), len(first))

    def test_mount_helper_and_fstab(self):
        # mount(8) runs mount.fuse3, which finds 'bucketfs' on a fixed
        # PATH: link the build there for the test, if nothing is there.
        link = "/usr/local/bin/bucketfs"
        if os.geteuid() != 0 or os.path.lexists(link):
            self.skipTest("needs root and no installed /usr/local/bin/bucketfs")
        os.symlink(os.path.abspath(harness.binary("bucketfs")), link)
        mnt = tempfile.mkdtemp(prefix="bfs-fstab-")
        fstab = os.path.join(self.tmp, "fstab")
        opts = f"endpoint={self.server.url},index={self.index('fstab')}"
        try:
            r = harness.run(["mount", "-t", "fuse.bucketfs", "s3://syn", mnt,
                             "-o", opts])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(len(os.listdir(os.path.join(mnt, "train"))),
                             3000)
            self.assertEqual(harness.run(["umount", mnt]).returncode, 0)
            with open(fstab, "w") as f:
                f.write(f"s3://syn {mnt} fuse.bucketfs {opts},_netdev,"
                        "nofail 0 0\n")
            r = harness.run(["mount", "-T", fstab, mnt])
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(mnt, "train",
                                   "img_0002_of_3000.jpeg"), "rb") as f:
                self.assertEqual(len(f.read()), 2048)
            self.assertEqual(harness.run(["umount", mnt]).returncode, 0)
        finally:
            if os.path.ismount(mnt):
                subprocess.run(["fusermount3", "-uz", mnt])
            os.unlink(link)
            os.rmdir(mnt)

    # -- the index -------------------------------------------------------

    def test_parallel_listing_of_a_deep_tree(self):
        idx = self.index("deep")
        m = self.mount("s3://deep", idx, "list_workers=4")
        self.assertEqual(walk(m.dir), self.deep)
        self.unmount(m)
        r = harness.run([harness.binary("bucketfs-index"), "verify", "-o",
                         f"endpoint={self.server.url},index={idx}",
                         "s3://deep"])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_metadata_sends_no_request_and_index_persists(self):
        idx = self.index("syn")
        m = self.mount("s3://syn", idx)
        self.unmount(m)
        self.server.control("POST", "stats/reset")
        m = self.mount("s3://syn", idx)
        names = os.listdir(m.path("train"))
        self.assertEqual(len(names), 3000)
        for n in random.Random(1).sample(names, 1000):
            st = os.stat(m.path("train", n))
            self.assertEqual(st.st_size, 2048)
        os.statvfs(m.dir)
        os.getxattr(m.path("train", names[0]), "user.s3.etag")
        stats = self.server.stats()["requests"]
        self.assertEqual(sum(stats.values()), 0, stats)
        with open(m.path("train", names[7]), "rb") as f:
            self.assertEqual(len(f.read()), 2048)
        self.assertEqual(self.server.stats()["requests"]["GET"], 1)
        self.assertEqual(self.server.stats()["requests"]["LIST"], 0)
        self.unmount(m)

    def test_bad_index_files_are_rebuilt(self):
        idx = self.index("syn-bad")
        other = self.index("tree-other")
        self.unmount(self.mount("s3://syn", idx))
        self.unmount(self.mount("s3://tree", other))
        with open(idx, "rb") as f:
            good = f.read()
        with open(other, "rb") as f:
            foreign = f.read()
        cases = {
            "truncated": good[:len(good) // 2],
            "header flipped": good[:40] + bytes([good[40] ^ 1]) + good[41:],
            "empty": b"",
            "another bucket": foreign,
        }
        for what, content in cases.items():
            with self.subTest(what=what):
                with open(idx, "wb") as f:
                    f.write(content)
                self.server.control("POST", "stats/reset")
                m = self.mount("s3://syn", idx)
                self.assertEqual(len(os.listdir(m.path("train"))), 3000)
                self.assertGreater(self.server.stats()["requests"]["LIST"],
                                   0)
                self.assertIn("rebuilding", m.output())
                self.unmount(m)

    def test_symlinked_index_is_refused(self):
        idx = self.index("link")
        os.symlink(self.index("syn"), idx)
        with self.assertRaises(RuntimeError) as cm:
            self.mount("s3://syn", idx)
        self.assertIn("symbolic link", str(cm.exception))

    def test_sighup_switches_live_mount(self):
        idx = self.index("hup")
        big = bytes(random.Random(9).randbytes(3 << 20))
        harness.put_object(self.server.url, "hup", "big.bin", big)
        m = self.mount("s3://hup", idx)
        f = open(m.path("big.bin"), "rb")
        head = f.read(100)
        harness.put_object(self.server.url, "hup", "added.txt", b"new!\n")
        r = harness.run([harness.binary("bucketfs-index"), "build", "-q",
                         "-o", f"endpoint={self.server.url},index={idx}",
                         "s3://hup"])
        self.assertEqual(r.returncode, 0, r.stderr)
        m.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "added.txt" not in os.listdir(m.dir):
            self.assertLess(time.monotonic(), deadline, m.output())
            time.sleep(0.05)
        with open(m.path("added.txt"), "rb") as g:
            self.assertEqual(g.read(), b"new!\n")
        # The file opened before the switch keeps working.
        self.assertEqual(head + f.read(), big)
        f.close()
        self.assertIn("SIGHUP: now serving", m.output())
        self.unmount(m)

    def test_index_max_age_rebuilds_in_background(self):
        harness.put_object(self.server.url, "age", "first", b"1")
        m = self.mount("s3://age", self.index("age"), "index_max_age=1")
        self.assertEqual(os.listdir(m.dir), ["first"])
        harness.put_object(self.server.url, "age", "second", b"2")
        deadline = time.monotonic() + 20
        while "second" not in os.listdir(m.dir):
            self.assertLess(time.monotonic(), deadline, m.output())
            time.sleep(0.1)
        self.assertIn("index_max_age: now serving", m.output())
        self.unmount(m)

    def test_sigterm_during_a_background_rebuild(self):
        # The rebuild's listing stalls (30 s per LIST); SIGTERM must not
        # wait for it: the S3 client is shut down first, the rebuild
        # fails at once, the daemon exits 0 and the mount is gone.
        harness.put_object(self.server.url, "age", "first", b"1")
        m = self.mount("s3://age", self.index("age-term"), "index_max_age=1")
        self.server.faults([{"op": "LIST", "bucket": "age", "kind": "delay",
                             "seconds": 30}])
        deadline = time.monotonic() + 20
        while self.server.stats()["requests"]["LIST"] == 0 or \
                not any(r["matched"] for r in
                        self.server.control("GET", "faults")["rules"]):
            self.assertLess(time.monotonic(), deadline, m.output())
            time.sleep(0.1)
        t0 = time.monotonic()
        m.proc.send_signal(signal.SIGTERM)
        status = m.proc.wait(20)
        self.assertLess(time.monotonic() - t0, 10, m.output())
        self.assertEqual(status, 0, m.output())
        self.assertFalse(os.path.ismount(m.dir))
        self.server.clear_faults()
        self.mounts.remove(m)
        m.logf.close()
        os.rmdir(m.dir)

    def test_relative_paths(self):
        # libfuse works from "/" once mounted: relative paths must have
        # been made absolute before, or unmount and SIGHUP would miss.
        rel = os.path.relpath(self.tmp)
        os.mkdir(os.path.join(self.tmp, "rel-mnt"))
        log = open(os.path.join(self.tmp, "rel.log"), "wb")
        p = subprocess.Popen(
            [harness.binary("bucketfs"), "-f", "-o",
             f"endpoint={self.server.url},index={rel}/rel.idx", "s3://syn",
             f"{rel}/rel-mnt"], stdout=log, stderr=subprocess.STDOUT,
            env=harness.client_env())
        mnt = os.path.join(self.tmp, "rel-mnt")
        try:
            deadline = time.monotonic() + 30
            while not os.path.ismount(mnt):
                self.assertIsNone(p.poll())
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.02)
            p.send_signal(signal.SIGHUP)
            time.sleep(0.3)
            p.send_signal(signal.SIGTERM)
            self.assertEqual(p.wait(30), 0)
            self.assertFalse(os.path.ismount(mnt))
            with open(log.name) as f:
                out = f.read()
            self.assertIn(f"SIGHUP: now serving {self.tmp}/rel.idx", out)
        finally:
            if os.path.ismount(mnt):
                subprocess.run(["fusermount3", "-uz", mnt])
            log.close()

    def test_sigterm_unmounts_cleanly(self):
        m = self.mount("s3://syn", self.index("syn-term"))
        m.proc.send_signal(signal.SIGTERM)
        self.assertEqual(m.proc.wait(30), 0, m.output())
        self.assertFalse(os.path.ismount(m.dir))
        self.assertIn("unmounting", m.output())
        self.mounts.remove(m)
        m.logf.close()
        os.rmdir(m.dir)

    # -- reads that fail --------------------------------------------------

    def test_changed_object_is_estale_with_log(self):
        m = self.mount("s3://syn", self.index("syn-stale"))
        self.server.control("POST", "mutate", {
            "bucket": "syn", "key": "train/img_0001_of_3000.jpeg"})
        with self.assertRaises(OSError) as cm:
            with open(m.path("train", "img_0001_of_3000.jpeg"), "rb") as f:
                f.read()
        self.assertEqual(cm.exception.errno, errno.ESTALE)
        out = m.output()
        self.assertRegex(out, r"read 'train/img_0001_of_3000.jpeg': the object"
                         r" changed after the index was built .*: GET "
                         r"s3://syn/train/img_0001_of_3000.jpeg via \S+ "
                         r"\(attempt 1/10, .*HTTP 412 PreconditionFailed")
        self.unmount(m)

    def test_deleted_object_is_enoent_with_log(self):
        m = self.mount("s3://syn", self.index("syn-del"))
        self.server.faults([{"op": "GET", "kind": "status", "status": 404,
                             "code": "NoSuchKey",
                             "message": "The specified key does not exist."}])
        with self.assertRaises(OSError) as cm:
            with open(m.path("train", "img_0005_of_3000.jpeg"), "rb") as f:
                f.read()
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.assertIn("the object vanished after the index was built",
                      m.output())
        self.unmount(m)

    def test_slowdown_storm_then_eio_with_chain(self):
        m = self.mount("s3://syn", self.index("syn-503"), "max_attempts=3")
        self.server.faults([{"op": "GET", "kind": "status", "status": 503,
                             "code": "SlowDown",
                             "message": "Please reduce your request rate."}])
        with self.assertRaises(OSError) as cm:
            with open(m.path("train", "img_0006_of_3000.jpeg"), "rb") as f:
                f.read()
        self.assertEqual(cm.exception.errno, errno.EIO)
        self.assertRegex(m.output(),
                         r"read 'train/img_0006_of_3000.jpeg': GET s3://syn/"
                         r"train/img_0006_of_3000.jpeg via http://\S+ "
                         r"\(attempt 3/3, [\d.]+ s\): HTTP 503 SlowDown")
        self.unmount(m)

    def test_bad_usage(self):
        for args, text in [
                (["s3://syn"], "expected s3://BUCKET"),
                (["-o", "max_attempts=0", "s3://syn", "/tmp"],
                 "max_attempts"),
                (["-o", "entry_timeout=x", "s3://syn", "/tmp"],
                 "entry_timeout"),
                (["--bogus", "s3://syn", "/tmp"], "unknown argument"),
                # FUSE's own options are judged before any listing.
                (["-o", f"endpoint={self.server.url},bogus_opt",
                  "s3://syn", "/tmp"], "unknown option")]:
            r = harness.run([harness.binary("bucketfs"), *args])
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(text.encode(), r.stderr)
        r = harness.run([harness.binary("bucketfs"), "--help"])
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"endpoint=URL", r.stdout)


class S3rverMountTest(unittest.TestCase):
    def test_mount_s3rver(self):
        server = harness.S3rver("bkt")
        tmp = tempfile.mkdtemp(prefix="bfs-s3rver-mnt-")
        m = None
        try:
            rnd = random.Random(5)
            objs = {f"ds/{i:03d}.bin": rnd.randbytes(rnd.randrange(1, 9000))
                    for i in range(40)}
            objs["ds/sub/x.txt"] = b"x\n"
            for k, v in objs.items():
                harness.put_object(server.url, "bkt", k, v,
                                   ak=harness.S3rver.AK, sk=harness.S3rver.SK)
            env = harness.client_env(AWS_ACCESS_KEY_ID=harness.S3rver.AK,
                                     AWS_SECRET_ACCESS_KEY=harness.S3rver.SK)
            m = Mount("s3://bkt/ds", server.url,
                      os.path.join(tmp, "i.idx"), env=env,
                      log=os.path.join(tmp, "mount.log"))
            self.assertEqual(walk(m.dir),
                             {k[3:]: v for k, v in objs.items()})
        finally:
            if m:
                rc, status = m.unmount()
                self.assertEqual((rc, status), (0, 0))
            server.stop()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    harness.main()
