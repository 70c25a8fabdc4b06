#!/usr/bin/python3
"""-o empty_dirs=PATH[:PATH...]: directories S3 cannot hold, on real mounts
of the test server.  A bucket holding train/ only, mounted with
empty_dirs=valid:test, lists valid/ and test/ as empty (read-only with -o ro)
directories (DLIO lists DATA/valid and dies without it), whatever index the
mount serves: one listed before the option was set, one bucketfs-index
built; a declared directory merges with one that exists; an object of the
same name wins, with a notice; names can be made inside; a SIGHUP
onto an index that has files there shows them through the names the
kernel already holds; the config file key; bad paths refused."""

import errno
import os
import signal
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

TRAIN = {f"DATA/train/img_{i}_of_4.npz": bytes([i]) * 1000 for i in range(4)}


class EmptyDirsTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-emptydirs-")
        cls.data = cls.mkdir("data")
        cls.server = harness.TestServer("--bucket", f"dlio={cls.data}",
                                        "--bucket",
                                        f"hup={cls.mkdir('hup')}",
                                        "--synthetic", "big:5000:10:train/")
        for k, v in TRAIN.items():
            harness.put_object(cls.server.url, "dlio", k, v)
        # "DATA/obj" is an object: a declared "obj" yields to it.
        harness.put_object(cls.server.url, "dlio", "DATA/obj", b"x")

    def mount(self, name, *opts, url="s3://dlio/DATA", index=None):
        m = Mount(url, self.server.url,
                  index or os.path.join(self.tmp, name + ".idx"), *opts,
                  log=os.path.join(self.tmp, name + ".log"))
        self.mounts.append(m)
        return m

    def assert_empty_dir(self, path):
        st = os.stat(path)
        self.assertTrue(os.path.isdir(path), oct(st.st_mode))
        self.assertEqual(os.listdir(path), [])
        self.assertEqual(st.st_nlink, 2)
        return st

    def assert_errno(self, code, fn, *args):
        with self.assertRaises(OSError) as cm:
            fn(*args)
        self.assertEqual(cm.exception.errno, code, cm.exception)

    def test_declared_dirs_beside_train(self):
        m = self.mount("basic", "empty_dirs=valid:test",
                       "empty_dirs=deep/a/b:train", "ro")
        self.assertEqual(sorted(os.listdir(m.dir)),
                         ["deep", "obj", "test", "train", "valid"])
        # train exists: merged, its files as they are.
        self.assertEqual(sorted(os.listdir(m.path("train"))),
                         sorted(k.split("/")[-1] for k in TRAIN))
        v = self.assert_empty_dir(m.path("valid"))
        t = self.assert_empty_dir(m.path("test"))
        self.assertNotEqual(v.st_ino, t.st_ino)
        # The same st_ino on every mount (hash of the key "DATA/valid/").
        self.assertEqual(os.stat(m.path("valid")).st_ino, v.st_ino)
        self.assertEqual(os.listdir(m.path("deep")), ["a"])
        self.assertEqual(os.listdir(m.path("deep", "a")), ["b"])
        self.assert_empty_dir(m.path("deep", "a", "b"))
        self.assertEqual(os.stat(m.path("deep", "a", "..")).st_ino,
                         os.stat(m.path("deep")).st_ino)
        self.assertEqual(os.stat(m.path("valid", "..")).st_ino,
                         os.stat(m.dir).st_ino)
        # Read-only like the rest of the mount (-o ro).
        self.assertEqual(v.st_mode & 0o777, 0o555)
        self.assert_errno(errno.EROFS, os.mkdir, m.path("valid", "x"))
        self.assert_errno(errno.EROFS, open, m.path("valid", "f"), "w")
        self.assert_errno(errno.EROFS, os.rmdir, m.path("valid"))
        self.assert_errno(errno.ENOENT, os.stat, m.path("valid", "nope"))
        self.assert_errno(errno.EISDIR, open, m.path("valid"), "w")
        with self.assertRaises(OSError) as cm:
            os.getxattr(m.path("valid"), "user.s3.etag")
        self.assertEqual(cm.exception.errno, errno.ENODATA)
        self.assertEqual(os.listxattr(m.path("valid")), [])
        # os.walk sees them as directories (readdir's d_type).
        walked = {os.path.relpath(d, m.dir) for d, _, _ in os.walk(m.dir)}
        self.assertTrue({"valid", "test", "deep/a/b"} <= walked, walked)
        self.unmount(m)

    def test_large_directory_listed_in_many_replies(self):
        """A declared name after 5,000 indexed ones: readdir resumes
        across replies (offsets past the index's), each name once."""
        m = self.mount("big", "empty_dirs=train/valid:train/0first",
                       url="s3://big")
        names = os.listdir(m.path("train"))
        self.assertEqual(len(names), 5002)
        self.assertEqual(len(set(names)), 5002)
        self.assertIn("valid", names)
        self.assertIn("0first", names)
        self.assert_empty_dir(m.path("train", "valid"))
        with os.scandir(m.path("train")) as it:
            dirs = sorted(e.name for e in it if e.is_dir())
        self.assertEqual(dirs, ["0first", "valid"])
        self.unmount(m)

    def test_bucketfs_compare_expects_them(self):
        m = self.mount("compare", "empty_dirs=valid:deep/a:obj/x")

        def compare(*opts):
            r = harness.run([harness.binary("bucketfs-compare"), m.dir,
                             "s3://dlio/DATA", "-o",
                             f"endpoint={self.server.url}", *opts])
            return r.returncode, r.stdout.decode() + r.stderr.decode()

        rc, out = compare("-o", "empty_dirs=valid:deep/a:obj/x")
        self.assertEqual(rc, 0, out)
        self.assertIn("result: the two sides match", out)
        rc, out = compare()
        self.assertNotEqual(rc, 0, out)
        self.assertIn("extra directory on mount: 'valid/'", out)
        self.assertIn("extra directory on mount: 'deep/a/'", out)
        self.unmount(m)

    def test_object_wins_with_a_notice(self):
        m = self.mount("object", "empty_dirs=obj:obj/below:valid")
        self.assertTrue(os.path.isfile(m.path("obj")))
        with open(m.path("obj"), "rb") as f:
            self.assertEqual(f.read(), b"x")
        self.assert_empty_dir(m.path("valid"))
        self.assertTrue(m.wait_output(
            "empty_dirs: 'obj' is not shown as a directory: the object "
            "s3://dlio/DATA/obj is on its path, and objects win"),
            m.output())
        self.assertIn("empty_dirs: 'obj/below' is not shown",
                      m.output())
        self.unmount(m)

    def test_mount_warns_of_the_dlio_layout(self):
        """train/ and no valid/: the mount logs the doctor's warning and
        its fix; not once the option declares valid."""
        want = ("DLIO layout: s3://dlio/DATA/train/ has keys and "
                "s3://dlio/DATA/valid/ none: DLIO and MLPerf Storage open "
                "valid/ too, and would stop with ENOENT: mount with "
                "-o empty_dirs=valid (an empty valid/ directory)")
        idx = os.path.join(self.tmp, "dlio-warn.idx")
        m = self.mount("dlio-warn", index=idx)
        self.assertIn(want, m.output())
        self.unmount(m)
        m = self.mount("dlio-declared", "empty_dirs=valid", index=idx)
        self.assertNotIn("DLIO layout", m.output())
        self.unmount(m)
        # The doctor says the same.
        r = harness.run([harness.binary("bucketfs-doctor"), "s3://dlio/DATA",
                         "-o", f"endpoint={self.server.url}"])
        self.assertIn("⚠ DLIO layout: " + want.split(": ", 1)[1].split(
            ": mount with")[0], r.stdout.decode())

    def test_index_listed_without_the_option(self):
        """The option on a mount whose cached index was listed before it
        was set, and on one bucketfs-index built."""
        idx = os.path.join(self.tmp, "shared.idx")
        m = self.mount("before", index=idx)
        self.assertFalse(os.path.exists(m.path("valid")))
        self.unmount(m)
        m = self.mount("after", "empty_dirs=valid:test", index=idx)
        self.assertNotIn("listing the bucket", m.output())
        self.assert_empty_dir(m.path("valid"))
        self.assert_empty_dir(m.path("test"))
        self.unmount(m)

        built = os.path.join(self.tmp, "built.idx")
        r = harness.run([harness.binary("bucketfs-index"), "build",
                         "s3://dlio/DATA", "-o",
                         f"endpoint={self.server.url},index={built},"
                         "empty_dirs=valid:train:obj"])
        out = r.stdout.decode()
        self.assertEqual(r.returncode, 0, out + r.stderr.decode())
        self.assertIn("empty dirs:   valid (not in the bucket: shown empty "
                      "by mounts with empty_dirs=)", out)
        self.assertIn("train (a directory of the bucket)", out)
        self.assertIn("obj (hidden by the object s3://dlio/DATA/obj)", out)
        self.assertIn("bucketfs-index: empty_dirs: 'obj' is not shown as a "
                      "directory", r.stderr.decode())
        r = harness.run([harness.binary("bucketfs-index"), "info",
                         "s3://dlio/DATA", "-o",
                         f"index={built},empty_dirs=train:valid"])
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn("empty dirs:   train (a directory of the bucket), "
                      "valid (not in the bucket: shown empty by mounts "
                      "with empty_dirs=)\n", r.stdout.decode())
        m = self.mount("built", "empty_dirs=valid", index=built)
        self.assert_empty_dir(m.path("valid"))
        self.unmount(m)

    def test_whole_bucket_mount_and_prefix(self):
        """Paths are relative to the mount's root, prefix or not."""
        m = self.mount("root", "empty_dirs=DATA/valid", url="s3://dlio")
        self.assertEqual(sorted(os.listdir(m.path("DATA"))),
                         ["obj", "train", "valid"])
        self.assert_empty_dir(m.path("DATA", "valid"))
        ino = os.stat(m.path("DATA", "valid")).st_ino
        self.unmount(m)
        m = self.mount("prefix", "empty_dirs=valid")
        self.assertEqual(os.stat(m.path("valid")).st_ino, ino)
        self.unmount(m)

    def test_writable(self):
        m = self.mount("writable", "writable", "empty_dirs=valid:test")
        self.assert_empty_dir(m.path("valid"))
        self.assertEqual(os.stat(m.path("valid")).st_mode & 0o777, 0o755)
        os.mkdir(m.path("valid", "sub"))
        with open(m.path("valid", "probe"), "wb") as f:
            f.write(b"hello")
        self.assertEqual(sorted(os.listdir(m.path("valid"))),
                         ["probe", "sub"])
        with open(m.path("valid", "probe"), "rb") as f:
            self.assertEqual(f.read(), b"hello")
        # Uploaded at close, under the declared directory's key.
        r = harness.run([harness.binary("s3-client"), "-o",
                         f"endpoint={self.server.url}", "head",
                         "s3://dlio/DATA/valid/probe"])
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn("size=5 ", r.stdout.decode())
        # A declared directory stays: not removed, not made again.
        self.assert_errno(errno.EROFS, os.rmdir, m.path("test"))
        self.assert_errno(errno.EEXIST, os.mkdir, m.path("test"))
        os.unlink(m.path("valid", "probe"))
        os.rmdir(m.path("valid", "sub"))
        self.assertEqual(os.listdir(m.path("valid")), [])
        self.unmount(m)

    def test_sighup_onto_an_index_that_has_the_dir(self):
        """Its own bucket: S3 gets a file in valid/ mid-way."""
        harness.put_object(self.server.url, "hup", "train/a", b"a")
        idx = os.path.join(self.tmp, "hup.idx")
        m = self.mount("hup", "empty_dirs=valid", url="s3://hup", index=idx)
        self.assert_empty_dir(m.path("valid"))
        fd = os.open(m.path("valid"), os.O_RDONLY | os.O_DIRECTORY)
        try:
            harness.put_object(self.server.url, "hup", "valid/v0", b"v" * 10)
            r = harness.run([harness.binary("bucketfs-index"), "build",
                             "s3://hup", "-q", "-o",
                             f"endpoint={self.server.url},index={idx}"])
            self.assertEqual(r.returncode, 0, r.stderr.decode())
            m.proc.send_signal(signal.SIGHUP)
            self.assertTrue(m.wait_output("SIGHUP: now serving"),
                            m.output())
            # Through the node the kernel already holds, and by path.
            self.assertEqual(os.listdir(fd), ["v0"])
            self.assertEqual(os.listdir(m.path("valid")), ["v0"])
            with open(m.path("valid", "v0"), "rb") as f:
                self.assertEqual(f.read(), b"v" * 10)
        finally:
            os.close(fd)
        self.unmount(m)

    def test_config_file_key(self):
        conf = os.path.join(self.tmp, "bucketfs.conf")
        with open(conf, "w") as f:
            f.write("[s3://dlio/DATA]\nempty_dirs = valid:test\n")
        os.chmod(conf, 0o600)
        m = Mount("s3://dlio/DATA", self.server.url,
                  os.path.join(self.tmp, "conf.idx"),
                  log=os.path.join(self.tmp, "conf.log"),
                  env=harness.client_env(BUCKETFS_CONFIG=conf))
        self.mounts.append(m)
        self.assert_empty_dir(m.path("valid"))
        self.assert_empty_dir(m.path("test"))
        self.unmount(m)

    def test_bad_paths_refused(self):
        cases = [
            ("../x", "'../x' has a '.' or '..' component"),
            ("valid:/abs", "'/abs' is absolute: paths are relative to the "
                           "mount's root"),
            ("a//b", "'a//b' has an empty component ('a//b')"),
            ("valid::test", "'valid::test' has an empty path"),
            ("x/" + "n" * 256, "has a component over 255 bytes"),
        ]
        for value, message in cases:
            with self.subTest(value=value):
                for tool in ("bucketfs", "bucketfs-index"):
                    if tool == "bucketfs":
                        args = [harness.binary(tool), "-f", "-o",
                                f"endpoint={self.server.url},"
                                f"empty_dirs={value}", "s3://dlio",
                                self.tmp]
                    else:
                        args = [harness.binary(tool), "build",
                                "s3://dlio", "-o",
                                f"endpoint={self.server.url},"
                                f"empty_dirs={value},index="
                                + os.path.join(self.tmp, "bad.idx")]
                    r = harness.run(args, timeout=30)
                    err = r.stderr.decode()
                    self.assertNotEqual(r.returncode, 0, err)
                    self.assertIn(f"{tool}: option 'empty_dirs': ", err)
                    self.assertIn(message, err)
                    self.assertFalse(os.path.exists(
                        os.path.join(self.tmp, "bad.idx")))


if __name__ == "__main__":
    harness.main()
