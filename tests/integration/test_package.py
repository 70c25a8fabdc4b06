#!/usr/bin/env python3
"""The Debian package, end to end: packaging/build-deb.sh builds it from
this tree, dpkg installs it, and then, against the test S3 server, an
fstab-style mount (mount -T) whose options name a config file, the
systemd template unit (checked with systemd-analyze verify; its
ExecStart/ExecStop run by hand, since systemd is usually not PID 1 in CI),
and finally dpkg --purge, leaving the machine as it was.

Skips (77) unless root with /dev/fuse, dpkg-buildpackage and debhelper,
and no bucketfs package already installed."""

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

FILES = {"train/img_1.jpeg": os.urandom(5000), "readme.txt": b"hello\n"}


def installed(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg],
                       capture_output=True, text=True)
    return r.returncode == 0 and "ok installed" in r.stdout


def why_skip():
    if os.geteuid() != 0:
        return "needs root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    for tool in ("dpkg-buildpackage", "dh", "dpkg"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    if installed("bucketfs"):
        return "a bucketfs package is installed already: not touching it"
    return None


# mount.fuse3 runs the first 'bucketfs' on PATH: the package's, not one a
# test put in /usr/local/bin (test_mount.py does, for a moment).
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def run(args, **kw):
    """Output through a file, not a pipe: a daemon started by mount(8)
    must not keep the caller waiting for the pipe's end."""
    kw.setdefault("env", harness.client_env(PATH=SYSTEM_PATH))
    with tempfile.TemporaryFile("w+") as out:
        r = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, text=True,
                           timeout=kw.pop("timeout", 300), **kw)
        out.seek(0)
        r.stdout = out.read()
        r.stderr = ""
    return r


class PackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = why_skip()
        if reason:
            raise unittest.SkipTest(reason)
        cls.tmp = tempfile.mkdtemp(prefix="bfs-pkg-")
        cls.server = None
        cls.installed = False
        try:
            cls.build_and_install()
            data = os.path.join(cls.tmp, "data")
            os.makedirs(data)
            cls.server = harness.TestServer("--bucket", f"pkgds={data}")
            for k, v in FILES.items():
                harness.put_object(cls.server.url, "pkgds", k, v)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def build_and_install(cls):
        out = os.path.join(cls.tmp, "debs")
        env = dict(os.environ, DEB_BUILD_OPTIONS="nocheck")
        r = run([os.path.join(harness.SRC, "packaging", "build-deb.sh"),
                 out], env=env, timeout=900)
        if r.returncode != 0:
            raise AssertionError("build-deb.sh failed:\n" + r.stdout[-3000:]
                                 + r.stderr[-3000:])
        debs = [f for f in os.listdir(out)
                if re.fullmatch(r"bucketfs_[^_]+_[a-z0-9]+\.deb", f)]
        assert len(debs) == 1, os.listdir(out)
        cls.installed = True
        r = run(["dpkg", "-i", os.path.join(out, debs[0])])
        if r.returncode != 0:
            raise AssertionError("dpkg -i failed:\n" + r.stdout + r.stderr)

    @classmethod
    def tearDownClass(cls):
        if cls.server:
            cls.server.stop()
        if cls.installed:
            r = run(["dpkg", "--purge", "bucketfs"])
            cls.purge_output = r.stdout + r.stderr
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.mnt = tempfile.mkdtemp(prefix="bfs-pkgmnt-")

    def tearDown(self):
        if os.path.ismount(self.mnt):
            if run(["fusermount3", "-u", self.mnt]).returncode:
                run(["fusermount3", "-uz", self.mnt])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.rmdir(self.mnt)
                break
            except OSError:
                time.sleep(0.1)

    def conf(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)
        return path

    def check_tree(self):
        with open("/proc/mounts") as f:
            types = [line.split()[2] for line in f
                     if line.split()[1] == self.mnt]
        self.assertEqual(types, ["fuse.bucketfs"])
        for k, v in FILES.items():
            with open(os.path.join(self.mnt, k), "rb") as f:
                self.assertEqual(f.read(), v, k)
        self.assertEqual(sorted(os.listdir(self.mnt)),
                         ["readme.txt", "train"])
        # The package's binary serves it.
        exes = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                if self.mnt.encode() in argv:
                    exes.add(os.readlink(f"/proc/{pid}/exe"))
            except OSError:
                pass
        self.assertEqual(exes, {"/usr/bin/bucketfs"})

    def test_files(self):
        for path in ("/usr/bin/bucketfs", "/usr/bin/bucketfs-index",
                     "/usr/bin/bucketfs-doctor",
                     "/lib/systemd/system/bucketfs@.service",
                     "/usr/share/doc/bucketfs/examples/bucketfs.conf",
                     "/etc/bucketfs/mounts"):
            self.assertTrue(os.path.exists(path), path)
        for page in ("bucketfs.1", "bucketfs.conf.5"):
            r = run(["man", "-w", page.rsplit(".", 1)[1],
                     page.rsplit(".", 1)[0]])
            self.assertEqual(r.returncode, 0, page)
        r = run(["dpkg-query", "-W", "-f=${Conffiles}", "bucketfs"])
        self.assertIn("/etc/bucketfs/bucketfs.conf", r.stdout)
        r = run(["/usr/bin/bucketfs", "--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("bucketfs "), r.stdout)
        # The conffile is the commented example: it sets nothing.
        r = run(["/usr/bin/bucketfs-doctor", "-o",
                 f"endpoint={self.server.url}", "s3://pkgds"],
                env=harness.client_env(BUCKETFS_CONFIG=
                                       "/etc/bucketfs/bucketfs.conf"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("config file:      /etc/bucketfs/bucketfs.conf",
                      r.stdout)

    def test_fstab_with_config_file(self):
        idx = os.path.join(self.tmp, "fstab.idx")
        conf = self.conf("fstab.conf",
                         f"[s3://pkgds]\nendpoint = {self.server.url}\n"
                         f"index = {idx}\nentry_timeout = 60\n")
        fstab = os.path.join(self.tmp, "fstab")
        with open(fstab, "w") as f:
            f.write(f"s3://pkgds {self.mnt} fuse.bucketfs "
                    f"config={conf},_netdev,nofail 0 0\n")
        r = run(["mount", "-T", fstab, self.mnt], timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.check_tree()
        self.assertTrue(os.path.exists(idx))
        r = run(["umount", self.mnt])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.ismount(self.mnt))

    def test_systemd_unit(self):
        inst = run(["systemd-escape", "--path", self.mnt]).stdout.strip()
        envfile = f"/etc/bucketfs/mounts/{inst}"
        opts = f"endpoint={self.server.url},index={self.tmp}/unit.idx"
        with open(envfile, "w") as f:
            f.write(f"URL=s3://pkgds\nOPTIONS={opts}\n")
        os.chmod(envfile, 0o600)
        try:
            r = run(["systemd-analyze", "verify", f"bucketfs@{inst}.service"])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open("/lib/systemd/system/bucketfs@.service") as f:
                unit = f.read()
            self.assertIn("\nType=forking\n", unit)
            start = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
            stop = re.search(r"^ExecStop=(.*)$", unit, re.M).group(1)
            env = harness.client_env(URL="s3://pkgds", OPTIONS=opts)
            # What systemd does: %f, then ${VAR} as one word each.
            def argv(cmd):
                words = cmd.replace("%f", self.mnt).split()
                return [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], w)
                        for w in words]
            # Type=forking: it returns once the mount is ready.
            r = run(argv(start), env=env)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.check_tree()
            r = run(argv(stop), env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertFalse(os.path.ismount(self.mnt))
        finally:
            os.unlink(envfile)


if __name__ == "__main__":
    harness.main()
