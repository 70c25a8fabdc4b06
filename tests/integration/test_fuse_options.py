#!/usr/bin/env python3
"""The FUSE options of a real mount, as the kernel shows them in
/proc/mounts: default_permissions always, allow_other only when asked for;
and what they mean for another user (nobody): no access at all without
allow_other; with it, reads work and the kernel itself (not bucketfs)
refuses writes by the file modes."""

import errno
import os
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

BODY = b"fuse options\n"


def as_nobody(*args):
    """Runs args as nobody:nogroup without supplementary groups."""
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup",
                           "--clear-groups", *args],
                          capture_output=True, timeout=60)


def mount_options(mountpoint):
    """The options field of mountpoint's line in /proc/mounts."""
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            # /proc/mounts escapes blanks as \040; ours has none.
            if fields[1] == mountpoint:
                return fields[2], fields[3].split(",")
    raise AssertionError(f"{mountpoint} not in /proc/mounts")


class FuseOptionsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (to switch to nobody)")
        if not shutil.which("setpriv"):
            raise unittest.SkipTest("no setpriv (util-linux)")
        # 0755 all the way down, so that nobody can reach the mount.
        cls.tmp = tempfile.mkdtemp(prefix="bfs-fuseopt-")
        os.chmod(cls.tmp, 0o755)
        data = os.path.join(cls.tmp, "data")
        os.makedirs(os.path.join(data, "d"))
        with open(os.path.join(data, "d", "f.txt"), "wb") as f:
            f.write(BODY)
        cls.server = harness.TestServer("--bucket", f"fopt={data}")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.mnt = tempfile.mkdtemp(prefix="mnt-", dir=self.tmp)
        os.chmod(self.mnt, 0o755)
        self.proc = None
        self.logf = None

    def tearDown(self):
        if os.path.ismount(self.mnt):
            if subprocess.run(["fusermount3", "-u", self.mnt]).returncode:
                subprocess.run(["fusermount3", "-uz", self.mnt])
        if self.proc:
            harness.stop_process(self.proc)
        if self.logf:
            self.logf.close()
        os.rmdir(self.mnt)

    def log(self):
        with open(self.logf.name, "rb") as f:
            return f.read().decode(errors="replace")

    def mount(self, *opts):
        o = ",".join([f"endpoint={self.server.url}",
                      f"index={self.mnt}.idx", *opts])
        if self.logf:
            self.logf.close()
        self.logf = open(self.mnt + ".log", "wb")
        self.proc = subprocess.Popen(
            [harness.binary("bucketfs"), "-f", "-o", o, "s3://fopt",
             self.mnt], stdout=self.logf, stderr=subprocess.STDOUT,
            env=harness.client_env())
        deadline = time.monotonic() + 60
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None:
                self.fail(f"bucketfs exited {self.proc.returncode}: "
                          f"{self.log()}")
            if time.monotonic() > deadline:
                self.fail("bucketfs did not mount: " + self.log())
            time.sleep(0.02)

    def unmount(self):
        self.assertEqual(subprocess.run(["fusermount3", "-u",
                                         self.mnt]).returncode, 0)
        self.assertEqual(self.proc.wait(60), 0, self.log())
        self.proc = None

    def path(self, *p):
        return os.path.join(self.mnt, *p)

    def test_default(self):
        self.mount()
        fstype, opts = mount_options(self.mnt)
        self.assertEqual(fstype, "fuse.bucketfs")
        self.assertIn("default_permissions", opts)
        self.assertNotIn("allow_other", opts)
        # Root, the owner of the mount, reads.
        with open(self.path("d", "f.txt"), "rb") as f:
            self.assertEqual(f.read(), BODY)
        # Anyone else is refused by the kernel, before any permission
        # check: not even stat or ls.
        for cmd in (["cat", self.path("d", "f.txt")],
                    ["stat", self.mnt], ["ls", self.mnt]):
            r = as_nobody(*cmd)
            self.assertNotEqual(r.returncode, 0, cmd)
            self.assertIn(b"Permission denied", r.stderr, cmd)
        self.unmount()

    def thread_slices(self):
        """se.slice (ns) of each of the daemon's threads, by name; None
        where the kernel does not show it."""
        out = {}
        task = f"/proc/{self.proc.pid}/task"
        for tid in os.listdir(task):
            try:
                with open(f"{task}/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"{task}/{tid}/sched") as f:
                    text = f.read()
            except FileNotFoundError:
                continue  # the thread ended meanwhile
            for line in text.splitlines():
                if line.startswith("se.slice"):
                    out.setdefault(name, set()).add(
                        int(line.split(":")[1]))
        return out

    def test_sched_slice(self):
        # Every thread, started before the mount or after it, runs with
        # the slice asked for: 100 us by default.
        self.mount()
        with open(self.path("d", "f.txt"), "rb") as f:
            self.assertEqual(f.read(), BODY)  # the HTTP threads exist
        slices = self.thread_slices()
        if not slices:
            self.unmount()
            self.skipTest("this kernel does not show se.slice "
                          "(/proc/PID/sched)")
        self.assertIn("bfs-http", slices)
        self.assertEqual(set().union(*slices.values()), {100_000}, slices)
        self.unmount()
        self.mount("sched_slice=2000")
        self.assertEqual(set().union(*self.thread_slices().values()),
                         {2_000_000})
        self.unmount()
        # 0: the kernel's own slice, whatever it is on this host.
        self.mount("sched_slice=0")
        with open("/proc/self/sched") as f:
            own = {int(line.split(":")[1]) for line in f
                   if line.startswith("se.slice")}
        self.assertEqual(set().union(*self.thread_slices().values()), own)
        self.unmount()
        for bad in ("50", "100001", "1.5", "-1", "fast"):
            r = subprocess.run(
                [harness.binary("bucketfs"), "-f", "-o",
                 f"endpoint={self.server.url},index={self.mnt}.idx,"
                 f"sched_slice={bad}", "s3://fopt", self.mnt],
                capture_output=True, timeout=60, env=harness.client_env())
            self.assertEqual(r.returncode, 2, bad)
            self.assertIn(f"option 'sched_slice': '{bad}' is not a whole "
                          "number of microseconds between 100 and 100000, "
                          "or 0", r.stderr.decode(), bad)
            self.assertFalse(os.path.ismount(self.mnt), bad)

    def test_explicit_default_permissions_is_accepted(self):
        self.mount("default_permissions")
        _, opts = mount_options(self.mnt)
        self.assertEqual(opts.count("default_permissions"), 1)
        self.assertNotIn("allow_other", opts)
        self.unmount()

    def test_allow_other(self):
        self.mount("allow_other")
        _, opts = mount_options(self.mnt)
        self.assertIn("allow_other", opts)
        self.assertIn("default_permissions", opts)
        r = as_nobody("cat", self.path("d", "f.txt"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, BODY)
        r = as_nobody("ls", self.mnt)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"d\n")
        # default_permissions: the kernel checks the modes (0444 files,
        # 0755 directories) itself, so nobody gets EACCES without asking
        # bucketfs, while root, whom modes do not stop, reaches bucketfs
        # and gets its EROFS.
        probe = ("import os, sys\n"
                 "try:\n"
                 "    os.open(sys.argv[1], os.O_WRONLY)\n"
                 "except OSError as e:\n"
                 "    print(e.errno)\n")
        r = as_nobody("/usr/bin/python3", "-c", probe,
                      self.path("d", "f.txt"))
        self.assertEqual(r.stdout.strip(), str(errno.EACCES).encode(),
                         r.stderr)
        r = as_nobody("/usr/bin/python3", "-c", probe.replace(
            "os.open(sys.argv[1], os.O_WRONLY)",
            "os.mkdir(sys.argv[1])"), self.path("d", "new"))
        self.assertEqual(r.stdout.strip(), str(errno.EACCES).encode(),
                         r.stderr)
        with self.assertRaises(OSError) as cm:
            os.open(self.path("d", "f.txt"), os.O_WRONLY)
        self.assertEqual(cm.exception.errno, errno.EROFS)
        self.unmount()


if __name__ == "__main__":
    harness.main()
