"""Shared pieces of the integration tests: servers started for real on
loopback port 0, the binaries under test, and botocore for writing objects.

Environment (set by meson test, or by hand):
  BFS_BUILD_DIR   the meson build directory (binaries)
  BFS_SOURCE_DIR  the source tree (the test S3 server)
  BFS_S3RVER      path to the s3rver executable (skips s3rver tests if unset
                  and not found under tests/s3rver/node_modules/.bin)
  BFS_RGW_URL, BFS_RGW_AK, BFS_RGW_SK, BFS_RGW_DIR
                  the suite's Ceph RGW (tools/run-tests.sh starts one with
                  tests/rgw/rgw.sh); unset: each RGW() starts its own
"""

import concurrent.futures
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

SRC = os.environ.get("BFS_SOURCE_DIR",
                     os.path.dirname(os.path.dirname(os.path.dirname(
                         os.path.abspath(__file__)))))
BUILD = os.environ.get("BFS_BUILD_DIR", os.path.join(SRC, "build"))
AK = "bucketfs-test"
SK = "bucketfs-test-secret"
SKIP = 77


def binary(name):
    for sub in ("tools", "tests", "fs", ""):
        p = os.path.join(BUILD, sub, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{name} not built under {BUILD}")


def client_env(**extra):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("AWS_") or k == "S3_ENDPOINT_URIS":
            del env[k]
    env.update({"AWS_ACCESS_KEY_ID": AK, "AWS_SECRET_ACCESS_KEY": SK,
                "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                "AWS_CONFIG_FILE": "/nonexistent",
                # The machine's /etc/bucketfs/bucketfs.conf stays out.
                "BUCKETFS_CONFIG": "none",
                # Nor may a test reach a real instance metadata service.
                "AWS_EC2_METADATA_DISABLED": "true"})
    env.update(extra)
    return env


def free_port():
    """A loopback port nothing listens on (for dead-endpoint tests)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def stop_process(proc, timeout=30):
    """SIGTERM, then SIGKILL after @timeout; closes its stdout pipe."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout:
        proc.stdout.close()


def _wait_line(proc, pattern, what, timeout=20):
    """Reads proc's stdout until a line matches; returns the match."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    proc.kill()
    raise RuntimeError(f"{what} did not start: {''.join(seen)!r}")


class TestServer:
    """The project's own S3 server (tests/s3server/s3server.py).  With
    --tls-cert it speaks HTTPS, its control API too: @cafile is what the
    control requests trust."""

    def __init__(self, *args, cafile=None):
        self.tls = ssl.create_default_context(cafile=cafile) if cafile \
            else None
        script = os.path.join(SRC, "tests", "s3server", "s3server.py")
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", script, "--port", "0", "--quiet", *args],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        m = _wait_line(self.proc, r"listening on (https?://\S+)",
                       "test S3 server")
        self.url = m.group(1)
        self.port = int(self.url.rsplit(":", 1)[1])

    def control(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}/_bucketfs/{path}",
                                     data=data, method=method)
        with urllib.request.urlopen(req, timeout=10, context=self.tls) as r:
            text = r.read()
        return json.loads(text) if text else None

    def faults(self, rules, seed=None):
        q = f"?seed={seed}" if seed is not None else ""
        self.control("POST", "faults" + q, rules)

    def clear_faults(self):
        self.control("DELETE", "faults")

    def stats(self):
        return self.control("GET", "stats")

    def stop(self):
        stop_process(self.proc)


def s3rver_path():
    p = os.environ.get("BFS_S3RVER")
    if p and os.path.exists(p):
        return p
    p = os.path.join(SRC, "tests", "s3rver", "node_modules", ".bin", "s3rver")
    return p if os.path.exists(p) else None


class S3rver:
    """s3rver from npm: an S3 implementation we did not write.

    Its credentials are S3RVER/S3RVER; under Node 20 it needs the legacy
    OpenSSL provider or paginated listings fail (DESIGN.md)."""

    AK = "S3RVER"
    SK = "S3RVER"

    def __init__(self, bucket):
        exe = s3rver_path()
        if not exe:
            raise unittest.SkipTest("s3rver is not installed")
        self.dir = tempfile.mkdtemp(prefix="bfs-s3rver-")
        self.argv = [exe, "-d", self.dir, "-a", "127.0.0.1", "-p", "0",
                     "--configure-bucket", bucket]
        self._spawn()
        self.url = f"http://127.0.0.1:{self.port}"

    def _spawn(self):
        env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=env)
        m = _wait_line(self.proc, r"listening on [\d.]+:(\d+)", "s3rver")
        self.port = int(m.group(1))

    def restart(self):
        """Starts it again, on the same port and data, once it exited."""
        if self.proc.stdout:
            self.proc.stdout.close()
        self.argv[self.argv.index("-p") + 1] = str(self.port)
        self._spawn()

    def stop(self):
        stop_process(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def key_path(bucket, key):
    """/BUCKET/KEY, %-escaped for a path-style request line."""
    return "/" + urllib.parse.quote(bucket, safe="") + "/" + \
        urllib.parse.quote(key.encode() if isinstance(key, str) else key,
                           safe="/~")


class NotImplementedByServer(RuntimeError):
    """The server answered 501 (NotImplemented)."""


class Signer:
    """SigV4-signed requests with botocore's own signer, path-style, on one
    kept-alive connection per thread user (not thread-safe itself)."""

    def __init__(self, url, ak=AK, sk=SK, region="us-east-1"):
        self.url, self.ak, self.sk, self.region = url, ak, sk, region
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.conn = None

    def request(self, method, path, body=b"", query="", headers=None):
        """Returns (status, headers dict lower-cased, body)."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        target = path + ("?" + query if query else "")
        h = {"X-Amz-Content-SHA256": hashlib.sha256(body).hexdigest()}
        h.update(headers or {})
        req = AWSRequest(method=method, url=self.url + target, data=body,
                         headers=h)
        S3SigV4Auth(Credentials(self.ak, self.sk), "s3",
                    self.region).add_auth(req)
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port,
                                                       timeout=60)
            try:
                self.conn.request(method, target, body=body,
                                  headers=dict(req.headers.items()))
                resp = self.conn.getresponse()
                text = resp.read()
                break
            except (http.client.HTTPException, ConnectionError):
                # A kept-alive connection the server closed: once more.
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        if resp.getheader("connection", "").lower() == "close":
            self.conn.close()
            self.conn = None
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, text

    def check(self, what, status, expect=(200,)):
        if status[0] == 501:
            code = re.search(rb"<Code>([^<]*)</Code>", status[2])
            raise NotImplementedByServer(
                f"{what}: HTTP 501 "
                f"{code.group(1).decode() if code else ''}".rstrip())
        if status[0] not in expect:
            raise RuntimeError(f"{what}: HTTP {status[0]}: {status[2]!r}")
        return status

    def put(self, bucket, key, body):
        return self.check(f"PUT {key!r}", self.request(
            "PUT", key_path(bucket, key), body))

    def delete(self, bucket, key):
        return self.check(f"DELETE {key!r}", self.request(
            "DELETE", key_path(bucket, key)), (200, 204))

    def create_bucket(self, bucket):
        self.check(f"PUT bucket {bucket}", self.request(
            "PUT", "/" + bucket), (200,))

    def multipart(self, bucket, key, parts):
        """A multipart upload of @parts (bytes each); returns the ETag."""
        import xml.etree.ElementTree as ET
        path = key_path(bucket, key)
        _, _, text = self.check(f"CreateMultipartUpload {key!r}",
                                self.request("POST", path, query="uploads="))
        ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
        upload = ET.fromstring(text).find(".//s3:UploadId", ns)
        if upload is None:
            upload = ET.fromstring(text).find(".//UploadId")
        uid = urllib.parse.quote(upload.text, safe="")
        done = ["<CompleteMultipartUpload>"]
        for n, part in enumerate(parts, 1):
            _, h, _ = self.check(f"UploadPart {n} of {key!r}", self.request(
                "PUT", path, part, query=f"partNumber={n}&uploadId={uid}"))
            done.append(f"<Part><PartNumber>{n}</PartNumber>"
                        f"<ETag>{h['etag']}</ETag></Part>")
        done.append("</CompleteMultipartUpload>")
        self.check(f"CompleteMultipartUpload {key!r}",
                   self.request("POST", path, "".join(done).encode(),
                                query=f"uploadId={uid}"))
        # The ETag from HEAD: RGW 16.2 completes with an empty <ETag>.
        _, h, _ = self.check(f"HEAD {key!r}", self.request("HEAD", path))
        return h["etag"]

    def close(self):
        if self.conn:
            self.conn.close()
            self.conn = None


def put_object(url, bucket, key, body, ak=AK, sk=SK, region="us-east-1"):
    """PUTs with botocore's own signer, path-style."""
    s = Signer(url, ak, sk, region)
    try:
        s.put(bucket, key, body)
    finally:
        s.close()


def put_objects(url, bucket, objects, ak=AK, sk=SK, workers=16):
    """PUTs every (key, body) of the dict @objects, @workers at a time, each
    worker on its own kept-alive connection."""
    items = list(objects.items())
    chunks = [items[i::workers] for i in range(workers)]

    def put_chunk(chunk):
        s = Signer(url, ak, sk)
        try:
            for k, v in chunk:
                s.put(bucket, k, v)
        finally:
            s.close()

    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        for f in [ex.submit(put_chunk, c) for c in chunks if c]:
            f.result()


def shutdown(*socks):
    """Shuts both directions of every socket, ignoring closed ones."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def relay(src, dst):
    """Copies @src to @dst until either ends; then shuts both down."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    shutdown(src, dst)


class CountingProxy:
    """A loopback TCP relay in front of an S3 server that counts the
    requests passing through it, by kind: "LIST" (list-type=2), else the
    method; "PROBE" counts the LISTs with max-keys=1 once more.  Bytes are relayed unchanged (SigV4 signs the Host header the
    client sent, which the server then sees), so it works with any server;
    for the servers that count nothing themselves (s3rver, RGW).  Request
    bodies are skipped by Content-Length, the only framing bucketfs
    sends."""

    def __init__(self, upstream):
        import threading
        u = urllib.parse.urlsplit(upstream)
        self.upstream = (u.hostname, u.port)
        self.lock = threading.Lock()
        self.counts = {}
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.conns = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def count(self, kind):
        with self.lock:
            return self.counts.get(kind, 0)

    def reset(self):
        with self.lock:
            self.counts.clear()

    def _accept(self):
        import threading
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream, timeout=30)
            except OSError:
                c.close()
                continue
            up.settimeout(None)
            with self.lock:
                self.conns += [c, up]
            threading.Thread(target=self._requests, args=(c, up),
                             daemon=True).start()
            threading.Thread(target=relay, args=(up, c),
                             daemon=True).start()

    def _requests(self, src, dst):
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = src.recv(65536)
                    if not data:
                        raise OSError("closed")
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                line = head.split(b"\r\n", 1)[0].decode("latin-1")
                method, target = (line.split(" ") + ["", ""])[:2]
                kind = "LIST" if re.search(r"[?&]list-type=2(&|$)",
                                           target) else method
                probe = kind == "LIST" and re.search(r"[?&]max-keys=1(&|$)",
                                                     target)
                with self.lock:
                    self.counts[kind] = self.counts.get(kind, 0) + 1
                    if probe:
                        self.counts["PROBE"] = self.counts.get("PROBE",
                                                               0) + 1
                m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                left = int(m.group(1)) if m else 0
                dst.sendall(head + b"\r\n\r\n")
                while left > 0:
                    if not buf:
                        buf = src.recv(min(left, 1 << 20))
                        if not buf:
                            raise OSError("closed")
                    part, buf = buf[:left], buf[left:]
                    dst.sendall(part)
                    left -= len(part)
        except OSError:
            pass
        shutdown(src, dst)

    def stop(self):
        shutdown(self.sock)
        self.sock.close()
        with self.lock:
            shutdown(*self.conns)
            for c in self.conns:
                c.close()
            self.conns = []


RGW_SCRIPT = os.path.join(SRC, "tests", "rgw", "rgw.sh")


def rgw_start(directory):
    """tests/rgw/rgw.sh start @directory; returns its env file as a dict.
    Raises with the script's own account (which daemon, its log tail)."""
    r = subprocess.run(["bash", RGW_SCRIPT, "start", directory],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"Ceph RGW did not start (tests/rgw/rgw.sh "
                           f"start {directory}, exit {r.returncode}):\n"
                           f"{r.stderr}{r.stdout}")
    with open(os.path.join(directory, "env")) as f:
        return dict(line.strip().split("=", 1) for line in f if "=" in line)


def rgw_stop(directory):
    r = subprocess.run(["bash", RGW_SCRIPT, "stop", directory],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"tests/rgw/rgw.sh stop {directory}: "
                           f"{r.stderr}")


class RGW:
    """Ceph RGW (Debian's radosgw): a production S3 server.  Uses the
    suite's instance when BFS_RGW_URL is set (tools/run-tests.sh), else
    starts its own with tests/rgw/rgw.sh and stops it in stop().  Either
    way a bucket of its own, named @bucket plus a unique suffix (.bucket),
    which stop() deletes with everything in it.  With @shared and the
    suite's RGW, the bucket is @bucket plus "-suite" and outlives the test
    (the suite's end removes the whole cluster): for a data set too slow to
    seed once per build.  A server that cannot start fails the test with
    the reason: never a skip."""

    def __init__(self, bucket, shared=False):
        self.own = None
        env = os.environ
        if not env.get("BFS_RGW_URL"):
            self.own = tempfile.mkdtemp(prefix="bfs-rgw-")
            try:
                env = rgw_start(self.own)
            except BaseException:
                shutil.rmtree(self.own, ignore_errors=True)
                raise
        self.url = env["BFS_RGW_URL"]
        self.AK = env["BFS_RGW_AK"]
        self.SK = env["BFS_RGW_SK"]
        self.state = env.get("BFS_RGW_DIR")
        self.port = int(self.url.rsplit(":", 1)[1])
        stamp = int(time.time() * 1e3) % 100000
        self.keep = shared and not self.own
        self.bucket = f"{bucket}-suite" if self.keep else \
            f"{bucket}-{os.getpid()}-{stamp}"
        s = Signer(self.url, self.AK, self.SK)
        # 200 again for a bucket of our own in us-east-1, or 409
        # BucketAlreadyOwnedByYou elsewhere: both fine when shared.
        s.check(f"PUT bucket {self.bucket}",
                s.request("PUT", "/" + self.bucket),
                (200, 409) if self.keep else (200,))
        s.close()

    def admin(self, *args, timeout=120):
        """radosgw-admin against this cluster (needs BFS_RGW_DIR)."""
        return subprocess.run(
            ["radosgw-admin", "-c", os.path.join(self.state, "ceph.conf"),
             *args], capture_output=True, text=True, timeout=timeout)

    def stop(self):
        try:
            # A cluster of our own goes as a whole (and purging a bucket
            # of 30,000 keys takes RGW minutes).
            if self.state and not self.keep and not self.own:
                r = self.admin("bucket", "rm", f"--bucket={self.bucket}",
                               "--purge-objects", "--bypass-gc",
                               timeout=900)
                if r.returncode != 0:
                    raise RuntimeError(f"radosgw-admin bucket rm "
                                       f"{self.bucket}: {r.stderr}")
        finally:
            if self.own:
                rgw_stop(self.own)
                shutil.rmtree(self.own, ignore_errors=True)


class Mount:
    """bucketfs -f in the background; unmounted with fusermount3 -u.
    @index None: no index= option (the cache directory's default).  With
    @may_fail, a daemon that exits before mounting leaves its status in
    .failed (None once mounted) instead of raising.  @debug: -d instead
    of -f (every retry logged, and FUSE's own trace)."""

    def __init__(self, url, endpoint, index, *opts, log, env=None,
                 may_fail=False, debug=False):
        self.dir = tempfile.mkdtemp(prefix="bfs-mnt-")
        o = [f"endpoint={endpoint}", *opts]
        if index is not None:
            o.insert(1, f"index={index}")
        self.opts = o
        self.failed = None
        self.log = log
        self.logf = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [binary("bucketfs"), "-d" if debug else "-f", "-o", ",".join(o), url,
             self.dir], stdout=self.logf, stderr=subprocess.STDOUT,
            env=env or client_env())
        deadline = time.monotonic() + 60
        while not os.path.ismount(self.dir):
            if self.proc.poll() is not None:
                os.rmdir(self.dir)
                self.logf.close()
                if may_fail:
                    self.failed = self.proc.returncode
                    return
                raise RuntimeError(f"bucketfs exited {self.proc.returncode}:"
                                   f" {self.output()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("bucketfs did not mount: " + self.output())
            time.sleep(0.02)

    def output(self):
        if not self.logf.closed:
            self.logf.flush()
        with open(self.log, "rb") as f:
            return f.read().decode(errors="replace")

    def direct_io_maps(self):
        """Whether INIT gave mmap of direct_io files (the mount logs it),
        so that direct_io=auto opens files fetched whole with direct_io."""
        return "FUSE_DIRECT_IO_ALLOW_MMAP negotiated" in self.output()

    def wait_output(self, text, timeout=30):
        """Whether @text shows up in the log within @timeout seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return True
            time.sleep(0.05)
        return False

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def unmount(self):
        rc = subprocess.run(["fusermount3", "-u", self.dir]).returncode
        if rc != 0:
            subprocess.run(["fusermount3", "-uz", self.dir])
        try:
            status = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            status = self.proc.wait()
        self.logf.close()
        os.rmdir(self.dir)
        return rc, status


def cleanup_mounts(mounts):
    """Unmounts what a test left mounted; reaps a daemon that died or never
    mounted, and removes its mount point."""
    for m in mounts:
        if os.path.ismount(m.dir):
            m.unmount()
            continue
        if m.proc.poll() is None:
            m.proc.kill()
        m.proc.wait()
        if not m.logf.closed:
            m.logf.close()
        if os.path.isdir(m.dir):
            os.rmdir(m.dir)


class MountCase(unittest.TestCase):
    """Base of the tests that mount.  setUpClass sets cls.tmp (a scratch
    directory) and cls.server (a TestServer), and may add more servers to
    cls.more_servers; they are stopped and removed after the class.  Each
    test starts with the server's faults cleared (unless the class sets
    reset_faults False) and ends with every mount in self.mounts unmounted
    (or reaped) and every process in self.procs killed."""

    tmp = None
    server = None
    more_servers = ()
    reset_faults = True

    @classmethod
    def tearDownClass(cls):
        for s in (cls.server, *cls.more_servers):
            if s is not None:
                s.stop()
        if cls.tmp:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def mkdir(cls, name):
        p = os.path.join(cls.tmp, name)
        os.makedirs(p, exist_ok=True)
        return p

    def setUp(self):
        if self.reset_faults:
            self.server.clear_faults()
        self.mounts = []
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        cleanup_mounts(self.mounts)

    def unmount(self, m):
        """Unmounts @m and checks that both fusermount3 and the daemon
        ended well."""
        self.mounts.remove(m)
        rc, status = m.unmount()
        self.assertEqual(rc, 0, "fusermount3 -u failed")
        self.assertEqual(status, 0, m.output())


def run(args, env=None, timeout=120, input=None):
    return subprocess.run(args, env=env or client_env(), timeout=timeout,
                          capture_output=True, input=input)


def build_index(url, bucket, index):
    """Builds the index of s3://@bucket at @url into the file @index, or
    raises with bucketfs-index's own message."""
    r = run([binary("bucketfs-index"), "build", "-q",
             "-o", f"endpoint={url},index={index}", f"s3://{bucket}"])
    if r.returncode != 0:
        raise RuntimeError(r.stderr)


def main():
    """unittest main that maps 'everything skipped' to exit 77."""
    prog = unittest.main(exit=False, verbosity=2)
    r = prog.result
    if not r.wasSuccessful():
        raise SystemExit(1)
    if r.testsRun and len(r.skipped) == r.testsRun:
        raise SystemExit(SKIP)
    raise SystemExit(0)


class CredFakes:
    """tests/credfakes/credfakes.py: IMDSv2, the container endpoint and STS
    on one loopback port, issuing session credentials that expire after
    @lifetime seconds; a TestServer started with "--session-key",
    CredFakes.KEY accepts them until then (ExpiredToken after)."""

    KEY = "bfs-test-session-key"

    def __init__(self, *args, lifetime=4):
        script = os.path.join(SRC, "tests", "credfakes", "credfakes.py")
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", script, "--session-key", self.KEY,
             "--lifetime", str(lifetime), *args],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        m = _wait_line(self.proc, r"listening on (http://\S+)",
                       "credential fakes")
        self.url = m.group(1)

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}/_fake/{path}", data=data,
                                     method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"null")

    def requests(self):
        """What was asked so far, in order ("imds-token", "sts:AssumeRole",
        "container"...)."""
        return self._call("GET", "requests")["requests"]

    def issued(self):
        return self._call("GET", "requests")["issued"]

    def secrets(self):
        """Every secret key, session token and IMDS token handed out."""
        return self._call("GET", "secrets")

    def reset(self):
        self._call("POST", "requests/reset", {})

    def config(self, **kw):
        self._call("POST", "config", kw)

    def stop(self):
        stop_process(self.proc)
