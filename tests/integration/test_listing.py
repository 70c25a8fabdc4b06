#!/usr/bin/python3
"""Listings of a directory too big for one readdir reply, in both
-o readdirplus modes, on real mounts of the test server: 2,500 files of
varied name lengths, sizes and mtimes, and a subdirectory.  os.listdir,
os.scandir and ls -l give every name once with its own size, mtime, mode
and type; lookups lists names without attributes after the first batch
(readdir) where always hands them all (readdirplus), and auto chooses
always for this small index and says so in the log, counted by the
mount's "ops"; ls -l sends a handful of xattr probes for the whole
listing, not two per file; getxattr of a namespace the mount does not
keep is ENOTSUP, of a missing user.* name ENODATA; a bad mode is refused."""

import errno
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

N = 2500
MTIME0 = 1_600_000_000


def name(i):
    # 12 to 80 bytes: replies hold a varying number of entries.
    return f"f_{i:05d}_" + "x" * (i * 7 % 69) + ".bin"


def size(i):
    return i * 4099 % 200_003


class ListingTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-listing-")
        data = cls.mkdir("data/big")
        for i in range(N):
            p = os.path.join(data, name(i))
            with open(p, "wb") as f:
                f.truncate(size(i))
            os.utime(p, (MTIME0 + i * 61, MTIME0 + i * 61))
        os.makedirs(os.path.join(data, "sub"))
        with open(os.path.join(data, "sub", "inner"), "wb") as f:
            f.write(b"y")
        cls.server = harness.TestServer("--bucket",
                                        f"many={cls.tmp}/data")

    def mount(self, mode):
        m = Mount("s3://many", self.server.url,
                  os.path.join(self.tmp, mode + ".idx"),
                  f"readdirplus={mode}",
                  log=os.path.join(self.tmp, mode + ".log"))
        self.mounts.append(m)
        return m

    def ops(self, m):
        return json.loads(os.getxattr(m.dir, "user.bucketfs.stats"))["ops"]

    def expected(self):
        return {name(i): (size(i), MTIME0 + i * 61) for i in range(N)}

    def check_mode(self, mode):
        m = self.mount(mode)
        d = m.path("big")
        want = self.expected()
        before = self.ops(m)
        names = os.listdir(d)
        after = self.ops(m)
        self.assertEqual(len(names), N + 1)
        self.assertEqual(set(names), set(want) | {"sub"})
        listed = (after["readdir_entries"] - before["readdir_entries"] +
                  after["readdirplus_entries"] -
                  before["readdirplus_entries"])
        self.assertEqual(listed, N + 1)
        if mode == "lookups":
            # Names alone after the first batch: no inode for most.
            self.assertGreater(after["readdir"] - before["readdir"], 1)
            self.assertLess(after["readdirplus_entries"] -
                            before["readdirplus_entries"], N // 2)
        else:
            self.assertEqual(after["readdir"], before["readdir"])
            self.assertGreaterEqual(after["readdirplus_entries"] -
                                    before["readdirplus_entries"], N + 1)
            self.assertGreater(after["readdirplus"] - before["readdirplus"],
                               1)
        with os.scandir(d) as it:
            seen = {e.name: (e.is_dir(), e.is_file()) for e in it}
        self.assertEqual(seen.pop("sub"), (True, False))
        self.assertEqual(set(seen), set(want))
        self.assertTrue(all(v == (False, True) for v in seen.values()))

        before = self.ops(m)
        out = subprocess.run(["ls", "-l", "-n", "--time-style=+%s", d],
                             capture_output=True, text=True, check=True,
                             env=dict(os.environ, LC_ALL="C")).stdout
        after = self.ops(m)
        rows = out.splitlines()
        self.assertTrue(rows[0].startswith("total "), rows[0])
        got = {}
        for row in rows[1:]:
            perm, _, _, _, sz, mt, nm = row.split(None, 6)
            got[nm] = (perm, int(sz), int(mt))
        self.assertEqual(got.pop("sub")[0], "drwxr-xr-x")  # new names
        self.assertEqual(set(got), set(want))
        for nm, (perm, sz, mt) in got.items():
            self.assertEqual((perm, sz, mt), ("-r--r--r--",) + want[nm], nm)
        # The security label and ACL probes: once for the mount (ls
        # remembers ENOTSUP per device), not twice per file.
        probes = (after["getxattr"] - before["getxattr"] +
                  after["listxattr"] - before["listxattr"])
        self.assertLess(probes, 20, probes)
        self.assertEqual(os.stat(m.path("big", name(7))).st_size, size(7))
        self.unmount(m)

    def test_lookups(self):
        self.check_mode("lookups")

    def test_auto(self):
        # An index of 2,504 entries is small: auto hands every name's
        # attributes, as always does, and names its choice.
        self.check_mode("auto")
        with open(os.path.join(self.tmp, "auto.log")) as f:
            log = f.read()
        self.assertIn("readdirplus=auto chose always (the index has 2504 "
                      "entries; always up to 100000)", log)

    def test_always(self):
        self.check_mode("always")

    def test_xattr_namespaces(self):
        m = self.mount("auto")
        f = m.path("big", name(3))
        for attr in ("security.selinux", "system.posix_acl_access",
                     "trusted.x"):
            with self.assertRaises(OSError) as cm:
                os.getxattr(f, attr)
            self.assertEqual(cm.exception.errno, errno.ENOTSUP, attr)
        with self.assertRaises(OSError) as cm:
            os.getxattr(f, "user.nope")
        self.assertEqual(cm.exception.errno, errno.ENODATA)
        self.assertEqual(os.getxattr(f, "user.s3.key"),
                         f"big/{name(3)}".encode())
        self.assertIn("ops", json.loads(
            os.getxattr(m.dir, "user.bucketfs.stats")))
        self.unmount(m)

    def test_bad_mode_refused(self):
        r = harness.run([harness.binary("bucketfs"), "-o",
                         f"endpoint={self.server.url},readdirplus=sometimes",
                         "s3://many", self.tmp])
        self.assertNotEqual(r.returncode, 0)
        err = r.stderr.decode()
        self.assertIn("readdirplus", err)
        self.assertIn("sometimes", err)


if __name__ == "__main__":
    unittest.main()
