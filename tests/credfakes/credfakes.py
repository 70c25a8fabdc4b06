#!/usr/bin/env python3
"""Fakes of the AWS credential endpoints, for the tests, on one port:

  * EC2 instance metadata, IMDSv2 only: PUT /latest/api/token (with
    X-aws-ec2-metadata-token-ttl-seconds), then with X-aws-ec2-metadata-token
    GET /latest/meta-data/iam/security-credentials/[ROLE] and
    GET /latest/meta-data/placement/region;
  * the container credentials endpoint: GET /container/<anything>, with the
    Authorization header checked when --container-token is set;
  * STS: POST / with a form: Action=AssumeRoleWithWebIdentity (unsigned; the
    WebIdentityToken must be the current --web-token) and Action=AssumeRole
    (SigV4 for service sts, verified with the --source-key keys).

Credentials it issues expire after --lifetime seconds and are stateless:
the access key id is ASIA + random, its secret and session token are HMACs
of --session-key, and the token carries its expiry.  The test S3 server,
given the same --session-key, derives the secret from the access key id,
checks the token's HMAC and answers 400 ExpiredToken once it has expired.

Control (JSON): GET /_fake/secrets (every secret key, session token and
IMDS token it handed out, for test_secrets), GET /_fake/requests (what was asked, in order: "imds-token",
"imds-role", "imds-creds", "imds-region", "container", "sts:<Action>"),
POST /_fake/requests/reset, POST /_fake/config with any of web_token (one, or a list of the valid ones),
container_token, imds_role (null: no role attached), sts_error ([status,
code, message] or null), lifetime.  Prints "listening on http://HOST:PORT".
No secret it issues appears in its own output.
"""

import argparse
import base64
import hashlib
import hmac
import json
import secrets
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_PREFIX = "bfs1"


def session_secret(key, ak):
    return base64.b64encode(hmac.new(key.encode(), b"sk:" + ak.encode(),
                                     hashlib.sha256).digest()).decode()


def session_token(key, ak, expires):
    mac = hmac.new(key.encode(), ("tok:%s:%d" % (ak, expires)).encode(),
                   hashlib.sha256).hexdigest()
    return "%s.%d.%s" % (TOKEN_PREFIX, expires, mac)


def check_session(key, ak, token, now):
    """For the S3 server: (secret, None) for a valid token, (None, code)
    otherwise, code being InvalidToken or ExpiredToken."""
    parts = (token or "").split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1].isdigit():
        return None, "InvalidToken"
    expires = int(parts[1])
    if not hmac.compare_digest(session_token(key, ak, expires), token):
        return None, "InvalidToken"
    if now >= expires:
        return None, "ExpiredToken"
    return session_secret(key, ak), None


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class State:
    def __init__(self, args):
        self.lock = threading.Lock()
        self.key = args.session_key
        self.lifetime = args.lifetime
        self.imds_role = args.imds_role
        self.region = args.region
        self.web_token = args.web_token
        self.container_token = args.container_token
        self.source_keys = dict(k.split(":", 1) for k in args.source_key)
        self.sts_error = None
        self.imds_tokens = set()
        self.requests = []
        self.issued = 0
        self.secrets = []       # all it handed out, for test_secrets

    def issue(self):
        ak = "ASIA" + secrets.token_hex(8).upper()
        expires = int(time.time()) + self.lifetime
        c = {"AccessKeyId": ak,
             "SecretAccessKey": session_secret(self.key, ak),
             "Token": session_token(self.key, ak, expires),
             "Expiration": iso(expires)}
        with self.lock:
            self.issued += 1
            self.secrets += [c["SecretAccessKey"], c["Token"]]
        return c


def sigv4_verify(state, method, path, headers, body, region):
    """'' when the Authorization of an STS request verifies, else why."""
    auth = headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "MissingAuthenticationToken", "Request is missing Authentication Token"
    fields = dict(p.strip().split("=", 1) for p in auth[17:].split(","))
    ak, date, reg, service, term = fields["Credential"].split("/")
    if ak not in state.source_keys:
        return "InvalidClientTokenId", "The security token included in the request is invalid."
    if service != "sts" or reg != region or term != "aws4_request":
        return "SignatureDoesNotMatch", "Credential scope is wrong: %s/%s" % (reg, service)
    signed = fields["SignedHeaders"].split(";")
    canon_headers = "".join("%s:%s\n" % (h, " ".join(headers.get(h, "").split()))
                            for h in signed)
    payload = hashlib.sha256(body).hexdigest()
    if headers.get("x-amz-content-sha256", payload) != payload:
        return "SignatureDoesNotMatch", "x-amz-content-sha256 does not match the body"
    canonical = "\n".join([method, path, "", canon_headers, fields["SignedHeaders"], payload])
    amz_date = headers.get("x-amz-date", "")
    sts = "AWS4-HMAC-SHA256\n%s\n%s/%s/sts/aws4_request\n%s" % (
        amz_date, date, reg, hashlib.sha256(canonical.encode()).hexdigest())
    k = ("AWS4" + state.source_keys[ak]).encode()
    for part in (date, reg, "sts", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    want = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, fields["Signature"]):
        return "SignatureDoesNotMatch", ("The request signature we calculated does not "
                                         "match the signature you provided.")
    return ""


def sts_error_xml(code, message):
    return ("<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
            "<Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error>"
            "<RequestId>fake-%s</RequestId></ErrorResponse>"
            % (code, message, secrets.token_hex(4))).encode()


def sts_ok_xml(action, creds, role_arn, session):
    c = creds
    return ("<{a}Response xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
            "<{a}Result><Credentials><AccessKeyId>{ak}</AccessKeyId>"
            "<SecretAccessKey>{sk}</SecretAccessKey><SessionToken>{tok}</SessionToken>"
            "<Expiration>{exp}</Expiration></Credentials>"
            "<AssumedRoleUser><Arn>{arn}/{s}</Arn><AssumedRoleId>AROAFAKE:{s}</AssumedRoleId>"
            "</AssumedRoleUser></{a}Result><ResponseMetadata><RequestId>fake</RequestId>"
            "</ResponseMetadata></{a}Response>").format(
                a=action, ak=c["AccessKeyId"], sk=c["SecretAccessKey"], tok=c["Token"],
                exp=c["Expiration"], arn=role_arn.replace(":role/", ":assumed-role/"),
                s=session).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body=b"", ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def record(self, kind):
        with self.state.lock:
            self.state.requests.append(kind)

    def body(self):
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def do_PUT(self):
        body = self.body()
        del body
        if self.path == "/latest/api/token":
            self.record("imds-token")
            if not self.headers.get("x-aws-ec2-metadata-token-ttl-seconds"):
                return self.reply(400)
            tok = "imdstok-" + secrets.token_hex(12)
            with self.state.lock:
                self.state.imds_tokens.add(tok)
                self.state.secrets.append(tok)
            return self.reply(200, tok.encode(), "text/plain")
        self.reply(404)

    def do_GET(self):
        st = self.state
        if self.path == "/_fake/requests":
            with st.lock:
                out = {"requests": list(st.requests), "issued": st.issued}
            return self.reply(200, json.dumps(out).encode())
        if self.path == "/_fake/secrets":
            with st.lock:
                out = list(st.secrets)
            return self.reply(200, json.dumps(out).encode())
        if self.path.startswith("/latest/"):
            return self.imds()
        if self.path.startswith("/container/"):
            self.record("container")
            want = st.container_token
            if want is not None and self.headers.get("authorization") != want:
                return self.reply(401, b'{"message":"invalid authorization token"}')
            return self.reply(200, json.dumps(st.issue()).encode())
        self.reply(404)

    def imds(self):
        st = self.state
        prefix = "/latest/meta-data/iam/security-credentials/"
        kind = ("imds-region" if self.path == "/latest/meta-data/placement/region"
                else "imds-role" if self.path == prefix else "imds-creds")
        self.record(kind)
        with st.lock:
            ok = self.headers.get("x-aws-ec2-metadata-token") in st.imds_tokens
        if not ok:
            return self.reply(401, b"", "text/plain")
        if kind == "imds-region":
            return self.reply(200, st.region.encode(), "text/plain")
        if st.imds_role is None or (kind == "imds-creds" and
                                    self.path != prefix + st.imds_role):
            return self.reply(404, b"", "text/plain")
        if kind == "imds-role":
            return self.reply(200, st.imds_role.encode(), "text/plain")
        c = dict(st.issue(), Code="Success", Type="AWS-HMAC",
                 LastUpdated=iso(time.time()))
        self.reply(200, json.dumps(c).encode())

    def do_POST(self):
        st = self.state
        body = self.body()
        if self.path == "/_fake/requests/reset":
            with st.lock:
                st.requests.clear()
            return self.reply(200, b"{}")
        if self.path == "/_fake/config":
            cfg = json.loads(body or b"{}")
            with st.lock:
                for k, v in cfg.items():
                    if k not in ("web_token", "container_token", "imds_role",
                                 "sts_error", "lifetime"):
                        return self.reply(400, b'{"error":"unknown key"}')
                    setattr(st, k, v)
            return self.reply(200, b"{}")
        if self.path != "/":
            return self.reply(404)
        form = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode()).items()}
        action = form.get("Action", "")
        self.record("sts:" + action)
        if st.sts_error:
            status, code, message = st.sts_error
            return self.reply(status, sts_error_xml(code, message), "text/xml")
        if form.get("Version") != "2011-06-15" or "RoleArn" not in form:
            return self.reply(400, sts_error_xml("MissingParameter", "RoleArn or Version"),
                              "text/xml")
        session = form.get("RoleSessionName", "")
        if action == "AssumeRoleWithWebIdentity":
            if "authorization" in self.headers:
                return self.reply(400, sts_error_xml("InvalidAction", "signed"), "text/xml")
            valid = st.web_token if isinstance(st.web_token, list) else [st.web_token]
            if form.get("WebIdentityToken") not in valid:
                return self.reply(400, sts_error_xml(
                    "InvalidIdentityToken", "Couldn't verify the web identity token"),
                    "text/xml")
        elif action == "AssumeRole":
            headers = {k.lower(): v for k, v in self.headers.items()}
            why = sigv4_verify(st, "POST", "/", headers, body, st.region)
            if why:
                return self.reply(403, sts_error_xml(*why), "text/xml")
        else:
            return self.reply(400, sts_error_xml("InvalidAction", "unknown action"),
                              "text/xml")
        self.reply(200, sts_ok_xml(action, st.issue(), form["RoleArn"], session),
                   "text/xml")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--session-key", required=True)
    p.add_argument("--lifetime", type=int, default=4)
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--imds-role", default="bfs-instance-role")
    p.add_argument("--web-token")
    p.add_argument("--container-token")
    p.add_argument("--source-key", action="append", default=[], metavar="AK:SK")
    args = p.parse_args()
    Handler.state = State(args)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print("listening on http://127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
