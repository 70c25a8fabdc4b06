#!/usr/bin/env python3
"""bucketfs-doctor against healthy and broken endpoints: every check prints
its cause and fix, and the exit status says whether all passed."""

import os
import shutil
import tempfile
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


class DoctorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = harness.TestServer("--synthetic", "dset:100:4096")
        cls.doctor = harness.binary("bucketfs-doctor")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.server.clear_faults()

    def doc(self, *args, env=None):
        r = harness.run([self.doctor, *args], env=env)
        return r.returncode, r.stdout.decode(), r.stderr.decode()

    def test_healthy(self):
        rc, out, err = self.doc("-o", f"endpoint={self.server.url}",
                                "s3://dset/train/")
        self.assertEqual(rc, 0, out + err)
        for check in ("✓ credentials", "✓ DNS", "✓ TCP connect", "✓ HTTP",
                      "✓ ListObjectsV2", "✓ clock skew", "✓ GET",
                      "✓ index", "✓ file descriptors", "✓ /dev/fuse"):
            self.assertIn(check, out)
        self.assertIn("first key 'train/img_000_of_100.jpeg'", out)
        self.assertIn("4096 of 4096 bytes", out)
        self.assertIn("✓ all ", out)

    def test_dead_endpoint(self):
        port = harness.free_port()
        rc, out, err = self.doc("-o", f"endpoint=http://127.0.0.1:{port}",
                                "s3://dset")
        self.assertEqual(rc, 1, out + err)
        self.assertIn(f"endpoint http://127.0.0.1:{port}", out)
        self.assertIn(f"✗ TCP connect: 127.0.0.1 port {port}: "
                      "Connection refused", out)
        self.assertRegex(out, rf"✗ ListObjectsV2 .*: LIST s3://dset/ via "
                         rf"http://127\.0\.0\.1:{port} \(attempt 3/3, "
                         r"[\d.]+ s\): curl 7 .*Connection refused")
        self.assertIn("fix: ", out)
        self.assertRegex(out, r"✗ \d+ of \d+ checks failed")

    def test_one_of_two_endpoints_dead(self):
        port = harness.free_port()
        rc, out, _ = self.doc("-o", f"endpoint={self.server.url}",
                              "-o", f"endpoint=http://127.0.0.1:{port}",
                              "s3://dset")
        self.assertEqual(rc, 1)
        healthy, dead = out.split(f"endpoint http://127.0.0.1:{port}")
        self.assertIn("✓ GET", healthy)
        self.assertIn("✗ TCP connect", dead)

    def test_endpoints_from_environment(self):
        other = f"http://localhost:{self.server.port}"
        env = harness.client_env(
            S3_ENDPOINT_URIS=f" {self.server.url} ,,{other},{other}")
        rc, out, err = self.doc("s3://dset", env=env)
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(out.count(f"endpoint {self.server.url}\n"), 1)
        self.assertEqual(out.count(f"endpoint {other}\n"), 1)

    def test_bad_secret(self):
        env = harness.client_env(AWS_SECRET_ACCESS_KEY="not-the-secret")
        rc, out, _ = self.doc("-o", f"endpoint={self.server.url}", "s3://dset",
                              env=env)
        self.assertEqual(rc, 1)
        self.assertIn("HTTP 403 SignatureDoesNotMatch", out)
        self.assertIn("fix: check the credentials", out)
        self.assertNotIn("not-the-secret", out)

    def test_index(self):
        tmp = tempfile.mkdtemp(prefix="bfs-doctor-")
        idx = os.path.join(tmp, "i.idx")
        try:
            opts = f"endpoint={self.server.url},index={idx}"
            rc, out, _ = self.doc("-o", opts, "s3://dset")
            self.assertEqual(rc, 0, out)
            self.assertIn(f"✓ index: none yet at {idx}", out)
            r = harness.run([harness.binary("bucketfs-index"), "build", "-q",
                             "-o", opts, "s3://dset"])
            self.assertEqual(r.returncode, 0, r.stderr)
            rc, out, _ = self.doc("-o", opts, "s3://dset")
            self.assertIn(f"✓ index: {idx}: 100 keys, built ", out)
            with open(idx, "r+b") as f:
                f.truncate(100)
            rc, out, _ = self.doc("-o", opts, "s3://dset")
            self.assertEqual(rc, 1)
            self.assertRegex(out, r"✗ index: index \S+: .*\n\s+fix: "
                             r"bucketfs-index build")
        finally:
            shutil.rmtree(tmp)

    def test_missing_bucket(self):
        rc, out, _ = self.doc("-o", f"endpoint={self.server.url}",
                              "s3://nosuchbucket")
        self.assertEqual(rc, 1)
        self.assertIn("HTTP 404 NoSuchBucket", out)

    def test_slowdown_is_named(self):
        self.server.faults([{"kind": "status", "status": 503,
                             "code": "SlowDown",
                             "message": "Please reduce your request rate."}])
        rc, out, _ = self.doc("-o", f"endpoint={self.server.url}", "s3://dset")
        self.assertEqual(rc, 1)
        self.assertRegex(out, r"\(attempt 3/3, [\d.]+ s\): HTTP 503 SlowDown:"
                         r" Please reduce your request rate\. "
                         r"\(RequestId: \S+\)")

    def test_no_credentials(self):
        env = harness.client_env()
        del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
        rc, out, _ = self.doc("-o", f"endpoint={self.server.url}", "s3://dset",
                              env=env)
        self.assertEqual(rc, 1)
        self.assertIn("✗ credentials", out)

    def test_usage_errors(self):
        for args, text in [((), "expected one s3://"),
                           (("bucket",), "s3://"),
                           (("-o", "max_attempts=3x", "s3://dset"),
                            "max_attempts"),
                           (("-o", "endpoint=ftp://x", "s3://dset"), "ftp"),
                           (("-o", "bogus", "s3://dset"), "bogus")]:
            with self.subTest(args=args):
                rc, out, err = self.doc(*args)
                self.assertEqual(rc, 2, out + err)
                self.assertEqual(out, "")
                self.assertIn(text, err)
                self.assertEqual(err.count("\n"), 1, err)

    def test_help_and_version(self):
        rc, out, _ = self.doc("--help")
        self.assertEqual(rc, 0)
        for word in ("endpoint=URL", "max_attempts", "S3_ENDPOINT_URIS"):
            self.assertIn(word, out)
        rc, out, _ = self.doc("--version")
        self.assertEqual(rc, 0)
        self.assertRegex(out, r"^bucketfs-doctor \d+\.\d+\.\d+")


class DoctorS3rverTest(unittest.TestCase):
    def test_healthy_s3rver(self):
        server = harness.S3rver("bkt")
        try:
            harness.put_object(server.url, "bkt", "x/hello", b"hi",
                               ak=harness.S3rver.AK, sk=harness.S3rver.SK)
            env = harness.client_env(AWS_ACCESS_KEY_ID=harness.S3rver.AK,
                                     AWS_SECRET_ACCESS_KEY=harness.S3rver.SK)
            r = harness.run([harness.binary("bucketfs-doctor"), "-o",
                             f"endpoint={server.url}", "s3://bkt"], env=env)
            out = r.stdout.decode()
            self.assertEqual(r.returncode, 0, out + r.stderr.decode())
            self.assertIn("first key 'x/hello'", out)
            self.assertIn("2 of 2 bytes", out)
        finally:
            server.stop()


if __name__ == "__main__":
    harness.main()
