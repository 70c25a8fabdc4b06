#!/usr/bin/env python3
"""bucketfs-doctor against healthy and broken endpoints: every check prints
its cause and fix, and the exit status says whether all passed."""

import os
import shutil
import socket
import tempfile
import threading
import time
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


class HeadWithABody:
    """A relay in front of a server that answers a connection's first
    request, when it is HEAD /, itself, as Ceph RGW 16.2 does (tracker
    66938): headers with Transfer-Encoding: chunked, then, a moment later
    and in a packet of its own, the body "0\\r\\n\\r\\n" that a HEAD reply
    must not have; the connection stays open and relays what follows.
    Every other connection is relayed as it is."""

    QUIRK = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
             b"Content-Type: application/xml\r\nConnection: Keep-Alive\r\n"
             b"\r\n")

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.heads = 0
        self.socks = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.socks.append(c)
            threading.Thread(target=self.serve, args=(c,),
                             daemon=True).start()

    def serve(self, c):
        buf = b""
        try:
            while b"\r\n\r\n" not in buf:
                data = c.recv(65536)
                if not data:
                    return
                buf += data
            if buf.startswith(b"HEAD / "):
                self.heads += 1
                head, _, buf = buf.partition(b"\r\n\r\n")
                c.sendall(self.QUIRK)
                time.sleep(0.05)
                c.sendall(b"0\r\n\r\n")
            up = socket.create_connection(("127.0.0.1", self.upstream))
            self.socks.append(up)
            if buf:
                up.sendall(buf)
        except OSError:
            return
        threading.Thread(target=harness.relay, args=(up, c),
                         daemon=True).start()
        harness.relay(c, up)

    def stop(self):
        self.sock.close()
        harness.shutdown(*self.socks)
        for s in self.socks:
            s.close()


class DoctorQuirkTest(unittest.TestCase):
    """A server quirk is a warning, and the next checks, on
    connections of their own, pass."""

    @classmethod
    def setUpClass(cls):
        cls.server = harness.TestServer("--synthetic", "dset:100:4096",
                                        "--synthetic", "flat:5:10:")
        cls.relay = HeadWithABody(cls.server.port)

    @classmethod
    def tearDownClass(cls):
        cls.relay.stop()
        cls.server.stop()

    def doc(self, *args):
        r = harness.run([harness.binary("bucketfs-doctor"), *args])
        return r.returncode, r.stdout.decode(), r.stderr.decode()

    def test_head_with_a_body_is_a_warning(self):
        rc, out, err = self.doc("-o", f"endpoint={self.relay.url}",
                                "s3://dset/train/")
        self.assertEqual(rc, 0, out + err)
        self.assertGreaterEqual(self.relay.heads, 1)
        self.assertRegex(out, r"⚠ HTTP: HEAD / answered HTTP 200 in [\d.]+ "
                         r"ms, and then 5 bytes of body \(chunked\), which "
                         r"a reply to HEAD must not have: .*curl 1 "
                         r"\"Received HTTP/0\.9\".*Ceph RGW 16\.2")
        self.assertIn("✓ ListObjectsV2 (signed, max-keys=1): first key "
                      "'train/img_000_of_100.jpeg'", out)
        self.assertIn("✓ GET", out)
        self.assertNotIn("✗", out)
        self.assertRegex(out, r"✓ all \d+ checks passed \(1 with a "
                         r"warning\)\n")

    def test_dlio_layout_without_valid(self):
        rc, out, err = self.doc("-o", f"endpoint={self.server.url}",
                                "s3://dset")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("⚠ DLIO layout: s3://dset/train/ has keys and "
                      "s3://dset/valid/ none: DLIO and MLPerf Storage open "
                      "valid/ too, and would stop with ENOENT\n"
                      "    fix: mount with -o empty_dirs=valid", out)
        rc, out, err = self.doc("-o", f"endpoint={self.server.url},"
                                "empty_dirs=test:valid", "s3://dset")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("✓ DLIO layout: s3://dset/valid/ has no key; "
                      "-o empty_dirs=valid declares it\n", out)
        self.assertNotIn("⚠", out)
        # A bucket with no train/, or one with both, has no such note.
        rc, out, _ = self.doc("-o", f"endpoint={self.server.url}",
                              "s3://flat")
        self.assertEqual(rc, 0, out)
        self.assertNotIn("DLIO", out)
        s = harness.Signer(self.server.url)
        s.put("dset", "valid/x", b"x")
        self.addCleanup(s.close)
        self.addCleanup(s.delete, "dset", "valid/x")
        rc, out, _ = self.doc("-o", f"endpoint={self.server.url}",
                              "s3://dset")
        self.assertNotIn("DLIO", out)


class DoctorRGWTest(unittest.TestCase):
    """Ceph RGW 16.2 (Debian's radosgw): every check passes; its HEAD /
    quirk is a warning."""

    def test_healthy_rgw(self):
        server = harness.RGW("doctor")
        try:
            harness.put_object(server.url, server.bucket, "x/hello", b"hi",
                               ak=server.AK, sk=server.SK)
            env = harness.client_env(AWS_ACCESS_KEY_ID=server.AK,
                                     AWS_SECRET_ACCESS_KEY=server.SK)
            r = harness.run([harness.binary("bucketfs-doctor"), "-o",
                             f"endpoint={server.url}",
                             f"s3://{server.bucket}"], env=env)
            out = r.stdout.decode()
            self.assertEqual(r.returncode, 0, out + r.stderr.decode())
            self.assertNotIn("✗", out)
            self.assertIn("⚠ HTTP: HEAD / answered HTTP 200", out)
            self.assertIn("first key 'x/hello'", out)
            self.assertIn("2 of 2 bytes", out)
            # Its errors have an empty <Message>: no dangling ': '.
            r = harness.run([harness.binary("bucketfs-doctor"), "-o",
                             f"endpoint={server.url}",
                             "s3://no-such-bucket-here"], env=env)
            out = r.stdout.decode()
            self.assertEqual(r.returncode, 1, out)
            self.assertRegex(out, r"HTTP 404 NoSuchBucket \(RequestId: \S+\)")
        finally:
            server.stop()


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
