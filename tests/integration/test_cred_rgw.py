#!/usr/bin/env python3
"""Ceph RGW's own STS: a profile with role_arn and source_profile assumes
a role through RGW's AssumeRole (SigV4-signed with the user's keys), and
the session credentials it issues mount and read.  A role that does not
exist ends in one clear line with RGW's error code.  (RGW issues sessions
of 900 s at least, so the expiries themselves are tested against the
fakes, in test_cred_providers.)"""

import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

BODY = b"assumed through RGW STS\n"


class RgwStsTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-rgwsts-")
        cls.server = cls.rgw = harness.RGW("bfs-sts")
        s = harness.Signer(cls.rgw.url, cls.rgw.AK, cls.rgw.SK)
        s.check("PUT", s.request("PUT", f"/{cls.rgw.bucket}/train/a.txt", BODY))
        s.close()
        cls.role = f"bfs-sts-{os.getpid()}"
        trust = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": ["sts:AssumeRole"],
            "Principal": {"AWS": ["arn:aws:iam:::user/bucketfs"]}}]}
        allow = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": ["s3:*"], "Resource": "arn:aws:s3:::*"}]}
        for args in (("caps", "add", "--uid=bucketfs", "--caps=roles=*"),
                     ("role", "create", f"--role-name={cls.role}", "--path=/",
                      "--assume-role-policy-doc=" + json.dumps(trust)),
                     ("role-policy", "put", f"--role-name={cls.role}",
                      "--policy-name=s3all", "--policy-doc=" + json.dumps(allow))):
            r = cls.rgw.admin(*args)
            if r.returncode != 0:
                raise RuntimeError(f"radosgw-admin {args[:2]}: {r.stderr}")

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "role", None) and cls.rgw.state:
            cls.rgw.admin("role-policy", "delete", f"--role-name={cls.role}",
                          "--policy-name=s3all")
            cls.rgw.admin("role", "delete", f"--role-name={cls.role}")
        super().tearDownClass()

    def setUp(self):
        self.mounts = []
        self.procs = []

    def env(self, role):
        creds = os.path.join(self.tmp, "credentials")
        conf = os.path.join(self.tmp, f"config-{role}")
        with open(creds, "w") as f:
            f.write(f"[src]\naws_access_key_id = {self.rgw.AK}\n"
                    f"aws_secret_access_key = {self.rgw.SK}\n")
        with open(conf, "w") as f:
            f.write(f"[profile rgw]\nrole_arn = arn:aws:iam:::role/{role}\n"
                    "source_profile = src\nrole_session_name = bfs-test\n"
                    "duration_seconds = 900\n")
        env = harness.client_env(AWS_SHARED_CREDENTIALS_FILE=creds,
                                 AWS_CONFIG_FILE=conf,
                                 AWS_ENDPOINT_URL_STS=self.rgw.url)
        del env["AWS_ACCESS_KEY_ID"]
        del env["AWS_SECRET_ACCESS_KEY"]
        return env

    def mount(self, role, may_fail=False):
        n = len(self.mounts)
        m = harness.Mount(f"s3://{self.rgw.bucket}/train/", self.rgw.url,
                          os.path.join(self.tmp, f"{role}-{n}.idx"), "profile=rgw",
                          log=os.path.join(self.tmp, f"{role}-{n}.log"),
                          env=self.env(role), may_fail=may_fail)
        if m.failed is None:
            self.mounts.append(m)
        return m

    def test_assume_role(self):
        m = self.mount(self.role)
        with open(m.path("a.txt"), "rb") as f:
            self.assertEqual(f.read(), BODY)
        out = m.output()
        self.assertIn(f"credentials: from assume-role (STS AssumeRole via "
                      f"{self.rgw.url}, role arn:aws:sts:::assumed-role/"
                      f"{self.role}/bfs-test); they expire in ", out)
        self.assertNotIn(self.rgw.SK, out)
        self.unmount(m)

    def test_no_such_role(self):
        m = self.mount("bfs-no-such-role", may_fail=True)
        self.assertIsNotNone(m.failed)
        lines = [x for x in m.output().splitlines() if "cannot mount" in x]
        self.assertEqual(len(lines), 1, m.output())
        self.assertIn(f"STS AssumeRole via {self.rgw.url}: HTTP 404 "
                      "NoSuchEntity", lines[0])
        self.assertFalse(lines[0].endswith(": "), lines[0])


if __name__ == "__main__":
    harness.main()
