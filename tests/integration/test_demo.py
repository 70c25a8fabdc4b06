#!/usr/bin/env python3
"""The README's first command: tools/demo.sh --no-setup, run on the build
under test (--build BFS_BUILD_DIR), exits 0 and shows every step: the
doctor's checks, the mount, ls, ls -l, the count, stat, the md5 of a file
(checked against the test server's bytes) and the index summary.  Whatever
happens, nothing it started outlives the test: the demo runs in its own
process group (its test S3 server too), which is killed after, and any
mount left under its TMPDIR is unmounted."""

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

sys.path.insert(0, os.path.join(harness.SRC, "tests", "s3server"))
import s3server  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

N, SIZE = 1000, 322624
FILE = "img_0042_of_1000.jpeg"


def mounts_under(top):
    """Mount points below @top, from /proc/self/mounts."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            mnt = line.split()[1].replace("\\040", " ")
            if mnt.startswith(top + "/"):
                out.append(mnt)
    return out


class DemoTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="bfs-demo-")
        # The doctor looks at the default index path: not the user's.
        self.cache = tempfile.mkdtemp(prefix="bfs-demo-cache-")
        self.proc = None

    def tearDown(self):
        # The demo's own cleanup should have run; this is for when it
        # did not (killed, timed out, or a step hung).
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        for mnt in mounts_under(self.tmp):
            if subprocess.run(["fusermount3", "-u", mnt]).returncode:
                subprocess.run(["fusermount3", "-uz", mnt])
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.cache, ignore_errors=True)

    def run_demo(self):
        env = harness.client_env(TMPDIR=self.tmp, XDG_CACHE_HOME=self.cache)
        self.proc = subprocess.Popen(
            ["bash", os.path.join(harness.SRC, "tools", "demo.sh"),
             "--no-setup", "--build", harness.BUILD],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            start_new_session=True)
        try:
            out, err = self.proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
            self.fail("demo.sh did not end in 300 s:\n" + out.decode(
                errors="replace") + err.decode(errors="replace"))
        return self.proc.returncode, out.decode(), err.decode()

    def test_demo(self):
        rc, out, err = self.run_demo()
        self.assertEqual(rc, 0, f"demo.sh exited {rc}:\n{out}\n{err}")
        lines = out.splitlines()
        m = re.search(r"^demo: test S3 server at (http://127\.0\.0\.1:\d+), "
                      r"bucket 'demo' \(1,000 objects\)$", out, re.M)
        self.assertIsNotNone(m, out)
        endpoint = m.group(1)
        root = None

        def after(command_re):
            """The lines after the "$ ..." line that matches."""
            for i, line in enumerate(lines):
                if line.startswith("$ ") and re.search(command_re, line):
                    rest = []
                    for nxt in lines[i + 1:]:
                        if nxt.startswith("$ "):
                            break
                        rest.append(nxt)
                    return line, rest
            self.fail(f"no step {command_re!r} in:\n{out}")

        # The doctor: every check passed, on this endpoint.
        _, doc = after(r"/tools/bucketfs-doctor -o endpoint=" +
                       re.escape(endpoint) + " s3://demo/train/$")
        self.assertIn(f"endpoint {endpoint}", doc)
        self.assertTrue(any(re.fullmatch(r"✓ all \d+ checks passed", x)
                            for x in doc), "\n".join(doc))
        self.assertFalse([x for x in doc if x.lstrip().startswith(("✗", "⚠"))],
                         doc)

        # The mount, from this build.
        line, _ = after(r"/fs/bucketfs -o endpoint=")
        self.assertIn(os.path.join(harness.BUILD, "fs", "bucketfs"), line)
        root = line.rsplit(" ", 1)[1]
        self.assertTrue(root.startswith(self.tmp + "/"), line)

        _, ls = after(r"^\$ ls " + re.escape(root) + "$")
        self.assertEqual(ls, ["train"])

        _, ll = after(r"^\$ ls -l .*/train \| sed -n 1,4p$")
        self.assertEqual(len(ll), 4, ll)
        self.assertRegex(ll[0], r"^total \d+$")
        for i, x in enumerate(ll[1:]):
            self.assertRegex(x, r"^-r--r--r-- 1 \S+ \S+ %d .* img_%04d_of_"
                             r"1000\.jpeg$" % (SIZE, i))

        _, count = after(r"^\$ ls .*/train \| wc -l$")
        self.assertEqual(count, [str(N)])

        _, st = after(r"^\$ stat -c ")
        self.assertEqual(len(st), 1, st)
        self.assertRegex(st[0], r"^%s: %d bytes, inode \d+$" % (
            re.escape(f"{root}/train/{FILE}"), SIZE))

        _, md5 = after(r"^\$ cat .*/train/%s \| md5sum$" % re.escape(FILE))
        want = hashlib.md5(s3server.synthetic_bytes(
            "demo", "train/" + FILE, SIZE)).hexdigest()
        self.assertEqual(md5, [f"{want}  -"])

        # The index summary.
        line, info = after(r"/tools/bucketfs-index info -o endpoint=")
        self.assertIn(os.path.join(harness.BUILD, "tools", "bucketfs-index"),
                      line)
        fields = dict(re.split(r":\s+", x, maxsplit=1) for x in info)
        self.assertEqual(fields["keys"], str(N))
        self.assertEqual(fields["files"], f"{N} ({N * SIZE} bytes)")
        self.assertEqual(fields["directories"], "1 (0 markers)")
        self.assertRegex(fields["format"], r"^version \d+$")
        self.assertTrue(fields["not shown"].startswith("0 "), info)

        line, rest = after(r"^\$ fusermount3 -u ")
        self.assertEqual(rest, [])
        # The demo cleaned up after itself: no mount, no scratch left.
        self.assertEqual(mounts_under(self.tmp), [])
        self.assertEqual(os.listdir(self.tmp), [])


if __name__ == "__main__":
    harness.main()
