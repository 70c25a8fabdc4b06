#!/usr/bin/env python3
"""HTTPS on the direct receive path: a test server speaking TLS with a
certificate of a CA made here.

  * GETs after curl's first one run on the direct path's own TLS
    connections, and every byte read is the object's;
  * connections opened once one has a session ticket resume that
    session, and a restarted server that lost its tickets gets full
    handshakes instead, with every read served;
  * a server that comes back on the same port with a certificate of
    another CA, or with one for another name, is refused by the direct
    path's handshake (its log line names the verify result) and then by
    curl (the read's error names it too): the read fails, no byte served;
  * a body cut mid-way by an RST, by a close, or never sent, fails the
    read with the direct path's own words for it, as over plain HTTP.
"""

import concurrent.futures
import errno
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402
from test_faults import (SMALL_N, SMALL_SIZE, content, fresh_key,  # noqa: E402
                         get_re, read_all, read_re)

BOUND = 30  # "does not hang", seconds


def openssl(*args):
    r = subprocess.run(["openssl", *args], capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {args[0]}: {r.stderr!r}")


def make_ca(d, name):
    key, cert = os.path.join(d, name + ".key"), os.path.join(d, name + ".pem")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
            "-out", cert, "-days", "2", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return key, cert


def make_leaf(d, name, ca, san):
    """A server certificate for @san signed by @ca: (cert, key)."""
    key, csr = os.path.join(d, name + ".key"), os.path.join(d, name + ".csr")
    cert, ext = os.path.join(d, name + ".pem"), os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write(f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out",
            csr, "-subj", f"/CN={name}")
    openssl("x509", "-req", "-in", csr, "-CA", ca[1], "-CAkey", ca[0],
            "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext)
    return cert, key


class TlsDirectTest(harness.MountCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-tls-")
        ca = make_ca(cls.tmp, "ca")
        other_ca = make_ca(cls.tmp, "other-ca")
        cls.ca = ca[1]
        cls.certs = {
            "good": make_leaf(cls.tmp, "good", ca,
                              "IP:127.0.0.1,DNS:localhost"),
            "other_ca": make_leaf(cls.tmp, "other", other_ca,
                                  "IP:127.0.0.1,DNS:localhost"),
            "other_name": make_leaf(cls.tmp, "name", ca,
                                    "DNS:other.invalid"),
        }
        cls.server = cls.start("good")
        cls.idx = os.path.join(cls.tmp, "syn.idx")
        r = harness.run([harness.binary("bucketfs-index"), "build", "-q",
                         "-o", f"endpoint={cls.server.url},index={cls.idx},"
                         f"ca_file={cls.ca}", "s3://syn"])
        if r.returncode != 0:
            raise RuntimeError(f"index build failed: {r.stderr!r}")

    @classmethod
    def start(cls, which, port=0):
        cert, key = cls.certs[which]
        return harness.TestServer("--synthetic", f"syn:{SMALL_N}:{SMALL_SIZE}",
                                  "--tls-cert", cert, "--tls-key", key,
                                  "--port", str(port), cafile=cls.ca)

    def setUp(self):
        if self.server.proc.poll() is not None or \
                getattr(self.server, "which", "good") != "good":
            self.restart("good")
        super().setUp()

    def restart(self, which):
        """The server again, on its port, with the certificate @which."""
        port = self.server.port
        self.server.stop()
        type(self).server = self.start(which, port)
        self.server.which = which
        self.assertEqual(self.server.port, port)

    def mount(self, *opts, host="127.0.0.1"):
        url = self.server.url.replace("127.0.0.1", host)
        m = Mount("s3://syn", url, self.idx,
                  f"ca_file={self.ca}", *opts,
                  log=os.path.join(self.tmp, f"m{time.monotonic_ns()}.log"))
        self.mounts.append(m)
        return m

    def stats(self, m):
        return json.loads(os.getxattr(m.dir, "user.bucketfs.stats"))

    def assert_reads(self, m, key):
        got, err, secs = read_all(m.path(key))
        self.assertIsNone(err, f"{key}: {err}\n{m.output()}")
        self.assertTrue(got == content("syn", key, SMALL_SIZE),
                        f"{key}: wrong bytes")
        self.assertLess(secs, BOUND)

    def assert_logged(self, m, pattern, timeout=5):
        deadline = time.monotonic() + timeout
        while True:
            out = m.output()
            lines = [ln for ln in out.splitlines() if re.search(pattern, ln)]
            if lines:
                return lines[0]
            if time.monotonic() > deadline:
                self.fail(f"no log line matches {pattern!r} in:\n{out}")
            time.sleep(0.05)

    def test_reads_run_on_the_direct_path(self):
        m = self.mount()
        keys = [fresh_key() for _ in range(20)]
        for k in keys:
            self.assert_reads(m, k)
        # The first GET is curl's (it finds the address); most of the rest
        # are the direct path's own.
        direct = self.stats(m)["endpoints"][0]["direct"]
        self.assertGreaterEqual(direct, 10, m.output())
        self.unmount(m)
        # The same reads with curl's receive path: none is direct.
        m = self.mount("http_receive=curl")
        for k in keys[:5]:
            self.assert_reads(m, k)
        self.assertEqual(self.stats(m)["endpoints"][0]["direct"], 0)
        self.unmount(m)

    def read_many(self, m, keys, threads=16):
        with concurrent.futures.ThreadPoolExecutor(threads) as ex:
            list(ex.map(lambda k: self.assert_reads(m, k), keys))

    def test_new_connections_resume_the_session(self):
        m = self.mount()
        keys = [fresh_key() for _ in range(60)]
        # One at a time: one direct connection, which gets the tickets.
        for k in keys[:5]:
            self.assert_reads(m, k)
        self.assertEqual(self.stats(m)["endpoints"][0]["tls_resumed"], 0)
        # Many at once: more connections, each resuming that session.
        self.read_many(m, keys[5:])
        ep = self.stats(m)["endpoints"][0]
        self.assertGreater(ep["connects"], 1, m.output())
        self.assertGreaterEqual(ep["tls_resumed"], 1, m.output())
        self.assertLess(ep["tls_resumed"], ep["connects"])
        self.unmount(m)

    def test_a_server_that_forgot_its_tickets(self):
        # A restarted server cannot resume the sessions it gave: the new
        # connections do full handshakes, and every read still succeeds.
        m = self.mount()
        keys = [fresh_key() for _ in range(60)]
        for k in keys[:5]:
            self.assert_reads(m, k)
        self.read_many(m, keys[5:30])
        before = self.stats(m)["endpoints"][0]
        self.assertGreaterEqual(before["tls_resumed"], 1, m.output())
        self.restart("good")
        self.read_many(m, keys[30:])
        after = self.stats(m)["endpoints"][0]
        self.assertGreater(after["connects"], before["connects"])
        self.unmount(m)

    def refused(self, which, direct_cause, curl_cause, host="127.0.0.1"):
        m = self.mount("max_attempts=2", "retry_deadline=0", host=host)
        for _ in range(3):
            self.assert_reads(m, fresh_key())
        self.assertGreater(self.stats(m)["endpoints"][0]["direct"], 0,
                           m.output())
        # The same address, a certificate that must not be trusted.
        self.restart(which)
        key = fresh_key()
        got, err, secs = read_all(m.path(key))
        self.assertIsNotNone(err, f"{key}: read succeeded\n{m.output()}")
        self.assertEqual(err.errno, errno.EIO, m.output())
        self.assertEqual(got, b"", "bytes served from an untrusted server")
        self.assertLess(secs, BOUND)
        self.assert_logged(m, r"TLS handshake with " + re.escape(host) +
                           r" on the direct path: .*" + direct_cause +
                           r".*; curl connects instead")
        line = self.assert_logged(m, read_re(key) + get_re("syn", key, "1/2"))
        self.assertRegex(line, r"curl 60 \(SSL peer certificate or SSH "
                         r"remote key was not OK\)")
        self.assertRegex(line, curl_cause)
        self.unmount(m)

    def test_another_ca_is_refused(self):
        self.refused("other_ca",
                     r"certificate verify failed \[TLS verify result 20: "
                     r"unable to get local issuer certificate\]",
                     r"unable to get local issuer certificate")

    def test_another_name_is_refused(self):
        self.refused("other_name",
                     r"certificate verify failed \[TLS verify result 64: "
                     r"IP address mismatch\]",
                     r"no alternative certificate subject name matches "
                     r"target host name '127\.0\.0\.1'")

    def test_another_name_is_refused_by_dns_name(self):
        # A name, not an address: SNI is sent and the name is checked.
        self.refused("other_name",
                     r"certificate verify failed \[TLS verify result 62: "
                     r"hostname mismatch\]",
                     r"no alternative certificate subject name matches "
                     r"target host name 'localhost'", host="localhost")

    def test_broken_bodies_fail_on_the_direct_path(self):
        m = self.mount("max_attempts=1", "retry_deadline=0")
        self.assert_reads(m, fresh_key())
        direct = r"HTTP/1\.1 \(direct\): "
        cases = [
            ({"kind": "reset", "after_bytes": 5000},
             direct + r"TLS receive: Connection reset by peer"),
            ({"kind": "truncate", "after_bytes": 5000},
             direct + r"the server closed the connection with \d+ of "
             r"\d+ body bytes to come \(partial body\)"),
            ({"kind": "drop"},
             direct + r"the server closed the connection without a "
             r"response \(empty reply\)"),
        ]
        for fault, cause in cases:
            with self.subTest(kind=fault["kind"]):
                # A clean read first: its connection is the next one's.
                self.assert_reads(m, fresh_key())
                key = fresh_key()
                self.server.faults([dict(fault, op="GET",
                                         key_regex=re.escape(key))])
                got, err, secs = read_all(m.path(key))
                self.assertIsNotNone(err, m.output())
                self.assertEqual(err.errno, errno.EIO, m.output())
                self.assertTrue(got == content("syn", key,
                                               SMALL_SIZE)[:len(got)])
                self.assert_logged(m, read_re(key) +
                                   get_re("syn", key, "1/1") + cause)
                self.server.clear_faults()
        self.assertGreater(self.stats(m)["endpoints"][0]["direct"], 0)
        self.unmount(m)


if __name__ == "__main__":
    harness.main()
