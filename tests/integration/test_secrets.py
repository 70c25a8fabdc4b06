#!/usr/bin/env python3
"""Secrets never show: the secret access key and the session token, given
through the environment or the shared credentials file, appear in no output
of bucketfs, bucketfs-index or bucketfs-doctor (stderr and stdout at debug
level, syslog), not in the daemon's /proc/PID/cmdline nor in /proc/mounts,
also on the error paths (403 SignatureDoesNotMatch with the server's
CanonicalRequest, which holds the token; a dead endpoint; a vanished
object).  Options that would carry a secret are refused without echoing
it.  The same for every credential provider (tests/credfakes): web
identity, AssumeRole from a source profile, credential_process, the
container endpoint and IMDS, with the tokens they are given, the IMDS
session token and every session key they hand out, across refreshes and
on their error paths."""

import os
import secrets
import shutil
import socket
import subprocess
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

AKID = "AKIDSECRETSTEST"
SECRET = "bfsS3cretK3y" + secrets.token_hex(10)
TOKEN = "bfsT0ken" + secrets.token_hex(16)
WRONG = "bfsWr0ngS3cret" + secrets.token_hex(10)
WEB_TOKEN = "bfsWebT0ken" + secrets.token_hex(16)
BAD_WEB_TOKEN = "bfsBadWebT0ken" + secrets.token_hex(16)
CONTAINER_TOKEN = "bfsC0ntainerT0ken" + secrets.token_hex(16)
SRC_AK = "AKIDSOURCESECRETS"
SRC_SECRET = "bfsSrcS3cret" + secrets.token_hex(10)
NEEDLES = [SECRET, TOKEN, WRONG, WEB_TOKEN, BAD_WEB_TOKEN, CONTAINER_TOKEN,
           SRC_SECRET]
ROLE = "arn:aws:iam::123456789012:role/bfs-secrets"
BODY = b"secret-free bytes\n"


class SyslogCapture:
    """Receives what the programs send to syslog(3), by binding /dev/log
    when nothing else does (there is no syslog daemon in the test
    environment); unavailable otherwise."""

    def __init__(self):
        self.lines = []
        self.sock = None
        if os.path.exists("/dev/log") or os.geteuid() != 0:
            return
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("/dev/log")
        self.sock.settimeout(0.2)
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping:
            try:
                self.lines.append(self.sock.recv(65536).decode(
                    errors="replace"))
            except socket.timeout:
                continue
            except OSError:
                break

    def text(self):
        return "\n".join(self.lines)

    def close(self):
        if not self.sock:
            return
        self.stopping = True
        self.thread.join(5)
        self.sock.close()
        os.unlink("/dev/log")
        self.sock = None


def env_keys(secret=SECRET, token=TOKEN):
    return harness.client_env(AWS_ACCESS_KEY_ID=AKID,
                              AWS_SECRET_ACCESS_KEY=secret,
                              AWS_SESSION_TOKEN=token)


def env_file(path):
    env = harness.client_env(AWS_SHARED_CREDENTIALS_FILE=path,
                             AWS_PROFILE="sec")
    del env["AWS_ACCESS_KEY_ID"]
    del env["AWS_SECRET_ACCESS_KEY"]
    return env


class SecretsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-secrets-")
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(os.path.join(cls.data, "d"))
        for name in ("a.txt", "gone.txt"):
            with open(os.path.join(cls.data, "d", name), "wb") as f:
                f.write(BODY)
        cls.syslog = SyslogCapture()
        cls.server = harness.TestServer(
            "--bucket", f"sec={cls.data}",
            "--access-key", f"{AKID}:{SECRET}:{TOKEN}",
            "--session-key", harness.CredFakes.KEY)
        cls.fakes = harness.CredFakes(
            "--web-token", WEB_TOKEN, "--container-token", CONTAINER_TOKEN,
            "--source-key", f"{SRC_AK}:{SRC_SECRET}", lifetime=4)
        cls.creds = os.path.join(cls.tmp, "credentials")
        cls.write_creds(cls.creds, SECRET)
        cls.wrong_creds = os.path.join(cls.tmp, "wrong-credentials")
        cls.write_creds(cls.wrong_creds, WRONG)

    @staticmethod
    def write_creds(path, secret):
        with open(path, "w") as f:
            f.write(f"[sec]\naws_access_key_id = {AKID}\n"
                    f"aws_secret_access_key = {secret}\n"
                    f"aws_session_token = {TOKEN}\n")
        os.chmod(path, 0o600)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        # What the fakes handed out is secret too, in syslog as anywhere.
        NEEDLES.extend(cls.fakes.secrets())
        cls.fakes.stop()
        try:
            # Last: everything the programs sent to syslog, all tests.
            text = cls.syslog.text()
            for n in NEEDLES:
                i = text.find(n)
                if i >= 0:
                    raise AssertionError(
                        "a secret is in syslog: ..."
                        f"{text[max(0, i - 300):i + len(n) + 50]}...")
        finally:
            cls.syslog.close()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def assertClean(self, text, what):
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        for n in NEEDLES + self.fakes.secrets():
            i = text.find(n)
            if i >= 0:
                self.fail(f"a secret in {what}: ..."
                          f"{text[max(0, i - 300):i + len(n) + 50]}...")

    def run_tool(self, name, *args, env, expect=None):
        r = harness.run([harness.binary(name), *args], env=env, timeout=300)
        out = (r.stdout + r.stderr).decode(errors="replace")
        self.assertClean(out, f"{name} {args}")
        if expect is not None:
            self.assertEqual(r.returncode, expect, out)
        return r.returncode, out

    # -- mounts -----------------------------------------------------------

    def mount(self, env, *opts, foreground=True):
        mnt = tempfile.mkdtemp(prefix="mnt-", dir=self.tmp)
        log = open(mnt + ".log", "wb")
        o = ",".join([f"endpoint={self.server.url}", f"index={mnt}.idx",
                      "max_attempts=2", *opts])
        args = [harness.binary("bucketfs"), *(["-d"] if foreground else []),
                "-o", o, "s3://sec", mnt]
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                env=env)
        self.addCleanup(self.cleanup_mount, mnt, proc, log)
        deadline = time.monotonic() + 60
        while not os.path.ismount(mnt):
            if proc.poll() is not None:
                if foreground or proc.returncode != 0:
                    return mnt, proc, log
            if time.monotonic() > deadline:
                self.fail("bucketfs did not mount")
            time.sleep(0.02)
        return mnt, proc, log

    def cleanup_mount(self, mnt, proc, log):
        if os.path.ismount(mnt):
            if subprocess.run(["fusermount3", "-u", mnt]).returncode:
                subprocess.run(["fusermount3", "-uz", mnt])
        harness.stop_process(proc)
        log.close()
        os.rmdir(mnt)

    def output(self, log):
        log.flush()
        with open(log.name, "rb") as f:
            return f.read()

    def daemon_pids(self, mnt):
        pids = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if mnt.encode() in cmd and b"bucketfs" in cmd:
                pids.append(int(p))
        return pids

    def check_live_mount(self, mnt):
        pids = self.daemon_pids(mnt)
        self.assertTrue(pids, "no daemon found for the mount")
        for pid in pids:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                self.assertClean(f.read(), f"/proc/{pid}/cmdline")
            # What ps shows of it (the test server's argv does hold the
            # key: it is given to it on its command line).
            r = subprocess.run(["ps", "-o", "args=", "-p", str(pid)],
                               capture_output=True)
            self.assertClean(r.stdout, f"ps of {pid}")
        with open("/proc/mounts") as f:
            self.assertClean(f.read(), "/proc/mounts")

    def exercise(self, mnt):
        """A good read, then a read of a vanished object (an error that
        logs its cause chain, at debug level with every request)."""
        with open(os.path.join(mnt, "d", "a.txt"), "rb") as f:
            self.assertEqual(f.read(), BODY)
        os.rename(os.path.join(self.data, "d", "gone.txt"),
                  os.path.join(self.data, "gone.moved"))
        try:
            with self.assertRaises(OSError):
                with open(os.path.join(mnt, "d", "gone.txt"), "rb") as f:
                    f.read()
        finally:
            os.rename(os.path.join(self.data, "gone.moved"),
                      os.path.join(self.data, "d", "gone.txt"))

    def mount_and_check(self, env):
        mnt, proc, log = self.mount(env)
        self.assertTrue(os.path.ismount(mnt), self.output(log))
        self.check_live_mount(mnt)
        self.exercise(mnt)
        self.assertEqual(subprocess.run(["fusermount3", "-u",
                                         mnt]).returncode, 0)
        self.assertEqual(proc.wait(60), 0, self.output(log))
        out = self.output(log)
        self.assertIn(b"GET s3://sec/d/gone.txt", out)
        self.assertClean(out, "bucketfs -d output")

    def test_mount_env(self):
        self.mount_and_check(env_keys())

    def test_mount_credentials_file(self):
        self.mount_and_check(env_file(self.creds))

    def test_mount_background(self):
        mnt, proc, log = self.mount(env_keys(), foreground=False)
        self.assertEqual(proc.wait(60), 0, self.output(log))
        self.assertTrue(os.path.ismount(mnt))
        self.check_live_mount(mnt)
        self.exercise(mnt)
        self.assertEqual(subprocess.run(["fusermount3", "-u",
                                         mnt]).returncode, 0)
        deadline = time.monotonic() + 30
        while self.daemon_pids(mnt) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertClean(self.output(log), "bucketfs output")
        if self.syslog.sock:
            self.assertIn("mounted s3://sec/", self.syslog.text())

    def test_mount_wrong_secret(self):
        for env in (env_keys(secret=WRONG), env_file(self.wrong_creds)):
            mnt, proc, log = self.mount(env)
            self.assertNotEqual(proc.wait(60), 0)
            out = self.output(log)
            self.assertIn(b"SignatureDoesNotMatch", out)
            self.assertClean(out, "bucketfs -d output")

    def test_mount_dead_endpoint(self):
        port = harness.free_port()
        mnt = tempfile.mkdtemp(prefix="mnt-", dir=self.tmp)
        with open(mnt + ".log", "wb") as log:
            r = subprocess.run(
                [harness.binary("bucketfs"), "-d", "-o",
                 f"endpoint=http://127.0.0.1:{port},index={mnt}.idx,"
                 "max_attempts=2,connect_timeout=1,retry_deadline=0",
                 "s3://sec", mnt],
                stdout=log, stderr=subprocess.STDOUT, env=env_keys(),
                timeout=120)
        os.rmdir(mnt)
        with open(mnt + ".log", "rb") as f:
            out = f.read()
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"127.0.0.1", out)
        self.assertClean(out, "bucketfs -d output")

    # -- the providers ----------------------------------------------------

    def provider_env(self, name, **extra):
        """An environment with no static keys and the provider @name."""
        env = harness.client_env(**extra)
        del env["AWS_ACCESS_KEY_ID"]
        del env["AWS_SECRET_ACCESS_KEY"]
        f = self.fakes.url
        if name == "web-identity":
            env.update(AWS_WEB_IDENTITY_TOKEN_FILE=self.token_file(WEB_TOKEN),
                       AWS_ROLE_ARN=ROLE, AWS_ENDPOINT_URL_STS=f)
        elif name == "assume-role":
            creds = os.path.join(self.tmp, "src-credentials")
            conf = os.path.join(self.tmp, "role-config")
            with open(creds, "w") as fh:
                fh.write(f"[src]\naws_access_key_id = {SRC_AK}\n"
                         f"aws_secret_access_key = {SRC_SECRET}\n")
            with open(conf, "w") as fh:
                fh.write(f"[default]\nrole_arn = {ROLE}\nsource_profile = src\n")
            env.update(AWS_SHARED_CREDENTIALS_FILE=creds, AWS_CONFIG_FILE=conf,
                       AWS_ENDPOINT_URL_STS=f)
        elif name == "credential-process":
            conf = os.path.join(self.tmp, "process-config")
            script = os.path.join(self.tmp, "process.sh")
            with open(script, "w") as fh:
                # Hands out the source keys: static, secret, in its stdout.
                fh.write("#!/bin/sh\nprintf '{\"Version\": 1, \"AccessKeyId\": "
                         f"\"{AKID}\", \"SecretAccessKey\": \"{SECRET}\", "
                         f"\"SessionToken\": \"{TOKEN}\"}}'\n")
            os.chmod(script, 0o700)
            with open(conf, "w") as fh:
                fh.write(f"[default]\ncredential_process = {script}\n")
            env.update(AWS_CONFIG_FILE=conf)
        elif name == "container":
            env.update(AWS_CONTAINER_CREDENTIALS_FULL_URI=f + "/container/x",
                       AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=self.token_file(
                           CONTAINER_TOKEN))
        elif name == "imds":
            del env["AWS_EC2_METADATA_DISABLED"]
            env.update(AWS_EC2_METADATA_SERVICE_ENDPOINT=f,
                       AWS_METADATA_SERVICE_TIMEOUT="10")
        return env

    def token_file(self, token):
        p = os.path.join(self.tmp, f"token-{secrets.token_hex(4)}")
        with open(p, "w") as f:
            f.write(token)
        os.chmod(p, 0o600)
        return p

    PROVIDERS = ("web-identity", "assume-role", "credential-process",
                 "container", "imds")

    def test_providers_mount(self):
        """Each provider at debug level, across two refreshes."""
        for name in self.PROVIDERS:
            with self.subTest(provider=name):
                env = self.provider_env(name)
                mnt, proc, log = self.mount(env)
                self.assertTrue(os.path.ismount(mnt), self.output(log))
                self.check_live_mount(mnt)
                self.exercise(mnt)
                if name != "credential-process":
                    # Two refreshes of 4-second credentials.
                    self.assertTrue(self.wait_log(log, b"credentials: refreshed", 2),
                                    self.output(log))
                with open(os.path.join(mnt, "d", "a.txt"), "rb") as f:
                    self.assertEqual(f.read(), BODY)
                self.assertEqual(subprocess.run(["fusermount3", "-u",
                                                 mnt]).returncode, 0)
                self.assertEqual(proc.wait(60), 0, self.output(log))
                out = self.output(log)
                self.assertIn(f"credentials: from {name} (".encode(), out)
                self.assertClean(out, f"bucketfs -d output ({name})")
                self.run_tool("bucketfs-doctor", "-v", "-o",
                              f"endpoint={self.server.url}", "s3://sec",
                              env=env, expect=0)

    def wait_log(self, log, text, count, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.output(log).count(text) >= count:
                return True
            time.sleep(0.1)
        return False

    def test_providers_errors(self):
        """The failures, which quote what went wrong, but no token."""
        cases = [("web-identity", {"AWS_WEB_IDENTITY_TOKEN_FILE":
                                   self.token_file(BAD_WEB_TOKEN)},
                  "InvalidIdentityToken"),
                 ("container", {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE":
                                self.token_file(BAD_WEB_TOKEN)}, "HTTP 401"),
                 ("assume-role", {"AWS_ENDPOINT_URL_STS":
                                  f"http://127.0.0.1:{harness.free_port()}"},
                  "curl 7")]
        for name, extra, what in cases:
            with self.subTest(provider=name):
                env = self.provider_env(name)
                env.update(extra)
                mnt, proc, log = self.mount(env)
                self.assertNotEqual(proc.wait(60), 0)
                out = self.output(log)
                self.assertIn(what.encode(), out)
                self.assertClean(out, f"bucketfs -d output ({name})")
                _, out = self.run_tool("bucketfs-doctor", "-v", "-o",
                                       f"endpoint={self.server.url}",
                                       "s3://sec", env=env, expect=1)
                self.assertIn(what, out)

    # -- tools ------------------------------------------------------------

    def test_doctor(self):
        ok = f"endpoint={self.server.url}"
        dead = f"endpoint=http://127.0.0.1:{harness.free_port()}"
        self.run_tool("bucketfs-doctor", "-v", "-o", ok, "s3://sec",
                      env=env_keys(), expect=0)
        self.run_tool("bucketfs-doctor", "-v", "-o", ok, "s3://sec",
                      env=env_file(self.creds), expect=0)
        for env in (env_keys(secret=WRONG), env_file(self.wrong_creds)):
            _, out = self.run_tool("bucketfs-doctor", "-v", "-o", ok,
                                   "s3://sec", env=env, expect=1)
            self.assertIn("SignatureDoesNotMatch", out)
        self.run_tool("bucketfs-doctor", "-v", "-o", dead, "-o",
                      "max_attempts=1,connect_timeout=1", "s3://sec",
                      env=env_keys(), expect=1)

    def test_index_tool(self):
        idx = os.path.join(self.tmp, "tool.idx")
        ok = f"endpoint={self.server.url},index={idx}"
        self.run_tool("bucketfs-index", "build", "s3://sec", "-o", ok,
                      env=env_keys(), expect=0)
        self.run_tool("bucketfs-index", "verify", "s3://sec", "-o", ok,
                      env=env_file(self.creds), expect=0)
        for env in (env_keys(secret=WRONG), env_file(self.wrong_creds)):
            rc, out = self.run_tool("bucketfs-index", "build", "s3://sec",
                                    "-o", ok, env=env)
            self.assertNotEqual(rc, 0)
            self.assertIn("SignatureDoesNotMatch", out)
        rc, _ = self.run_tool(
            "bucketfs-index", "build", "s3://sec", "-o",
            f"endpoint=http://127.0.0.1:{harness.free_port()},index={idx}"
            ",max_attempts=1,connect_timeout=1,retry_deadline=0",
            env=env_keys())
        self.assertNotEqual(rc, 0)

    # -- secrets as options -----------------------------------------------

    def test_secret_options_refused(self):
        """No option takes a secret (src/config_options.c refuses any option
        whose name looks like one, and user:password in an endpoint URL), and the
        refusal does not repeat the value."""
        mnt = tempfile.mkdtemp(prefix="mnt-", dir=self.tmp)
        self.addCleanup(os.rmdir, mnt)
        bad = [f"secret_access_key={SECRET}", f"aws_session_token={TOKEN}",
               f"password={SECRET}", f"x-credentials={SECRET}",
               f"endpoint=http://{AKID}:{SECRET}@127.0.0.1:1"]
        for opt in bad:
            r = harness.run([harness.binary("bucketfs"), "-f", "-o", opt,
                             "s3://sec", mnt], env=env_keys(), timeout=60)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertFalse(os.path.ismount(mnt))
            self.assertClean(r.stdout + r.stderr, f"bucketfs -o {opt}")
            for tool in ("bucketfs-doctor", "bucketfs-index"):
                args = ["build"] if tool == "bucketfs-index" else []
                rc, _ = self.run_tool(tool, *args, "-o", opt, "s3://sec",
                                      env=env_keys())
                self.assertEqual(rc, 2, f"{tool} -o {opt}")


if __name__ == "__main__":
    harness.main()
