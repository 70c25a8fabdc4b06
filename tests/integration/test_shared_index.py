#!/usr/bin/env python3
"""The shared index: one host publishes the index with
`bucketfs-index publish`, the others mount with -o index_url= and fetch it
instead of listing.  Each "host" is a mount with its own cache directory
(XDG_CACHE_HOME).  Also: a corrupt, a foreign and a missing published
index are refused (or fall back) with their cause logged, an unchanged one
is not downloaded again, SIGHUP fetches a new one, and PUT/DELETE errors
are classified like GET's."""

import os
import signal
import stat
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

# The dataset: s3://dset/train is what the hosts mount.
TRAIN = {f"train/img_{i:03d}_of_250.jpeg": bytes([i % 251]) * (100 + i)
         for i in range(250)}
TRAIN["train/sub/deeper.bin"] = b"deeper\n"
OTHER = {"a.txt": b"other bucket\n"}
PUB = "s3://pubs/ds-train.idx"


def walk(root):
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def expected(objects, prefix):
    return {k[len(prefix):]: v for k, v in objects.items()
            if k.startswith(prefix)}


class Host:
    """A cache directory standing for one host."""

    def __init__(self, tmp, name):
        self.cache = os.path.join(tmp, name)
        os.makedirs(self.cache)
        self.env = harness.client_env(XDG_CACHE_HOME=self.cache)

    def index_files(self):
        out = []
        for d, _, files in os.walk(self.cache):
            out += [os.path.join(d, f) for f in files]
        return out


class SharedIndexTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-shared-")
        cls.server = harness.TestServer(
            "--bucket", f"dset={cls.populate('ds-data', TRAIN)}",
            "--bucket", f"other={cls.populate('other-data', OTHER)}",
            "--bucket", f"pubs={cls.populate('pub-data', {})}")
        cls.hosts = 0

    @classmethod
    def populate(cls, name, objects):
        root = os.path.join(cls.tmp, name)
        os.makedirs(root)
        for k, v in objects.items():
            os.makedirs(os.path.dirname(os.path.join(root, k)),
                        exist_ok=True)
            with open(os.path.join(root, k), "wb") as f:
                f.write(v)
        return root

    # -- helpers ---------------------------------------------------------

    new_added = aged_added = False

    def train(self):
        """What s3://dset/train holds now, relative to the prefix."""
        t = expected(TRAIN, "train/")
        if self.new_added:
            t["new.txt"] = b"new\n"
        if self.aged_added:
            t["aged.txt"] = b"aged\n"
        return t

    def host(self):
        type(self).hosts += 1
        return Host(self.tmp, f"host{self.hosts}")

    def tool(self, host, *args):
        return harness.run([harness.binary("bucketfs-index"), *args, "-o",
                            f"endpoint={self.server.url}"], env=host.env)

    def publish(self, host, url, *args):
        r = self.tool(host, "publish", url, *args)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        return r

    def mount(self, host, url, *opts):
        log = os.path.join(self.tmp, f"mount-{time.monotonic_ns()}.log")
        m = harness.Mount(url, self.server.url, None, *opts, log=log,
                          env=host.env, may_fail=True)
        self.mounts.append(m)
        return m

    def count(self, op):
        return self.server.stats()["requests"][op]

    def published_bytes(self, host):
        files = [f for f in host.index_files() if f.endswith(".idx")]
        self.assertEqual(len(files), 1, files)
        with open(files[0], "rb") as f:
            return f.read()

    # -- one listing for four hosts --------------------------------------

    def test_four_hosts_one_listing(self):
        publisher = self.host()
        lists0 = self.count("LIST")
        r = self.publish(publisher, "s3://dset/train", "--to", PUB)
        self.assertIn(f"index_url={PUB}", r.stdout.decode())
        lists = self.count("LIST")
        self.assertGreater(lists, lists0, "publish built by listing")
        self.assertGreaterEqual(self.count("PUT"), 1)

        hosts = [self.host() for _ in range(4)]
        gets0 = self.count("GET")
        mounts = [self.mount(h, "s3://dset/train", f"index_url={PUB}")
                  for h in hosts]
        want = expected(TRAIN, "train/")
        for h, m in zip(hosts, mounts):
            self.assertIsNone(m.failed, m.output())
            self.assertIn("fetched and verified the published index",
                          m.output())
            self.assertEqual(walk(m.dir), want)
            # The fetched copy: 0600 in a 0700 directory, the same bytes.
            idx = [f for f in h.index_files() if f.endswith(".idx")]
            self.assertEqual(len(idx), 1, h.index_files())
            self.assertEqual(stat.S_IMODE(os.stat(idx[0]).st_mode), 0o600)
            self.assertEqual(
                stat.S_IMODE(os.stat(os.path.dirname(idx[0])).st_mode),
                0o700)
            self.assertFalse([f for f in h.index_files() if ".fetch-" in f])
        self.assertEqual(self.count("LIST"), lists,
                         "a mount with index_url listed the bucket")
        self.assertGreaterEqual(self.count("GET"), gets0 + 4)
        # Same st_ino for the same path on every "host".
        inos = {os.stat(os.path.join(m.dir, "sub", "deeper.bin")).st_ino
                for m in mounts}
        self.assertEqual(len(inos), 1)

        # An unchanged published index is not downloaded again.
        self.unmount(mounts[0])
        gets, heads = self.count("GET"), self.count("HEAD")
        again = self.mount(hosts[0], "s3://dset/train", f"index_url={PUB}")
        self.assertIsNone(again.failed, again.output())
        self.assertIn("unchanged", again.output())
        self.assertEqual(self.count("GET"), gets)
        self.assertGreater(self.count("HEAD"), heads)
        self.assertEqual(walk(again.dir), want)

        # A new publish, then SIGHUP: fetched, not listed.
        harness.put_object(self.server.url, "dset", "train/new.txt", b"new\n")
        type(self).new_added = True
        self.publish(publisher, "s3://dset/train", "--to", PUB, "--build")
        lists = self.count("LIST")
        m = mounts[1]
        # (readdir, not a lookup: a negative entry would be cached.)
        self.assertNotIn("new.txt", os.listdir(m.dir))
        m.proc.send_signal(signal.SIGHUP)
        self.assertTrue(m.wait_output("SIGHUP: now serving"), m.output())
        self.assertEqual(m.output().count("fetched and verified"), 2,
                         m.output())
        self.assertIn("new.txt", os.listdir(m.dir))
        with open(os.path.join(m.dir, "new.txt"), "rb") as f:
            self.assertEqual(f.read(), b"new\n")
        self.assertEqual(self.count("LIST"), lists)
        for x in [again] + mounts[1:]:
            self.unmount(x)

    def test_index_max_age_fetches_again(self):
        publisher = self.host()
        url = "s3://pubs/aging.idx"
        self.publish(publisher, "s3://dset/train", "--to", url)
        h = self.host()
        m = self.mount(h, "s3://dset/train", f"index_url={url}",
                       "index_max_age=1")
        self.assertIsNone(m.failed, m.output())
        harness.put_object(self.server.url, "dset", "train/aged.txt",
                           b"aged\n")
        type(self).aged_added = True
        self.publish(publisher, "s3://dset/train", "--to", url, "--build")
        lists = self.count("LIST")
        self.assertTrue(m.wait_output("index_max_age: now serving"),
                        m.output())
        self.assertIn("aged.txt", os.listdir(m.dir))
        self.assertEqual(self.count("LIST"), lists)
        self.unmount(m)

    # -- refusals --------------------------------------------------------

    def test_corrupt_published_index_is_refused(self):
        publisher = self.host()
        self.publish(publisher, "s3://dset/train", "--to",
                     "s3://pubs/good.idx")
        good = self.published_bytes(publisher)
        # A byte of the body (index_open's O(1) check passes, the full
        # verification does not) and a byte of the header.
        for where, offset in (("body", len(good) // 2), ("header", 10)):
            with self.subTest(where=where):
                bad = bytearray(good)
                bad[offset] ^= 0x5a
                harness.put_object(self.server.url, "pubs", f"bad-{where}",
                                   bytes(bad))
                url = f"s3://pubs/bad-{where}"
                h = self.host()
                m = self.mount(h, "s3://dset/train", f"index_url={url}",
                               "index_url_fallback=fail")
                self.assertEqual(m.failed, 1, "a corrupt index mounted")
                out = m.output()
                self.assertIn(f"published index {url}", out)
                self.assertIn("refusing it", out)
                self.assertIn("index_url_fallback=fail", out)
                self.assertEqual(h.index_files(), [],
                                 "the corrupt download was left behind")

                # Default fallback: listed, the right tree, never the
                # corrupt file.
                lists = self.count("LIST")
                m = self.mount(h, "s3://dset/train", f"index_url={url}")
                self.assertIsNone(m.failed, m.output())
                self.assertIn("not using the published index", m.output())
                self.assertIn("refusing it", m.output())
                self.assertGreater(self.count("LIST"), lists)
                self.assertEqual(walk(m.dir), self.train())
                self.assertNotEqual(self.published_bytes(h), bytes(bad))
                self.unmount(m)

    def test_foreign_published_index_is_refused(self):
        publisher = self.host()
        # Another bucket's index, published outside its tree.
        self.publish(publisher, "s3://other", "--to", "s3://pubs/other.idx")
        h = self.host()
        m = self.mount(h, "s3://dset/train", "index_url=s3://pubs/other.idx",
                       "index_url_fallback=fail")
        self.assertEqual(m.failed, 1, m.output())
        self.assertIn("refusing it", m.output())
        self.assertIn("s3://other/", m.output())
        self.assertEqual(h.index_files(), [])
        m = self.mount(h, "s3://dset/train", "index_url=s3://pubs/other.idx")
        self.assertIsNone(m.failed, m.output())
        self.assertEqual(walk(m.dir), self.train())
        self.unmount(m)

    def test_missing_published_index(self):
        h = self.host()
        url = "s3://pubs/nothing-here.idx"
        m = self.mount(h, "s3://dset/train", f"index_url={url}",
                       "index_url_fallback=fail")
        self.assertEqual(m.failed, 1, m.output())
        self.assertIn("HEAD s3://pubs/nothing-here.idx", m.output())
        self.assertIn("HTTP 404", m.output())
        # Documented default: the cause is logged and the bucket listed.
        lists = self.count("LIST")
        m = self.mount(h, "s3://dset/train", f"index_url={url}")
        self.assertIsNone(m.failed, m.output())
        self.assertIn("not using the published index", m.output())
        self.assertIn("HTTP 404", m.output())
        self.assertGreater(self.count("LIST"), lists)
        self.assertEqual(walk(m.dir), self.train())
        self.unmount(m)
        # With a valid local index and the published one gone, the local
        # one is served: no listing.
        lists = self.count("LIST")
        m = self.mount(h, "s3://dset/train", f"index_url={url}")
        self.assertIsNone(m.failed, m.output())
        self.assertIn("HTTP 404", m.output())
        self.assertEqual(self.count("LIST"), lists)
        self.unmount(m)

    def test_symlink_index_path_is_not_replaced(self):
        publisher = self.host()
        self.publish(publisher, "s3://dset/train", "--to",
                     "s3://pubs/link.idx")
        h = self.host()
        target = os.path.join(h.cache, "elsewhere")
        link = os.path.join(h.cache, "link.idx")
        os.symlink(target, link)
        m = self.mount(h, "s3://dset/train", "index_url=s3://pubs/link.idx",
                       f"index={link}")
        self.assertEqual(m.failed, 1, "mounted through a symlink")
        self.assertIn("is a symbolic link", m.output())
        self.assertTrue(os.path.islink(link))
        self.assertFalse(os.path.exists(target))

    # -- the default location, unpublish, PUT/DELETE errors --------------

    def test_default_location_and_unpublish(self):
        publisher = self.host()
        r = self.publish(publisher, "s3://dset/train")
        url = "s3://dset/.bucketfs/index-v1/train/index"
        self.assertIn(f"index_url={url}", r.stdout.decode())
        h = self.host()
        m = self.mount(h, "s3://dset/train", f"index_url={url}")
        self.assertIsNone(m.failed, m.output())
        self.assertIn("fetched and verified", m.output())
        self.unmount(m)
        # A whole-bucket index would lie inside its own tree.
        r = self.tool(publisher, "publish", "s3://dset")
        self.assertEqual(r.returncode, 2)
        self.assertIn("inside s3://dset/", r.stderr.decode())
        r = self.tool(publisher, "publish", "s3://dset/train", "--to",
                      "s3://dset/train/x.idx")
        self.assertEqual(r.returncode, 2)
        # unpublish deletes it (DELETE), then the mount falls back.
        deletes = self.count("DELETE")
        r = self.tool(publisher, "unpublish", "s3://dset/train")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(self.count("DELETE"), deletes + 1)
        h2 = self.host()
        m = self.mount(h2, "s3://dset/train", f"index_url={url}",
                       "index_url_fallback=fail")
        self.assertEqual(m.failed, 1, m.output())
        self.assertIn("HTTP 404", m.output())

    def test_put_and_delete_errors(self):
        publisher = self.host()
        # Transient: retried like a GET.
        self.server.faults([{"op": "PUT", "kind": "status", "status": 503,
                             "count": 2}])
        self.publish(publisher, "s3://dset/train", "--to", "s3://pubs/r.idx",
                     "-o", "max_attempts=3")
        # Final: the whole cause chain and the exit status.
        self.server.faults([{"op": "PUT", "kind": "status", "status": 403,
                             "code": "AccessDenied"}])
        r = self.tool(publisher, "publish", "s3://dset/train", "--to",
                      "s3://pubs/r.idx")
        self.assertEqual(r.returncode, 1)
        err = r.stderr.decode()
        self.assertIn("PUT s3://pubs/r.idx via", err)
        self.assertIn("HTTP 403 AccessDenied", err)
        self.assertIn("RequestId", err)
        self.server.faults([{"op": "DELETE", "kind": "status",
                             "status": 500, "count": 1}])
        r = self.tool(publisher, "unpublish", "s3://dset/train", "--to",
                      "s3://pubs/r.idx")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.server.faults([{"op": "DELETE", "kind": "status",
                             "status": 403}])
        r = self.tool(publisher, "unpublish", "s3://dset/train", "--to",
                      "s3://pubs/r.idx")
        self.assertEqual(r.returncode, 1)
        self.assertIn("DELETE s3://pubs/r.idx via", r.stderr.decode())
        self.assertIn("HTTP 403", r.stderr.decode())
        self.server.clear_faults()
        # The signed payload hash is checked by the server: a good PUT
        # went through above, and the object is what was published.
        r = self.tool(publisher, "publish", "s3://dset/train", "--to",
                      "s3://pubs/r.idx")
        self.assertEqual(r.returncode, 0, r.stderr.decode())


if __name__ == "__main__":
    harness.main()
