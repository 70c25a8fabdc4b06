"""Shared pieces of the integration tests: servers started for real on
loopback port 0, the binaries under test, and botocore for writing objects.

Environment (set by meson test, or by hand):
  BFS_BUILD_DIR   the meson build directory (binaries)
  BFS_SOURCE_DIR  the source tree (the test S3 server)
  BFS_S3RVER      path to the s3rver executable (skips s3rver tests if unset
                  and not found under tests/s3rver/node_modules/.bin)
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
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
                "BUCKETFS_CONFIG": "none"})
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
    """The project's own S3 server (tests/s3server/s3server.py)."""

    def __init__(self, *args):
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
        with urllib.request.urlopen(req, timeout=10) as r:
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
        env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
        self.proc = subprocess.Popen(
            [exe, "-d", self.dir, "-a", "127.0.0.1", "-p", "0",
             "--configure-bucket", bucket],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=env)
        m = _wait_line(self.proc, r"listening on [\d.]+:(\d+)", "s3rver")
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        stop_process(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def put_object(url, bucket, key, body, ak=AK, sk=SK, region="us-east-1"):
    """PUTs with botocore's own signer, path-style."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    import hashlib
    import http.client
    import urllib.parse

    path = "/" + urllib.parse.quote(bucket, safe="") + "/" + \
        urllib.parse.quote(key.encode() if isinstance(key, str) else key,
                           safe="/~")
    req = AWSRequest(method="PUT", url=url + path, data=body, headers={
        "X-Amz-Content-SHA256": hashlib.sha256(body).hexdigest()})
    S3SigV4Auth(Credentials(ak, sk), "s3", region).add_auth(req)
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("PUT", path, body=body, headers=dict(req.headers.items()))
    resp = conn.getresponse()
    text = resp.read()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"PUT {key!r}: HTTP {resp.status}: {text!r}")


class Mount:
    """bucketfs -f in the background; unmounted with fusermount3 -u.
    @index None: no index= option (the cache directory's default).  With
    @may_fail, a daemon that exits before mounting leaves its status in
    .failed (None once mounted) instead of raising."""

    def __init__(self, url, endpoint, index, *opts, log, env=None,
                 may_fail=False):
        self.dir = tempfile.mkdtemp(prefix="bfs-mnt-")
        o = [f"endpoint={endpoint}", *opts]
        if index is not None:
            o.insert(1, f"index={index}")
        self.failed = None
        self.log = log
        self.logf = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [binary("bucketfs"), "-f", "-o", ",".join(o), url,
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


def main():
    """unittest main that maps 'everything skipped' to exit 77."""
    prog = unittest.main(exit=False, verbosity=2)
    r = prog.result
    if not r.wasSuccessful():
        raise SystemExit(1)
    if r.testsRun and len(r.skipped) == r.testsRun:
        raise SystemExit(SKIP)
    raise SystemExit(0)
