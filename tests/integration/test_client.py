#!/usr/bin/env python3
"""The S3 client (src/s3 + src/http) against the project's test S3 server:
bytes, listings, special keys, and every transport and HTTP fault with the
errno and the cause chain it must produce."""

import errno
import os
import random
import shutil
import sys
import tempfile
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SPECIAL_KEYS = [
    "plain.txt",
    "with space.bin",
    "plus+sign",
    "percent%41literal",
    "tilde~and=equals&amp'quote",
    "unicode/ümlaut/日本語/😀.jpeg",
    "double//slash",
    "dot/./and/../dotdot",
    "trailing/",
    "ctrl\x01char",
    "q?mark#hash",
]


def esc(key):
    """A key as s3-client takes it: %-escaped so any byte survives argv."""
    return urllib.parse.quote(key.encode() if isinstance(key, str) else key,
                              safe="/")


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-client-")
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(os.path.join(cls.data, "dir"))
        rnd = random.Random(42)
        cls.files = {
            "hello.txt": b"hello, bucketfs\n",
            "dir/blob.bin": rnd.randbytes(300_000),
            "empty": b"",
        }
        for k, v in cls.files.items():
            with open(os.path.join(cls.data, k), "wb") as f:
                f.write(v)
        cls.server = harness.TestServer("--bucket", f"data={cls.data}",
                                        "--synthetic", "syn:2500:1000")
        cls.client = harness.binary("s3-client")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.server.clear_faults()

    def c(self, *args, opts=(), endpoint=None, env=None):
        o = []
        for x in opts:
            o += ["-o", x]
        o += ["-o", f"endpoint={endpoint or self.server.url}"]
        return harness.run([self.client, *o, *args], env=env)

    def get(self, key, *rest, **kw):
        return self.c("get", f"s3://data/{esc(key)}", *rest, **kw)

    # -- bytes ---------------------------------------------------------

    def test_get_whole_objects(self):
        for k, v in self.files.items():
            r = self.get(k)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, v, k)

    def test_get_ranges(self):
        blob = self.files["dir/blob.bin"]
        for off, ln in [(0, 1), (1, 10), (299_990, 10), (299_990, 100),
                        (123_456, 65_536), (5, 0)]:
            r = self.get("dir/blob.bin", str(off), str(ln))
            self.assertEqual(r.returncode, 0, r.stderr)
            want = blob[off:off + ln] if ln else blob[off:]
            self.assertEqual(r.stdout, want, (off, ln))
            self.assertIn(b"size=300000", r.stderr)

    def test_range_past_end_is_einval(self):
        r = self.get("hello.txt", "1000", "10")
        self.assertEqual(r.returncode, errno.EINVAL, r.stderr)
        self.assertIn(b"HTTP 416 InvalidRange", r.stderr)

    def test_head(self):
        r = self.c("head", "s3://data/dir/blob.bin")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"size=300000 etag=", r.stdout)

    def test_head_missing_is_enoent_by_status(self):
        r = self.c("head", "s3://data/nope")
        self.assertEqual(r.returncode, errno.ENOENT, r.stderr)
        self.assertIn(b"HEAD s3://data/nope via " + self.server.url.encode(),
                      r.stderr)
        self.assertIn(b"HTTP 404 Not Found", r.stderr)
        self.assertIn(b"RequestId: ", r.stderr)

    def test_missing_key_chain(self):
        r = self.get("no/such/key")
        self.assertEqual(r.returncode, errno.ENOENT)
        err = r.stderr.decode()
        self.assertRegex(err, r"GET s3://data/no/such/key via http://"
                         r"127\.0\.0\.1:\d+ \(attempt 1/10, [\d.]+ s\): "
                         r"HTTP 404 NoSuchKey: .*\(RequestId: \S+\)")

    def test_if_match(self):
        r = self.c("head", "s3://data/hello.txt")
        etag = r.stdout.decode().split("etag=")[1].split()[0]
        r = self.get("hello.txt", "0", "0", etag)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.get("hello.txt", "0", "0", "0123456789abcdef")
        self.assertEqual(r.returncode, errno.ESTALE, r.stderr)
        self.assertIn(b"HTTP 412 PreconditionFailed", r.stderr)

    def test_special_keys_roundtrip(self):
        for i, k in enumerate(SPECIAL_KEYS):
            body = f"object {i}: {k}".encode()
            harness.put_object(self.server.url, "data", "sp/" + k, body)
        r = self.c("listall", "s3://data/sp/")
        self.assertEqual(r.returncode, 0, r.stderr)
        listed = [bytes.fromhex(l.split()[1]).decode()
                  for l in r.stdout.decode().splitlines()
                  if l.startswith("obj ")]
        self.assertEqual(listed,
                         sorted(("sp/" + k for k in SPECIAL_KEYS),
                                key=lambda s: s.encode()))
        for i, k in enumerate(SPECIAL_KEYS):
            r = self.get("sp/" + k)
            self.assertEqual(r.returncode, 0, (k, r.stderr))
            self.assertEqual(r.stdout, f"object {i}: {k}".encode())

    def test_control_char_is_escaped_in_errors(self):
        r = self.get("missing\x01key\nline")
        self.assertEqual(r.returncode, errno.ENOENT)
        self.assertIn(b"missing\\x01key\\x0aline", r.stderr)
        self.assertEqual(r.stderr.count(b"\n"), 1, r.stderr)

    # -- listings --------------------------------------------------------

    def pages(self, out):
        return sum(1 for l in out.decode().splitlines()
                   if l.startswith("page "))

    def keys(self, out):
        return [bytes.fromhex(l.split()[1]).decode()
                for l in out.decode().splitlines() if l.startswith("obj ")]

    def test_listall_pages(self):
        r = self.c("listall", "s3://syn", "-", "1000")
        self.assertEqual(r.returncode, 0, r.stderr)
        want = [f"train/img_{i:04d}_of_2500.jpeg" for i in range(2500)]
        self.assertEqual(self.keys(r.stdout), want)
        self.assertEqual(self.pages(r.stdout), 3)

    def test_list_delimiter_and_start_after(self):
        r = self.c("list", "s3://syn", "/")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"prefix " + b"train/".hex().encode(), r.stdout)
        r = self.c("list", "s3://syn/train/", "-", "5",
                   "train/img_2497_of_2500.jpeg")
        self.assertEqual(self.keys(r.stdout),
                         ["train/img_2498_of_2500.jpeg",
                          "train/img_2499_of_2500.jpeg"])

    def test_empty_truncated_pages_are_followed(self):
        self.server.faults([{"op": "LIST", "kind": "empty_truncated",
                             "count": 3}])
        r = self.c("listall", "s3://syn", "-", "1000")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(self.keys(r.stdout)), 2500)
        self.assertEqual(self.pages(r.stdout), 6)

    def test_repeating_token_stops(self):
        self.server.faults([{"op": "LIST", "kind": "repeat_token",
                             "skip": 1}])
        r = self.c("listall", "s3://syn", "-", "100")
        self.assertEqual(r.returncode, errno.EPROTO, r.stderr)
        self.assertIn(b"repeats: the server is looping", r.stderr)

    def test_malformed_listing(self):
        # Always broken: retried, then EPROTO with the parser's words.
        self.server.faults([{"op": "LIST", "kind": "malformed_xml"}])
        r = self.c("list", "s3://syn", opts=["max_attempts=3"])
        self.assertEqual(r.returncode, errno.EPROTO, r.stderr)
        self.assertIn(b"LIST s3://syn/ via ", r.stderr)
        self.assertIn(b"(attempt 3/3", r.stderr)
        self.assertIn(b"RequestId", r.stderr)
        # Cut once on the way: the retry gets the whole page.
        self.server.faults([{"op": "LIST", "kind": "malformed_xml",
                             "count": 1}])
        r = self.c("list", "s3://syn", opts=["max_attempts=3"])
        self.assertEqual(r.returncode, 0, r.stderr)

    # -- retries and faults ---------------------------------------------

    def test_transient_slowdown_succeeds(self):
        self.server.faults([{"op": "GET", "kind": "status", "status": 503,
                             "code": "SlowDown",
                             "message": "Please reduce your request rate.",
                             "probability": 0.5}], seed=7)
        before = self.server.stats()["faults_injected"]
        for _ in range(8):
            r = self.get("dir/blob.bin")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, self.files["dir/blob.bin"])
        self.assertGreater(self.server.stats()["faults_injected"], before)

    def test_persistent_slowdown_fails_with_chain(self):
        self.server.faults([{"op": "GET", "kind": "status", "status": 503,
                             "code": "SlowDown",
                             "message": "Please reduce your request rate."}])
        r = self.get("hello.txt", opts=["max_attempts=3"])
        self.assertEqual(r.returncode, errno.EIO, r.stderr)
        self.assertRegex(r.stderr.decode(),
                         r"GET s3://data/hello.txt via http://\S+ "
                         r"\(attempt 3/3, [\d.]+ s\): HTTP 503 SlowDown: "
                         r"Please reduce your request rate\. "
                         r"\(RequestId: \S+\)")

    def test_request_timeout_is_retried(self):
        self.server.faults([{"op": "GET", "kind": "status", "status": 400,
                             "code": "RequestTimeout", "count": 2}])
        r = self.get("hello.txt")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_other_4xx_not_retried(self):
        self.server.faults([{"op": "GET", "kind": "status", "status": 403,
                             "code": "AccessDenied", "message": "no"}])
        r = self.get("hello.txt")
        self.assertEqual(r.returncode, errno.EACCES, r.stderr)
        self.assertIn(b"(attempt 1/10", r.stderr)

    def test_connection_refused(self):
        port = harness.free_port()
        r = self.get("hello.txt", opts=["max_attempts=2", "retry_deadline=0"],
                     endpoint=f"http://127.0.0.1:{port}")
        self.assertEqual(r.returncode, errno.EIO, r.stderr)
        self.assertRegex(r.stderr.decode(),
                         rf"via http://127\.0\.0\.1:{port} \(attempt 2/2, "
                         r"[\d.]+ s\): curl 7 \(Couldn't connect to server\)"
                         r".*\[os errno 111: Connection refused\]")

    def test_broken_bodies_are_retried(self):
        for kind in ("truncate", "reset", "drop"):
            with self.subTest(kind=kind):
                self.server.faults([{"op": "GET", "kind": kind,
                                     "after_bytes": 1000, "count": 1}])
                r = self.get("dir/blob.bin")
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout, self.files["dir/blob.bin"])

    def test_stall_is_abandoned_and_retried(self):
        self.server.faults([{"op": "GET", "kind": "stall",
                             "after_bytes": 1000, "seconds": 30,
                             "count": 1}])
        r = self.get("dir/blob.bin", opts=["stall_timeout=1"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, self.files["dir/blob.bin"])

    def test_persistent_stall_names_timeout(self):
        self.server.faults([{"op": "GET", "kind": "stall",
                             "after_bytes": 10, "seconds": 30}])
        # retry_deadline=0: the stalls count in max_attempts.
        r = self.get("dir/blob.bin", opts=["stall_timeout=1",
                                           "max_attempts=2",
                                           "retry_deadline=0"])
        self.assertEqual(r.returncode, errno.ETIMEDOUT, r.stderr)
        self.assertIn(b"(attempt 2/2", r.stderr)
        self.assertRegex(r.stderr, rb"stalled: no byte moved for \d+\.\d s "
                         rb"\(stall_timeout\), 10 body bytes in")

    def test_wrong_lengths_never_return_bytes(self):
        cases = [({"kind": "bad_length", "delta": -7}, b"Content-"),
                 ({"kind": "bad_range", "delta": 1}, b"Content-Range")]
        for rule, text in cases:
            with self.subTest(rule=rule):
                self.server.faults([dict(rule, op="GET")])
                r = self.get("dir/blob.bin", "100", "5000",
                             opts=["max_attempts=2"])
                self.assertEqual(r.returncode, errno.EIO, r.stderr)
                self.assertEqual(r.stdout, b"")
                self.assertIn(text, r.stderr)

    def test_bad_signature(self):
        env = harness.client_env(AWS_SECRET_ACCESS_KEY="wrong")
        r = self.get("hello.txt", env=env)
        self.assertEqual(r.returncode, errno.EACCES, r.stderr)
        self.assertIn(b"HTTP 403 SignatureDoesNotMatch", r.stderr)

    def test_unknown_access_key(self):
        env = harness.client_env(AWS_ACCESS_KEY_ID="AKIDNOPE")
        r = self.get("hello.txt", env=env)
        self.assertEqual(r.returncode, errno.EACCES, r.stderr)
        self.assertIn(b"InvalidAccessKeyId", r.stderr)

    def test_secret_never_printed(self):
        secret = "s3cr3t-" + "x" * 30
        env = harness.client_env(AWS_SECRET_ACCESS_KEY=secret,
                                 S3_CLIENT_DEBUG="1")
        self.server.faults([{"op": "GET", "kind": "status", "status": 503,
                             "code": "SlowDown"}])
        r = self.get("hello.txt", opts=["max_attempts=2"], env=env)
        self.assertNotEqual(r.returncode, 0)
        self.assertNotIn(secret.encode(), r.stderr + r.stdout)

    def test_virtual_hosted(self):
        r = self.get("hello.txt", opts=["addressing=virtual"],
                     endpoint=f"http://localhost:{self.server.port}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, self.files["hello.txt"])

    def test_many_in_flight(self):
        keys = [f"train/img_{i:04d}_of_2500.jpeg" for i in range(0, 2500, 5)]
        before = self.server.stats()["requests"]["GET"]
        r = self.c("parallel-get", "s3://syn", "32", *keys,
                   opts=["max_connections=16"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"gets={len(keys)} failed=0 bytes={len(keys) * 1000}"
                      .encode(), r.stdout)
        self.assertEqual(self.server.stats()["requests"]["GET"] - before,
                         len(keys))


if __name__ == "__main__":
    harness.main()
