#!/usr/bin/env python3
"""Tests for the bucketfs test S3 server (s3server.py).

Run with Debian's interpreter, which has python3-botocore:

    /usr/bin/python3 tests/s3server/test_s3server.py [-v] [TestClass[.test]]

The server runs as a subprocess on an ephemeral port.  botocore signs the
requests, as an implementation of SigV4 independent of the server's.
"""

import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import types
import unittest
import xml.etree.ElementTree as ET
from urllib.parse import quote, unquote_to_bytes

try:
    from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
except ImportError:
    # Debian's python3-botocore lives under /usr/bin/python3 only.
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") \
            and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    print("SKIP: python3-botocore is not installed", file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "s3server.py")
sys.path.insert(0, HERE)
import s3server  # noqa: E402  (for synthetic_bytes and reference values)

AK, SK = "bucketfs-test", "bucketfs-test-secret"
TOKEN_AK, TOKEN_SK, TOKEN = "tokenuser", "tokensecret", "FQoG/token+with=odd/chars"
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
BIG_N = 50_000_000
LARGE_SIZE = 5_000_000
SYN_SIZE = 4096

# Files of the "tree" bucket (listing tests) and the "files" bucket.
TREE_FILES = [
    b"a.txt", b"a b.txt", b"a+b.txt", b"a%b", b"a~b", b"a=b&c", b"a'q",
    b"dir/x", b"dir/y/z", b"dir/y/zz", b"dir/y/zdeep/f", b"dir2/k",
    "é.txt".encode(), "日本/語.txt".encode(), "日本/x".encode(),
    b"zz", b"A", b"_u", b"-", b"\xff\xfe.bin", b"deep/1/2/3/4/5/f",
]
TREE_PUTS = [
    b"a//b", b"dir/", b"./x", b"../y", b"ctl\x01char", b"tab\tkey", b"nl\nkey",
    b"cr\rkey", b"\xc3(invalid", b"x" * 300 + b"/long", b"dir/y/", b"~tilde",
    "€uro".encode(), b"\x7f", b"a/./b", b"space end ", b"dir/y/z/", b"a.txt",
]
TREE_DELETES = [b"dir/x", b"zz"]
FILES = {b"hello.txt": b"hello, world\n", b"sub/dir/data.bin": bytes(range(256)) * 1000,
         b"empty": b"", b"mutate.bin": bytes(range(256)) * 3}


class Result:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def error(self):
        """The S3 error XML as {element: text}."""
        root = ET.fromstring(self.body)
        assert root.tag == "Error", self.body
        return {child.tag: child.text or "" for child in root}

    def __repr__(self):
        return "<Result %d %r>" % (self.status, self.body[:300])


def aws_encode(value, safe="-_.~"):
    return quote(value, safe=safe)


class S3Client:
    """A tiny S3 client: botocore signs, http.client sends exactly what we say."""

    def __init__(self, port, access_key=AK, secret_key=SK, token=None, region="us-east-1",
                 scheme="http", ssl_context=None):
        self.port = port
        self.creds = Credentials(access_key, secret_key, token) if access_key else None
        self.region = region
        self.scheme = scheme
        self.ssl_context = ssl_context
        self.conn = None

    def connection(self, timeout=30):
        if self.conn is None:
            if self.scheme == "https":
                self.conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout,
                                                        context=self.ssl_context)
            else:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        return self.conn

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    @staticmethod
    def path(bucket, key=None):
        if key is None:
            return "/" + bucket if bucket else "/"
        if isinstance(key, str):
            key = key.encode()
        return "/%s/%s" % (bucket, aws_encode(key, "/~"))

    def sign(self, method, url, headers, body=b"", creds=None, region=None, unsigned=False):
        req = AWSRequest(method=method, url=url, headers=dict(headers), data=body)
        if unsigned:
            req.context["client_config"] = types.SimpleNamespace(
                s3={"payload_signing_enabled": False})
        S3SigV4Auth(creds or self.creds, "s3", region or self.region).add_auth(req)
        return dict(req.headers.items())

    def request(self, method, bucket=None, key=None, query=(), headers=None, body=b"",
                sign=True, host=None, path=None, send_target=None, creds=None, region=None,
                unsigned=False, after_sign=None):
        host = host or "127.0.0.1:%d" % self.port
        if path is None:
            path = self.path(bucket, key)
        qs = "&".join("%s=%s" % (aws_encode(n), aws_encode(v)) for n, v in query)
        target = path + ("?" + qs if qs else "")
        headers = dict(headers or {})
        if sign and (creds or self.creds):
            headers = self.sign(method, "%s://%s%s" % (self.scheme, host, target), headers,
                                body, creds, region, unsigned)
        if after_sign:
            after_sign(headers)
        return self.send(method, send_target or target, headers, body, host)

    def send(self, method, target, headers, body=b"", host=None):
        conn = self.connection()
        try:
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", host or "127.0.0.1:%d" % self.port)
            for name, value in headers.items():
                conn.putheader(name, value)
            if body or method in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            resp = conn.getresponse()
            data = resp.read()
        except Exception:
            self.close()
            raise
        if resp.will_close:
            self.close()
        return Result(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)

    def get(self, bucket, key, **kw):
        return self.request("GET", bucket, key, **kw)

    def put(self, bucket, key, body, **kw):
        return self.request("PUT", bucket, key, body=body, **kw)

    def list(self, bucket, **params):
        query = [("list-type", "2")]
        for name, value in params.items():
            if value is not None:
                query.append((name.replace("_", "-"), str(value) if isinstance(value, int)
                              else value))
        r = self.request("GET", bucket, query=query)
        assert r.status == 200, r
        return ET.fromstring(r.body)


def parse_listing(root, url_encoded=True):
    """(keys, common prefixes, is truncated, next token) of a ListObjectsV2 page."""
    def dec(text):
        text = text or ""
        if url_encoded:
            return unquote_to_bytes(text.replace("+", " "))
        return text.encode()
    keys = [dec(c.find(NS + "Key").text) for c in root.findall(NS + "Contents")]
    prefixes = [dec(p.find(NS + "Prefix").text) for p in root.findall(NS + "CommonPrefixes")]
    token = root.find(NS + "NextContinuationToken")
    truncated = root.find(NS + "IsTruncated").text == "true"
    return keys, prefixes, truncated, token.text if token is not None else None


def reference_listing(keys, prefix=b"", delimiter=b"", start_after=b""):
    """What S3 returns, as (kind, value) in key order; computed naively."""
    out, seen = [], set()
    for key in sorted(keys):
        if not key.startswith(prefix) or key <= start_after:
            continue
        if delimiter:
            i = key.find(delimiter, len(prefix))
            if i >= 0:
                common = key[:i + len(delimiter)]
                if common not in seen:
                    seen.add(common)
                    out.append(("P", common))
                continue
        out.append(("K", key))
    return out


class Server:
    """s3server.py running as a subprocess."""

    def __init__(self, *args):
        self.tmp = tempfile.mkdtemp(prefix="s3server-test-")
        self.port_file = os.path.join(self.tmp, "port")
        self.stderr_path = os.path.join(self.tmp, "stderr")
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, SERVER, "--port", "0", "--port-file", self.port_file,
             "--quiet", *args],
            stdout=subprocess.PIPE, stderr=self.stderr)
        self.line = self.proc.stdout.readline().decode()
        m = re.fullmatch(r"listening on (https?)://127\.0\.0\.1:(\d+)\n", self.line)
        if not m:
            self.proc.kill()
            raise RuntimeError("server did not start: %r\n%s" % (self.line, self.read_stderr()))
        self.scheme, self.port = m.group(1), int(m.group(2))

    def read_stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def control(self, method, route, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        if self.scheme == "https":
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=30,
                                               context=ssl._create_unverified_context())
        data = json.dumps(body).encode() if body is not None else b""
        conn.request(method, "/_bucketfs/" + route, body=data,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = json.loads(resp.read())
        conn.close()
        return resp.status, payload

    def faults(self, rules, seed=None):
        status, body = self.control("POST", "faults" + ("?seed=%d" % seed if seed is not None
                                                        else ""), rules)
        assert status == 200, body
        return body

    def stop(self, timeout=30):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        finally:
            self.proc.stdout.close()
            self.stderr.close()
        return rc

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


SRV = None
DATA_DIR = None


def setUpModule():
    global SRV, DATA_DIR
    DATA_DIR = tempfile.mkdtemp(prefix="s3server-data-")
    for name in TREE_FILES:
        path = os.path.join(os.fsencode(DATA_DIR), b"tree", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"tree:" + name)
    for name, data in FILES.items():
        path = os.path.join(os.fsencode(DATA_DIR), b"files", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    SRV = Server("--bucket", "tree=" + os.path.join(DATA_DIR, "tree"),
                 "--bucket", "files=" + os.path.join(DATA_DIR, "files"),
                 "--synthetic", "syn:1000:%d" % SYN_SIZE,
                 "--synthetic", "big:%d" % BIG_N,
                 "--synthetic", "large:3:%d:" % LARGE_SIZE,
                 "--access-key", "%s:%s" % (AK, SK),
                 "--access-key", "%s:%s:%s" % (TOKEN_AK, TOKEN_SK, TOKEN))


def tearDownModule():
    stderr = SRV.read_stderr()
    rc = SRV.stop()
    SRV.cleanup()
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    assert rc == 0, "server exit status %r" % rc
    assert "Traceback" not in stderr, "server printed a traceback:\n" + stderr


class ServerTest(unittest.TestCase):
    def setUp(self):
        self.c = S3Client(SRV.port)

    def tearDown(self):
        self.c.close()
        SRV.control("DELETE", "faults")
        SRV.control("POST", "clock", {"offset_seconds": 0})

    def assertError(self, result, status, code):
        self.assertEqual(result.status, status, result)
        err = result.error()
        self.assertEqual(err["Code"], code, result)
        self.assertEqual(err["RequestId"], result.headers["x-amz-request-id"])
        self.assertIn("HostId", err)
        self.assertIn("Resource", err)
        return err


# --------------------------------------------------------------------------


class TestCli(unittest.TestCase):
    def test_help(self):
        out = subprocess.run([sys.executable, SERVER, "--help"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0)
        for option in ("--synthetic", "--bucket", "--access-key", "--port-file", "--no-verify"):
            self.assertIn(option, out.stdout)

    def test_bad_arguments(self):
        out = subprocess.run([sys.executable, SERVER, "--synthetic", "x"], capture_output=True)
        self.assertEqual(out.returncode, 2)

    def test_port_file_and_line(self):
        with open(SRV.port_file) as f:
            self.assertEqual(int(f.read()), SRV.port)
        self.assertEqual(SRV.line, "listening on http://127.0.0.1:%d\n" % SRV.port)


class TestListing(ServerTest):
    @classmethod
    def setUpClass(cls):
        c = S3Client(SRV.port)
        for key in TREE_PUTS:
            r = c.put("tree", key, b"put:" + key)
            assert r.status == 200, (key, r)
        for key in TREE_DELETES:
            assert c.request("DELETE", "tree", key).status == 204
        c.close()
        cls.keys = (set(TREE_FILES) | set(TREE_PUTS)) - set(TREE_DELETES)

    def walk(self, prefix=b"", delimiter=b"", start_after=b"", max_keys=None, url=True):
        """All pages of a listing, checked page by page; returns [(kind, value)]."""
        token, pages, got = None, 0, []
        while True:
            root = self.c.list("tree", prefix=prefix, delimiter=delimiter or None,
                               start_after=start_after or None, max_keys=max_keys,
                               continuation_token=token, encoding_type="url" if url else None)
            keys, prefixes, truncated, token = parse_listing(root, url)
            count = int(root.find(NS + "KeyCount").text)
            self.assertEqual(count, len(keys) + len(prefixes))
            if max_keys is not None:
                self.assertLessEqual(count, max_keys)
                if truncated:
                    self.assertEqual(count, max_keys)
            self.assertEqual(root.find(NS + "EncodingType") is not None, url)
            page = [("K", k) for k in keys] + [("P", p) for p in prefixes]
            got.extend(sorted(page, key=lambda item: item[1]))
            pages += 1
            self.assertEqual(truncated, token is not None)
            if not truncated:
                return got
            self.assertLess(pages, 1000)

    def test_full_listing_sorted_by_bytes(self):
        got = self.walk()
        self.assertEqual(got, reference_listing(self.keys))
        self.assertEqual([v for _, v in got], sorted(self.keys))

    def test_random_combinations(self):
        rng = random.Random(1234)
        prefixes = [b"", b"a", b"dir/", b"dir/y/", b"d", "日本/".encode(), b"zzz", b"\xff",
                    b"x", b"a/"]
        delimiters = [b"", b"/", b"y", b"ir", b"//"]
        starts = [b"", b"a", b"dir/y", "日".encode(), b"dir/y/z", b"\x00"]
        for _ in range(60):
            prefix, delim, start = rng.choice(prefixes), rng.choice(delimiters), rng.choice(starts)
            max_keys = rng.choice([1, 2, 3, 7, None])
            with self.subTest(prefix=prefix, delimiter=delim, start_after=start, max_keys=max_keys):
                self.assertEqual(self.walk(prefix, delim, start, max_keys),
                                 reference_listing(self.keys, prefix, delim, start))

    def test_delimiter_pages(self):
        for max_keys in (1, 2, 5):
            self.assertEqual(self.walk(b"", b"/", b"", max_keys),
                             reference_listing(self.keys, b"", b"/"))

    def test_plain_xml_without_encoding(self):
        printable = {k for k in self.keys if k.startswith(b"dir")}
        self.assertEqual(self.walk(b"dir", url=False), reference_listing(printable, b"dir"))
        r = self.c.request("GET", "tree", query=[("list-type", "2"), ("prefix", "日本/")])
        root = ET.fromstring(r.body)
        self.assertEqual(root.find(NS + "Prefix").text, "日本/")
        self.assertEqual([c.find(NS + "Key").text for c in root.findall(NS + "Contents")],
                         ["日本/x", "日本/語.txt"])

    def test_url_encoding_of_fields(self):
        r = self.c.request("GET", "tree", query=[
            ("list-type", "2"), ("prefix", "a b"), ("delimiter", "+"), ("start-after", "a b"),
            ("encoding-type", "url")])
        root = ET.fromstring(r.body)
        self.assertEqual(root.find(NS + "Prefix").text, "a+b")
        self.assertEqual(root.find(NS + "Delimiter").text, "%2B")
        self.assertEqual(root.find(NS + "StartAfter").text, "a+b")
        self.assertEqual(root.find(NS + "EncodingType").text, "url")
        self.assertEqual([c.find(NS + "Key").text for c in root.findall(NS + "Contents")],
                         ["a+b.txt"])
        root = self.c.list("tree", prefix="日本/", encoding_type="url", delimiter="/")
        self.assertEqual(root.find(NS + "Contents/" + NS + "Key").text,
                         "%E6%97%A5%E6%9C%AC/x")

    def test_contents_fields(self):
        root = self.c.list("files", prefix="hello")
        (contents,) = root.findall(NS + "Contents")
        self.assertEqual(contents.find(NS + "Key").text, "hello.txt")
        self.assertEqual(contents.find(NS + "Size").text, str(len(FILES[b"hello.txt"])))
        self.assertEqual(contents.find(NS + "ETag").text,
                         '"%s"' % hashlib.md5(FILES[b"hello.txt"]).hexdigest())
        self.assertEqual(contents.find(NS + "StorageClass").text, "STANDARD")
        self.assertRegex(contents.find(NS + "LastModified").text,
                         r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        r = self.c.request("GET", "tree", query=[("list-type", "2"), ("max-keys", "3")])
        self.assertIn(b'<ETag>&quot;', r.body)

    def test_token_echo_and_max_keys(self):
        root = self.c.list("tree", max_keys=2)
        token = root.find(NS + "NextContinuationToken").text
        root2 = self.c.list("tree", max_keys=2, continuation_token=token)
        self.assertEqual(root2.find(NS + "ContinuationToken").text, token)
        root0 = self.c.list("tree", max_keys=0)
        self.assertEqual(root0.find(NS + "KeyCount").text, "0")
        self.assertEqual(root0.find(NS + "IsTruncated").text, "false")
        big = self.c.list("big", max_keys=5000)
        self.assertEqual(big.find(NS + "MaxKeys").text, "1000")
        self.assertEqual(len(big.findall(NS + "Contents")), 1000)
        default = self.c.list("big")
        self.assertEqual(len(default.findall(NS + "Contents")), 1000)

    def test_list_errors(self):
        r = self.c.request("GET", "tree", query=[("list-type", "2"),
                                                 ("continuation-token", "bm90LWEtdG9rZW4=")])
        self.assertError(r, 400, "InvalidArgument")
        r = self.c.request("GET", "tree", query=[("list-type", "2"), ("continuation-token", "%%%")])
        self.assertError(r, 400, "InvalidArgument")
        r = self.c.request("GET", "nosuchbucket", query=[("list-type", "2")])
        self.assertEqual(self.assertError(r, 404, "NoSuchBucket")["BucketName"], "nosuchbucket")
        r = self.c.request("GET", "tree", query=[("list-type", "2"), ("max-keys", "-1")])
        self.assertError(r, 400, "InvalidArgument")
        r = self.c.request("GET", "tree", query=[("list-type", "2"), ("encoding-type", "xml")])
        self.assertError(r, 400, "InvalidArgument")

    def test_list_v1(self):
        got, marker = [], None
        while True:
            query = [("max-keys", "3"), ("delimiter", "/"), ("encoding-type", "url")]
            if marker is not None:
                query.append(("marker", marker))
            root = ET.fromstring(self.c.request("GET", "tree", query=query).body)
            keys, prefixes, truncated, _ = parse_listing(root)
            got.extend(sorted([("K", k) for k in keys] + [("P", p) for p in prefixes],
                              key=lambda item: item[1]))
            if not truncated:
                break
            marker = unquote_to_bytes(root.find(NS + "NextMarker").text.replace("+", " "))
        self.assertEqual(got, reference_listing(self.keys, b"", b"/"))


class TestSynthetic(ServerTest):
    def test_50m_listing_at_end_of_keyspace(self):
        def key(i):
            return "train/img_%08d_of_%d.jpeg" % (i, BIG_N)
        start = time.monotonic()
        root = self.c.list("big", start_after=key(BIG_N - 10), max_keys=5)
        keys, _, truncated, token = parse_listing(root, False)
        self.assertEqual(keys, [key(i).encode() for i in range(BIG_N - 9, BIG_N - 4)])
        self.assertTrue(truncated)
        root = self.c.list("big", continuation_token=token, max_keys=5)
        keys, _, truncated, token = parse_listing(root, False)
        self.assertEqual(keys, [key(i).encode() for i in range(BIG_N - 4, BIG_N)])
        self.assertFalse(truncated)
        self.assertIsNone(token)
        root = self.c.list("big", prefix="train/img_4999999")
        self.assertEqual(len(root.findall(NS + "Contents")), 10)
        root = self.c.list("big", delimiter="/")
        self.assertEqual(parse_listing(root, False)[:3], ([], [b"train/"], False))
        root = self.c.list("big", start_after="train/img_5")
        self.assertEqual(root.findall(NS + "Contents"), [])
        root = self.c.list("big", start_after="train/img_24999999_of_50000000.jpeg", max_keys=1)
        self.assertEqual(parse_listing(root, False)[0], [key(25_000_000).encode()])
        # An O(N) scan of 50M keys would take minutes; this is a loose sanity bound.
        self.assertLess(time.monotonic() - start, 10)
        r = self.c.request("HEAD", "big", key(BIG_N - 1))
        self.assertEqual((r.status, r.headers["content-length"]), (200, "322624"))
        self.assertEqual(self.c.request("HEAD", "big", key(BIG_N)).status, 404)
        self.assertEqual(self.c.request("HEAD", "big", "train/img_0000000x_of_50000000.jpeg")
                         .status, 404)

    def test_content_is_deterministic(self):
        key = "train/img_0042_of_1000.jpeg"
        r = self.c.get("syn", key)
        self.assertEqual(r.status, 200)
        self.assertEqual(len(r.body), SYN_SIZE)
        self.assertEqual(r.body, s3server.synthetic_bytes("syn", key, SYN_SIZE))
        self.assertNotEqual(r.body, self.c.get("syn", "train/img_0043_of_1000.jpeg").body)
        self.assertEqual(r.headers["etag"], '"%s"' % s3server.synthetic_etag(
            "syn", key.encode(), SYN_SIZE, 0))
        self.assertEqual(r.headers["last-modified"], "Wed, 01 Jan 2020 00:00:00 GMT")
        self.assertEqual(self.c.get("syn", key).body, r.body)

    def test_empty_prefix_synthetic(self):
        root = self.c.list("large")
        self.assertEqual(parse_listing(root, False)[0],
                         [b"img_0_of_3.jpeg", b"img_1_of_3.jpeg", b"img_2_of_3.jpeg"])


class TestObjects(ServerTest):
    LARGE_KEY = "img_1_of_3.jpeg"

    def test_get_file(self):
        r = self.c.get("files", "sub/dir/data.bin")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, FILES[b"sub/dir/data.bin"])
        self.assertEqual(r.headers["etag"], '"%s"' % hashlib.md5(r.body).hexdigest())
        self.assertEqual(r.headers["accept-ranges"], "bytes")
        self.assertRegex(r.headers["x-amz-request-id"], r"^[0-9A-F]{16}$")
        self.assertIn("date", r.headers)
        self.assertIn("last-modified", r.headers)
        r2 = self.c.get("files", "empty")
        self.assertEqual((r2.status, r2.body), (200, b""))
        self.assertNotEqual(r.headers["x-amz-request-id"], r2.headers["x-amz-request-id"])

    def test_missing(self):
        err = self.assertError(self.c.get("files", "nope"), 404, "NoSuchKey")
        self.assertEqual(err["Key"], "nope")
        self.assertEqual(err["Resource"], "/files/nope")
        self.assertError(self.c.get("nobucket", "x"), 404, "NoSuchBucket")
        self.assertError(self.c.get("files", "sub/dir"), 404, "NoSuchKey")

    def test_head(self):
        r = self.c.request("HEAD", "files", "hello.txt")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b"")
        self.assertEqual(r.headers["content-length"], str(len(FILES[b"hello.txt"])))
        self.assertEqual(r.headers["etag"], '"%s"' % hashlib.md5(FILES[b"hello.txt"]).hexdigest())
        r = self.c.request("HEAD", "files", "nope")
        self.assertEqual((r.status, r.body), (404, b""))
        self.assertIn("x-amz-request-id", r.headers)
        r = self.c.request("HEAD", "files", "hello.txt", headers={"Range": "bytes=1-3"})
        self.assertEqual((r.status, r.headers["content-length"]), (206, "3"))
        self.assertEqual(self.c.request("HEAD", "files").status, 200)
        self.assertEqual(self.c.request("HEAD", "nobucket").status, 404)

    def test_ranges(self):
        full = s3server.synthetic_bytes("large", self.LARGE_KEY, LARGE_SIZE)
        size = len(full)
        cases = {
            "bytes=0-0": (0, 1), "bytes=0-99": (0, 100), "bytes=100-": (100, size),
            "bytes=-100": (size - 100, size), "bytes=65530-65545": (65530, 65546),
            "bytes=131071-196608": (131071, 196609), "bytes=%d-" % (size - 1): (size - 1, size),
            "bytes=10-%d" % (size + 1000): (10, size), "bytes=-%d" % (size * 2): (0, size),
        }
        for spec, (a, b) in cases.items():
            with self.subTest(range=spec):
                r = self.c.get("large", self.LARGE_KEY, headers={"Range": spec})
                self.assertEqual(r.status, 206)
                self.assertEqual(r.headers["content-range"], "bytes %d-%d/%d" % (a, b - 1, size))
                self.assertEqual(r.body, full[a:b])
        for spec in ("bytes=5-2", "bytes=0-1,5-6", "items=0-1", "bytes=abc"):
            with self.subTest(range=spec):
                r = self.c.get("files", "hello.txt", headers={"Range": spec})
                self.assertEqual((r.status, r.body), (200, FILES[b"hello.txt"]))
        for spec in ("bytes=%d-" % size, "bytes=-0", "bytes=%d-%d" % (size + 5, size + 9)):
            with self.subTest(range=spec):
                r = self.c.get("large", self.LARGE_KEY, headers={"Range": spec})
                self.assertError(r, 416, "InvalidRange")
                self.assertEqual(r.headers["content-range"], "bytes */%d" % size)
        r = self.c.get("files", "empty", headers={"Range": "bytes=0-"})
        self.assertError(r, 416, "InvalidRange")

    def test_large_body_streams(self):
        r = self.c.get("large", self.LARGE_KEY)
        self.assertEqual(r.status, 200)
        self.assertEqual(hashlib.sha256(r.body).digest(), hashlib.sha256(
            s3server.synthetic_bytes("large", self.LARGE_KEY, LARGE_SIZE)).digest())

    def test_conditionals(self):
        r = self.c.get("files", "hello.txt")
        etag = r.headers["etag"]
        for good in (etag, etag.strip('"'), "*", '"nope", ' + etag):
            with self.subTest(if_match=good):
                self.assertEqual(self.c.get("files", "hello.txt",
                                            headers={"If-Match": good}).status, 200)
        err = self.assertError(self.c.get("files", "hello.txt", headers={"If-Match": '"0000"'}),
                               412, "PreconditionFailed")
        self.assertEqual(err["Condition"], "If-Match")
        r = self.c.request("HEAD", "files", "hello.txt", headers={"If-Match": '"0000"'})
        self.assertEqual((r.status, r.body), (412, b""))
        r = self.c.get("files", "hello.txt", headers={"If-None-Match": etag})
        self.assertEqual((r.status, r.body, r.headers["etag"]), (304, b"", etag))
        r = self.c.get("files", "hello.txt", headers={"If-None-Match": '"other"'})
        self.assertEqual(r.status, 200)
        r = self.c.get("syn", "train/img_0001_of_1000.jpeg",
                       headers={"If-Modified-Since": "Thu, 01 Jan 2021 00:00:00 GMT"})
        self.assertEqual(r.status, 304)
        r = self.c.get("syn", "train/img_0001_of_1000.jpeg",
                       headers={"If-Unmodified-Since": "Thu, 01 Jan 2019 00:00:00 GMT"})
        self.assertError(r, 412, "PreconditionFailed")
        r = self.c.get("files", "hello.txt", headers={"If-Match": etag, "Range": "bytes=0-4"})
        self.assertEqual((r.status, r.body), (206, b"hello"))

    def test_put_get_delete_overlay(self):
        data = os.urandom(100_000)
        r = self.c.put("files", "new/object", data, headers={"Content-Type": "text/plain",
                                                             "x-amz-meta-color": "blue"})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers["etag"], '"%s"' % hashlib.md5(data).hexdigest())
        r = self.c.get("files", "new/object")
        self.assertEqual((r.status, r.body), (200, data))
        self.assertEqual(r.headers["content-type"], "text/plain")
        self.assertEqual(r.headers["x-amz-meta-color"], "blue")
        # Overwrite a file-backed key, then delete it: the file is untouched
        # on disk but gone from the bucket.
        self.assertEqual(self.c.put("files", "hello.txt", b"shadow").status, 200)
        self.assertEqual(self.c.get("files", "hello.txt").body, b"shadow")
        self.assertEqual(self.c.request("DELETE", "files", "hello.txt").status, 204)
        self.assertEqual(self.c.get("files", "hello.txt").status, 404)
        self.assertNotIn(b"hello.txt", self.c.request("GET", "files",
                                                      query=[("list-type", "2")]).body)
        with open(os.path.join(DATA_DIR, "files", "hello.txt"), "rb") as f:
            self.assertEqual(f.read(), FILES[b"hello.txt"])
        self.assertEqual(self.c.put("files", "hello.txt", FILES[b"hello.txt"]).status, 200)
        # Deleting a synthetic key tombstones it.
        key = "train/img_0007_of_1000.jpeg"
        self.assertEqual(self.c.request("DELETE", "syn", key).status, 204)
        self.assertEqual(self.c.get("syn", key).status, 404)
        keys = parse_listing(self.c.list("syn", prefix="train/img_000"), False)[0]
        self.assertNotIn(key.encode(), keys)
        self.assertEqual(len(keys), 9)
        self.assertEqual(self.c.request("DELETE", "syn", key).status, 204)
        self.assertEqual(self.c.request("DELETE", "files", "never-existed").status, 204)
        self.assertEqual(self.c.put("syn", key, b"back").status, 200)
        self.assertEqual(self.c.get("syn", key).body, b"back")

    def test_weird_keys(self):
        keys = [b"a//b", b"dir/", b"./x", b"../x", b"/lead", b"ctl\x01\x02", b"\xff\xfe\xfd",
                b"y" * 300, b"q?uery#frag", b"per%cent", b"sp ace+plus", b"a/../b",
                "ünï/cödé ✓".encode()]
        for key in keys:
            with self.subTest(key=key):
                self.assertEqual(self.c.put("files", key, b"v:" + key).status, 200)
                r = self.c.get("files", key)
                self.assertEqual((r.status, r.body), (200, b"v:" + key))
        root = self.c.list("files", encoding_type="url")
        listed = set(parse_listing(root)[0])
        self.assertTrue(set(keys) <= listed, set(keys) - listed)
        # Paths are not normalised: "a/../b" and "b" differ.
        self.assertEqual(self.c.get("files", "b").status, 404)

    def test_put_checks(self):
        r = self.c.put("files", "md5", b"abc", headers={"Content-MD5": "AAAAAAAAAAAAAAAAAAAAAA=="})
        self.assertError(r, 400, "BadDigest")
        r = self.c.put("files", "md5", b"abc", headers={"Content-MD5": "xx"})
        self.assertError(r, 400, "InvalidDigest")
        import base64
        good = base64.b64encode(hashlib.md5(b"abc").digest()).decode()
        self.assertEqual(self.c.put("files", "md5", b"abc",
                                    headers={"Content-MD5": good}).status, 200)

    def test_conditional_put(self):
        self.assertEqual(self.c.put("files", "cond", b"1").status, 200)
        r = self.c.put("files", "cond", b"2", headers={"If-None-Match": "*"})
        self.assertError(r, 412, "PreconditionFailed")
        etag = self.c.request("HEAD", "files", "cond").headers["etag"]
        self.assertError(self.c.put("files", "cond", b"2", headers={"If-Match": '"00"'}),
                         412, "PreconditionFailed")
        self.assertEqual(self.c.put("files", "cond", b"2", headers={"If-Match": etag}).status, 200)
        self.assertError(self.c.put("files", "cond-none", b"2", headers={"If-Match": etag}),
                         404, "NoSuchKey")
        self.assertEqual(self.c.put("files", "cond-new", b"2",
                                    headers={"If-None-Match": "*"}).status, 200)
        self.assertEqual(self.c.get("files", "cond").body, b"2")

    def test_keep_alive(self):
        self.c.get("files", "hello.txt")
        sock = self.c.conn.sock
        for _ in range(5):
            self.assertEqual(self.c.get("syn", "train/img_0001_of_1000.jpeg").status, 200)
            self.assertEqual(self.c.get("files", "nope").status, 404)
            self.assertIs(self.c.conn.sock, sock)

    def test_chunked_put(self):
        body = b"chunk-one;" * 1000 + b"two"
        headers = self.c.sign("PUT", "http://127.0.0.1:%d/files/chunked" % SRV.port, {}, body)
        conn = http.client.HTTPConnection("127.0.0.1", SRV.port, timeout=10)
        conn.request("PUT", "/files/chunked", body=iter([body[:5000], body[5000:]]),
                     headers=headers, encode_chunked=True)
        self.assertEqual(conn.getresponse().status, 200)
        conn.close()
        self.assertEqual(self.c.get("files", "chunked").body, body)

    def test_expect_100_continue(self):
        body = b"x" * 5000
        url = "http://127.0.0.1:%d/files/expect" % SRV.port
        headers = self.c.sign("PUT", url, {"Expect": "100-continue"}, body)
        with socket.create_connection(("127.0.0.1", SRV.port), timeout=10) as s:
            head = "PUT /files/expect HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d\r\n" % (
                SRV.port, len(body))
            head += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
            s.sendall(head.encode())
            self.assertEqual(s.recv(100), b"HTTP/1.1 100 Continue\r\n\r\n")
            s.sendall(body)
            self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 200 "))
        # With a bad signature the answer comes before the body, and closes.
        headers["Authorization"] = headers["Authorization"][:-4] + "0000"
        with socket.create_connection(("127.0.0.1", SRV.port), timeout=10) as s:
            head = "PUT /files/expect HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d\r\n" % (
                SRV.port, len(body))
            head += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
            s.sendall(head.encode())
            reply = b""
            while True:
                data = s.recv(65536)
                if not data:
                    break
                reply += data
            self.assertTrue(reply.startswith(b"HTTP/1.1 403 "), reply)
            self.assertIn(b"Connection: close", reply)

    def test_virtual_hosted(self):
        host = "files.localhost:%d" % SRV.port
        r = self.c.request("GET", path="/sub/dir/data.bin", host=host)
        self.assertEqual((r.status, r.body), (200, FILES[b"sub/dir/data.bin"]))
        self.assertEqual(self.c.request("PUT", path="///lead", host=host, body=b"L").status, 200)
        self.assertEqual(self.c.get("files", "//lead").body, b"L")
        r = self.c.request("GET", path="/", host=host, query=[("list-type", "2"),
                                                              ("prefix", "sub/")])
        self.assertEqual(parse_listing(ET.fromstring(r.body), False)[0], [b"sub/dir/data.bin"])
        r = self.c.request("GET", path="/x", host="nobucket.localhost:%d" % SRV.port)
        self.assertError(r, 404, "NoSuchBucket")
        # A control-API path on a virtual host is an ordinary key.
        r = self.c.request("GET", path="/_bucketfs/stats", host=host)
        self.assertError(r, 404, "NoSuchKey")

    def test_bucket_operations(self):
        r = self.c.request("GET", path="/")
        names = [b.find(NS + "Name").text
                 for b in ET.fromstring(r.body).iter(NS + "Bucket")]
        self.assertTrue({"big", "files", "syn", "tree", "large"} <= set(names))
        r = self.c.request("GET", "files", query=[("location", "")])
        self.assertEqual(r.status, 200)
        self.assertIn(b"LocationConstraint", r.body)
        self.assertEqual(self.c.request("PUT", "newbucket").status, 200)
        self.assertEqual(self.c.put("newbucket", "k", b"v").status, 200)
        self.assertEqual(parse_listing(self.c.list("newbucket"), False)[0], [b"k"])
        self.assertError(self.c.request("GET", "files", query=[("versioning", "")]), 501,
                         "NotImplemented")
        self.assertError(self.c.request("POST", "files", "k"), 501, "NotImplemented")

    def test_client_disconnect_mid_body(self):
        url = "http://127.0.0.1:%d/large/%s" % (SRV.port, self.LARGE_KEY)
        headers = self.c.sign("GET", url, {})
        for abort in (False, True):
            s = socket.create_connection(("127.0.0.1", SRV.port), timeout=10)
            s.sendall(("GET /large/%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s\r\n" % (
                self.LARGE_KEY, SRV.port,
                "".join("%s: %s\r\n" % kv for kv in headers.items()))).encode())
            s.recv(1000)
            if abort:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        time.sleep(0.3)
        self.assertEqual(self.c.get("files", "empty").status, 200)
        self.assertNotIn("Traceback", SRV.read_stderr())


class TestHttp(ServerTest):
    def raw(self, data):
        with socket.create_connection(("127.0.0.1", SRV.port), timeout=5) as s:
            s.sendall(data)
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return out
                out += chunk

    def test_malformed_requests(self):
        self.assertTrue(self.raw(b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400 "))
        self.assertTrue(self.raw(b"GET / HTTP/2.0\r\n\r\n").startswith(b"HTTP/1.1 400 "))
        reply = self.raw(b"GET /x HTTP/1.1\r\nContent-Length: 5\r\nbad header\r\n\r\n")
        self.assertTrue(reply.startswith(b"HTTP/1.1 400 "))
        reply = self.raw(b"GET /x HTTP/1.1\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n")
        self.assertTrue(reply.startswith(b"HTTP/1.1 431 "))
        reply = self.raw(b"GET /x HTTP/1.1\r\n" + b"X-A: b\r\n" * 300 + b"\r\n")
        self.assertTrue(reply.startswith(b"HTTP/1.1 431 "))
        reply = self.raw(b"GET /files/empty HTTP/1.0\r\n\r\n")
        self.assertTrue(reply.startswith(b"HTTP/1.1 403 "), reply)
        self.assertIn(b"Connection: close", reply)
        reply = self.raw(b"GET /files/empty HTTP/1.1\r\nConnection: close\r\n\r\n")
        self.assertIn(b"Connection: close", reply)
        self.assertNotIn("Traceback", SRV.read_stderr())

    def test_absolute_form_target(self):
        url = "http://127.0.0.1:%d/files/hello.txt" % SRV.port
        headers = self.c.sign("GET", url, {})
        r = self.c.send("GET", url, headers)
        self.assertEqual((r.status, r.body), (200, FILES[b"hello.txt"]))

    def test_control_api_errors(self):
        self.assertEqual(SRV.control("GET", "nope")[0], 404)
        self.assertEqual(SRV.control("PUT", "faults", [])[0], 400)
        status, body = SRV.control("GET", "")
        self.assertEqual(status, 200)
        self.assertIn("GET stats", body["endpoints"])
        status, body = SRV.control("GET", "buckets")
        self.assertEqual({b["name"]: b["kind"] for b in body}["big"], "synthetic")
        status, body = SRV.control("POST", "rescan", {"bucket": "files"})
        self.assertEqual((status, body["rescanned"]["files"]), (200, len(FILES)))


class TestMutate(ServerTest):
    def test_mutate_synthetic(self):
        key = "train/img_0100_of_1000.jpeg"
        before = self.c.get("syn", key)
        status, body = SRV.control("POST", "mutate", {"bucket": "syn", "key": key})
        self.assertEqual(status, 200)
        after = self.c.get("syn", key)
        self.assertNotEqual(before.headers["etag"], after.headers["etag"])
        self.assertEqual(after.headers["etag"], '"%s"' % body["etag"])
        self.assertEqual(after.body, s3server.synthetic_bytes("syn", key, SYN_SIZE, gen=1))
        self.assertNotEqual(before.body, after.body)
        r = self.c.get("syn", key, headers={"If-Match": before.headers["etag"]})
        self.assertError(r, 412, "PreconditionFailed")
        root = self.c.list("syn", prefix=key)
        self.assertEqual(root.find(NS + "Contents/" + NS + "ETag").text, after.headers["etag"])

    def test_mutate_file(self):
        original = FILES[b"mutate.bin"]
        before = self.c.get("files", "mutate.bin")
        for gen in (1, 2):
            self.assertEqual(SRV.control("POST", "mutate", {"bucket": "files",
                                                            "key": "mutate.bin"})[0], 200)
            r = self.c.get("files", "mutate.bin")
            self.assertEqual(r.body[0], original[0] ^ 0xFF)
            self.assertEqual(r.body[1], original[1] ^ gen)
            self.assertEqual(r.body[8:], original[8:])
            self.assertEqual(r.headers["etag"], '"%s"' % hashlib.md5(r.body).hexdigest())
            self.assertNotEqual(r.headers["etag"], before.headers["etag"])
            ranged = self.c.get("files", "mutate.bin", headers={"Range": "bytes=0-3"})
            self.assertEqual(ranged.body, r.body[:4])
        with open(os.path.join(DATA_DIR, "files", "mutate.bin"), "rb") as f:
            self.assertEqual(f.read(), original)

    def test_mutate_overlay_and_missing(self):
        self.c.put("files", "mut", b"abcdefghij")
        SRV.control("POST", "mutate", {"bucket": "files", "key": "mut"})
        self.assertEqual(self.c.get("files", "mut").body, bytes([ord("a") ^ 0xFF, ord("b") ^ 1])
                         + b"cdefghij")
        self.assertEqual(SRV.control("POST", "mutate", {"bucket": "files", "key": "none"})[0], 404)
        self.assertEqual(SRV.control("POST", "mutate", {"bucket": "zzz", "key": "none"})[0], 404)
        self.assertEqual(SRV.control("POST", "mutate", {"bucket": "files"})[0], 400)


class TestAuth(ServerTest):
    def test_botocore_random_keys(self):
        rng = random.Random(99)
        alphabet = ["a", "Z", "0", " ", "+", "%", "~", "=", "&", "'", "/", "//", "é", "日",
                    "😀", "-", "_", ".", "!", "*", "(", ")", "?", "#", ";", ":", ",", "@", "$"]
        for i in range(60):
            key = "r%d/" % i + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20)))
            body = key.encode() * 3
            with self.subTest(key=key):
                self.assertEqual(self.c.put("files", key, body).status, 200)
                r = self.c.get("files", key, headers={"Range": "bytes=0-"})
                self.assertEqual((r.status, r.body), (206, body))
                root = self.c.list("files", prefix=key, encoding_type="url")
                self.assertEqual(parse_listing(root)[0], [key.encode()])
                r = self.c.request("GET", "files", query=[("list-type", "2"), ("prefix", key),
                                                          ("start-after", key[:3] + "!")])
                self.assertEqual(r.status, 200, r)

    def test_raw_path_is_decoded_then_canonicalised(self):
        self.c.put("files", "canon~key a", b"c")
        url = "http://127.0.0.1:%d/files/canon~key%%20a" % SRV.port
        headers = self.c.sign("GET", url, {})
        for variant in ("/files/canon%7Ekey%20a", "/files/c%61non~key%20a",
                        "/%66iles/canon%7ekey%20a"):
            with self.subTest(variant=variant):
                r = self.c.send("GET", variant, headers)
                self.assertEqual((r.status, r.body), (200, b"c"))
        # Query values are decoded and re-encoded too.
        url = "http://127.0.0.1:%d/files?list-type=2&prefix=canon~key%%20a" % SRV.port
        headers = self.c.sign("GET", url, {})
        r = self.c.send("GET", "/files?prefix=canon%7Ekey%20a&list-type=2", headers)
        self.assertEqual(r.status, 200, r)

    def test_unsigned_payload_and_session_token(self):
        self.assertEqual(self.c.put("files", "unsigned", b"u", unsigned=True).status, 200)
        tok = S3Client(SRV.port, TOKEN_AK, TOKEN_SK, TOKEN)
        self.assertEqual(tok.get("files", "unsigned").body, b"u")
        tok.close()
        no_token = Credentials(TOKEN_AK, TOKEN_SK)
        self.assertError(self.c.get("files", "unsigned", creds=no_token), 403, "InvalidToken")
        wrong = Credentials(TOKEN_AK, TOKEN_SK, "wrong")
        self.assertError(self.c.get("files", "unsigned", creds=wrong), 403, "InvalidToken")
        stray = Credentials(AK, SK, "unexpected")
        self.assertError(self.c.get("files", "unsigned", creds=stray), 403, "InvalidToken")

    def test_tampered(self):
        url = "http://127.0.0.1:%d/files/empty" % SRV.port
        headers = self.c.sign("GET", url, {})
        r = self.c.send("GET", "/files/hello.txt", headers)
        err = self.assertError(r, 403, "SignatureDoesNotMatch")
        self.assertIn("/files/hello.txt", err["CanonicalRequest"])
        self.assertTrue(err["StringToSign"].startswith("AWS4-HMAC-SHA256\n"))
        self.assertEqual(err["AWSAccessKeyId"], AK)
        self.assertIn("SignatureProvided", err)
        self.assertIn("CanonicalRequestBytes", err)
        self.assertIn("StringToSignBytes", err)
        r = self.c.get("files", "empty",
                       after_sign=lambda h: h.update({"X-Amz-Date": h["X-Amz-Date"][:-2] + str(
                           (int(h["X-Amz-Date"][-2]) + 1) % 10) + "Z"}))
        self.assertError(r, 403, "SignatureDoesNotMatch")
        wrong_secret = Credentials(AK, "not-the-secret")
        self.assertError(self.c.get("files", "empty", creds=wrong_secret), 403,
                         "SignatureDoesNotMatch")
        # A signed header's value changed after signing.
        r = self.c.get("files", "empty", headers={"Range": "bytes=0-"},
                       after_sign=lambda h: h.update({"Range": "bytes=1-"}))
        self.assertError(r, 403, "SignatureDoesNotMatch")
        # An x-amz- header added after signing.
        r = self.c.get("files", "empty", after_sign=lambda h: h.update({"x-amz-meta-x": "1"}))
        err = self.assertError(r, 403, "AccessDenied")
        self.assertEqual(err["HeadersNotSigned"], "x-amz-meta-x")

    def test_payload_hash_mismatch(self):
        r = self.c.put("files", "hashed", b"abc",
                       after_sign=lambda h: None)
        self.assertEqual(r.status, 200)
        headers = self.c.sign("PUT", "http://127.0.0.1:%d/files/hashed" % SRV.port, {}, b"abc")
        r = self.c.send("PUT", "/files/hashed", headers, b"abd")
        err = self.assertError(r, 400, "XAmzContentSHA256Mismatch")
        self.assertEqual(err["ClientComputedContentSHA256"], hashlib.sha256(b"abc").hexdigest())
        self.assertEqual(self.c.get("files", "hashed").body, b"abc")

    def test_skew(self):
        self.assertEqual(SRV.control("POST", "clock", {"offset_seconds": 600})[0], 200)
        self.assertEqual(self.c.get("files", "empty").status, 200)
        SRV.control("POST", "clock", {"offset_seconds": 16 * 60})
        err = self.assertError(self.c.get("files", "empty"), 403, "RequestTimeTooSkewed")
        self.assertEqual(err["MaxAllowedSkewMilliseconds"], "900000")
        self.assertRegex(err["RequestTime"], r"^\d{8}T\d{6}Z$")
        self.assertRegex(err["ServerTime"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        SRV.control("POST", "clock", {"offset_seconds": -16 * 60})
        self.assertError(self.c.get("files", "empty"), 403, "RequestTimeTooSkewed")

    def test_unknown_key_region_anonymous(self):
        err = self.assertError(self.c.get("files", "empty", creds=Credentials("nobody", "x")),
                               403, "InvalidAccessKeyId")
        self.assertEqual(err["AWSAccessKeyId"], "nobody")
        err = self.assertError(self.c.get("files", "empty", region="eu-west-1"), 400,
                               "AuthorizationHeaderMalformed")
        self.assertEqual(err["Region"], "us-east-1")
        self.assertIn("eu-west-1", err["Message"])
        self.assertError(self.c.get("files", "empty", sign=False), 403, "AccessDenied")
        r = self.c.get("files", "empty", sign=False, headers={
            "Authorization": "AWS %s:c2lnbmF0dXJl" % AK})
        self.assertEqual(r.status, 400)
        r = self.c.get("files", "empty",
                       after_sign=lambda h: h.pop("X-Amz-Content-SHA256"))
        self.assertError(r, 400, "InvalidRequest")
        r = self.c.get("files", "empty", after_sign=lambda h: h.pop("X-Amz-Date"))
        self.assertError(r, 403, "AccessDenied")

    def test_keys_swapped_and_expired(self):
        self.assertEqual(self.c.get("files", "empty").status, 200)
        try:
            status, body = SRV.control("POST", "keys", {"keys": {"new-ak": ["new-sk", "tok"]},
                                                        "expired": [AK]})
            self.assertEqual(status, 200)
            self.assertEqual(body, {"keys": ["new-ak"], "expired": [AK]})
            # The old key: 400 ExpiredToken, whatever the signature.
            self.assertError(self.c.get("files", "empty"), 400, "ExpiredToken")
            self.assertError(self.c.get("files", "empty", creds=Credentials(AK, "x")), 400,
                             "ExpiredToken")
            fresh = S3Client(SRV.port, "new-ak", "new-sk", "tok")
            self.assertEqual(fresh.get("files", "empty").status, 200)
            fresh.close()
            self.assertError(self.c.get("files", "empty", creds=Credentials("new-ak", "new-sk")),
                             403, "InvalidToken")
            for bad in ({"keys": {}}, {"keys": {"a": ["s"]}}, {"expired": "x"}, {"bogus": 1},
                        {"keys": {"a": ["", None]}}):
                with self.subTest(bad=bad):
                    self.assertEqual(SRV.control("POST", "keys", bad)[0], 400)
        finally:
            SRV.control("POST", "keys", {"keys": {AK: [SK, None], TOKEN_AK: [TOKEN_SK, TOKEN]},
                                         "expired": []})
        self.assertEqual(self.c.get("files", "empty").status, 200)
        self.assertEqual(SRV.control("GET", "keys")[1]["expired"], [])

    def test_presigned(self):
        url = "http://127.0.0.1:%d/files/sub/dir/data.bin" % SRV.port
        req = AWSRequest(method="GET", url=url)
        S3SigV4QueryAuth(self.c.creds, "s3", "us-east-1", expires=300).add_auth(req)
        target = req.url[len("http://127.0.0.1:%d" % SRV.port):]
        r = self.c.send("GET", target, {})
        self.assertEqual((r.status, r.body), (200, FILES[b"sub/dir/data.bin"]))
        r = self.c.send("GET", target.replace("X-Amz-Signature=", "X-Amz-Signature=0"), {})
        self.assertError(r, 403, "SignatureDoesNotMatch")
        SRV.control("POST", "clock", {"offset_seconds": 400})
        self.assertError(self.c.send("GET", target, {}), 403, "AccessDenied")


class TestFaults(ServerTest):
    KEY = "train/img_0005_of_1000.jpeg"

    def raw_get(self, key=KEY, extra=None):
        """Send a signed GET on a fresh socket; return the socket."""
        url = "http://127.0.0.1:%d/syn/%s" % (SRV.port, key)
        headers = self.c.sign("GET", url, extra or {})
        s = socket.create_connection(("127.0.0.1", SRV.port), timeout=5)
        s.sendall(("GET /syn/%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s\r\n" % (
            key, SRV.port, "".join("%s: %s\r\n" % kv for kv in headers.items()))).encode())
        return s

    @staticmethod
    def read_until_close(s):
        data = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                return data
            data += chunk

    @staticmethod
    def split(data):
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
        return head, length, body

    def test_status(self):
        SRV.faults([{"op": "GET", "kind": "status", "status": 503, "code": "SlowDown",
                     "count": 1}])
        err = self.assertError(self.c.get("syn", self.KEY), 503, "SlowDown")
        self.assertEqual(err["Message"], "Please reduce your request rate.")
        self.assertEqual(self.c.get("syn", self.KEY).status, 200)
        SRV.faults([{"kind": "status", "status": 500}])
        self.assertError(self.c.get("syn", self.KEY), 500, "InternalError")
        r = self.c.request("HEAD", "syn", self.KEY)
        self.assertEqual((r.status, r.body), (500, b""))
        self.assertIn("x-amz-request-id", r.headers)
        SRV.faults([{"kind": "status", "code": "ExpiredToken", "message": "gone"}])
        err = self.assertError(self.c.get("syn", self.KEY), 400, "ExpiredToken")
        self.assertEqual(err["Message"], "gone")

    def test_status_with_raw_body(self):
        page = "<html><body><h1>502 Bad Gateway</h1></body></html>"
        SRV.faults([{"op": "GET", "kind": "status", "status": 502, "body": page, "count": 1}])
        r = self.c.get("syn", self.KEY)
        self.assertEqual((r.status, r.body), (502, page.encode()))
        self.assertEqual(r.headers["content-type"], "text/html")
        self.assertEqual(self.c.get("syn", self.KEY).status, 200)
        status, _ = SRV.control("POST", "faults", [{"kind": "delay", "body": "x"}])
        self.assertEqual(status, 400)

    def test_delay(self):
        SRV.faults([{"kind": "delay", "seconds": 0.5}])
        start = time.monotonic()
        self.assertEqual(self.c.get("syn", self.KEY).status, 200)
        self.assertGreaterEqual(time.monotonic() - start, 0.5)

    def test_stall(self):
        SRV.faults([{"kind": "stall", "after_bytes": 100, "seconds": 30, "count": 1}])
        s = self.raw_get()
        s.settimeout(1)
        data = b""
        with self.assertRaises(socket.timeout):
            while True:
                chunk = s.recv(65536)
                self.assertTrue(chunk)
                data += chunk
        s.close()
        head, length, body = self.split(data)
        self.assertEqual((length, len(body)), (SYN_SIZE, 100))
        self.assertEqual(body, s3server.synthetic_bytes("syn", self.KEY, SYN_SIZE)[:100])
        self.assertEqual(self.c.get("syn", self.KEY).status, 200)

    def test_reset(self):
        SRV.faults([{"kind": "reset", "after_bytes": 1000, "count": 1}])
        s = self.raw_get()
        with self.assertRaises(ConnectionResetError):
            self.read_until_close(s)
        s.close()
        self.assertEqual(SRV.faults([])["rules"], [])

    def test_truncate(self):
        SRV.faults([{"kind": "truncate", "after_bytes": 1000}])
        s = self.raw_get()
        head, length, body = self.split(self.read_until_close(s))
        s.close()
        self.assertEqual((length, len(body)), (SYN_SIZE, 1000))
        self.assertNotIn(b"Connection: close", head)
        with self.assertRaises(http.client.IncompleteRead):
            self.c.get("syn", self.KEY)

    def test_bad_length(self):
        full = s3server.synthetic_bytes("syn", self.KEY, SYN_SIZE)
        for delta in (10, -10):
            with self.subTest(delta=delta):
                SRV.faults([{"kind": "bad_length", "delta": delta, "count": 1}])
                r = self.c.get("syn", self.KEY)
                self.assertEqual(int(r.headers["content-length"]), SYN_SIZE + delta)
                expect = full + bytes(10) if delta > 0 else full[:delta]
                self.assertEqual(r.body, expect)
                # The connection stays in sync.
                self.assertEqual(self.c.get("files", "empty").status, 200)

    def test_bad_range(self):
        full = s3server.synthetic_bytes("syn", self.KEY, SYN_SIZE)
        SRV.faults([{"kind": "bad_range"}])
        r = self.c.get("syn", self.KEY)           # not ranged: untouched
        self.assertEqual((r.status, r.body), (200, full))
        r = self.c.get("syn", self.KEY, headers={"Range": "bytes=100-199"})
        self.assertEqual(r.headers["content-range"], "bytes 101-200/%d" % SYN_SIZE)
        self.assertEqual(r.body, full[101:201])
        SRV.faults([{"kind": "bad_range", "delta": -50}])
        r = self.c.get("syn", self.KEY, headers={"Range": "bytes=10-19"})
        self.assertEqual(r.headers["content-range"], "bytes 0-9/%d" % SYN_SIZE)
        self.assertEqual(r.body, full[0:10])

    def test_drop(self):
        SRV.faults([{"kind": "drop", "count": 1}])
        with self.assertRaises(http.client.RemoteDisconnected):
            self.c.get("syn", self.KEY)
        self.assertEqual(self.c.get("syn", self.KEY).status, 200)

    def test_malformed_xml(self):
        SRV.faults([{"op": "LIST", "kind": "malformed_xml", "count": 1}])
        r = self.c.request("GET", "syn", query=[("list-type", "2")])
        self.assertEqual(r.status, 200)
        with self.assertRaises(ET.ParseError):
            ET.fromstring(r.body)
        self.c.list("syn")

    def test_empty_truncated(self):
        expected = parse_listing(self.c.list("syn", max_keys=10))
        SRV.faults([{"kind": "empty_truncated", "count": 1}])
        keys, prefixes, truncated, token = parse_listing(self.c.list("syn", max_keys=10))
        self.assertEqual((keys, prefixes, truncated), ([], [], True))
        self.assertEqual(parse_listing(self.c.list("syn", max_keys=10, continuation_token=token)),
                         expected)
        # In the middle of a listing it resumes at the same place.
        SRV.faults([{"kind": "empty_truncated", "count": 1, "skip": 1}])
        first = parse_listing(self.c.list("syn", max_keys=10))
        empty = parse_listing(self.c.list("syn", max_keys=10, continuation_token=first[3]))
        self.assertEqual(empty[0], [])
        resumed = parse_listing(self.c.list("syn", max_keys=10, continuation_token=empty[3]))
        self.assertEqual(resumed[0][0], b"train/img_0010_of_1000.jpeg")

    def test_repeat_token(self):
        SRV.faults([{"kind": "repeat_token", "count": 3}])
        keys, _, truncated, token = parse_listing(self.c.list("syn", max_keys=5))
        self.assertTrue(truncated)
        for _ in range(2):
            keys2, _, truncated, token2 = parse_listing(
                self.c.list("syn", max_keys=5, continuation_token=token))
            self.assertEqual(token2, token)
            self.assertTrue(truncated)
        # Exhausted: the token now works normally.
        keys3 = parse_listing(self.c.list("syn", max_keys=5, continuation_token=token))[0]
        self.assertEqual(keys3[0], b"train/img_0005_of_1000.jpeg")
        # A listing that fits in one page still gets a token it will repeat.
        SRV.faults([{"kind": "repeat_token", "count": 2}])
        keys, _, truncated, token = parse_listing(self.c.list("syn", prefix="train/img_000"))
        self.assertEqual((len(keys), truncated), (10, True))
        again = parse_listing(self.c.list("syn", prefix="train/img_000", continuation_token=token))
        self.assertEqual((again[0], again[3]), ([], token))

    def test_matching_and_counters(self):
        SRV.faults([
            {"op": "GET", "bucket": "syn", "key_regex": r"img_000[13]_", "kind": "status",
             "status": 404, "code": "NoSuchKey"},
            {"op": "LIST", "key_prefix": "train/img_09", "kind": "status", "status": 500},
            {"op": "HEAD", "kind": "status", "status": 503, "skip": 2, "count": 3},
        ])
        self.assertEqual(self.c.get("syn", "train/img_0001_of_1000.jpeg").status, 404)
        self.assertEqual(self.c.get("syn", "train/img_0002_of_1000.jpeg").status, 200)
        self.assertEqual(self.c.get("syn", "train/img_0003_of_1000.jpeg").status, 404)
        self.assertEqual(self.c.get("files", "img_0001_").status, 404)     # real 404
        r = self.c.request("GET", "syn", query=[("list-type", "2"), ("prefix", "train/img_09")])
        self.assertEqual(r.status, 500)
        r = self.c.request("GET", "syn", query=[("list-type", "2"), ("prefix", "train/img_08")])
        self.assertEqual(r.status, 200)
        heads = [self.c.request("HEAD", "syn", self.KEY).status for _ in range(7)]
        self.assertEqual(heads, [200, 200, 503, 503, 503, 200, 200])
        rules = SRV.control("GET", "faults")[1]["rules"]
        self.assertEqual([(r["matched"], r["hits"]) for r in rules], [(2, 2), (1, 1), (5, 3)])

    def test_probability_is_seeded(self):
        SRV.faults([{"kind": "status", "status": 503, "probability": 0.3}], seed=7)
        statuses = [self.c.request("HEAD", "syn", self.KEY).status for _ in range(100)]
        rng = random.Random(7)
        expected = [503 if rng.random() < 0.3 else 200 for _ in range(100)]
        self.assertEqual(statuses, expected)

    def test_invalid_rules(self):
        for rule in ({"kind": "nope"}, {"kind": "delay", "seconds": "x"}, {"kind": "status",
                     "colour": 1}, {"op": "FETCH", "kind": "drop"}, {"kind": "status",
                     "probability": 2}, {"kind": "status", "key_regex": "("}, "x"):
            with self.subTest(rule=rule):
                status, body = SRV.control("POST", "faults", [rule])
                self.assertEqual(status, 400)
                self.assertIn("error", body)

    def test_stats(self):
        SRV.control("POST", "stats/reset")
        SRV.faults([{"op": "DELETE", "kind": "status", "status": 503}])
        self.c.get("syn", self.KEY)
        self.c.get("syn", "nope")
        self.c.request("HEAD", "syn", self.KEY)
        self.c.list("syn", max_keys=1)
        self.c.put("files", "statkey", b"s")
        self.c.request("DELETE", "files", "statkey")
        self.c.request("GET", path="/")
        status, stats = SRV.control("GET", "stats")
        self.assertEqual(stats["requests"], {"LIST": 1, "GET": 2, "HEAD": 1, "PUT": 1,
                                             "DELETE": 1, "OTHER": 1})
        self.assertEqual(stats["status"], {"200": 5, "404": 1, "503": 1})
        self.assertEqual(stats["faults_injected"], 1)
        SRV.control("POST", "stats/reset")
        stats = SRV.control("GET", "stats")[1]
        self.assertEqual(sum(stats["requests"].values()), 0)


class TestOtherServers(unittest.TestCase):
    """Options that need a server of their own."""

    def start(self, *args):
        srv = Server(*args)
        self.addCleanup(srv.cleanup)
        return srv

    def test_anonymous_ok_and_no_verify(self):
        srv = self.start("--synthetic", "s:10:100", "--anonymous-ok")
        c = S3Client(srv.port, access_key=None)
        self.assertEqual(c.get("s", "train/img_01_of_10.jpeg").status, 200)
        bad = S3Client(srv.port, "bucketfs-test", "wrong")
        self.assertEqual(bad.get("s", "train/img_01_of_10.jpeg").status, 403)
        c.close()
        bad.close()
        self.assertEqual(srv.stop(), 0)
        srv = self.start("--synthetic", "s:10:100", "--no-verify")
        c = S3Client(srv.port, "who", "ever")
        self.assertEqual(c.get("s", "train/img_01_of_10.jpeg").status, 200)
        self.assertEqual(c.get("s", "train/img_01_of_10.jpeg", sign=False,
                               headers={"Authorization": "garbage"}).status, 200)
        c.close()
        self.assertEqual(srv.stop(), 0)

    def test_stall_and_idle_clients_do_not_block_shutdown(self):
        srv = self.start("--synthetic", "s:10:100", "--no-verify")
        idle = S3Client(srv.port, access_key=None)
        self.assertEqual(idle.get("s", "train/img_01_of_10.jpeg").status, 200)
        srv.faults([{"kind": "stall"}])
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(b"GET /s/train/img_01_of_10.jpeg HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 200"))
        start = time.monotonic()
        self.assertEqual(srv.stop(), 0)
        self.assertLess(time.monotonic() - start, 5)
        s.close()
        idle.close()

    def test_custom_region_domain_and_default_credentials(self):
        srv = self.start("--synthetic", "s:10:100", "--region", "eu-central-1",
                         "--domain", "s3.test")
        c = S3Client(srv.port, region="eu-central-1")
        self.assertEqual(c.get("s", "train/img_01_of_10.jpeg").status, 200)
        r = c.request("GET", path="/train/img_02_of_10.jpeg", host="s.s3.test:%d" % srv.port)
        self.assertEqual(r.status, 200)
        r = c.request("GET", "s", query=[("location", "")])
        self.assertIn(b">eu-central-1<", r.body)
        c.close()
        self.assertEqual(srv.stop(), 0)

    def test_etag_style_nginx(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        os.makedirs(os.path.join(tmp, "d", "sub"))
        files = {"a.bin": b"x" * 322624, "sub/b.txt": b"hello\n"}
        for name, data in files.items():
            path = os.path.join(tmp, "d", name)
            with open(path, "wb") as f:
                f.write(data)
            os.utime(path, (1700000000.75, 1700000000.75))
        srv = self.start("--bucket", "d=" + os.path.join(tmp, "d"), "--etag-style", "nginx")
        c = S3Client(srv.port)
        root = c.list("d")
        listed = {c_.find(NS + "Key").text: c_.find(NS + "ETag").text
                  for c_ in root.findall(NS + "Contents")}
        want = {name: '"%x-%x"' % (1700000000, len(data)) for name, data in files.items()}
        self.assertEqual(listed, want)
        self.assertEqual(want["a.bin"], '"6553f100-4ec40"')
        r = c.get("d", "a.bin", headers={"If-Match": want["a.bin"]})
        self.assertEqual((r.status, r.headers["etag"], r.body),
                         (200, want["a.bin"], files["a.bin"]))
        self.assertEqual(c.get("d", "a.bin", headers={"If-Match": '"0-0"'}).status, 412)
        status, body = srv.control("GET", "buckets")
        self.assertEqual(body[0]["etag_style"], "nginx")
        self.assertEqual(srv.control("POST", "mutate", {"bucket": "d", "key": "a.bin"})[0], 200)
        self.assertNotEqual(c.get("d", "a.bin").headers["etag"], want["a.bin"])
        c.close()
        self.assertEqual(srv.stop(), 0)

    @unittest.skipUnless(shutil.which("openssl"), "openssl is not installed")
    def test_tls(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        srv = self.start("--synthetic", "s:10:100000", "--tls-cert", cert, "--tls-key", key)
        self.assertTrue(srv.line.startswith("listening on https://127.0.0.1:"))
        ctx = ssl.create_default_context(cafile=cert)
        c = S3Client(srv.port, scheme="https", ssl_context=ctx)
        r = c.get("s", "train/img_03_of_10.jpeg")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, s3server.synthetic_bytes("s", "train/img_03_of_10.jpeg", 100000))
        self.assertEqual(c.get("s", "train/img_03_of_10.jpeg",
                               headers={"Range": "bytes=5-9"}).body, r.body[5:10])
        srv.faults([{"kind": "truncate", "after_bytes": 10, "count": 1}])
        with self.assertRaises(http.client.IncompleteRead):
            c.get("s", "train/img_03_of_10.jpeg")
        c.close()
        self.assertEqual(srv.stop(), 0)
        self.assertNotIn("Traceback", srv.read_stderr())


if __name__ == "__main__":
    unittest.main(verbosity=1)
