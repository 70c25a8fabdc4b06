#!/usr/bin/env python3
"""The credential providers, against the fakes of tests/credfakes (IMDSv2,
the container endpoint, STS) whose session credentials expire after a few
seconds, and the test S3 server, which refuses them with 400 ExpiredToken
once they have.

Each provider mounts and reads under a continuous load across at least
two expiries with no failed read; each failure (IMDS down, a bad token,
an STS error, a credential_process that fails, a rotated token file) ends
in one clear line, and no provider that was not asked for is reached."""

import hashlib
import os
import socket
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

LIFETIME = 4
FILES = 100
SIZE = 4096
SRC_AK = "AKIDSOURCEKEYS"
SRC_SK = "source-secret-key"
ROLE = "arn:aws:iam::123456789012:role/bfs-test"
# The fake IMDS on a loaded machine (sanitizers) may take over the
# default 1 s: the SDKs' own variable gives it more.
SLOW_IMDS_OK = {"AWS_METADATA_SERVICE_TIMEOUT": "10"}


def base_env(**extra):
    """No static keys, no IMDS: each test adds the provider it asks for."""
    env = harness.client_env(**extra)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(k, None)
    return env


def signed_get(url, ak, sk, token):
    """(status, body) of a GET signed by botocore with a session token."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    req = AWSRequest(method="GET", url=url, headers={
        "X-Amz-Content-SHA256": hashlib.sha256(b"").hexdigest()})
    S3SigV4Auth(Credentials(ak, sk, token), "s3", "us-east-1").add_auth(req)
    r = urllib.request.Request(url, headers=dict(req.headers.items()))
    try:
        with urllib.request.urlopen(r, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Blackhole:
    """A loopback port that accepts connections and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]

    def close(self):
        self.sock.close()


class ProviderTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-credtest-")
        cls.server = harness.TestServer(
            "--session-key", harness.CredFakes.KEY,
            "--synthetic", f"dset:{FILES}:{SIZE}")

    def setUp(self):
        super().setUp()
        self.fakes = harness.CredFakes(
            "--web-token", "web-token-1", "--container-token", "ctok-1",
            "--source-key", f"{SRC_AK}:{SRC_SK}", lifetime=LIFETIME)
        self.addCleanup(self.fakes.stop)
        self.n = 0

    def write(self, name, text, mode=0o600):
        p = os.path.join(self.tmp, f"{self.id().rsplit('.', 1)[-1]}-{name}")
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, mode)
        return p

    def mount(self, env, *opts, may_fail=False):
        self.n += 1
        m = harness.Mount("s3://dset/train/", self.server.url,
                          os.path.join(self.tmp, f"{self.id()}-{self.n}.idx"),
                          "direct_io=all", *opts,
                          log=os.path.join(self.tmp, f"{self.id()}-{self.n}.log"),
                          env=env, may_fail=may_fail)
        if m.failed is None:
            self.mounts.append(m)
        return m

    def read_load(self, m, expiries=2):
        """Reads files in a loop from two threads until the fakes issued
        @expiries more credentials; returns (reads, errors)."""
        stop = threading.Event()
        errors = []
        reads = [0]
        lock = threading.Lock()

        def reader(k):
            i = k
            while not stop.is_set():
                p = m.path(f"img_{i % FILES:03d}_of_{FILES}.jpeg")
                try:
                    with open(p, "rb") as f:
                        data = f.read()
                    if len(data) != SIZE:
                        raise OSError(f"{p}: {len(data)} bytes")
                except OSError as e:
                    with lock:
                        errors.append(str(e))
                with lock:
                    reads[0] += 1
                i += 2

        start = self.fakes.issued()
        threads = [threading.Thread(target=reader, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30 * expiries * LIFETIME
        while (self.fakes.issued() < start + expiries and
               time.monotonic() < deadline):
            time.sleep(0.2)
        # One more lifetime with the last credentials.
        time.sleep(LIFETIME)
        stop.set()
        for t in threads:
            t.join(60)
        self.assertGreaterEqual(self.fakes.issued(), start + expiries,
                                "the credentials were not refreshed")
        return reads[0], errors

    def check_provider(self, env, provider, kinds, opts=()):
        m = self.mount(env, *opts)
        reads, errors = self.read_load(m)
        self.assertEqual(errors, [], m.output())
        self.assertGreater(reads, 20)
        out = m.output()
        self.assertIn(f"credentials: from {provider} (", out)
        self.assertIn(f"credentials: refreshed from {provider} (", out)
        self.assertNotIn("refresh failed", out)
        self.assertEqual(set(self.fakes.requests()), set(kinds),
                         "a provider that was not asked for was reached")
        self.unmount(m)
        return out

    # -- each provider mounts and reads across expiries -------------------

    def test_imds(self):
        env = base_env(AWS_EC2_METADATA_SERVICE_ENDPOINT=self.fakes.url,
                       **SLOW_IMDS_OK)
        del env["AWS_EC2_METADATA_DISABLED"]
        # No region given: IMDS is asked for that too.
        out = self.check_provider(env, "imds",
                                  {"imds-token", "imds-role", "imds-creds",
                                   "imds-region"})
        self.assertIn("role bfs-instance-role", out)

    def test_web_identity(self):
        tok = self.write("token", "web-token-1\n")
        env = base_env(AWS_WEB_IDENTITY_TOKEN_FILE=tok, AWS_ROLE_ARN=ROLE,
                       AWS_ROLE_SESSION_NAME="bfs-session",
                       AWS_ENDPOINT_URL_STS=self.fakes.url)
        out = self.check_provider(env, "web-identity",
                                  {"sts:AssumeRoleWithWebIdentity"})
        self.assertIn("assumed-role/bfs-test/bfs-session", out)

    def test_container_full_uri_token_file(self):
        tok = self.write("ctoken", "ctok-1")
        env = base_env(
            AWS_CONTAINER_CREDENTIALS_FULL_URI=self.fakes.url + "/container/c",
            AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=tok)
        self.check_provider(env, "container", {"container"})

    def test_container_token_variable(self):
        env = base_env(
            AWS_CONTAINER_CREDENTIALS_FULL_URI=self.fakes.url + "/container/c",
            AWS_CONTAINER_AUTHORIZATION_TOKEN="ctok-1")
        self.check_provider(env, "container", {"container"})

    def test_assume_role_source_profile(self):
        creds = self.write("credentials", f"[src]\naws_access_key_id = {SRC_AK}\n"
                           f"aws_secret_access_key = {SRC_SK}\n")
        conf = self.write("config", f"[profile dev]\nrole_arn = {ROLE}\n"
                          "source_profile = src\nrole_session_name = desk\n")
        env = base_env(AWS_SHARED_CREDENTIALS_FILE=creds, AWS_CONFIG_FILE=conf,
                       AWS_ENDPOINT_URL_STS=self.fakes.url)
        out = self.check_provider(env, "assume-role", {"sts:AssumeRole"},
                                  opts=("profile=dev",))
        self.assertIn(f"role {ROLE.replace(':role/', ':assumed-role/')}/desk",
                      out)

    def test_assume_role_credential_source_environment(self):
        conf = self.write("config", f"[default]\nrole_arn = {ROLE}\n"
                          "credential_source = Environment\n")
        env = base_env(AWS_CONFIG_FILE=conf, AWS_ENDPOINT_URL_STS=self.fakes.url)
        # The source keys are in the environment, so the environment
        # provider would answer first: name the profile.
        env.update(AWS_ACCESS_KEY_ID=SRC_AK, AWS_SECRET_ACCESS_KEY=SRC_SK)
        self.check_provider(env, "assume-role", {"sts:AssumeRole"},
                            opts=("profile=default",))

    def test_profile_web_identity_token_file(self):
        tok = self.write("token", "web-token-1")
        conf = self.write("config", f"[default]\nrole_arn = {ROLE}\n"
                          f"web_identity_token_file = {tok}\n")
        env = base_env(AWS_CONFIG_FILE=conf, AWS_ENDPOINT_URL_STS=self.fakes.url)
        self.check_provider(env, "web-identity",
                            {"sts:AssumeRoleWithWebIdentity"})

    def process_script(self, body):
        return self.write("process.py", "#!/usr/bin/python3\nimport sys\n"
                          f"sys.path.insert(0, {os.path.join(harness.SRC, 'tests', 'credfakes')!r})\n"
                          + body, mode=0o700)

    def test_credential_process(self):
        count = os.path.join(self.tmp, "process-count")
        script = self.process_script(
            "import json, time, secrets, credfakes as c\n"
            f"open({count!r}, 'a').write('x')\n"
            "ak = 'ASIA' + secrets.token_hex(8).upper()\n"
            f"exp = int(time.time()) + {LIFETIME}\n"
            f"k = {harness.CredFakes.KEY!r}\n"
            "print(json.dumps({'Version': 1, 'AccessKeyId': ak,\n"
            "  'SecretAccessKey': c.session_secret(k, ak),\n"
            "  'SessionToken': c.session_token(k, ak, exp),\n"
            "  'Expiration': c.iso(exp)}))\n")
        conf = self.write("config", f"[default]\ncredential_process = {script} --x\n")
        env = base_env(AWS_CONFIG_FILE=conf)
        m = self.mount(env)
        before = os.path.getsize(count)
        stop_at = time.monotonic() + 120
        errors = []
        while os.path.getsize(count) < before + 3 and time.monotonic() < stop_at:
            for i in range(FILES):
                try:
                    with open(m.path(f"img_{i:03d}_of_{FILES}.jpeg"), "rb") as f:
                        self.assertEqual(len(f.read()), SIZE)
                except OSError as e:
                    errors.append(str(e))
        self.assertGreaterEqual(os.path.getsize(count), before + 3)
        self.assertEqual(errors, [], m.output())
        out = m.output()
        self.assertIn("credentials: refreshed from credential-process "
                      f"(credential_process '{script}' of profile 'default')",
                      out)
        self.assertNotIn("--x", out)
        self.assertEqual(self.fakes.requests(), [])
        self.unmount(m)

    def test_server_refuses_expired_session(self):
        """The server really checks: a session past its expiry is
        refused with ExpiredToken, a forged token with InvalidToken."""
        import credfakes as c
        k = harness.CredFakes.KEY
        for exp, forged, code in ((int(time.time()) - 1, False, "ExpiredToken"),
                                  (int(time.time()) + 60, True, "InvalidToken")):
            ak = "ASIAEXPIREDTEST0"
            token = c.session_token(k, ak, exp)
            if forged:
                token = token[:-4] + "0000"
            status, body = signed_get(self.server.url + "/dset?list-type=2",
                                      ak, c.session_secret(k, ak), token)
            self.assertIn(f"<Code>{code}</Code>", body.decode(), body)
            self.assertEqual(status, 400 if code == "ExpiredToken" else 403)
        # And a valid one passes.
        ak = "ASIAVALIDTEST000"
        exp = int(time.time()) + 60
        status, body = signed_get(self.server.url + "/dset?list-type=2", ak,
                                  c.session_secret(k, ak),
                                  c.session_token(k, ak, exp))
        self.assertEqual(status, 200, body)

    # -- failures -----------------------------------------------------------

    def assert_one_line(self, out, text):
        lines = [line for line in out.splitlines() if text in line]
        self.assertEqual(len(lines), 1, out)
        return lines[0]

    def test_imds_down_no_wait(self):
        """A host whose IMDS never answers: the chain ends within about a
        second per step, and says so; with keys in the environment, IMDS
        is not even asked."""
        hole = Blackhole()
        self.addCleanup(hole.close)
        env = base_env(AWS_EC2_METADATA_SERVICE_ENDPOINT=hole.url,
                       AWS_REGION="us-east-1")
        del env["AWS_EC2_METADATA_DISABLED"]
        t0 = time.monotonic()
        m = self.mount(env, may_fail=True)
        elapsed = time.monotonic() - t0
        self.assertIsNotNone(m.failed)
        line = self.assert_one_line(m.output(), "cannot mount")
        self.assertIn("no credentials found", line)
        self.assertRegex(line, r"IMDS: PUT http://127\.0\.0\.1:\d+/latest/api/"
                         r"token: curl 28 \(Timeout was reached\)")
        self.assertLess(elapsed, 30)  # 1 s per fetch, twice; generous
        # Keys in the environment: IMDS is not asked for credentials,
        # and the region, which nobody gave, falls back to the default
        # after IMDS's timeout.
        env.update(AWS_ACCESS_KEY_ID=harness.AK,
                   AWS_SECRET_ACCESS_KEY=harness.SK)
        del env["AWS_REGION"]
        r, out = self.doctor(env)
        self.assertEqual(r.returncode, 0, out)
        self.assertRegex(out, r"region: +us-east-1 \(default; no region from "
                         r"IMDS: PUT http://127\.0\.0\.1:\d+/latest/api/token: "
                         r"curl 28 \(Timeout was reached\)")
        self.assertIn("✓ credentials: environment", out)
        m = self.mount(env)
        with open(m.path(f"img_000_of_{FILES}.jpeg"), "rb") as f:
            self.assertEqual(len(f.read()), SIZE)
        self.assertIn("credentials: from environment", m.output())
        self.unmount(m)

    def test_imds_no_role(self):
        self.fakes.config(imds_role=None)
        env = base_env(AWS_EC2_METADATA_SERVICE_ENDPOINT=self.fakes.url,
                       **SLOW_IMDS_OK)
        del env["AWS_EC2_METADATA_DISABLED"]
        m = self.mount(env, may_fail=True)
        self.assertIsNotNone(m.failed)
        line = self.assert_one_line(m.output(), "cannot mount")
        self.assertIn("IMDS: no role attached to this instance", line)

    def test_bad_web_identity_token(self):
        tok = self.write("token", "not-the-token")
        env = base_env(AWS_WEB_IDENTITY_TOKEN_FILE=tok, AWS_ROLE_ARN=ROLE,
                       AWS_ENDPOINT_URL_STS=self.fakes.url,
                       AWS_CONTAINER_CREDENTIALS_FULL_URI=self.fakes.url + "/container/c")
        m = self.mount(env, may_fail=True)
        self.assertIsNotNone(m.failed)
        line = self.assert_one_line(m.output(), "cannot mount")
        self.assertIn("STS AssumeRoleWithWebIdentity via "
                      f"{self.fakes.url}: HTTP 400 InvalidIdentityToken: "
                      "Couldn't verify the web identity token", line)
        self.assertNotIn("not-the-token", m.output())
        # The container endpoint was configured, but not asked.
        self.assertEqual(set(self.fakes.requests()),
                         {"sts:AssumeRoleWithWebIdentity"})

    def test_bad_container_token(self):
        env = base_env(
            AWS_CONTAINER_CREDENTIALS_FULL_URI=self.fakes.url + "/container/c",
            AWS_CONTAINER_AUTHORIZATION_TOKEN="wrong-ctoken")
        m = self.mount(env, may_fail=True)
        line = self.assert_one_line(m.output(), "cannot mount")
        self.assertIn(f"container: GET {self.fakes.url}/container/c: HTTP 401",
                      line)
        self.assertNotIn("wrong-ctoken", m.output())

    def test_sts_error(self):
        self.fakes.config(sts_error=[403, "AccessDenied",
                                     "User is not authorized to perform: sts:AssumeRole"])
        creds = self.write("credentials", f"[src]\naws_access_key_id = {SRC_AK}\n"
                           f"aws_secret_access_key = {SRC_SK}\n")
        conf = self.write("config", f"[default]\nrole_arn = {ROLE}\nsource_profile = src\n")
        env = base_env(AWS_SHARED_CREDENTIALS_FILE=creds, AWS_CONFIG_FILE=conf,
                       AWS_ENDPOINT_URL_STS=self.fakes.url)
        m = self.mount(env, may_fail=True)
        line = self.assert_one_line(m.output(), "cannot mount")
        self.assertIn(f"STS AssumeRole via {self.fakes.url}: HTTP 403 "
                      "AccessDenied: User is not authorized to perform: "
                      "sts:AssumeRole", line)
        self.assertIn(f"with the credentials from profile 'src' in {creds}", line)
        self.assertEqual(set(self.fakes.requests()), {"sts:AssumeRole"})

    def test_refresh_failure_keeps_credentials(self):
        """STS fails while mounted: the current credentials stay in use
        while valid, the cause is logged once, and the next success says
        it recovered."""
        fakes = harness.CredFakes("--web-token", "w", lifetime=20)
        self.addCleanup(fakes.stop)
        tok = self.write("token", "w")
        env = base_env(AWS_WEB_IDENTITY_TOKEN_FILE=tok, AWS_ROLE_ARN=ROLE,
                       AWS_ENDPOINT_URL_STS=fakes.url)
        m = self.mount(env)
        fakes.config(sts_error=[503, "ServiceUnavailable", "try later"])
        self.assertTrue(m.wait_output("refresh failed", 60), m.output())
        with open(m.path(f"img_001_of_{FILES}.jpeg"), "rb") as f:
            self.assertEqual(len(f.read()), SIZE)
        time.sleep(2.5)  # further attempts fail and stay quiet
        fakes.config(sts_error=None)
        self.assertTrue(m.wait_output("failed attempts", 60), m.output())
        out = m.output()
        line = self.assert_one_line(out, "refresh failed")
        self.assertIn("keeping the current ones", line)
        self.assertIn("HTTP 503 ServiceUnavailable: try later", line)
        self.unmount(m)

    def test_credential_process_fails(self):
        script = self.process_script(
            "sys.stderr.write('no session for you\\n')\nsys.exit(3)\n")
        conf = self.write("config", f"[default]\ncredential_process = {script}\n")
        env = base_env(AWS_CONFIG_FILE=conf,
                       AWS_CONTAINER_CREDENTIALS_FULL_URI=self.fakes.url + "/container/c")
        m = self.mount(env, may_fail=True)
        line = self.assert_one_line(m.output(), "cannot mount")
        self.assertIn(f"credential_process '{script}' of profile 'default' "
                      "exited with status 3: no session for you", line)
        self.assertEqual(self.fakes.requests(), [])

    def test_rotated_token_file(self):
        """Kubernetes rewrites the token file: each refresh reads it again."""
        tok = self.write("token", "web-token-1")
        env = base_env(AWS_WEB_IDENTITY_TOKEN_FILE=tok, AWS_ROLE_ARN=ROLE,
                       AWS_ENDPOINT_URL_STS=self.fakes.url)
        m = self.mount(env)
        reads, errors = self.read_load(m, expiries=1)
        # As with Kubernetes, the old token stays valid for a while
        # after the new one is written.
        self.fakes.config(web_token=["web-token-1", "web-token-2"])
        tmp = tok + ".new"
        with open(tmp, "w") as f:
            f.write("web-token-2")
        os.replace(tmp, tok)  # as the kubelet does: a new file
        more, errors2 = self.read_load(m, expiries=1)
        # Now only the new one: the refreshes must have read the file again.
        self.fakes.config(web_token="web-token-2")
        last, errors3 = self.read_load(m, expiries=2)
        errors2 += errors3
        self.assertEqual(errors + errors2, [], m.output())
        self.assertNotIn("refresh failed", m.output())
        self.assertNotIn("web-token-2", m.output())
        self.unmount(m)

    def doctor(self, env):
        r = harness.run([harness.binary("bucketfs-doctor"), "-o",
                         f"endpoint={self.server.url}", "s3://dset/train/"],
                        env=env)
        return r, r.stdout.decode()

    def test_doctor_names_provider(self):
        tok = self.write("token", "web-token-1")
        env = base_env(AWS_WEB_IDENTITY_TOKEN_FILE=tok, AWS_ROLE_ARN=ROLE,
                       AWS_ENDPOINT_URL_STS=self.fakes.url)
        r, out = self.doctor(env)
        self.assertEqual(r.returncode, 0, out + r.stderr.decode())
        self.assertIn("✓ credentials: web-identity: STS AssumeRoleWithWebIdentity", out)
        self.assertIn("assumed-role/bfs-test/", out)
        self.assertRegex(out, r"expire in \d+ s")
        self.assertIn("· environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                      "not set", out)
        # A failing step, with its cause.
        with open(tok, "w") as f:
            f.write("bad")
        r, out = self.doctor(env)
        self.assertEqual(r.returncode, 1, out)
        self.assertRegex(out, r"✗ credentials: .*STS AssumeRoleWithWebIdentity "
                         r"via \S+: HTTP 400 InvalidIdentityToken: ")

    def test_region_from_imds(self):
        """No region given: the instance's.  Here it is not the bucket's,
        and the doctor says which region to use."""
        fakes = harness.CredFakes("--region", "eu-west-3")
        self.addCleanup(fakes.stop)
        env = base_env(AWS_EC2_METADATA_SERVICE_ENDPOINT=fakes.url, **SLOW_IMDS_OK)
        del env["AWS_EC2_METADATA_DISABLED"]
        r, out = self.doctor(env)
        self.assertEqual(r.returncode, 1, out)
        self.assertIn("region:           eu-west-3 (EC2 instance metadata (IMDS))", out)
        self.assertIn("✓ credentials: imds: EC2 instance metadata", out)
        self.assertRegex(out, r"✗ ListObjectsV2 .*AuthorizationHeaderMalformed.*"
                         r"\[the bucket is in region 'us-east-1'; use -o "
                         r"region=us-east-1\]")
        m = self.mount(env, may_fail=True)
        self.assertIsNotNone(m.failed)
        line = self.assert_one_line(m.output(), "cannot mount")
        self.assertIn("use -o region=us-east-1", line)


sys.path.insert(0, os.path.join(harness.SRC, "tests", "credfakes"))

if __name__ == "__main__":
    harness.main()
