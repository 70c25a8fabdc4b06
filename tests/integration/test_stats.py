#!/usr/bin/env python3
"""user.bucketfs.stats is JSON a strict parser takes (json-glib builds it):
every documented field is there with its type, the counters move with
reads, strings with awkward characters (quotes, backslashes, a tab, a
control character, non-ASCII) come back exactly, and the index's
generation counts a SIGHUP switch."""

import json
import os
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

BUCKET = "stats"
# Valid UTF-8, as the prefix must be; everything JSON has to escape.
PREFIX = 'we"ird\\pre\tfix\x01 \u00fc\U0001f600/'
FILES = {"a.bin": b"a" * 5000, "b.bin": b"b" * 70000, "sub/c.txt": b"c\n"}

ENDPOINT = {"url": str, "requests": int, "bytes": int, "errors": int,
            "hedges": int, "ejections": int, "direct": int, "connects": int,
            "tls_resumed": int, "inflight": int, "ejected": bool,
            "p50_ms": float, "p99_ms": float}
READAHEAD = ["objects_fetched", "parts_fetched", "direct_reads",
             "prefetch_hits", "prefetch_wasted", "prefetch_late",
             "prefetch_queued", "prefetch_unopened", "stream_fetched",
             "stream_hits", "stream_wasted", "stream_late",
             "lookup_fetched", "lookup_hits", "lookup_wasted", "memory_used",
             "memory_max"]
STREAMS = ["opens", "continued", "confirmed", "announced", "jumps",
           "batch_len", "batch_jump", "tracked"]
LOOKUPS = ["lookups", "fetched", "followed", "hits", "wasted", "credit",
           "pending"]
STAGES = ["wait", "first_byte", "body", "handoff"]


class StatsTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-stats-")
        cls.server = harness.TestServer(
            "--bucket", f"{BUCKET}={cls.mkdir('data')}")
        harness.put_objects(cls.server.url, BUCKET,
                            {PREFIX + k: v for k, v in FILES.items()})

    def stats(self, m):
        raw = os.getxattr(m.dir, "user.bucketfs.stats")
        # Strict: a raw control character in a string is an error.
        return raw, json.loads(raw.decode("utf-8"), strict=True)

    def check_shape(self, s):
        self.assertEqual(len(s["endpoints"]), 2)
        for ep in s["endpoints"]:
            self.assertEqual(set(ep), set(ENDPOINT))
            for k, t in ENDPOINT.items():
                self.assertIsInstance(ep[k], t, k)
        self.assertIsInstance(s["queued"], int)
        self.assertEqual(set(s["readahead"]), set(READAHEAD))
        self.assertEqual(set(s["streams"]), set(STREAMS))
        self.assertEqual(set(s["lookups"]), set(LOOKUPS))
        self.assertEqual(set(s["files"]), {"reads", "handed_over", "open"})
        self.assertEqual(set(s["passthrough"]),
                         {"on", "opens", "stale", "direct", "memfds",
                          "fallbacks"})
        self.assertEqual(set(s["passthrough"]["memfds"]),
                         {"reused_when_idle", "made", "reused", "busy",
                          "idle", "idle_bytes", "bodies_lent"})
        self.assertIsInstance(s["passthrough"]["on"], bool)
        self.assertIsInstance(s["passthrough"]["opens"], int)
        self.assertIsInstance(s["passthrough"]["stale"], int)
        self.assertEqual(set(s["passthrough"]["fallbacks"]),
                         {"cached", "memfd", "backing", "reply"})
        self.assertEqual(set(s["stages"]), {"samples", *STAGES})
        for st in STAGES:
            self.assertEqual(set(s["stages"][st]), {"p50_ms", "p99_ms"})
        for group in ("readahead", "streams", "lookups", "files"):
            for k, v in s[group].items():
                self.assertIsInstance(v, int, f"{group}.{k}")
                self.assertGreaterEqual(v, 0, f"{group}.{k}")
        self.assertEqual(set(s["index"]), {"bucket", "prefix", "keys",
                                           "created", "generation"})
        self.assertEqual(set(s["fuse_init"]),
                         {"parallel_dirops", "direct_io_allow_mmap"})
        for k, v in s["fuse_init"].items():
            self.assertIsInstance(v, bool, f"fuse_init.{k}")

    def test_stats_json(self):
        # Two spellings of one server: two endpoints, both listed.
        other = self.server.url.replace("127.0.0.1", "localhost")
        m = harness.Mount(f"s3://{BUCKET}/{PREFIX}", self.server.url,
                          os.path.join(self.tmp, "stats.idx"),
                          f"endpoint={other}",
                          log=os.path.join(self.tmp, "mount.log"))
        self.mounts.append(m)
        raw, s = self.stats(m)
        self.check_shape(s)
        self.assertEqual(s["index"]["bucket"], BUCKET)
        self.assertEqual(s["index"]["prefix"], PREFIX)
        self.assertEqual(s["index"]["keys"], len(FILES))
        self.assertEqual(s["index"]["generation"], 1)
        self.assertLessEqual(s["index"]["created"], time.time() + 1)
        self.assertEqual({e["url"] for e in s["endpoints"]},
                         {self.server.url, other})
        # Escaped, not raw: JSON's own escapes for what it cannot hold.
        for esc in (rb'we\"ird', rb'\\pre', rb'\t', rb'\u0001'):
            self.assertIn(esc, raw)
        self.assertNotIn(b"\x01", raw)

        for k, v in FILES.items():
            with open(m.path(k), "rb") as f:
                self.assertEqual(f.read(), v)
        _, s = self.stats(m)
        self.check_shape(s)
        # Each file was either stored in the page cache at its open (no
        # FUSE read follows), passed through, or read through the daemon.
        self.assertGreaterEqual(s["files"]["reads"] + s["files"]["handed_over"]
                                + s["passthrough"]["opens"], len(FILES))
        self.assertGreaterEqual(sum(e["requests"] for e in s["endpoints"]),
                                len(FILES))
        self.assertGreaterEqual(sum(e["bytes"] for e in s["endpoints"]),
                                sum(len(v) for v in FILES.values()))
        # Answers on the direct receive path are some of the requests.
        self.assertLessEqual(sum(e["direct"] for e in s["endpoints"]),
                             sum(e["requests"] for e in s["endpoints"]))
        # They came on connections the direct path opened; over plain
        # HTTP none of them resumed a TLS session.
        for e in s["endpoints"]:
            if e["direct"]:
                self.assertGreaterEqual(e["connects"], 1, e)
            self.assertEqual(e["tls_resumed"], 0, e)

        # A SIGHUP reopens the index file: the next generation.
        m.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 120
        while self.stats(m)[1]["index"]["generation"] == 1:
            self.assertLess(time.monotonic(), deadline, m.output())
            time.sleep(0.1)
        self.assertEqual(self.stats(m)[1]["index"]["generation"], 2)
        self.unmount(m)

    def test_parallel_dirops_negotiated(self):
        """libfuse 3.14 leaves FUSE_PARALLEL_DIROPS out of its INIT reply,
        so the kernel would hold a directory's lock around every LOOKUP in
        it; bucketfs adds the flag (fuse_init.c), says so in its log and
        its stats, and lookups from many threads at once in one directory
        still answer right."""
        m = harness.Mount(f"s3://{BUCKET}/{PREFIX}", self.server.url,
                          os.path.join(self.tmp, "dirops.idx"),
                          log=os.path.join(self.tmp, "dirops.log"))
        self.mounts.append(m)
        s = self.stats(m)[1]
        self.assertTrue(s["fuse_init"]["parallel_dirops"], m.output())
        self.assertIn("FUSE_PARALLEL_DIROPS negotiated", m.output())
        errors = []

        def look(t):
            try:
                for i in range(40):
                    # Not there: each is a LOOKUP of the root...
                    self.assertFalse(os.path.exists(m.path(f"no-{t}-{i}")))
                    # ... and these are, all in one directory.
                    k = list(FILES)[(t + i) % len(FILES)]
                    self.assertEqual(os.stat(m.path(k)).st_size,
                                     len(FILES[k]))
            except Exception as e:  # reported below, with the thread's
                errors.append(e)

        ts = [threading.Thread(target=look, args=(t,)) for t in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        for k, v in FILES.items():
            with open(m.path(k), "rb") as f:
                self.assertEqual(f.read(), v)
        self.unmount(m)

    def test_open_files_counted_until_released(self):
        """files.open counts the handles the daemon holds: one per open
        file, and none once the kernel's RELEASEs (sent after close(), in
        the background) have come."""
        m = harness.Mount(f"s3://{BUCKET}/{PREFIX}", self.server.url,
                          os.path.join(self.tmp, "open.idx"),
                          log=os.path.join(self.tmp, "open.log"))
        self.mounts.append(m)
        keys = list(FILES)[:3]
        fs = [open(m.path(k), "rb") for k in keys]
        try:
            self.assertEqual(self.stats(m)[1]["files"]["open"], len(keys))
        finally:
            for f in fs:
                f.close()
        deadline = time.monotonic() + 10
        while self.stats(m)[1]["files"]["open"] and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.stats(m)[1]["files"]["open"], 0)
        self.unmount(m)

if __name__ == "__main__":
    harness.main()
