#!/usr/bin/env python3
"""A real server restarted under load (docs/RELIABILITY.md):
Ceph RGW and s3rver, servers we did not write.

32 readers read random objects of a mount (default options: retry_deadline
60 s) and check every byte.  The server is SIGKILLed, and started again on
the same port with the same data 5 s later.  The test asserts:
  - no read fails, and no read is ESTALE (the objects did not change);
  - reads resume after the server's return (how long after is measured and
    printed, never asserted: the machine may be loaded);
  - the daemon's log says what happened in a few lines (the ejection and
    the re-admission), not a line per request.

The RGW is the suite's (BFS_RGW_*) when there is one: only its radosgw
daemon is killed and started again, with the command tests/rgw/rgw.sh
uses, and the test waits until it answers before it ends, so the tests
after it find it as it was.  Without BFS_RGW_*, harness.RGW starts a
private cluster.
"""

import hashlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

READERS = 32
N, SIZE = 64, 48 << 10
DOWN = 5            # seconds the server stays down
LOAD_BEFORE = 2     # seconds of reads before the kill
LOAD_AFTER = 4      # seconds of reads after the first read that resumed


def answers(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def wait_answers(port, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answers(port):
            return True
        time.sleep(0.05)
    return False


class Restart:
    """A test of one server kind: kill() and start() it."""

    reset_faults = False    # no test S3 server here

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="bfs-restart-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def run_restart(self, url, port, bucket, ak, sk):
        rnd = random.Random(24)
        objs = {f"r/obj_{i:03d}.bin": rnd.randbytes(SIZE) for i in range(N)}
        want = {k: hashlib.sha256(v).digest() for k, v in objs.items()}
        harness.put_objects(url, bucket, objs, ak, sk, workers=8)
        env = harness.client_env(AWS_ACCESS_KEY_ID=ak,
                                 AWS_SECRET_ACCESS_KEY=sk)
        index = os.path.join(self.tmp, "r.idx")
        r = harness.run([harness.binary("bucketfs-index"), "build", "-q",
                         "-o", f"endpoint={url},index={index}",
                         f"s3://{bucket}"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        log = os.path.join(self.tmp, "mount.log")
        m = harness.Mount(f"s3://{bucket}", url, index, log=log, env=env)
        self.mounts.append(m)
        keys = sorted(objs)
        lock = threading.Lock()
        failures, done = [], []       # done: (finished, started) monotonic
        stop = threading.Event()

        def reader(i):
            rng = random.Random(i)
            while not stop.is_set():
                k = rng.choice(keys)
                t = time.monotonic()
                try:
                    with open(m.path(k), "rb") as f:
                        ok = hashlib.sha256(f.read()).digest() == want[k]
                        os.posix_fadvise(f.fileno(), 0, 0,
                                         os.POSIX_FADV_DONTNEED)
                    if not ok:
                        raise ValueError("wrong bytes")
                    with lock:
                        done.append((time.monotonic(), t))
                except (OSError, ValueError) as e:
                    with lock:
                        failures.append(f"{k}: {e!r}")

        ts = [threading.Thread(target=reader, args=(i,))
              for i in range(READERS)]
        for t in ts:
            t.start()
        try:
            time.sleep(LOAD_BEFORE)
            log_before = len(m.output().splitlines())
            killed = time.monotonic()
            self.kill()
            time.sleep(DOWN)
            self.start()
            self.assertTrue(wait_answers(port), "the server did not return")
            back = time.monotonic()
            deadline = back + 90
            while time.monotonic() < deadline:
                with lock:
                    after = [d for d in done if d[0] > back]
                if after:
                    break
                time.sleep(0.05)
            time.sleep(LOAD_AFTER)
        finally:
            stop.set()
            for t in ts:
                t.join(120)
        with lock:
            before_kill = [d for d in done if d[0] < killed]
            after = sorted(d[0] for d in done if d[0] > back)
        new_lines = m.output().splitlines()[log_before:]
        out = m.output()
        self.unmount(m)
        self.assertEqual(failures, [], out[-3000:])
        self.assertTrue(before_kill, "no read before the kill")
        self.assertTrue(after, "no read finished after the server returned")
        first = after[0] - back
        tenth = after[min(9, len(after) - 1)] - back
        print(f"\n  {self.name}: {len(before_kill)} reads before the kill, "
              f"{len(after)} in {LOAD_AFTER} s after its return; the first "
              f"read done {first:.2f} s after the server answered again, "
              f"the 10th {tenth:.2f} s; {len(new_lines)} log lines "
              f"meanwhile", file=sys.stderr)
        for ln in new_lines:
            print(f"    | {ln[:200]}", file=sys.stderr)
        self.assertNotIn("ESTALE", out)
        self.assertNotIn("changed after the index", out)
        # A few lines: the ejection, the re-admission; not one per read.
        self.assertLessEqual(len(new_lines), 12, "\n".join(new_lines))


class S3rverRestartTest(Restart, harness.MountCase):
    name = "s3rver"

    def test_killed_and_restarted_under_load(self):
        s = harness.S3rver("restart")
        self.s3rver = s
        try:
            self.run_restart(s.url, s.port, "restart", s.AK, s.SK)
        finally:
            s.stop()

    def kill(self):
        self.s3rver.proc.send_signal(signal.SIGKILL)
        self.s3rver.proc.wait()

    def start(self):
        self.s3rver.restart()


class RGWRestartTest(Restart, harness.MountCase):
    name = "Ceph RGW"

    def test_killed_and_restarted_under_load(self):
        rgw = harness.RGW("restart")
        self.rgw = rgw
        try:
            if not rgw.state:
                raise unittest.SkipTest("no BFS_RGW_DIR: cannot restart")
            self.run_restart(rgw.url, rgw.port, rgw.bucket, rgw.AK, rgw.SK)
        finally:
            # The suite's RGW must answer again for the tests after this.
            if not answers(rgw.port):
                self.start()
                wait_answers(rgw.port)
            rgw.stop()

    def pidfile(self):
        return os.path.join(self.rgw.state, "run", "client.rgw.0.pid")

    def kill(self):
        with open(self.pidfile()) as f:
            pid = int(f.read().strip())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.05)

    def start(self):
        # As tests/rgw/rgw.sh starts it: it forks, and writes its pid file.
        conf = os.path.join(self.rgw.state, "ceph.conf")
        out = os.path.join(self.rgw.state, "log", "client.rgw.0.out")
        with open(out, "ab") as f:
            subprocess.run(["radosgw", "-c", conf, "-n", "client.rgw.0"],
                           stdout=f, stderr=subprocess.STDOUT, check=True,
                           timeout=120)


if __name__ == "__main__":
    harness.main()
