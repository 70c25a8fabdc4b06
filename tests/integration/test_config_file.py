#!/usr/bin/env python3
"""The config file (bucketfs.conf(5)) in real runs: a mount that takes its
endpoint, index and mount options from the file; -o beating the file; the
file's errors stopping the mount with the file, line and group, worded like
the -o ones; every mount option of --help settable in the file; and the
other tools reading the same file."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

FILES = {"a.txt": b"alpha\n", "sub/b.bin": bytes(range(256)) * 8}


class ConfigFileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-conffile-")
        data = os.path.join(cls.tmp, "data")
        os.makedirs(data)
        cls.server = harness.TestServer("--bucket", f"cfgds={data}")
        for k, v in FILES.items():
            harness.put_object(cls.server.url, "cfgds", k, v)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.procs = []
        self.mnts = []

    def tearDown(self):
        for mnt in self.mnts:
            if os.path.ismount(mnt):
                if subprocess.run(["fusermount3", "-u", mnt]).returncode:
                    subprocess.run(["fusermount3", "-uz", mnt])
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for mnt in self.mnts:
            os.rmdir(mnt)

    def conf(self, text, mode=0o600):
        path = os.path.join(self.tmp, f"bucketfs-{time.monotonic_ns()}.conf")
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def env(self, conf):
        return harness.client_env(BUCKETFS_CONFIG=conf)

    def start(self, conf, *opts, url="s3://cfgds"):
        """bucketfs -f with $BUCKETFS_CONFIG; returns (mountpoint, proc)
        once mounted, or (None, proc) once it exited."""
        mnt = tempfile.mkdtemp(prefix="bfs-cfmnt-")
        self.mnts.append(mnt)
        args = [harness.binary("bucketfs"), "-f"]
        if opts:
            args += ["-o", ",".join(opts)]
        proc = subprocess.Popen(args + [url, mnt], env=self.env(conf),
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        self.procs.append(proc)
        deadline = time.monotonic() + 60
        while not os.path.ismount(mnt):
            if proc.poll() is not None:
                return None, proc
            self.assertLess(time.monotonic(), deadline, "no mount")
            time.sleep(0.02)
        return mnt, proc

    def unmount(self, mnt, proc):
        self.assertEqual(subprocess.run(["fusermount3", "-u", mnt])
                         .returncode, 0)
        self.assertEqual(proc.wait(30), 0)

    def fails(self, conf, *opts):
        """bucketfs exits 2 without mounting; returns its output."""
        mnt, proc = self.start(conf, *opts)
        self.assertIsNone(mnt, "mounted despite a bad config file")
        out = proc.stdout.read().decode()
        proc.stdout.close()
        self.assertEqual(proc.returncode, 2, out)
        return out.strip()

    def mount_options(self, mnt):
        with open("/proc/mounts") as f:
            for line in f:
                fields = line.split()
                if fields[1] == mnt:
                    return fields[3].split(",")
        self.fail(f"{mnt} not in /proc/mounts")

    def test_mount_from_file(self):
        idx = os.path.join(self.tmp, "file.idx")
        conf = self.conf(
            "# everything but the URL comes from here\n"
            "[default]\n"
            "endpoint = http://127.0.0.1:1\n"
            "max_attempts = 2\n"
            "\n"
            "[s3://cfgds]\n"
            f"endpoint = {self.server.url}\n"
            f"index = {idx}\n"
            "allow_other = true\n"
            "entry_timeout = 5\n")
        mnt, proc = self.start(conf)
        self.assertIsNotNone(mnt, proc.stdout.read().decode()
                             if mnt is None else "")
        with open(os.path.join(mnt, "a.txt"), "rb") as f:
            self.assertEqual(f.read(), FILES["a.txt"])
        with open(os.path.join(mnt, "sub", "b.bin"), "rb") as f:
            self.assertEqual(f.read(), FILES["sub/b.bin"])
        self.assertTrue(os.path.exists(idx), "index= from the file")
        # A mount option of the file reached FUSE.
        self.assertIn("allow_other", self.mount_options(mnt))
        self.unmount(mnt, proc)
        proc.stdout.close()

    def test_options_beat_file(self):
        conf = self.conf("[default]\n"
                         "endpoint = http://127.0.0.1:1\n"
                         "allow_other = true\n")
        idx = os.path.join(self.tmp, "cli.idx")
        # -o endpoint replaces the file's (dead) endpoint as a whole.
        mnt, proc = self.start(conf, f"endpoint={self.server.url}",
                               f"index={idx}")
        self.assertIsNotNone(mnt)
        self.assertEqual(sorted(os.listdir(mnt)), ["a.txt", "sub"])
        self.unmount(mnt, proc)
        proc.stdout.close()

    def test_errors_name_file_line_group(self):
        conf = self.conf("[default]\n"
                         f"endpoint = {self.server.url}\n"
                         "\n"
                         "[s3://cfgds]\n"
                         "max_atempts = 3\n")
        out = self.fails(conf)
        self.assertEqual(out, f"bucketfs: {conf}:5: [s3://cfgds]: unknown "
                         "key 'max_atempts' (the keys are the -o options; "
                         "see bucketfs.conf(5))")
        conf = self.conf("[default]\nsecret_access_key = hunter2\n")
        out = self.fails(conf)
        self.assertIn(f"{conf}:2: [default]: key 'secret_access_key': "
                      "secrets are not accepted", out)
        self.assertNotIn("hunter2", out)
        conf = self.conf("[s3://cfgds]\nregion = x\n", mode=0o646)
        out = self.fails(conf)
        self.assertIn("others may write it (mode 0646): not trusted", out)

    def test_values_fail_as_with_o(self):
        """The same parser as -o: the same message, with the place."""
        for key, value in [("max_attempts", "3x"), ("whole_max", "8M"),
                           ("list_workers", "99"),
                           ("endpoint", "ftp://x")]:
            with self.subTest(key=key):
                none = self.conf("")
                by_o = self.fails(none, f"{key}={value}",
                                  f"endpoint={self.server.url}")
                self.assertTrue(by_o.startswith("bucketfs: "), by_o)
                conf = self.conf(f"[default]\n# x\n{key} = {value}\n")
                by_file = self.fails(conf, f"endpoint={self.server.url}"
                                     if key != "endpoint" else "ro")
                self.assertEqual(by_file, by_o.replace(
                    "bucketfs: ", f"bucketfs: {conf}:3: [default]: ", 1))

    def test_every_mount_option_of_help_is_a_key(self):
        r = harness.run([harness.binary("bucketfs"), "--help"])
        help_text = r.stdout.decode()
        section = help_text.split("Mount options:", 1)[1]
        names = re.findall(r"^    ([a-z_]+)(?:=|  )", section, re.M)
        self.assertGreaterEqual(len(names), 8, section)
        # Values the keys would take; the doctor checks names only.
        conf = self.conf("[default]\n" + "".join(
            f"{n} = {'true' if n.startswith('allow') else '1'}\n"
            for n in names))
        r = harness.run([harness.binary("bucketfs-doctor"), "-o",
                         f"endpoint={self.server.url}", "s3://cfgds"],
                        env=self.env(conf))
        out = (r.stdout + r.stderr).decode()
        self.assertNotIn("unknown key", out)
        self.assertIn(f"config file:      {conf}", out)

    def test_doctor_and_index_read_the_file(self):
        idx = os.path.join(self.tmp, "tool.idx")
        conf = self.conf(f"[s3://cfgds]\nendpoint = {self.server.url}\n"
                         f"index = {idx}\nwhole_max = 1048576\n")
        r = harness.run([harness.binary("bucketfs-doctor"), "s3://cfgds"],
                        env=self.env(conf))
        out = r.stdout.decode()
        self.assertEqual(r.returncode, 0, out + r.stderr.decode())
        self.assertIn(f"{self.server.url} ({conf}:2: [s3://cfgds])", out)
        r = harness.run([harness.binary("bucketfs-index"), "build",
                         "s3://cfgds", "-q"], env=self.env(conf))
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertTrue(os.path.exists(idx))


if __name__ == "__main__":
    harness.main()
