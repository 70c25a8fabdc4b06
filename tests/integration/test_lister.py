#!/usr/bin/env python3
"""The parallel lister against the project's test server: what it sends
(every start-after clean UTF-8 without control characters, even between
keys full of them), what it costs (a small bucket is listed in sequence
with no probe; a large one spends at most about 5% more requests), and
that a probe no server answers sanely costs balance, never the listing."""

import os
import random
import re
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

FAST = "max_attempts=3,connect_timeout=2,stall_timeout=5"
PROBE = r"max-keys=1(&|$)"
# A start-after holding a control character (C0, DEL, C1) or a byte
# that cannot start UTF-8, percent-encoded.
UNCLEAN = (r"start-after=[^&]*%(0[0-9A-F]|1[0-9A-F]|7F|C2%[89][0-9A-F]|"
           r"[89AB][0-9A-F]%|C[01]|F[5-9A-F])")
FLAT = 40000    # keys of the flat synthetic bucket: 40 pages
SMALL = 3000    # 3 pages


def awkward_names(n, seed=5):
    """@n distinct file names mixing controls, emoji, U+E000-U+FFFF,
    spaces and the characters URLs and XML care about."""
    rnd = random.Random(seed)
    alphabet = ["a", "b", "z", "0", "7", " ", "+", "%", "~", "=", "&", "<",
                "\x01", "\x1f", "\x7f", "\u0085", "\u00e9", "\u3042",
                "\ue000", "\ufffd", "\U0001f600", "\U0010fffd"]
    names = set()
    while len(names) < n:
        names.add("".join(rnd.choice(alphabet)
                          for _ in range(rnd.randrange(1, 9))))
    return sorted(names)


class ListerTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix="bfs-lister-")
        data = cls.mkdir("awk-data")
        cls.awk = {}
        for d in ("d\u3042", "d\U0001f600", "d\x01", "plain"):
            os.makedirs(os.path.join(data, d))
            for name in awkward_names(7000, seed=len(d) + ord(d[-1])):
                key = f"{d}/{name}"
                cls.awk[key] = len(name)
                with open(os.path.join(data, key), "wb") as f:
                    f.write(b"x" * len(name))
        cls.server = harness.TestServer(
            "--bucket", f"awk={data}",
            "--synthetic", f"flat:{FLAT}:16",
            "--synthetic", f"small:{SMALL}:16")

    def index(self, name):
        return os.path.join(self.tmp, f"{name}-{time.monotonic_ns()}.idx")

    def build(self, bucket, idx, opts=FAST, workers=None):
        j = ["-j", str(workers)] if workers else []
        return harness.run([harness.binary("bucketfs-index"), "build", "-q",
                            *j, "-o", f"endpoint={self.server.url},"
                            f"index={idx},{opts}", f"s3://{bucket}"],
                           timeout=300)

    def lists(self):
        return self.server.stats()["requests"].get("LIST", 0)

    def rule_counts(self):
        return [(r["matched"], r["hits"])
                for r in self.server.control("GET", "faults")["rules"]]

    def tree(self, idx, bucket):
        m = harness.Mount(f"s3://{bucket}", self.server.url, idx,
                          log=os.path.join(self.tmp, "m.log"))
        self.mounts.append(m)
        found = {}
        for root, _, files in os.walk(m.dir):
            for f in files:
                p = os.path.join(root, f)
                found[os.path.relpath(p, m.dir)] = os.stat(p).st_size
        self.unmount(m)
        return found

    def test_small_bucket_is_listed_in_sequence(self):
        self.server.faults([{"op": "LIST", "query_regex": PROBE,
                             "kind": "delay", "seconds": 0}])
        before = self.lists()
        r = self.build("small", self.index("small"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.lists() - before, SMALL // 1000)
        self.assertEqual(self.rule_counts(), [(0, 0)])

    def test_large_bucket_probes_within_five_percent(self):
        self.server.faults([{"op": "LIST", "query_regex": PROBE,
                             "kind": "delay", "seconds": 0}])
        before = self.lists()
        idx = self.index("flat")
        r = self.build("flat", idx, FAST, workers=4)
        self.assertEqual(r.returncode, 0, r.stderr)
        total = self.lists() - before
        probes = self.rule_counts()[0][0]
        pages = total - probes
        self.assertGreater(probes, 0, "a 40-page listing was never cut")
        self.assertLessEqual(probes, pages / 20 + 1, (probes, pages))
        # Every key once, whatever the cuts: pages of 1,000 but the
        # last of each range.
        self.assertLessEqual(pages, FLAT // 1000 + 4 * 4)
        info = harness.run([harness.binary("bucketfs-index"), "info", "-o",
                            f"endpoint={self.server.url},index={idx}",
                            "s3://flat"])
        self.assertIn(f"keys:         {FLAT}", info.stdout.decode())

    def test_cut_points_are_clean_among_awkward_keys(self):
        self.server.faults([
            {"op": "LIST", "query_regex": UNCLEAN, "kind": "status",
             "status": 400, "code": "InvalidArgument"},
            {"op": "LIST", "query_regex": PROBE, "kind": "delay",
             "seconds": 0}])
        idx = self.index("awk")
        r = self.build("awk", idx, FAST, workers=8)
        self.assertEqual(r.returncode, 0, r.stderr)
        unclean, probes = self.rule_counts()
        self.assertEqual(unclean[0], 0, "an unclean start-after was sent")
        self.assertGreater(probes[0], 0, "a 28-page listing was never cut")
        self.server.clear_faults()
        self.assertEqual(self.tree(idx, "awk"), self.awk)

    def test_malformed_probe_falls_back_at_once(self):
        self.server.faults([{"op": "LIST", "query_regex": PROBE,
                             "kind": "malformed_xml"}])
        idx = self.index("malformed")
        r = self.build("awk", idx, FAST, workers=8)
        err = r.stderr.decode()
        self.assertEqual(r.returncode, 0, err)
        # Not retried: the first malformed probe ends the cutting.
        self.assertEqual(self.rule_counts(), [(1, 1)])
        self.assertEqual(len(re.findall("no more parallel ranges", err)), 1,
                         err)
        self.assertRegex(err, r"malformed ListObjectsV2 response")
        self.server.clear_faults()
        self.assertEqual(self.tree(idx, "awk"), self.awk)

    def test_failing_probe_costs_only_balance(self):
        # Retried like any request (max_attempts), then given up on.
        self.server.faults([{"op": "LIST", "query_regex": PROBE,
                             "kind": "status", "status": 503}])
        idx = self.index("failing")
        r = self.build("flat", idx, FAST)
        err = r.stderr.decode()
        self.assertEqual(r.returncode, 0, err)
        self.assertEqual(self.rule_counts()[0][1], 3)
        self.assertRegex(err, r"no more parallel ranges .*attempt 3/3.*"
                         r"HTTP 503 SlowDown")
        info = harness.run([harness.binary("bucketfs-index"), "info", "-o",
                            f"endpoint={self.server.url},index={idx}",
                            "s3://flat"])
        self.assertIn(f"keys:         {FLAT}", info.stdout.decode())

    def test_an_ordinary_malformed_page_still_fails(self):
        # Only probes give up at once; a listing page is retried, and a
        # page that never parses fails the build with its cause.
        self.server.faults([{"op": "LIST", "query_regex": r"max-keys=1000",
                             "kind": "malformed_xml", "skip": 2}])
        r = self.build("flat", self.index("page"))
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr.decode(),
                         r"\(attempt 3/3, [\d.]+ s\): malformed "
                         r"ListObjectsV2 response")


if __name__ == "__main__":
    harness.main()
