#!/usr/bin/env python3
"""What each fault costs under the retry policy (docs/RELIABILITY.md,
"Retry policy"), each on a real mount against the test S3 server:

- every clause of a cause chain belongs to its own request: with a refused
  endpoint beside one that truncates bodies, no line about the truncating
  endpoint carries the refused one's errno (curl keeps an OS errno in a
  reused easy handle; the bodies are truncated at 30%, so with 10
  attempts a read fails with a chance of 0.3^10);
- a 200 to a ranged GET (a server ignoring Range, as RFC 9110 allows)
  serves the range from the whole body, and the quirk is logged once; a
  200 too big for the range is tried once more, then fails with its
  cause, never ten times;
- every endpoint down for a while: within retry_deadline the read waits
  for the store and succeeds once it is back; past it, the read fails
  with the deadline in its cause chain.

Nothing here asserts a speed; the bounds only show that nothing hangs.
"""

import errno
import os
import re
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402

sys.path.insert(0, os.path.join(harness.SRC, "tests", "s3server"))
import s3server  # noqa: E402

N, SIZE = 400, 6000
LARGE = 4 << 20


def key(i):
    return f"train/img_{i:03d}_of_{N}.jpeg"


def build_index(url, bucket, path):
    r = harness.run([harness.binary("bucketfs-index"), "build", "-q",
                     "-o", f"endpoint={url},index={path}", f"s3://{bucket}"])
    if r.returncode != 0:
        raise RuntimeError(f"index build failed: {r.stderr!r}")


class FaultCostTest(harness.MountCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-cost-")
        cls.server = harness.TestServer(
            "--synthetic", f"cost:{N}:{SIZE}",
            "--synthetic", f"big:2:{LARGE}")
        cls.index = os.path.join(cls.tmp, "cost.idx")
        cls.big_index = os.path.join(cls.tmp, "big.idx")
        build_index(cls.server.url, "cost", cls.index)
        build_index(cls.server.url, "big", cls.big_index)

    def read(self, m, bucket, k, size):
        with open(m.path(k), "rb") as f:
            got = f.read()
        self.assertEqual(got, s3server.synthetic_bytes(bucket, k, size, 0),
                         f"{k}: wrong bytes")

    def test_errno_belongs_to_its_request(self):
        # curl's easy handles, reused across endpoints.
        self.errno_belongs("http_receive=curl", "curl 18")

    def test_errno_belongs_to_its_request_on_the_direct_path(self):
        # GETs to the live endpoint run on the direct receive path once
        # curl has connected there; refusals stay curl's.
        self.errno_belongs("http_receive=direct", "(partial body)")

    def errno_belongs(self, receive, truncated):
        """Reads through four refusing endpoints and a truncating one: each
        truncation (logged with @truncated) carries no OS errno, the
        refusals' included."""
        deads = [f"http://127.0.0.1:{harness.free_port()}" for _ in range(4)]
        dead = deads[0]
        # Each GET's attempts are truncated independently: with
        # probability p, all 10 attempts of one GET are with p ** 10, and
        # its read fails (EIO, the budget spent).  p = 0.3 made that
        # 0.24% of the runs (400 keys x 0.3 ** 10): seen twice in 400
        # ASan runs.  p = 0.15: about 60 truncations a run, and a spent
        # budget once in 400,000 runs.
        self.server.faults([{"op": "GET", "bucket": "cost", "kind": "truncate",
                             "after_bytes": SIZE // 2, "probability": 0.15}],
                           seed=24)
        log = os.path.join(self.tmp, "errno.log")
        # -d logs every retry; one event thread, so the same easy handles
        # serve the refused endpoint and the truncating one in turn.
        m = Mount("s3://cost", dead, self.index,
                  *[f"endpoint={d}" for d in deads[1:]],
                  f"endpoint={self.server.url}", "event_threads=1",
                  "max_connections=4", receive, log=log, debug=True)
        self.mounts.append(m)
        failures = []
        failed = []

        def reader(ks):
            for k in ks:
                try:
                    self.read(m, "cost", k, SIZE)
                except (OSError, AssertionError) as e:
                    failures.append(f"{k}: {e}")
                    failed.append(k)

        keys = [key(i) for i in range(N)]
        ts = [threading.Thread(target=reader, args=(keys[j::4],))
              for j in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.server.clear_faults()
        out = m.output()
        self.unmount(m)
        # A failed read: the daemon's lines of its key say why (the tail
        # of a -d log is other reads' retries).
        self.assertEqual(failures, [], "\n".join(
            [ln for ln in out.splitlines() if any(k in ln for k in failed)]
            [-40:]) or out[-3000:])
        live = [ln for ln in out.splitlines()
                if f"via {self.server.url} " in ln and truncated in ln]
        refused = [ln for ln in out.splitlines()
                   if any(f"via {d} " in ln for d in deads) and
                   "os errno 111" in ln]
        self.assertTrue(refused, "the dead endpoint was never tried: " +
                        out[-2000:])
        self.assertTrue(live, "no truncation was logged: " + out[-2000:])
        stale = [ln for ln in live if "os errno" in ln]
        self.assertEqual(stale, [], "a truncation carries an OS errno "
                         "that is not its own")

    def mount_debug(self, *opts, index=None, bucket="cost", name="m",
                    debug=False):
        log = os.path.join(self.tmp, f"{name}.log")
        m = Mount(f"s3://{bucket}", self.server.url, index or self.index,
                  *opts, log=log, debug=debug)
        self.mounts.append(m)
        return m

    def test_range_ignored_small_objects_are_served(self):
        # img_000 .. img_009: small objects are fetched whole with
        # Range: bytes=0-(size-1), and the server answers 200 to each.
        self.server.faults([{"op": "GET", "bucket": "cost",
                             "key_prefix": "train/img_00",
                             "kind": "ignore_range"}])
        m = self.mount_debug(name="range-small")
        for i in range(5):
            self.read(m, "cost", key(i), SIZE)
        rule = self.server.control("GET", "faults")["rules"][0]
        self.server.clear_faults()
        out = m.output()
        self.unmount(m)
        self.assertGreaterEqual(rule["hits"], 5, "the server honoured a Range")
        # One GET per object at most (prefetch may fetch all 10): the
        # whole body serves the range, nothing is retried.
        self.assertLessEqual(rule["hits"], 10, out[-2000:])
        self.assertNotIn("error", out)
        notes = [ln for ln in out.splitlines() if "ignores Range" in ln]
        self.assertEqual(len(notes), 1, out[-2000:])
        self.assertRegex(notes[0], r"ignores Range: HTTP 200 with the whole "
                         r"object \(6000 bytes\) to GET s3://cost/train/"
                         r"img_00\d_of_400\.jpeg with Range bytes=0-5999;")

    def test_range_ignored_large_object(self):
        """A read inside a 4 MiB object: a part asked for with a length
        gets the whole object, more than it can take: tried once more,
        then it fails with the cause (never ten times); a part without a
        length is served from the whole body.  Either way the reader gets
        the right bytes or the error, and never a wrong byte."""
        k = "train/img_0_of_2.jpeg"
        self.server.faults([{"op": "GET", "bucket": "big", "key_prefix": k,
                             "kind": "ignore_range"}])
        m = self.mount_debug("whole_max=65536", "window_max=1048576",
                             index=self.big_index, bucket="big",
                             name="range-large", debug=True)
        t0 = time.monotonic()
        want = s3server.synthetic_bytes("big", k, LARGE, 0)
        try:
            with open(m.path(k), "rb") as f:
                f.seek(LARGE // 2)
                got = f.read(65536)
            self.assertEqual(got, want[LARGE // 2:LARGE // 2 + 65536])
        except OSError as e:
            self.assertEqual(e.errno, errno.EIO)
        self.assertLess(time.monotonic() - t0, 60)
        rule = self.server.control("GET", "faults")["rules"][0]
        self.server.clear_faults()
        out = m.output()
        self.unmount(m)
        lines = [ln for ln in out.splitlines()
                 if "ignored the Range and sends the whole object" in ln]
        self.assertTrue(lines, out[-3000:])
        for ln in lines:
            self.assertRegex(ln, r"\(attempt [12]/10, ")
        self.assertLessEqual(rule["hits"], 8, out[-3000:])

    def test_store_down_within_the_deadline_is_waited_for(self):
        port = harness.free_port()
        srv = harness.TestServer("--port", str(port), "--synthetic",
                                 f"cost:{N}:{SIZE}")
        index = os.path.join(self.tmp, "down.idx")
        try:
            build_index(srv.url, "cost", index)
        finally:
            srv.stop()
        log = os.path.join(self.tmp, "down.log")
        m = Mount("s3://cost", f"http://127.0.0.1:{port}", index,
                  "retry_deadline=30", log=log)
        self.mounts.append(m)
        result = {}

        def reader():
            t = time.monotonic()
            try:
                self.read(m, "cost", key(7), SIZE)
                result["ok"] = time.monotonic() - t
            except (OSError, AssertionError) as e:
                result["error"] = e

        t = threading.Thread(target=reader)
        t.start()
        time.sleep(3)
        self.assertNotIn("error", result, "failed before the deadline")
        back = time.monotonic()
        srv = harness.TestServer("--port", str(port), "--synthetic",
                                 f"cost:{N}:{SIZE}")
        try:
            t.join(60)
            resumed = time.monotonic() - back
        finally:
            srv.stop()
        self.unmount(m)
        self.assertEqual(result.get("error"), None)
        self.assertIn("ok", result)
        print(f"\n  read done {resumed:.2f} s after the server came back",
              file=sys.stderr)

    def test_store_down_past_the_deadline_fails_with_it(self):
        port = harness.free_port()
        log = os.path.join(self.tmp, "past.log")
        m = Mount("s3://cost", f"http://127.0.0.1:{port}", self.index,
                  "retry_deadline=2", log=log)
        self.mounts.append(m)
        t0 = time.monotonic()
        with self.assertRaises(OSError) as cm:
            self.read(m, "cost", key(9), SIZE)
        secs = time.monotonic() - t0
        self.assertEqual(cm.exception.errno, errno.EIO)
        self.assertGreaterEqual(secs, 2)
        self.assertLess(secs, 30)
        self.assertTrue(m.wait_output("retry_deadline", 10), m.output())
        line = [ln for ln in m.output().splitlines()
                if "retry_deadline" in ln][0]
        self.unmount(m)
        self.assertRegex(
            line, r"GET s3://cost/train/img_009_of_400\.jpeg via "
            rf"http://127\.0\.0\.1:{port} \(attempt 1/10, [\d.]+ s, after "
            r"\d+ attempts that reached no endpoint\): no endpoint reachable"
            r" for retry_deadline \(2 s\): curl 7 ")
        self.assertIn("[os errno 111: Connection refused]", line)


if __name__ == "__main__":
    harness.main()
