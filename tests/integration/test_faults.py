#!/usr/bin/env python3
"""The fault matrix, part 1 (docs/RELIABILITY.md): real mounts of bucketfs
against the fault-injecting test S3 server.  For every fault each test shows

  * the errno the reader gets;
  * the log line (the daemon runs with -f, so what goes to syslog also goes
    to its stderr, which the test captures and matches);
  * that the read does not hang: its wall time stays under a stated bound
    (a generous "does not hang" bound, never a performance claim);
  * that no wrong byte is ever returned: every byte read is compared with
    the object's known content; a read returns the right bytes or fails.

Rows: the endpoint (refused, blackholed, DNS, TLS), storms of 5xx and
RequestTimeout, broken transfers, objects changing under the index, and
auth and clock (AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch,
ExpiredToken with credentials read again, RequestTimeTooSkewed).

Every mount is pre-indexed (bucketfs-index build against a healthy server),
so mounting sends no request and the fault lands on the read.
"""

import errno
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402

sys.path.insert(0, os.path.join(harness.SRC, "tests", "s3server"))
import s3server  # noqa: E402  (synthetic_bytes: the content we compare)

MiB = 1 << 20
SMALL_N, SMALL_SIZE = 400, 100_000
# Far larger than the window after the few MiB a test reads before it seeks
# (at most 4x the bytes read in sequence), so the tail of an object is
# fetched only when asked for.
LARGE_N, LARGE_SIZE = 4, 160 * MiB + 4321

# "Does not hang" bounds, in seconds (docs/RELIABILITY.md states them).
# Each is several times what the configured timeouts and backoff allow.
BOUND_FAST = 30         # max_attempts=3, connect/stall timeouts of 1-2 s
BOUND_RETRY = 60        # transient faults with up to 6 attempts of backoff
BOUND_LARGE = 120       # a 160 MiB object read through windows


def small_key(i):
    return f"train/img_{i:03d}_of_{SMALL_N}.jpeg"


# Keys handed out once each, in an order far from the listing order: a
# reader opening neighbours in listing order makes bucketfs prefetch the
# next ones (before a test has installed their fault).
_KEY_ORDER = random.Random(6).sample(range(SMALL_N), SMALL_N)


def fresh_key():
    return small_key(_KEY_ORDER.pop())


def large_key(i):
    return f"large/img_{i}_of_{LARGE_N}.jpeg"


def content(bucket, key, size, gen=0):
    return s3server.synthetic_bytes(bucket, key, size, gen)


def read_all(path, chunk=128 * 1024):
    """Reads path with plain read(2)s; returns (bytes read, OSError or
    None, seconds).  The bytes are what arrived before any error."""
    got = bytearray()
    err = None
    start = time.monotonic()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return bytes(got), e, time.monotonic() - start
    try:
        while True:
            b = os.read(fd, chunk)
            if not b:
                break
            got += b
    except OSError as e:
        err = e
    finally:
        os.close(fd)
    return bytes(got), err, time.monotonic() - start


def delete_object(url, bucket, key):
    """DELETE signed with botocore (path-style): a tombstone on the key."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    import hashlib
    import http.client
    import urllib.parse

    path = f"/{bucket}/" + urllib.parse.quote(key, safe="/~")
    req = AWSRequest(method="DELETE", url=url + path, headers={
        "X-Amz-Content-SHA256": hashlib.sha256(b"").hexdigest()})
    S3SigV4Auth(Credentials(harness.AK, harness.SK), "s3",
                "us-east-1").add_auth(req)
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("DELETE", path, headers=dict(req.headers.items()))
    resp = conn.getresponse()
    resp.read()
    conn.close()
    if resp.status != 204:
        raise RuntimeError(f"DELETE {key}: HTTP {resp.status}")


class Blackhole:
    """A loopback TCP port whose connects never complete: a listening
    socket with backlog 0 that never accepts, its queue filled first, so
    the kernel drops further SYNs and a client's connect() just waits (as
    with a firewalled or dead host), all without leaving loopback."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.port = self.listener.getsockname()[1]
        self.fillers = []
        for _ in range(8):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", self.port))
            except BlockingIOError:
                pass
            self.fillers.append(s)
        # Prove the hole: a fresh connect must not complete within 1 s.
        probe = socket.socket()
        probe.settimeout(1)
        try:
            probe.connect(("127.0.0.1", self.port))
            self.close()
            raise unittest.SkipTest("cannot blackhole a loopback port here")
        except (socket.timeout, TimeoutError):
            pass
        finally:
            probe.close()

    def close(self):
        for s in self.fillers:
            s.close()
        self.listener.close()


class FaultTestBase(harness.MountCase):
    """A server with a synthetic bucket of small objects ('syn') and one of
    large ones ('large'), both indexed once; mounts that clean up."""

    server_args = ()

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-faults-")
        cls.server = harness.TestServer(
            "--synthetic", f"syn:{SMALL_N}:{SMALL_SIZE}",
            "--synthetic", f"large:{LARGE_N}:{LARGE_SIZE}:large/",
            *cls.server_args)
        for bucket in ("syn", "large"):
            cls.build_index(bucket)

    @classmethod
    def index(cls, bucket):
        return os.path.join(cls.tmp, bucket + ".idx")

    @classmethod
    def build_index(cls, bucket, env=None):
        r = harness.run([harness.binary("bucketfs-index"), "build", "-q",
                         "-o", f"endpoint={cls.server.url},"
                         f"index={cls.index(bucket)}", f"s3://{bucket}"],
                        env=env)
        if r.returncode != 0:
            raise RuntimeError(f"index build failed: {r.stderr!r}")

    def setUp(self):
        super().setUp()
        self.server.control("POST", "clock", {"offset_seconds": 0})

    def mount(self, bucket, *opts, endpoint=None, env=None):
        log = os.path.join(self.tmp, f"mount-{time.monotonic_ns()}.log")
        m = Mount(f"s3://{bucket}", endpoint or self.server.url,
                  self.index(bucket), *opts, log=log, env=env)
        self.mounts.append(m)
        return m

    # -- the four checks --------------------------------------------------

    def assert_reads(self, m, key, bound, bucket="syn", size=SMALL_SIZE,
                     gen=0):
        """The whole object reads back right, within bound seconds."""
        got, err, secs = read_all(m.path(key))
        self.assertIsNone(err, f"{key}: {err}\n{m.output()}")
        self.assertLess(secs, bound, f"{key}: took {secs:.1f} s")
        self.assertTrue(got == content(bucket, key, size, gen),
                        f"{key}: wrong bytes")
        return secs

    def assert_fails(self, m, key, err_no, log_re, bound, bucket="syn",
                     size=SMALL_SIZE, gens=(0,)):
        """Reading key fails with err_no within bound seconds, every byte
        read before the failure is right (of one of the generations gens),
        and the log has a line matching log_re.  Returns the line."""
        got, err, secs = read_all(m.path(key))
        self.assertIsNotNone(err, f"{key}: read succeeded\n{m.output()}")
        self.assertEqual(err.errno, err_no,
                         f"{key}: {err}\n{m.output()}")
        self.assertLess(secs, bound, f"{key}: took {secs:.1f} s")
        self.assertTrue(
            any(got == content(bucket, key, size, g)[:len(got)]
                for g in gens), f"{key}: wrong bytes before the error")
        return self.assert_logged(m, log_re)

    def assert_logged(self, m, log_re, timeout=5):
        deadline = time.monotonic() + timeout
        while True:
            out = m.output()
            lines = [ln for ln in out.splitlines() if re.search(log_re, ln)]
            if lines:
                if os.environ.get("BFS_FAULTS_VERBOSE"):
                    print(f"\n  log: {lines[0]}", file=sys.stderr)
                return lines[0]
            if time.monotonic() > deadline:
                self.fail(f"no log line matches {log_re!r} in:\n{out}")
            time.sleep(0.05)

    def rule_hits(self):
        return [r["hits"] for r in self.server.control("GET",
                                                       "faults")["rules"]]


def read_re(key):
    return rf"read '{re.escape(key)}': "


def get_re(bucket, key, attempt):
    return (rf"GET s3://{bucket}/{re.escape(key)} via https?://\S+ "
            rf"\(attempt {attempt}, [\d.]+ s\): ")


# ---------------------------------------------------------------------------


class EndpointTest(FaultTestBase):
    """Endpoint faults: the daemon is pointed at something that is not a
    working S3 endpoint, with an index built against a working one."""

    def test_connection_refused(self):
        port = harness.free_port()
        m = self.mount("syn", "max_attempts=3", "retry_deadline=0",
                       endpoint=f"http://127.0.0.1:{port}")
        key = fresh_key()
        line = self.assert_fails(
            m, key, errno.EIO,
            read_re(key) + rf"GET s3://syn/{re.escape(key)} via "
            rf"http://127\.0\.0\.1:{port} \(attempt 3/3, [\d.]+ s\): "
            r"curl 7 \(Couldn't connect to server\)", BOUND_FAST)
        self.assertIn("[os errno 111: Connection refused]", line)
        self.unmount(m)

    def test_blackholed_connect_times_out(self):
        hole = Blackhole()
        try:
            m = self.mount("syn", "max_attempts=2", "retry_deadline=0",
                           "connect_timeout=1", endpoint=f"http://127.0.0.1:{hole.port}")
            key = fresh_key()
            line = self.assert_fails(
                m, key, errno.ETIMEDOUT,
                read_re(key) + get_re("syn", key, "2/2") +
                r"curl 28 \(Timeout was reached\)", BOUND_FAST)
            self.assertRegex(line, r"[Cc]onnect|Connection timed out")
            self.unmount(m)
        finally:
            hole.close()

    def test_dns_failure(self):
        m = self.mount("syn", "max_attempts=2", "retry_deadline=0",
                       endpoint="http://nonexistent.invalid:9000")
        key = fresh_key()
        line = self.assert_fails(
            m, key, errno.EIO,
            read_re(key) + rf"GET s3://syn/{re.escape(key)} via "
            r"http://nonexistent\.invalid:9000 \(attempt 2/2, [\d.]+ s\): "
            r"curl 6 \(Couldn't resolve host name\)", BOUND_FAST)
        self.assertIn("nonexistent.invalid", line.split("curl 6")[1])
        self.unmount(m)


class TlsTest(harness.MountCase):
    """A test server speaking HTTPS with a self-signed certificate made
    here: without ca_file the read fails and the log names the TLS
    verification failure; with -o ca_file=CERT the same read works."""

    reset_faults = False  # its control API speaks HTTPS too

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-faults-tls-")
        cls.cert = os.path.join(cls.tmp, "cert.pem")
        cls.key = os.path.join(cls.tmp, "key.pem")
        r = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
             "-keyout", cls.key, "-out", cls.cert, "-days", "2",
             "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
            capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(f"openssl: {r.stderr!r}")
        cls.server = harness.TestServer(
            "--synthetic", f"syn:{SMALL_N}:{SMALL_SIZE}",
            "--tls-cert", cls.cert, "--tls-key", cls.key)
        assert cls.server.url.startswith("https://")
        cls.idx = os.path.join(cls.tmp, "syn.idx")

    def mount(self, *opts):
        m = Mount("s3://syn", self.server.url, self.idx, *opts,
                  log=os.path.join(self.tmp, f"m{time.monotonic_ns()}.log"))
        self.mounts.append(m)
        return m

    def test_self_signed_needs_ca_file(self):
        # With the certificate as ca_file: the index builds and reads work.
        m = self.mount(f"ca_file={self.cert}")
        key = fresh_key()
        got, err, secs = read_all(m.path(key))
        self.assertIsNone(err, m.output())
        self.assertTrue(got == content("syn", key, SMALL_SIZE))
        self.assertLess(secs, BOUND_FAST)
        self.mounts.remove(m)
        self.assertEqual(m.unmount(), (0, 0))
        # Without it: the same index, the system CAs, a clear refusal,
        # not retried (attempt 1/2): a certificate does not get better.
        m = self.mount("max_attempts=2")
        key = fresh_key()
        got, err, secs = read_all(m.path(key))
        self.assertIsNotNone(err, m.output())
        self.assertEqual(err.errno, errno.EIO, m.output())
        self.assertEqual(got, b"")
        self.assertLess(secs, BOUND_FAST)
        out = m.output()
        lines = [ln for ln in out.splitlines()
                 if re.search(read_re(key) + get_re("syn", key, "1/2"), ln)]
        self.assertTrue(lines, out)
        if os.environ.get("BFS_FAULTS_VERBOSE"):
            print(f"\n  log: {lines[0]}", file=sys.stderr)
        self.assertRegex(lines[0], r"curl 60 \(SSL peer certificate or SSH "
                         r"remote key was not OK\)")
        self.assertRegex(lines[0], r"\[TLS verify result \d+: self[- ]signed "
                         r"certificate\]")
        self.mounts.remove(m)
        self.assertEqual(m.unmount(), (0, 0))


# ---------------------------------------------------------------------------


# (status, code or None, HTML body or None, errno when persistent)
STORMS = [
    (500, "InternalError", None, errno.EIO),
    (502, None, "<html><head><title>502 Bad Gateway</title></head><body>"
     "<center><h1>502 Bad Gateway</h1></center></body></html>", errno.EIO),
    (503, "SlowDown", None, errno.EIO),
    (504, None, "<html><head><title>504 Gateway Time-out</title></head>"
     "<body><center><h1>504 Gateway Time-out</h1></center></body></html>",
     errno.EIO),
    (400, "RequestTimeout", None, errno.ETIMEDOUT),
]


def storm_rule(status, code, body, key, **extra):
    rule = {"op": "GET", "kind": "status", "status": status,
            "key_regex": "^" + re.escape(key) + "$", **extra}
    if code:
        rule["code"] = code
    if body:
        rule["body"] = body
    return rule


class StormTest(FaultTestBase):
    """Storms of 500, 502, 503 SlowDown, 504 and 400 RequestTimeout."""

    def test_transient_storms_succeed_after_retries(self):
        m = self.mount("syn", "max_attempts=6")
        for i, (status, code, body, _) in enumerate(STORMS):
            with self.subTest(status=status, code=code, how="first 3"):
                key = fresh_key()
                self.server.faults([storm_rule(status, code, body, key,
                                               count=3)])
                self.assert_reads(m, key, BOUND_RETRY)
                self.assertEqual(self.rule_hits(), [3])
            with self.subTest(status=status, code=code, how="p=0.4"):
                keys = [fresh_key() for j in range(5)]
                rule = storm_rule(status, code, body, keys[0],
                                  probability=0.4)
                rule["key_regex"] = "|".join(
                    "^" + re.escape(k) + "$" for k in keys)
                self.server.faults([rule], seed=i)
                for k in keys:
                    self.assert_reads(m, k, BOUND_RETRY)
                self.assertGreater(self.rule_hits()[0], 0)
        self.server.clear_faults()
        self.unmount(m)

    def test_persistent_storms_fail_with_cause_chain(self):
        m = self.mount("syn", "max_attempts=3")
        for i, (status, code, body, err_no) in enumerate(STORMS):
            with self.subTest(status=status, code=code):
                key = fresh_key()
                self.server.faults([storm_rule(status, code, body, key)])
                if body:
                    cause = rf"HTTP {status} \(error body unreadable: "
                else:
                    cause = rf"HTTP {status} {code}: .* \(RequestId: \S+\)"
                self.assert_fails(m, key, err_no,
                                  read_re(key) + get_re("syn", key, "3/3") +
                                  cause, BOUND_FAST)
                self.assertEqual(self.rule_hits(), [3])
        self.server.clear_faults()
        self.unmount(m)


# ---------------------------------------------------------------------------


class BrokenTransferTest(FaultTestBase):
    """Bodies that stall, reset or stop short; lengths and ranges that lie."""

    def test_transient_broken_bodies_are_retried(self):
        m = self.mount("syn", "max_attempts=4", "stall_timeout=1")
        cases = [{"kind": "stall", "after_bytes": 5000, "seconds": 30},
                 {"kind": "reset", "after_bytes": 5000},
                 {"kind": "truncate", "after_bytes": 5000},
                 {"kind": "drop"},
                 {"kind": "bad_length", "delta": -7},
                 {"kind": "bad_length", "delta": 7}]
        for i, case in enumerate(cases):
            with self.subTest(**case):
                key = fresh_key()
                self.server.faults([dict(case, op="GET", count=2,
                                         key_regex=re.escape(key))])
                self.assert_reads(m, key, BOUND_RETRY)
                self.assertEqual(self.rule_hits(), [2])
        self.unmount(m)

    def test_persistent_broken_bodies_fail(self):
        # retry_deadline=0: a stall counts in max_attempts like the others
        # (by default a silent server is waited for: the next two tests).
        # curl's words: the direct path has its own (the next test).
        m = self.mount("syn", "max_attempts=2", "stall_timeout=1",
                       "retry_deadline=0", "http_receive=curl")
        cases = [
            ({"kind": "stall", "after_bytes": 5000, "seconds": 30},
             errno.ETIMEDOUT,
             r"stalled: no byte moved for \d+\.\d s \(stall_timeout\), "
             r"\d+ body bytes in"),
            ({"kind": "reset", "after_bytes": 5000}, errno.EIO,
             r"curl 56 .*\[os errno 104: Connection reset by peer\]"),
            ({"kind": "truncate", "after_bytes": 5000}, errno.EIO,
             r"curl 18 \(Transferred a partial file\)"),
            ({"kind": "drop"}, errno.EIO,
             r"curl 52 \(Server returned nothing"),
            # 7 bytes fewer than the object, declared and sent: the
            # Range asked for more (bucketfs asks for whole objects
            # with Range 0-(size-1), the size in the index).
            ({"kind": "bad_length", "delta": -7}, errno.EIO,
             r"Content-Range '[^']*' but \d+ body bytes arrived"),
            # 7 bytes more, zero padded: more than asked for.
            ({"kind": "bad_length", "delta": 7}, errno.EIO,
             r"(response body exceeds the \d+ bytes expected|"
             r"Content-Range '[^']*' but \d+ body bytes arrived)"),
        ]
        self.fail_each(m, cases)
        self.unmount(m)

    def fail_each(self, m, cases):
        """Each (fault, errno, cause) fails a fresh key's read on its last
        attempt with that errno and cause."""
        for case, err_no, cause in cases:
            with self.subTest(**case):
                key = fresh_key()
                self.server.faults([dict(case, op="GET",
                                         key_regex=re.escape(key))])
                self.assert_fails(m, key, err_no,
                                  read_re(key) + get_re("syn", key, "2/2") +
                                  cause, BOUND_FAST)

    def test_persistent_broken_bodies_fail_on_the_direct_path(self):
        """The same faults once GETs run on the direct receive path (a
        connection of bucketfs's own, after curl's first one): the same
        errno, and a cause in the path's own words."""
        m = self.mount("syn", "max_attempts=2", "stall_timeout=1",
                       "retry_deadline=0")
        # curl's GET connects: its address is the direct path's.
        self.assert_reads(m, fresh_key(), BOUND_FAST)
        direct = r"HTTP/1\.1 \(direct\): "
        cases = [
            ({"kind": "stall", "after_bytes": 5000, "seconds": 30},
             errno.ETIMEDOUT,
             r"stalled: no byte moved for \d+\.\d s \(stall_timeout\), "
             r"\d+ body bytes in"),
            ({"kind": "reset", "after_bytes": 5000}, errno.EIO,
             direct + r"receive: .*\[os errno 104: Connection reset by "
             r"peer\]"),
            ({"kind": "truncate", "after_bytes": 5000}, errno.EIO,
             direct + r"the server closed the connection with \d+ of "
             r"\d+ body bytes to come \(partial body\)"),
            ({"kind": "drop"}, errno.EIO,
             direct + r"the server closed the connection without a "
             r"response \(empty reply\)"),
        ]
        self.fail_each(m, cases)
        # "direct" counts the answers the path gave: a clean read is one.
        self.assert_reads(m, fresh_key(), BOUND_FAST)
        stats = json.loads(os.getxattr(m.dir, "user.bucketfs.stats"))
        self.assertGreater(stats["endpoints"][0]["direct"], 0)
        self.unmount(m)

    def test_slow_drips_fail_on_both_paths(self):
        """A body that comes a byte at a time, each within stall_timeout
        of the last (the stall clock never fires), is ended by the
        low-speed backstop, under 1 byte a second over stall_timeout + 2
        seconds: by curl's, and by the direct path's own."""
        drip = {"kind": "drip", "after_bytes": 5000, "seconds": 1.5,
                "op": "GET"}
        for receive, cause in [
                ("curl", r"curl 28 \(Timeout was reached\): Operation too "
                 r"slow\. Less than 1 bytes/sec transferred the last 4 "
                 r"seconds"),
                ("direct", r"HTTP/1\.1 \(direct\): too slow: fewer than 1 "
                 r"bytes a second over the last 4 s \(stall_timeout \+ 2\), "
                 r"\d+ body bytes in")]:
            with self.subTest(http_receive=receive):
                m = self.mount("syn", "max_attempts=1", "stall_timeout=2",
                               "retry_deadline=0",
                               "http_receive=" + receive)
                # curl's GET connects: its address is the direct path's.
                self.assert_reads(m, fresh_key(), BOUND_FAST)
                key = fresh_key()
                self.server.faults([dict(drip, key_regex=re.escape(key))])
                self.assert_fails(m, key, errno.ETIMEDOUT,
                                  read_re(key) + get_re("syn", key, "1/1") +
                                  cause, BOUND_FAST)
                self.server.clear_faults()
                stats = json.loads(os.getxattr(m.dir, "user.bucketfs.stats"))
                if receive == "curl":
                    self.assertEqual(stats["endpoints"][0]["direct"], 0)
                self.unmount(m)

    def test_stalls_within_the_deadline_are_waited_for(self):
        """A server that takes the request and then sends nothing is
        waited for like one that is down: within retry_deadline its stalls
        are not counted in max_attempts."""
        m = self.mount("syn", "max_attempts=2", "stall_timeout=1",
                       "retry_deadline=30")
        for after in (0, 5000):
            with self.subTest(after_bytes=after):
                key = fresh_key()
                # Four stalls in a row: twice max_attempts.
                self.server.faults([{"kind": "stall", "after_bytes": after,
                                     "seconds": 30, "count": 4, "op": "GET",
                                     "key_regex": re.escape(key)}])
                secs = self.assert_reads(m, key, BOUND_RETRY)
                self.assertEqual(self.rule_hits(), [4])
                self.assertGreaterEqual(secs, 4)
        self.server.clear_faults()
        self.unmount(m)

    def test_stalls_past_the_deadline_fail_with_it(self):
        # max_attempts=1: counted, the first stall would end the read.
        m = self.mount("syn", "max_attempts=1", "stall_timeout=1",
                       "retry_deadline=5")
        key = fresh_key()
        self.server.faults([{"kind": "stall", "after_bytes": 5000,
                             "seconds": 30, "op": "GET",
                             "key_regex": re.escape(key)}])
        t0 = time.monotonic()
        self.assert_fails(
            m, key, errno.ETIMEDOUT,
            read_re(key) + rf"GET s3://syn/{re.escape(key)} via "
            r"https?://\S+ \(attempt 1/1, [\d.]+ s, after [1-9]\d* "
            r"attempts that stalled\): no endpoint answered for "
            r"retry_deadline \(5 s\): stalled: no byte moved for \d+\.\d s "
            r"\(stall_timeout\), 5000 body bytes in", BOUND_FAST)
        self.assertGreaterEqual(time.monotonic() - t0, 5)
        # More attempts than max_attempts, each a stall of 1-2 s.
        self.assertGreaterEqual(self.rule_hits()[0], 2)
        self.server.clear_faults()
        self.unmount(m)

    def test_shifted_content_range_in_windows(self):
        """A large object read through windows (ranged GETs): a server that
        answers another range than asked (with a Content-Range that says
        so) or a Content-Length that lies never gets its bytes through."""
        m = self.mount("large", "max_attempts=2")
        for i, (rule, cause) in enumerate([
                ({"kind": "bad_range", "delta": 1},
                 r"Content-Range '[^']*' does not match"),
                ({"kind": "bad_length", "delta": -7},
                 r"Content-(Length|Range) .*body bytes arrived")]):
            with self.subTest(**rule):
                key = large_key(i)
                self.server.faults([dict(rule, op="GET",
                                         key_regex=re.escape(key))])
                self.assert_fails(m, key, errno.EIO,
                                  read_re(key) + get_re("large", key, "2/2") +
                                  cause, BOUND_LARGE, bucket="large",
                                  size=LARGE_SIZE)
        self.unmount(m)


# ---------------------------------------------------------------------------


class ChangingObjectTest(FaultTestBase):
    """Objects that change or vanish after the index was built."""

    STALE_LOG = (r"the object changed after the index was built .*: " +
                 r"GET s3://{b}/{k} via \S+ \(attempt 1/\d+, [\d.]+ s\): "
                 r"HTTP 412 PreconditionFailed")

    def test_changed_small_object_is_estale(self):
        m = self.mount("syn")
        key = fresh_key()
        self.server.control("POST", "mutate", {"bucket": "syn", "key": key})
        self.assert_fails(m, key, errno.ESTALE,
                          read_re(key) + self.STALE_LOG.format(
                              b="syn", k=re.escape(key)), BOUND_FAST)
        self.unmount(m)

    def read_across_change(self, m, key, change):
        """Reads 1 MiB of key, calls change(), then reads the tail (a part
        not fetched yet: a fresh ranged GET with If-Match) and the rest in
        order.  Returns (bytes read in order, tail error, in-order error,
        seconds)."""
        fd = os.open(m.path(key), os.O_RDONLY)
        got = bytearray()
        tail_err = seq_err = None
        start = time.monotonic()
        try:
            got += os.read(fd, 1 << 20)
            change()
            try:
                tail = os.pread(fd, 100_000, LARGE_SIZE - 100_000)
                self.fail(f"read {len(tail)} bytes of the tail after the "
                          "object changed")
            except OSError as e:
                tail_err = e
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                got += b
        except OSError as e:
            seq_err = e
        finally:
            os.close(fd)
        return bytes(got), tail_err, seq_err, time.monotonic() - start

    def test_changed_large_object_mid_read_is_estale_never_mixed(self):
        """Parts of a large object are fetched with If-Match: once the
        object changes (synthetic content: every byte changes), a part
        fetched after that fails with ESTALE; the bytes that do arrive,
        before and after the change, are all of the indexed generation."""
        m = self.mount("large")
        key = large_key(2)
        old = content("large", key, LARGE_SIZE, 0)
        got, tail_err, seq_err, secs = self.read_across_change(
            m, key, lambda: self.server.control(
                "POST", "mutate", {"bucket": "large", "key": key}))
        self.assertEqual(tail_err.errno, errno.ESTALE, m.output())
        self.assertLess(secs, BOUND_LARGE)
        self.assertGreaterEqual(len(got), 1 << 20)
        self.assertTrue(got == old[:len(got)], "mixed bytes")
        if seq_err is not None:
            self.assertEqual(seq_err.errno, errno.ESTALE, m.output())
        self.assert_logged(m, read_re(key) + self.STALE_LOG.format(
            b="large", k=re.escape(key)))
        # A fresh open is stale too: nothing of the new generation leaks.
        self.assert_fails(m, key, errno.ESTALE, read_re(key), BOUND_LARGE,
                          bucket="large", size=LARGE_SIZE)
        self.unmount(m)

    def test_deleted_object_is_enoent(self):
        m = self.mount("syn")
        key = fresh_key()
        delete_object(self.server.url, "syn", key)
        self.assert_fails(
            m, key, errno.ENOENT,
            read_re(key) + r"the object vanished after the index was built: "
            + get_re("syn", key, r"1/\d+") + r"HTTP 404 NoSuchKey",
            BOUND_FAST)
        self.unmount(m)

    def test_deleted_large_object_mid_read_is_enoent(self):
        m = self.mount("large")
        key = large_key(3)
        got, tail_err, seq_err, secs = self.read_across_change(
            m, key, lambda: delete_object(self.server.url, "large", key))
        self.assertEqual(tail_err.errno, errno.ENOENT, m.output())
        self.assertLess(secs, BOUND_LARGE)
        self.assertTrue(got == content("large", key, LARGE_SIZE)[:len(got)],
                        "wrong bytes")
        if seq_err is not None:
            self.assertEqual(seq_err.errno, errno.ENOENT, m.output())
        self.assert_logged(m, read_re(key) + r"the object vanished after the "
                           r"index was built: .*HTTP 404 NoSuchKey")
        self.unmount(m)


# ---------------------------------------------------------------------------


class AuthTest(FaultTestBase):
    """Refusals: 403 AccessDenied, InvalidAccessKeyId and
    SignatureDoesNotMatch map to EACCES and are not retried; the clock skew
    is named."""

    def test_access_denied(self):
        m = self.mount("syn", "max_attempts=5")
        key = fresh_key()
        self.server.faults([{"op": "GET", "kind": "status", "status": 403,
                             "code": "AccessDenied",
                             "key_regex": re.escape(key)}])
        self.assert_fails(m, key, errno.EACCES,
                          read_re(key) + get_re("syn", key, "1/5") +
                          r"HTTP 403 AccessDenied: Access Denied "
                          r"\(RequestId: \S+\)", BOUND_FAST)
        self.assertEqual(self.rule_hits(), [1])
        self.unmount(m)

    def test_invalid_access_key_id(self):
        env = harness.client_env(AWS_ACCESS_KEY_ID="AKIDNOTKNOWN")
        m = self.mount("syn", "max_attempts=5", env=env)
        key = fresh_key()
        self.assert_fails(m, key, errno.EACCES,
                          read_re(key) + get_re("syn", key, "1/5") +
                          r"HTTP 403 InvalidAccessKeyId: The AWS Access Key "
                          r"Id you provided does not exist", BOUND_FAST)
        self.unmount(m)

    def test_signature_does_not_match(self):
        secret = "wrong-secret-" + "z" * 20
        env = harness.client_env(AWS_SECRET_ACCESS_KEY=secret)
        m = self.mount("syn", "max_attempts=5", env=env)
        key = fresh_key()
        line = self.assert_fails(
            m, key, errno.EACCES,
            read_re(key) + get_re("syn", key, "1/5") +
            r"HTTP 403 SignatureDoesNotMatch: The request signature we "
            r"calculated does not match", BOUND_FAST)
        self.assertIn("[server's canonical request: GET", line)
        self.assertNotIn(secret, m.output())
        self.unmount(m)

    def test_request_time_too_skewed_names_the_skew(self):
        m = self.mount("syn", "max_attempts=3")
        key = fresh_key()
        self.server.control("POST", "clock", {"offset_seconds": 3600})
        try:
            line = self.assert_fails(
                m, key, errno.EACCES,
                read_re(key) + get_re("syn", key, r"\d/3") +
                r"HTTP 403 RequestTimeTooSkewed: ", BOUND_FAST)
        finally:
            self.server.control("POST", "clock", {"offset_seconds": 0})
        m_ = re.search(r"\[clock skew ([+-]\d+) s: server time \S+, our "
                       r"request time \S+; fix this host's clock", line)
        self.assertIsNotNone(m_, line)
        self.assertAlmostEqual(int(m_.group(1)), -3600, delta=60)
        # With the clock right again, the same mount reads.
        self.assert_reads(m, fresh_key(), BOUND_FAST)
        self.unmount(m)


class ExpiredTokenTest(FaultTestBase):
    """Temporary credentials from a credentials file expire (the server
    answers 400 ExpiredToken); the file is rewritten with new keys and a
    new session token; the next read must read the file again and succeed,
    without a remount."""

    server_args = ("--access-key", f"{harness.AK}:{harness.SK}",
                   "--access-key", "ASIAFIRST:first-secret:first-token")

    def write_credentials(self, path, ak, sk, token):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"[default]\naws_access_key_id = {ak}\n"
                    f"aws_secret_access_key = {sk}\n"
                    f"aws_session_token = {token}\n")
        os.replace(tmp, path)

    def env(self, path):
        env = harness.client_env(AWS_SHARED_CREDENTIALS_FILE=path)
        del env["AWS_ACCESS_KEY_ID"]
        del env["AWS_SECRET_ACCESS_KEY"]
        return env

    def setUp(self):
        super().setUp()
        self.addCleanup(self.server.control, "POST", "keys", {
            "keys": {harness.AK: [harness.SK, None],
                     "ASIAFIRST": ["first-secret", "first-token"]},
            "expired": []})

    def rotate(self, creds):
        """The first token expires; new keys are issued and written."""
        self.server.control("POST", "keys", {
            "keys": {harness.AK: [harness.SK, None],
                     "ASIASECOND": ["second-secret", "second-token"]},
            "expired": ["ASIAFIRST"]})
        self.write_credentials(creds, "ASIASECOND", "second-secret",
                               "second-token")

    def test_expired_token_rereads_credentials(self):
        creds = os.path.join(self.tmp, "credentials")
        self.write_credentials(creds, "ASIAFIRST", "first-secret",
                               "first-token")
        m = self.mount("syn", "max_attempts=3", env=self.env(creds))
        self.assert_reads(m, fresh_key(), BOUND_FAST)
        self.rotate(creds)
        key = fresh_key()
        got, err, secs = read_all(m.path(key))
        out = m.output()
        self.assertLess(secs, BOUND_FAST)
        self.assertIsNone(err, f"{key}: {err}: the credentials were not"
                          f" read again after ExpiredToken\n{out}")
        self.assertTrue(got == content("syn", key, SMALL_SIZE))
        self.assertRegex(out, r"ExpiredToken")
        for secret in ("first-secret", "second-secret", "first-token",
                       "second-token"):
            self.assertNotIn(secret, out)
        self.unmount(m)

    def test_expired_token_on_a_head_rereads_credentials(self):
        # A HEAD's error has no body to say ExpiredToken: signed with a
        # session token, its bare 400 is taken as that; the file is read
        # again and the HEAD retried.  Writable mode HEADs a name the
        # index doesn't have.
        creds = os.path.join(self.tmp, "credentials-head")
        self.write_credentials(creds, "ASIAFIRST", "first-secret",
                               "first-token")
        m = self.mount("syn", "max_attempts=3", "writable",
                       env=self.env(creds))
        self.rotate(creds)
        with self.assertRaises(FileNotFoundError):
            os.stat(m.path(".probe-after-expiry"))
        self.assertIn("credentials expired (ExpiredToken): read them again",
                      m.output())
        self.assert_reads(m, fresh_key(), BOUND_FAST)
        self.unmount(m)

    def test_expired_token_not_renewed_fails_clearly(self):
        creds = os.path.join(self.tmp, "credentials-stale")
        self.write_credentials(creds, "ASIAFIRST", "first-secret",
                               "first-token")
        m = self.mount("syn", "max_attempts=3", env=self.env(creds))
        self.server.control("POST", "keys", {"expired": ["ASIAFIRST"]})
        key = fresh_key()
        line = self.assert_fails(
            m, key, errno.EACCES,
            read_re(key) + get_re("syn", key, r"\d/3") +
            r"HTTP 400 ExpiredToken: The provided token has expired",
            BOUND_FAST)
        self.assertNotIn("first-token", m.output())
        self.assertNotIn("first-secret", m.output())
        self.assertTrue(line)
        self.unmount(m)


if __name__ == "__main__":
    harness.main()
