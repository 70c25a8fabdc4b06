#!/usr/bin/env python3
"""bucketfs-compare against real mounts of the test S3 server: a clean
mount matches in every mode (namespace, --content --all, --bench, --json);
each planted difference (a key missing on the mount, one extra on it, a
size mismatch, an object changed behind the mount's back, bytes that
differ between the two paths) is caught with exit 1 and named; bad usage
and a dead endpoint give exit 2 with the cause."""

import hashlib
import http.client
import json
import os
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

# Keys of bucket "tree" (PUT): shown, and not shown by the key rules.
TREE_KEYS = {
    "top.txt": b"top\n",
    "dir/": b"",                        # a marker
    "dir/inner.bin": bytes(range(256)) * 40,
    "deep/a/b/c/d.txt": b"deep\n",
    "both": b"file and prefix",         # hidden by the directory 'both'
    "both/child": b"child\n",
    "a//b": b"empty component",         # not a path
    "x/./y": b"dot",                    # not a path
    "n" * 300: b"long",                 # not a path
    "uni/ümlaut 😀.txt": b"unicode\n",
    "sp ace/+plus%25": b"specials\n",
    "empty.bin": b"",
}
SHOWN = [k for k in TREE_KEYS
         if k not in ("dir/", "both", "a//b", "x/./y", "n" * 300)]
SYN = 20          # keys of each synthetic bucket
SYN_SIZE = 3000
SYN_KEY = "train/img_{:02d}_of_20.jpeg"


def signed(method, url, bucket, key, body=b""):
    """A SigV4-signed request with botocore's signer, path-style."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    path = "/" + bucket + "/" + urllib.parse.quote(key, safe="/~")
    req = AWSRequest(method=method, url=url + path, data=body, headers={
        "X-Amz-Content-SHA256": hashlib.sha256(body).hexdigest()})
    S3SigV4Auth(Credentials(harness.AK, harness.SK), "s3",
                "us-east-1").add_auth(req)
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request(method, path, body=body, headers=dict(req.headers.items()))
    resp = conn.getresponse()
    resp.read()
    conn.close()
    if resp.status not in (200, 204):
        raise RuntimeError(f"{method} {key}: HTTP {resp.status}")


class CompareTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-compare-")
        # Bucket "bytes" on two servers: the same names and sizes, one
        # byte different in one file.
        a, b = cls.mkdir("bytes-a"), cls.mkdir("bytes-b")
        for i in range(6):
            data = bytes((i * 7 + j) % 251 for j in range(5000 + i))
            for root in (a, b):
                os.makedirs(os.path.join(root, "d"), exist_ok=True)
                with open(os.path.join(root, "d", f"f{i}.bin"), "wb") as f:
                    f.write(data)
        with open(os.path.join(b, "d", "f3.bin"), "r+b") as f:
            f.seek(1234)
            c = f.read(1)
            f.seek(1234)
            f.write(bytes([c[0] ^ 0x01]))
        syn = []
        for name in ("clean", "miss", "extra", "size", "mut", "type"):
            syn += ["--synthetic", f"{name}:{SYN}:{SYN_SIZE}"]
        cls.server = harness.TestServer("--bucket", f"bytes={a}",
                                        "--bucket",
                                        f"tree={cls.mkdir('tree')}", *syn)
        cls.other = harness.TestServer("--bucket", f"bytes={b}")
        cls.more_servers = (cls.other,)
        for k, v in TREE_KEYS.items():
            harness.put_object(cls.server.url, "tree", k, v)

    def mount(self, bucket):
        log = os.path.join(self.tmp, f"{bucket}-{time.monotonic_ns()}.log")
        m = Mount(f"s3://{bucket}", self.server.url,
                  os.path.join(self.tmp, f"{bucket}.idx"), log=log)
        self.mounts.append(m)
        return m

    def compare(self, mnt, url, *args, endpoint=None, env=None):
        ep = ["-o", f"endpoint={endpoint or self.server.url}"] \
            if endpoint is not False else []
        r = harness.run([harness.binary("bucketfs-compare"), mnt, url,
                         *ep, *args], env=env, timeout=300)
        return r.returncode, r.stdout.decode(errors="replace"), \
            r.stderr.decode(errors="replace")

    def check_rc(self, got, want, out, err):
        self.assertEqual(got, want, f"stdout:\n{out}\nstderr:\n{err}")

    # -- clean ---------------------------------------------------------

    def test_clean_namespace_with_keys_that_are_not_paths(self):
        m = self.mount("tree")
        rc, out, err = self.compare(m.dir, "s3://tree")
        self.check_rc(rc, 0, out, err)
        self.assertIn("result: the two sides match", out)
        self.assertIn("differences: 0", out)
        self.assertIn("not shown by the key rules (not differences): 4",
                      out)
        self.assertIn("not a path: 'a//b': an empty component", out)
        self.assertIn("not a path: 'x/./y': a '.' or '..' component", out)
        self.assertIn(f"not a path: '{'n' * 300}': a component over 255",
                      out)
        self.assertIn("not a path: 'both': hidden by a directory", out)
        # dir, deep/a/b/c (4), both, uni, 'sp ace', and 'a' and 'x' which
        # the keys that are not paths still make.
        self.assertIn(f"{len(SHOWN)} files and 10 directories expected, "
                      f"{len(SHOWN)} files and 10 directories on the mount",
                      out)
        rc, out, err = self.compare(m.dir, "s3://tree", "--json")
        self.check_rc(rc, 0, out, err)
        j = json.loads(out)
        self.assertEqual(j["result"], "match")
        ns = j["namespace"]
        self.assertEqual(ns["expected_files"], len(SHOWN))
        self.assertEqual(ns["mount_files"], len(SHOWN))
        self.assertEqual(ns["not_shown"]["count"], 4)
        self.assertEqual(ns["not_shown"]["shadowed"], 1)
        self.assertEqual(ns["differences"]["count"], 0)

    def test_clean_content_all_and_json(self):
        m = self.mount("tree")
        rc, out, err = self.compare(m.dir, "s3://tree", "--content",
                                    "--all")
        self.check_rc(rc, 0, out, err)
        self.assertIn(f"content: {len(SHOWN)} of {len(SHOWN)} files", out)
        # --all (like --sample) says --content by itself.
        rc, out, err = self.compare(m.dir, "s3://tree", "--all", "--json")
        self.check_rc(rc, 0, out, err)
        j = json.loads(out)
        self.assertEqual(j["content"]["compared"], len(SHOWN))
        self.assertEqual(j["content"]["differences"]["count"], 0)

    def test_clean_sample_is_seeded(self):
        m = self.mount("clean")
        outs = []
        for _ in range(2):
            rc, out, err = self.compare(m.dir, "s3://clean", "--content",
                                        "--sample", "5", "--seed", "7",
                                        "--json")
            self.check_rc(rc, 0, out, err)
            outs.append(json.loads(out)["content"])
        self.assertEqual(outs[0]["compared"], 5)
        self.assertEqual(outs[0]["seed"], 7)
        self.assertEqual(outs[0], outs[1])

    def test_clean_bench(self):
        m = self.mount("clean")
        rc, out, err = self.compare(m.dir, "s3://clean", "--bench",
                                    "--files", "10", "--procs", "3",
                                    "--runs", "2")
        self.check_rc(rc, 0, out, err)
        self.assertRegex(out, r"bench: 10 files \(0\.0 MB\), 3 workers "
                              r"per side, 2 runs \(medians\)")
        self.assertRegex(out, r"\n  mount +[\d.]+ +[\d.]+ ")
        self.assertRegex(out, r"\n  s3 +[\d.]+ +[\d.]+ ")
        self.assertIn("mount/s3", out)
        rc, out, err = self.compare(m.dir, "s3://clean", "--bench",
                                    "--files", "8", "--procs", "2",
                                    "--runs", "1", "--json",
                                    "--order", "s3-first")
        self.check_rc(rc, 0, out, err)
        b = json.loads(out)["bench"]
        self.assertEqual(b["files"], 8)
        self.assertEqual(b["bytes"], 8 * SYN_SIZE)
        for side in ("mount", "s3"):
            self.assertGreater(b[side]["files_per_s"], 0)
            self.assertGreater(b[side]["mb_per_s"], 0)
            self.assertEqual(b[side]["errors"], 0)
            self.assertLessEqual(b[side]["p50_ms"], b[side]["p99_ms"])
            self.assertLessEqual(b[side]["p99_ms"], b[side]["max_ms"])
        self.assertGreater(b["ratio_files_per_s"], 0)

    def test_endpoints_from_the_mount(self):
        m = self.mount("clean")
        rc, out, err = self.compare(m.dir, "s3://clean", "--json",
                                    endpoint=False)
        self.check_rc(rc, 0, out, err)
        j = json.loads(out)
        self.assertEqual(j["endpoints"], [self.server.url])
        self.assertIn("user.bucketfs.stats", j["endpoint_source"])
        # From a directory inside the mount too: the root holds them.
        rc, out, err = self.compare(os.path.join(m.dir, "train"),
                                    "s3://clean/train", "--json",
                                    endpoint=False)
        self.check_rc(rc, 0, out, err)
        j = json.loads(out)
        self.assertEqual(j["endpoints"], [self.server.url])
        self.assertEqual(j["namespace"]["mount_files"], SYN)

    def test_subdirectory_against_prefix(self):
        m = self.mount("tree")
        rc, out, err = self.compare(os.path.join(m.dir, "deep"),
                                    "s3://tree/deep", "--content", "--all")
        self.check_rc(rc, 0, out, err)
        self.assertIn("1 files and 3 directories expected", out)

    # -- planted differences -------------------------------------------

    def test_missing_on_mount(self):
        m = self.mount("miss")
        # Written after the mount's index was built: S3 has it, the
        # mount does not.
        harness.put_object(self.server.url, "miss", "train/new.bin",
                           b"12345")
        harness.put_object(self.server.url, "miss", "newdir/x", b"x")
        rc, out, err = self.compare(m.dir, "s3://miss")
        self.check_rc(rc, 1, out, err)
        self.assertIn("missing on mount: 'train/new.bin' (5 bytes in S3)",
                      out)
        self.assertIn("missing on mount: 'newdir/x' (1 bytes in S3)", out)
        self.assertIn("directory missing on mount: 'newdir/'", out)
        self.assertIn("differences: 3", out)
        self.assertIn("result: 3 differences", out)
        rc, out, err = self.compare(m.dir, "s3://miss", "--json",
                                    "--max-diffs", "1")
        self.check_rc(rc, 1, out, err)
        d = json.loads(out)["namespace"]["differences"]
        self.assertEqual(d["count"], 3)
        self.assertEqual(d["missing_on_mount"], 2)
        self.assertEqual(d["dir_missing_on_mount"], 1)
        self.assertEqual(len(d["first"]), 1)

    def test_extra_on_mount(self):
        m = self.mount("extra")
        key = SYN_KEY.format(3)
        # Deleted after the index was built: the mount still shows it.
        signed("DELETE", self.server.url, "extra", key)
        rc, out, err = self.compare(m.dir, "s3://extra", "--content",
                                    "--all")
        self.check_rc(rc, 1, out, err)
        self.assertIn(f"extra on mount: '{key}' (a file that is not in S3)",
                      out)
        self.assertIn("differences: 1", out)
        # Only the files on both sides are read for --content.
        self.assertIn(f"content: {SYN - 1} of {SYN - 1} files", out)

    def test_size_mismatch(self):
        m = self.mount("size")
        key = SYN_KEY.format(5)
        harness.put_object(self.server.url, "size", key, b"seven b")
        rc, out, err = self.compare(m.dir, "s3://size")
        self.check_rc(rc, 1, out, err)
        self.assertIn(f"size mismatch: '{key}': 7 bytes in S3, {SYN_SIZE} "
                      "bytes on the mount", out)
        rc, out, err = self.compare(m.dir, "s3://size", "--json")
        d = json.loads(out)["namespace"]["differences"]["first"][0]
        self.assertEqual(d, {"kind": "size_mismatch", "path": key,
                             "s3_size": 7, "mount_size": SYN_SIZE,
                             "detail": None})

    def test_file_became_a_directory(self):
        m = self.mount("type")
        key = SYN_KEY.format(2)
        # In S3 the key is now also a prefix: the directory wins there.
        harness.put_object(self.server.url, "type", key + "/inside", b"in")
        rc, out, err = self.compare(m.dir, "s3://type", "--json")
        self.check_rc(rc, 1, out, err)
        ns = json.loads(out)["namespace"]
        self.assertEqual(ns["not_shown"]["shadowed"], 1)
        kinds = {(d["kind"], d["path"]) for d in ns["differences"]["first"]}
        self.assertEqual(kinds, {("type_mismatch", key),
                                 ("missing_on_mount", key + "/inside")})
        rc, out, err = self.compare(m.dir, "s3://type")
        self.assertIn(f"type mismatch: '{key}': a directory in S3, a file on "
                      "the mount", out)
        self.assertIn(f"not a path: '{key}': hidden by a directory", out)

    def test_changed_behind_the_mounts_back(self):
        m = self.mount("mut")
        key = SYN_KEY.format(7)
        # Same size, new bytes and ETag: the mount's If-Match fails.
        self.server.control("POST", "mutate", {"bucket": "mut", "key": key})
        rc, out, err = self.compare(m.dir, "s3://mut", "--content", "--all")
        self.check_rc(rc, 1, out, err)
        self.assertIn("namespace: 20 keys", out)
        self.assertIn(f"mount error: '{key}': read through the mount "
                      "failed: Stale file handle (ESTALE: the object "
                      "changed in S3 since the mount's index was built",
                      out)
        self.assertIn("result: 1 difference\n", out)
        # The bench reads it too: the failed reads are differences.
        rc, out, err = self.compare(m.dir, "s3://mut", "--bench", "--files",
                                    str(SYN), "--runs", "1", "--json")
        self.check_rc(rc, 1, out, err)
        b = json.loads(out)["bench"]
        self.assertEqual(b["mount"]["errors"], 1)
        # The S3 side sends If-Match too, with the fresh listing's ETag.
        self.assertEqual(b["s3"]["errors"], 0)
        self.assertEqual(b["differences"]["mount_error"], 1)
        self.assertIn("Stale file handle",
                      b["differences"]["first"][0]["detail"])

    def test_bytes_differ_between_the_paths(self):
        m = self.mount("bytes")
        # The mount reads server A; compare's S3 side reads server B,
        # whose d/f3.bin has one byte flipped.
        rc, out, err = self.compare(m.dir, "s3://bytes", "--content",
                                    "--all", endpoint=self.other.url)
        self.check_rc(rc, 1, out, err)
        self.assertIn("content: 6 of 6 files", out)
        self.assertRegex(out, r"content differs: 'd/f3\.bin': sha256 "
                              r"[0-9a-f]{64} in S3, [0-9a-f]{64} on the "
                              r"mount")
        self.assertIn("result: 1 difference\n", out)
        rc, out, err = self.compare(m.dir, "s3://bytes", "--content",
                                    "--all")
        self.check_rc(rc, 0, out, err)

    # -- usage and failures --------------------------------------------

    def test_bad_usage(self):
        exe = harness.binary("bucketfs-compare")
        for args, msg in (
                ([], "expected MOUNTPOINT and s3://BUCKET"),
                ([self.tmp], "expected MOUNTPOINT and s3://BUCKET"),
                ([self.tmp, "s3:/x"], "expected s3://BUCKET"),
                ([self.tmp, "s3://tree", "--procs", "0"], "--procs"),
                ([self.tmp, "s3://tree", "--order", "x"], "--order: 'x'"),
                ([self.tmp, "s3://tree", "--all", "--sample", "3"],
                 "--sample and --all exclude each other"),
                ([self.tmp, "s3://tree", "-o", "bogus=1"],
                 "unknown option 'bogus'"),
                ([os.path.join(self.tmp, "nope"), "s3://tree"],
                 "No such file or directory"),
                (["--frobnicate"], "Unknown option --frobnicate")):
            r = harness.run([exe, *args])
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(msg, r.stderr.decode(), args)
            self.assertTrue(r.stderr.startswith(b"bucketfs-compare: "))
        r = harness.run([exe, "--help"])
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"--content", r.stdout)

    def test_dead_endpoint_is_an_operational_error(self):
        m = self.mount("clean")
        dead = f"http://127.0.0.1:{harness.free_port()}"
        rc, out, err = self.compare(m.dir, "s3://clean", "-o",
                                    "max_attempts=2,connect_timeout=2,"
                                    "retry_deadline=0", endpoint=dead)
        self.check_rc(rc, 2, out, err)
        self.assertEqual(out, "")
        self.assertIn("bucketfs-compare: listing s3://clean/, page 1: LIST s3://clean/", err)
        self.assertIn(f"via {dead} (attempt 2/2", err)
        self.assertIn("Connection refused", err)


if __name__ == "__main__":
    harness.main()
