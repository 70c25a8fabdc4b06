#!/usr/bin/env python3
"""One conformance test of the mission's paths, run against each of three
S3 servers in turn: the project's own test server, s3rver (npm) and Ceph
RGW (Debian's radosgw).  The same class body, the same data set:

  - the index built by a parallel listing over 25 pages (25,037 keys;
    the lister cuts only past 20), through probes that stay within 5%;
    s3rver, too slow to seed that many per build, gets 6 pages;
  - the tree equals the server's listing (names, sizes, directories, DIR/
    markers, awkward keys, an object/prefix collision, astral-plane names
    next to BMP U+E000..U+FFFD ones);
  - bytes by SHA-256, a multipart object among them;
  - an overwritten object reads ESTALE, a deleted one ENOENT, each with
    its log line (and no dangling ': ' from an empty <Message>);
  - a remount with the index sends zero LIST;
  - bucketfs-index publish, then a mount with -o index_url=;
  - writable mode's probe file (create, stat, unlink), mkdir, EXDEV;
  - bucketfs-doctor passes and bucketfs-compare --content exits 0.

LIST requests are counted by a harness.CountingProxy in front of every
server (s3rver and RGW count nothing themselves).  A check that a server
cannot support is skipped with the server's limitation as the reason."""

import errno
import hashlib
import json
import os
import random
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_client import SPECIAL_KEYS  # noqa: E402

# The lister splits a listing only past 20 pages (src/lister.c): a data
# set of 25 pages exercises its cuts, probes and merge.
SPLIT_PAGES = 20
MIB = 1 << 20
# Awkward keys beyond SPECIAL_KEYS: astral-plane next to the top of the
# BMP (UTF-16 servers sort them the other way round), an object/prefix
# collision, DIR/ markers (one empty, one with a child).
EXTRA_KEYS = ["astral/\U0001F600.bin", "astral/\U0001F9EA-x.bin",
              "astral/\ue000.bin", "astral/\ufffd.bin",
              "astral/\uff21-fullwidth.bin",
              "collide", "collide/child.bin",
              "marked/", "marked/inside.bin", "emptydir/"]


def shown_tree(listing):
    """What a mount shows for @listing ({key: size}, keys relative to the
    mount's prefix): {path: size, or None for a directory}, by the key
    rules of docs/INDEX-FORMAT.md (an empty, '.' or '..' component, or
    one over 255 bytes, is not a path, but the directories before it
    exist; an object whose name is also a directory is hidden by the
    directory; KEY/ is a directory marker)."""
    tree = {}
    files = {}
    for key, size in listing.items():
        marker = key.endswith("/")
        parts = (key[:-1] if marker else key).split("/")
        bad = next((i for i, p in enumerate(parts)
                    if p in ("", ".", "..") or len(p.encode()) > 255), None)
        # The directories before the first bad component still exist.
        for i in range(1, len(parts) if bad is None else bad + 1):
            tree["/".join(parts[:i])] = None
        if bad is not None:
            continue
        if marker:
            tree["/".join(parts)] = None
        else:
            files["/".join(parts)] = size
    for path, size in files.items():
        if path not in tree:
            tree[path] = size
    return tree


def walk(root):
    """{path: size, None for a directory} of the mounted tree."""
    out = {}
    for d, dirs, names in os.walk(root):
        rel = os.path.relpath(d, root)
        for n in dirs:
            out[os.path.normpath(os.path.join(rel, n))] = None
        for n in names:
            out[os.path.normpath(os.path.join(rel, n))] = \
                os.stat(os.path.join(d, n)).st_size
    return out


def sha(data):
    return hashlib.sha256(data).hexdigest()


class Conformance:
    """The class body; a subclass names the server (name, make_server) and
    the keys it cannot store (unstorable).  A server that answers
    CreateMultipartUpload with 501 NotImplemented has the multipart check
    skipped with that answer as the reason."""

    reset_faults = False
    name = None
    # keys under ds/train/ (plus ds/sp/ and ds/mp/)
    train_keys = 25 * 1000 + 37
    # {reason: predicate(key)}: special keys this server cannot store.
    unstorable = {}
    # S3's multipart ETag "MD5-N" (s3rver gives the MD5 of the bytes).
    multipart_etag_parts = False

    @classmethod
    def make_server(cls):
        """Starts the server; returns (server, url, bucket, ak, sk)."""
        raise NotImplementedError

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-conf-")
        cls.server, url, cls.bucket, cls.ak, cls.sk = cls.make_server()
        cls.direct = url
        cls.proxy = harness.CountingProxy(url)
        cls.more_servers = (cls.proxy,)
        cls.url = cls.proxy.url
        cls.env = harness.client_env(AWS_ACCESS_KEY_ID=cls.ak,
                                     AWS_SECRET_ACCESS_KEY=cls.sk)
        rnd = random.Random(12)
        objs = {f"ds/train/img_{i:05d}.bin": rnd.randbytes(rnd.randrange(64))
                for i in range(cls.train_keys)}
        cls.skipped_keys = {}
        for i, k in enumerate(SPECIAL_KEYS + EXTRA_KEYS):
            why = next((r for r, bad in cls.unstorable.items() if bad(k)),
                       None)
            if why:
                cls.skipped_keys[k] = why
                continue
            objs["ds/sp/" + k] = b"" if k.endswith("/") else \
                f"special {i}: {k}".encode()
        objs["ds/sp/big.bin"] = rnd.randbytes(3 * MIB + 5)
        parts = [rnd.randbytes(5 * MIB), rnd.randbytes(5 * MIB),
                 rnd.randbytes(MIB + 3)]
        s = harness.Signer(url, cls.ak, cls.sk)
        try:
            cls.seed(s, objs, parts)
        finally:
            s.close()
        cls.objects = {k[3:]: v for k, v in objs.items()}
        cls.idx = os.path.join(cls.tmp, "ds.idx")
        cls.build = None

    @classmethod
    def seed(cls, s, objs, parts):
        """PUTs @objs and the multipart object of @parts, unless a bucket
        kept from an earlier build of this run has them all already (its
        SEEDED object names the data set's digest)."""
        digest = hashlib.sha256()
        for k in sorted(objs):
            digest.update(k.encode() + b"\0" + sha(objs[k]).encode())
        digest = digest.hexdigest().encode()
        status, _, body = s.request("GET", harness.key_path(cls.bucket,
                                                            "SEEDED"))
        seeded = status == 200 and body == digest
        if not seeded:
            harness.put_objects(cls.direct, cls.bucket, objs, ak=cls.ak,
                                sk=cls.sk, workers=32)
        cls.mp_reason = None
        try:
            if seeded:
                _, h, _ = s.check("HEAD multi.bin", s.request(
                    "HEAD", harness.key_path(cls.bucket, "ds/mp/multi.bin")))
                cls.mp_etag = h["etag"]
            else:
                cls.mp_etag = s.multipart(cls.bucket, "ds/mp/multi.bin",
                                          parts)
            objs["ds/mp/multi.bin"] = b"".join(parts)
        except harness.NotImplementedByServer as e:
            cls.mp_reason = f"{cls.name} does not implement multipart " \
                f"uploads: {e}"
        if not seeded:
            s.put(cls.bucket, "SEEDED", digest)

    # -- helpers ---------------------------------------------------------

    def opts(self, *more):
        return ["-o", ",".join([f"endpoint={self.url}", *more])]

    def mount(self, sub, index, *opts, env=None):
        log = os.path.join(self.tmp, f"m{len(os.listdir(self.tmp))}.log")
        m = harness.Mount(f"s3://{self.bucket}/{sub}", self.url, index,
                          *opts, log=log, env=env or self.env)
        self.mounts.append(m)
        return m

    def built(self):
        """The index of ds/, built once per class by bucketfs-index build
        (the parallel lister); the LIST requests it took."""
        cls = type(self)
        if cls.build is None:
            self.proxy.reset()
            r = harness.run([harness.binary("bucketfs-index"), "build",
                             f"s3://{self.bucket}/ds", *self.opts(
                                 f"index={self.idx}"), "-j", "8"],
                            env=self.env, timeout=600)
            cls.build = (r, self.proxy.count("LIST"),
                         self.proxy.count("PROBE"))
        r, lists, probes = cls.build
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        return r.stdout.decode(), lists, probes

    def server_listing(self, prefix):
        """{key: size} under @prefix by a plain sequential listing
        (s3-client listall), independent of the lister under test."""
        r = harness.run([harness.binary("s3-client"), *self.opts(), "listall",
                         f"s3://{self.bucket}/{prefix}"], env=self.env,
                        timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        got = {}
        for line in r.stdout.decode().splitlines():
            if line.startswith("obj "):
                f = line.split()
                got[bytes.fromhex(f[1]).decode()[len(prefix):]] = int(f[2])
        return got

    def signer(self):
        s = harness.Signer(self.direct, self.ak, self.sk)
        self.addCleanup(s.close)
        return s

    # -- the paths ---------------------------------------------------------

    def test_index_build_by_parallel_listing(self):
        out, lists, probes = self.built()
        self.assertRegex(out, rf"keys:\s+{len(self.objects)}\n")
        # A page holds at most 1,000 keys on every server.
        pages = len(self.objects) // 1000
        self.assertGreaterEqual(lists, pages)
        if pages > SPLIT_PAGES:
            # Split, and within the lister's budget: a probe per 20
            # pages, and a few pages more for the ranges' ends.
            self.assertGreater(probes, 0, out)
            self.assertLessEqual(lists, pages * 1.05 + 8, out)
        r = harness.run([harness.binary("bucketfs-index"), "verify",
                         f"s3://{self.bucket}/ds",
                         *self.opts(f"index={self.idx}")], env=self.env,
                        timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr.decode())

    def test_keys_the_server_cannot_store(self):
        """Marks (never drops) the special keys left out for this server."""
        if not self.skipped_keys:
            return
        for k, why in self.skipped_keys.items():
            with self.subTest(key=k):
                self.skipTest(why)

    def test_tree_equals_listing(self):
        listing = self.server_listing("ds/")
        self.assertEqual(listing, {k: len(v) for k, v in self.objects.items()})
        self.built()
        m = self.mount("ds", self.idx)
        want = shown_tree(listing)
        got = walk(m.dir)
        self.assertEqual(got.keys() - want.keys(), set())
        self.assertEqual(want.keys() - got.keys(), set())
        self.assertEqual(got, want)
        # The collision: the directory wins; the markers are directories.
        self.assertTrue(os.path.isdir(m.path("sp", "collide")))
        self.assertTrue(os.path.isdir(m.path("sp", "emptydir")))
        self.assertEqual(os.listdir(m.path("sp", "emptydir")), [])
        names = os.listdir(m.path("sp", "astral"))
        self.assertEqual(sorted(names, key=str.encode), names)
        self.unmount(m)

    def test_bytes_by_sha256(self):
        self.built()
        m = self.mount("ds", self.idx)
        want = shown_tree({k: len(v) for k, v in self.objects.items()})
        rnd = random.Random(5)
        paths = [p for p, size in want.items() if size is not None]
        sample = [p for p in paths if not p.startswith("train/")] + \
            rnd.sample([p for p in paths if p.startswith("train/")], 300)
        for p in sample:
            with open(m.path(p), "rb") as f:
                self.assertEqual(sha(f.read()), sha(self.objects[p]), p)
        self.unmount(m)

    def test_multipart_object(self):
        if self.mp_reason:
            self.skipTest(self.mp_reason)
        if self.multipart_etag_parts:
            self.assertRegex(self.mp_etag, r'^"[0-9a-f]{32}-3"$')
        self.built()
        m = self.mount("ds", self.idx)
        with open(m.path("mp", "multi.bin"), "rb") as f:
            self.assertEqual(sha(f.read()), sha(self.objects["mp/multi.bin"]))
        etag = os.getxattr(m.path("mp", "multi.bin"), "user.s3.etag").decode()
        self.assertIn(self.mp_etag.strip('"'), etag)
        self.unmount(m)

    def test_overwrite_estale_and_delete_enoent(self):
        s = self.signer()
        for k in ("mut/a.bin", "mut/b.bin", "mut/c.bin"):
            s.put(self.bucket, k, k.encode() * 100)
        m = self.mount("mut", os.path.join(self.tmp, "mut.idx"))
        s.put(self.bucket, "mut/a.bin", b"overwritten")
        s.delete(self.bucket, "mut/b.bin")
        with self.assertRaises(OSError) as cm:
            with open(m.path("a.bin"), "rb") as f:
                f.read()
        self.assertEqual(cm.exception.errno, errno.ESTALE)
        with self.assertRaises(OSError) as cm:
            with open(m.path("b.bin"), "rb") as f:
                f.read()
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        with open(m.path("c.bin"), "rb") as f:
            self.assertEqual(f.read(), b"mut/c.bin" * 100)
        out = m.output()
        self.assertRegex(out, r"read 'mut/a\.bin': the object changed after "
                         r"the index was built .*GET s3://\S+/mut/a\.bin via "
                         r"\S+ \(attempt 1/\d+, .*(HTTP 412 |ETag \"\w+\" "
                         r"differs from If-Match \"\w+\" \(the server "
                         r"ignored If-Match\))")
        self.assertIn("the object vanished after the index was built", out)
        self.assertRegex(out, r"HTTP 404 NoSuchKey")
        # An empty <Message> (RGW) leaves no dangling ': ' before the id.
        self.assertNotRegex(out, r"HTTP 4\d\d \S*:\s+\(RequestId")
        self.assertNotRegex(out, r"(?m)HTTP 4\d\d \S*: *$")
        self.unmount(m)

    def test_remount_sends_zero_list(self):
        self.built()
        self.unmount(self.mount("ds", self.idx))
        self.proxy.reset()
        m = self.mount("ds", self.idx)
        self.assertEqual(len(os.listdir(m.path("train"))), self.train_keys)
        os.stat(m.path("sp", "plain.txt"))
        stats = json.loads(os.getxattr(m.dir, "user.bucketfs.stats"))
        self.assertEqual(sum(e["requests"] for e in stats["endpoints"]), 0,
                         stats)
        self.assertEqual(self.proxy.count("LIST"), 0)
        self.unmount(m)

    def test_publish_and_index_url(self):
        self.built()
        r = harness.run([harness.binary("bucketfs-index"), "publish",
                         f"s3://{self.bucket}/ds",
                         *self.opts(f"index={self.idx}")], env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        url = re.search(r"-o index_url=(\S+)", r.stdout.decode()).group(1)
        self.assertTrue(url.startswith(f"s3://{self.bucket}/.bucketfs/"), url)
        cache = os.path.join(self.tmp, "host-b")
        env = dict(self.env, XDG_CACHE_HOME=cache)
        self.proxy.reset()
        m = self.mount("ds", None, f"index_url={url}", env=env)
        self.assertEqual(len(os.listdir(m.path("train"))), self.train_keys)
        self.assertIn("fetched and verified the published index", m.output())
        self.assertEqual(self.proxy.count("LIST"), 0)
        self.unmount(m)
        r = harness.run([harness.binary("bucketfs-index"), "unpublish",
                         f"s3://{self.bucket}/ds", *self.opts()],
                        env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr.decode())

    def test_writable_probe_file(self):
        s = self.signer()
        s.put(self.bucket, "w/train/x.bin", b"x")
        m = self.mount("w", os.path.join(self.tmp, "w.idx"), "writable")
        probe = m.path("train", ".probe-host-a")
        with open(probe, "wb") as f:
            f.write(b"probe\n")
        st = os.stat(probe)
        self.assertEqual(st.st_size, 6)
        status, _, body = s.request("GET", harness.key_path(
            self.bucket, "w/train/.probe-host-a"))
        self.assertEqual((status, body), (200, b"probe\n"))
        os.unlink(probe)
        self.assertFalse(os.path.exists(probe))
        status, _, _ = s.request("HEAD", harness.key_path(
            self.bucket, "w/train/.probe-host-a"))
        self.assertEqual(status, 404)
        os.mkdir(m.path("valid"))
        status, _, _ = s.request("HEAD", harness.key_path(self.bucket,
                                                          "w/valid/"))
        self.assertEqual(status, 200)
        with self.assertRaises(OSError) as cm:
            os.link(m.path("train", "x.bin"), m.path("valid", "x.bin"))
        self.assertEqual(cm.exception.errno, errno.EXDEV)
        os.rmdir(m.path("valid"))
        self.unmount(m)

    def test_writable_multipart_checkpoint(self):
        # A checkpoint as DLIO writes one: makedirs, open("wb"), 1 MiB
        # writes, fsync, close; streamed in 8 MiB parts (2.5 of them),
        # read back byte-exact through the mount (past write_max: by the
        # readahead) and from S3, no upload left behind.
        import xml.etree.ElementTree as ET
        s = self.signer()
        m = self.mount("wmp", os.path.join(self.tmp, "wmp.idx"), "writable",
                       "part_size=8388608", "write_parts=2",
                       "write_max=10000000")
        os.makedirs(m.path("step1"), exist_ok=True)
        data = os.urandom(20 << 20)
        with open(m.path("step1", "rank0.pt"), "wb") as f:
            for off in range(0, len(data), 1 << 20):
                f.write(data[off:off + (1 << 20)])
            f.flush()
            os.fsync(f.fileno())
        status, _, body = s.request("GET", harness.key_path(
            self.bucket, "wmp/step1/rank0.pt"))
        self.assertEqual((status, sha(body)), (200, sha(data)))
        with open(m.path("step1", "rank0.pt"), "rb") as f:
            self.assertEqual(sha(f.read()), sha(data))
        try:
            _, _, text = s.check("ListMultipartUploads", s.request(
                "GET", "/" + self.bucket, query="prefix=wmp%2F&uploads="))
            left = [u for u in ET.fromstring(text).iter()
                    if u.tag.rpartition("}")[2] == "Upload"]
            self.assertEqual(left, [])
        except harness.NotImplementedByServer:
            pass  # s3rver 3.7 has no ListMultipartUploads (501)
        os.unlink(m.path("step1", "rank0.pt"))
        os.rmdir(m.path("step1"))
        self.unmount(m)

    def test_doctor_and_compare(self):
        r = harness.run([harness.binary("bucketfs-doctor"), *self.opts(),
                         f"s3://{self.bucket}/ds"], env=self.env)
        out = r.stdout.decode()
        self.assertEqual(r.returncode, 0, out + r.stderr.decode())
        self.assertNotIn("✗", out)
        for check in ("✓ ListObjectsV2", "✓ GET", "✓ clock skew"):
            self.assertIn(check, out)
        self.built()
        m = self.mount("ds", self.idx)
        r = harness.run([harness.binary("bucketfs-compare"), m.dir,
                         f"s3://{self.bucket}/ds", *self.opts(), "--content"],
                        env=self.env, timeout=600)
        out = r.stdout.decode()
        self.assertEqual(r.returncode, 0, out + r.stderr.decode())
        self.assertIn("result: the two sides match", out)
        self.unmount(m)


class TestServerConformance(Conformance, harness.MountCase):
    name = "the project's test server (tests/s3server)"

    @classmethod
    def make_server(cls):
        s = harness.TestServer()
        signer = harness.Signer(s.url)
        signer.create_bucket("conf")
        signer.close()
        return s, s.url, "conf", harness.AK, harness.SK


def _s3rver_unstorable():
    # s3rver keeps keys as file names and ignores encoding-type=url
    # (DESIGN.md, test_s3rver.py).
    return {
        "s3rver stores keys as file names: no '//', '/./' or '/../'":
            lambda k: "//" in k or "/." in k,
        "s3rver ignores encoding-type=url: a control character makes its "
        "listing invalid XML": lambda k: any(ord(c) < 32 for c in k),
    }


class S3rverConformance(Conformance, harness.MountCase):
    name = "s3rver"
    unstorable = _s3rver_unstorable()
    # ~250 PUT/s and 0.5 s per listed page: 25 pages would cost 100 s of
    # seeding per build (test_s3rver.py and docs/SCALE.md go further).
    train_keys = 5 * 1000 + 37

    @classmethod
    def make_server(cls):
        s = harness.S3rver("conf")
        return s, s.url, "conf", harness.S3rver.AK, harness.S3rver.SK


class RGWConformance(Conformance, harness.MountCase):
    name = "Ceph RGW"
    multipart_etag_parts = True
    @classmethod
    def make_server(cls):
        s = harness.RGW("conf", shared=True)
        return s, s.url, s.bucket, s.AK, s.SK


if __name__ == "__main__":
    harness.main()
