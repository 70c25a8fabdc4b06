#!/usr/bin/env python3
"""`bucketfs-index publish` of a large index as a multipart upload: an
index above --multipart-above goes in parts of --part-size, the
object is the same bytes, its ETag the multipart "-N" one, and a mount
with -o index_url= fetches and uses it as before.  At the threshold it is
still one PUT.  A part or a Complete that fails for good: exit 1 with the
cause chain, the upload aborted (none left on the server), the index
published before untouched.  A part failing twice with 500 is retried.
Ceph RGW takes the same upload.  Bad sizes: exit 2, and no request at
all."""

import os
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

MiB = 1 << 20
# About 66 bytes a key: an index of ~6.6 MB, 2 parts of 5 MiB (S3's
# smallest but the last, which the test server enforces too).
N = 100000
PUB = "s3://pubs/big.idx"


class PublishPartsTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-pubparts-")
        pubs = os.path.join(cls.tmp, "pubs")
        os.makedirs(pubs)
        cls.server = harness.TestServer("--synthetic", f"dset:{N}",
                                        "--bucket", f"pubs={pubs}")
        cls.index = os.path.join(cls.tmp, "dset.idx")
        cls.env = harness.client_env(
            XDG_CACHE_HOME=os.path.join(cls.tmp, "cache"))
        cls.signer = harness.Signer(cls.server.url)
        try:
            r = cls.tool_run("build", "-q")
            assert r.returncode == 0, r.stderr.decode()
            with open(cls.index, "rb") as f:
                cls.bytes = f.read()
        except BaseException:
            # unittest calls no tearDownClass after a failed setUpClass.
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.signer.conn is not None:
            cls.signer.conn.close()
        super().tearDownClass()

    @classmethod
    def tool_run(cls, cmd, *args):
        return harness.run([harness.binary("bucketfs-index"), cmd,
                            "s3://dset/train", "-o",
                            f"endpoint={cls.server.url},index={cls.index}",
                            *args], env=cls.env, timeout=600)

    def publish(self, *args):
        return self.tool_run("publish", "--to", PUB, *args)

    def ops(self):
        return dict(self.server.stats()["requests"])

    def head_etag(self):
        status, h, _ = self.signer.request("HEAD", "/pubs/big.idx")
        self.assertEqual(status, 200)
        return h["etag"]

    def published(self):
        status, _, body = self.signer.request("GET", "/pubs/big.idx")
        self.assertEqual(status, 200)
        return body

    def uploads(self):
        _, _, text = self.signer.check(
            "ListMultipartUploads",
            self.signer.request("GET", "/pubs", query="uploads="))
        return [u for u in ET.fromstring(text).iter()
                if u.tag.rpartition("}")[2] == "Upload"]

    def one_put(self):
        """Publishes the index with one PUT: the 'earlier index'."""
        r = self.publish()
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn("one PUT", r.stdout.decode())
        etag = self.head_etag()
        self.assertNotIn("-", etag)
        return etag

    def tearDown(self):
        self.server.clear_faults()
        super().tearDown()

    def test_parts_and_the_mount_reads_them(self):
        self.assertGreater(len(self.bytes), 5 * MiB)
        before = self.ops()
        r = self.publish("--multipart-above=1M", "--part-size=5M")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        out = r.stdout.decode()
        self.assertIn(f"2 parts of {5 * MiB} bytes", out)
        after = self.ops()
        self.assertEqual(after["UPLOADPART"] - before.get("UPLOADPART", 0),
                         2)
        self.assertEqual(after["COMPLETE"] - before.get("COMPLETE", 0), 1)
        self.assertEqual(after["PUT"], before["PUT"], "no plain PUT")
        etag = self.head_etag()
        self.assertTrue(etag.strip('"').endswith("-2"), etag)
        self.assertIn(f"etag:         {etag}", out)
        self.assertEqual(self.published(), self.bytes)
        self.assertEqual(self.uploads(), [])

        # The reader side is the same: fetched, verified, listed.
        log = os.path.join(self.tmp, "mount.log")
        m = harness.Mount("s3://dset/train", self.server.url, None,
                          f"index_url={PUB}", log=log, env=harness.client_env(
                              XDG_CACHE_HOME=os.path.join(self.tmp, "h2")))
        self.mounts.append(m)
        self.assertIn("fetched and verified the published index",
                      m.output())
        lists = self.ops()["LIST"]
        self.assertEqual(len(os.listdir(m.dir)), N)
        self.assertEqual(self.ops()["LIST"], lists)
        self.unmount(m)

    def test_threshold_is_inclusive_for_one_put(self):
        size = len(self.bytes)
        r = self.publish(f"--multipart-above={size}", "--part-size=5M")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn("one PUT", r.stdout.decode())
        r = self.publish(f"--multipart-above={size - 1}")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        # The default part size, 16 MiB: one part, the last.
        self.assertIn(f"1 parts of {16 * MiB} bytes", r.stdout.decode())
        self.assertTrue(self.head_etag().strip('"').endswith("-1"))
        self.assertEqual(self.published(), self.bytes)

    def test_failed_part_publishes_nothing(self):
        etag = self.one_put()
        self.server.faults([{"op": "UPLOADPART", "kind": "status",
                             "status": 403, "code": "AccessDenied"}])
        r = self.publish("--multipart-above=1M", "--part-size=5M")
        self.assertEqual(r.returncode, 1)
        err = r.stderr.decode()
        self.assertIn("HTTP 403 AccessDenied", err)
        self.assertIn("the multipart upload (2 parts of", err)
        self.assertIn("nothing was published: s3://pubs/big.idx is as it "
                      "was", err)
        self.assertIn("aborted", err)
        self.server.clear_faults()
        self.assertEqual(self.head_etag(), etag)
        self.assertEqual(self.published(), self.bytes)
        self.assertEqual(self.uploads(), [])

    def test_failed_complete_publishes_nothing(self):
        etag = self.one_put()
        self.server.faults([{"op": "COMPLETE", "kind": "status",
                             "status": 403, "code": "AccessDenied"}])
        r = self.publish("--multipart-above=1M", "--part-size=5M")
        self.assertEqual(r.returncode, 1)
        err = r.stderr.decode()
        self.assertIn("HTTP 403 AccessDenied", err)
        self.assertIn("nothing was published", err)
        self.server.clear_faults()
        self.assertEqual(self.head_etag(), etag)
        self.assertEqual(self.uploads(), [])

    def test_part_retried(self):
        before = self.ops()
        self.server.faults([{"op": "UPLOADPART", "kind": "status",
                             "status": 500, "count": 2}])
        r = self.publish("--multipart-above=1M", "--part-size=5M",
                         "-o", "max_attempts=3")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(self.ops()["UPLOADPART"]
                         - before.get("UPLOADPART", 0), 4)
        self.assertTrue(self.head_etag().strip('"').endswith("-2"))
        self.assertEqual(self.published(), self.bytes)
        self.assertEqual(self.uploads(), [])

    def test_parts_on_rgw(self):
        """Ceph RGW takes the same upload: the bytes back, its "-2" ETag,
        no upload left."""
        rgw = harness.RGW("pubparts")
        try:
            s = harness.Signer(rgw.url, rgw.AK, rgw.SK)
            r = harness.run(
                [harness.binary("bucketfs-index"), "publish",
                 "s3://dset/train", "--to", f"s3://{rgw.bucket}/big.idx",
                 "--multipart-above=1M", "--part-size=5M", "-o",
                 f"endpoint={rgw.url},index={self.index}"],
                env=harness.client_env(AWS_ACCESS_KEY_ID=rgw.AK,
                                       AWS_SECRET_ACCESS_KEY=rgw.SK),
                timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr.decode())
            self.assertIn(f"2 parts of {5 * MiB} bytes", r.stdout.decode())
            status, h, body = s.request("GET", f"/{rgw.bucket}/big.idx")
            self.assertEqual(status, 200)
            self.assertEqual(body, self.bytes)
            self.assertTrue(h["etag"].strip('"').endswith("-2"), h["etag"])
            _, _, text = s.check("ListMultipartUploads",
                                 s.request("GET", f"/{rgw.bucket}",
                                           query="uploads="))
            self.assertFalse([u for u in ET.fromstring(text).iter()
                              if u.tag.rpartition("}")[2] == "Upload"])
            s.close()
        finally:
            rgw.stop()

    def test_bad_sizes_send_nothing(self):
        before = self.ops()
        for args, want in [
                (["--part-size=4M"], "--part-size: '4M' is not a size "
                 f"between {5 * MiB} and {5 << 30} bytes"),
                (["--part-size=6G"], "--part-size: '6G'"),
                (["--part-size=12Q"], "--part-size: '12Q'"),
                (["--part-size="], "--part-size: ''"),
                (["--multipart-above=6G"], "--multipart-above: '6G' is not "
                 f"a size between 0 and {5 << 30} bytes"),
                (["--multipart-above=-1"], "--multipart-above: '-1'"),
                (["--multipart-above=99999999999999999999"],
                 "--multipart-above: '99999999999999999999'")]:
            r = self.publish(*args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(want, r.stderr.decode(), args)
        self.assertEqual(self.ops(), before)


if __name__ == "__main__":
    harness.main()
