#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Cross-check bucketfs's SigV4 signer against botocore's on random requests.

    /usr/bin/python3 sigv4_botocore.py PATH/TO/sigv4_cli [--count N] [--seed S]

For each case a seeded RNG picks a path-style key (unicode with astral
characters, space, + % ~ = & ', //, ./, .., ?, #, control characters), a
ListObjectsV2-like query, a time, a region and credentials (with or without
a session token).  sigv4_cli signs it with UNSIGNED-PAYLOAD; botocore's
S3SigV4Auth signs the same request at the same time; the Authorization
headers must be equal byte for byte.

Half of the cases give both signers the same canonically encoded query in
the URL.  The other half give sigv4_cli a differently encoded query
(lowercase hex, needless escapes, '+' for space, raw '/' and raw UTF-8) and
give botocore the decoded parameters, so sigv4's decode-and-re-encode is
checked against botocore's own encoder.  The path sigv4_cli builds is also
checked against botocore's S3 key encoding (percent_encode(key, safe='/~')).

Needs Debian's python3-botocore; exits 77 (skip) without it.  Prints every
mismatch with both canonical requests and exits 1 if there was any.
"""

import argparse
import datetime
import os
import random
import subprocess
import sys
import types

try:
    import botocore.auth
    import botocore.credentials
    import botocore.utils
    from botocore.awsrequest import AWSRequest
except ImportError as e:
    print(f"sigv4_botocore: skipped: botocore is not importable ({e})")
    sys.exit(77)

UNRESERVED = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)

KEY_PIECES = [
    "a", "Z", "0", "9", "img", "train", "-", "_", ".", "~", "/", " ", "+",
    "%", "%20", "%2F", "=", "&", "'", "//", "./", "../", "..", "?", "#",
    "!", "$", "(", ")", "*", ",", ";", ":", "@", "[", "]", "{", "}", "\\",
    "^", "`", "|", '"', "<", ">",
    "\u00e9", "\u00fc", "\u65e5\u672c", "\u0416", "\u200b", "\ufeff",
    "\U0001f600", "\U0001d11e", "\U00010348", "\U0010fffd",
    "\x01", "\x09", "\x0a", "\x0d", "\x1f", "\x7f",
]

SPECIAL_KEYS = [
    "a b", "a+b", "100%", "~user", "a=b&c=d", "it's", "//", "./x", "../..",
    "dir/", "a//b", "?x", "#frag", "\x01", "\U0001f600", "a/./b/../c",
]

TOKEN_ALPHABET = (
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
)


def random_key(rng):
    if rng.random() < 0.1:
        return rng.choice(SPECIAL_KEYS)
    n = rng.randint(1, 24)
    return "".join(rng.choice(KEY_PIECES) for _ in range(n))


def random_token(rng, lo, hi):
    return "".join(rng.choice(TOKEN_ALPHABET)
                   for _ in range(rng.randint(lo, hi)))


def random_params(rng):
    """A list of (name, value) str pairs, like ListObjectsV2 sends."""
    params = []
    if rng.random() < 0.15:
        return params
    params.append(("list-type", "2"))
    if rng.random() < 0.7:
        params.append(("prefix", random_key(rng)))
    if rng.random() < 0.5:
        params.append(("delimiter", "/"))
    if rng.random() < 0.5:
        params.append(("continuation-token", random_token(rng, 20, 80)))
    if rng.random() < 0.5:
        params.append(("encoding-type", "url"))
    if rng.random() < 0.3:
        params.append(("max-keys", str(rng.randint(1, 1000))))
    if rng.random() < 0.2:
        params.append(("start-after", random_key(rng)))
    if rng.random() < 0.1:
        params.append(("fetch-owner", ""))
    if rng.random() < 0.1:
        # a repeated name: sorted by value
        params.append(("x-id", random_key(rng)))
        params.append(("x-id", random_key(rng)))
    rng.shuffle(params)
    return params


def aws_quote(s):
    return botocore.utils.percent_encode(s, safe="-_.~")


def sloppy_quote(rng, s, is_name):
    """Encodes @s the way a careless client might; it still decodes to s."""
    out = []
    for b in s.encode("utf-8"):
        c = chr(b)
        r = rng.random()
        if b in UNRESERVED:
            if r < 0.2:
                out.append("%%%02x" % b)
            else:
                out.append(c)
        elif c == " " and r < 0.5:
            out.append("+")
        elif c in "/:@!$'()*,;" and r < 0.5:
            out.append(c)
        elif c == "=" and not is_name and r < 0.5:
            out.append(c)
        elif b >= 0x80 and r < 0.3:
            out.append(bytes([b]).decode("latin-1"))  # raw byte, see below
        elif r < 0.5:
            out.append("%%%02x" % b)
        else:
            out.append("%%%02X" % b)
    return "".join(out)


def to_argv_bytes(s):
    """sloppy_quote() keeps raw UTF-8 bytes as latin-1 chars: undo that."""
    return s.encode("latin-1")


class CapturingAuth(botocore.auth.S3SigV4Auth):
    last_canonical = None

    def canonical_request(self, request):
        cr = super().canonical_request(request)
        CapturingAuth.last_canonical = cr
        return cr


def fixed_datetime(ts):
    fixed = datetime.datetime.utcfromtimestamp(ts)

    class FixedDateTime(datetime.datetime):
        @classmethod
        def utcnow(cls):
            return fixed

    return types.SimpleNamespace(datetime=FixedDateTime)


def botocore_sign(case, path, query_in_url):
    botocore.auth.datetime = fixed_datetime(case["time"])
    creds = botocore.credentials.Credentials(
        case["ak"], case["sk"], case["token"])
    auth = CapturingAuth(creds, "s3", case["region"])
    url = "http://" + case["host"] + path
    if query_in_url:
        url += "?" + query_in_url
    req = AWSRequest(
        method=case["method"],
        url=url,
        headers={"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"},
        params=None if query_in_url else case["params"],
    )
    req.context["client_config"] = types.SimpleNamespace(
        s3={"payload_signing_enabled": False})
    auth.add_auth(req)
    return req.headers["Authorization"], CapturingAuth.last_canonical


def make_case(rng, i):
    case = {
        "method": rng.choice(["GET", "GET", "HEAD", "PUT", "DELETE"]),
        "host": rng.choice([
            "127.0.0.1:9000", "localhost:8080", "s3.amazonaws.com",
            "s3.eu-west-1.amazonaws.com", "10.0.0.7:9000",
        ]),
        "bucket": rng.choice(["examplebucket", "ds-train", "b.with.dots"]),
        "key": random_key(rng),
        "params": random_params(rng),
        # 1970..9999: x-amz-date has four year digits
        "time": rng.randint(0, 253402300799),
        "region": rng.choice(["us-east-1", "eu-west-1", "ap-south-2",
                              "garage"]),
        "ak": "AKIA" + random_token(rng, 16, 16).replace("+", "X")
        .replace("/", "Y").replace("=", "Z"),
        "sk": random_token(rng, 40, 90),  # > 60: a key over 64 B
        "token": random_token(rng, 100, 400) if rng.random() < 0.3 else None,
        "sloppy": i % 2 == 1,
    }
    if case["sloppy"]:
        parts = []
        for n, v in case["params"]:
            part = sloppy_quote(rng, n, True)
            if v != "" or rng.random() < 0.5:
                part += "=" + sloppy_quote(rng, v, False)
            parts.append(part)
        case["cli_query"] = "&".join(parts)
        case["url_query"] = None
    else:
        case["cli_query"] = "&".join(
            aws_quote(n) + "=" + aws_quote(v) for n, v in case["params"])
        case["url_query"] = case["cli_query"]
    return case


def run_cli(cli, case, debug=False):
    rawkey = case["bucket"] + "/" + case["key"]
    argv = [
        cli.encode(), case["method"].encode(), case["host"].encode(),
        rawkey.encode("utf-8"), to_argv_bytes(case["cli_query"]),
        str(case["time"]).encode(), case["region"].encode(),
        case["ak"].encode(), case["sk"].encode(),
    ]
    if case["token"]:
        argv.append(case["token"].encode())
    env = dict(os.environ)
    if debug:
        env["SIGV4_CLI_CANONICAL"] = "1"
    p = subprocess.run(argv, capture_output=True, env=env, check=False)
    if p.returncode != 0:
        raise RuntimeError("sigv4_cli exited %d: %s" %
                           (p.returncode, p.stderr.decode(errors="replace")))
    lines = p.stdout.decode("ascii").split("\n")
    return lines[0], lines[1], p.stderr.decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cli", help="path to the sigv4_cli binary")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=20130524)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    passed = failed = 0
    for i in range(args.count):
        case = make_case(rng, i)
        rawkey = case["bucket"] + "/" + case["key"]
        path, ours, _ = run_cli(args.cli, case)
        problems = []
        want_path = "/" + botocore.utils.percent_encode(rawkey, safe="/~")
        if path != want_path:
            problems.append("path %r, botocore encodes the key as %r"
                            % (path, want_path))
        theirs, their_cr = botocore_sign(case, path, case["url_query"])
        if ours != theirs:
            problems.append("Authorization differs")
        if not problems:
            passed += 1
            continue
        failed += 1
        _, _, our_cr = run_cli(args.cli, case, debug=True)
        print("MISMATCH case %d: key %r query %r" %
              (i, rawkey, case["cli_query"]))
        for p in problems:
            print("  " + p)
        print("  ours:     " + ours)
        print("  botocore: " + theirs)
        print("  --- our canonical request ---")
        print(our_cr.rstrip("\n"))
        print("  --- botocore's canonical request ---")
        print(their_cr)
        print()

    print("sigv4 vs botocore: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
