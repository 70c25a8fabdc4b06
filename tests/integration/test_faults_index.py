#!/usr/bin/env python3
"""The fault matrix, part 2: listing faults during an index build, and the
index file itself (see docs/RELIABILITY.md).

Listing faults (malformed XML, empty pages that are still truncated, a
continuation token that repeats, the server killed mid-listing) hit
`bucketfs-index build` and a first mount.  A build that fails exits 1 with
one line naming the range and the cause; a mount with no index refuses to
start; an index that was there is byte-identical afterwards and a remount
serves it without a single LIST.

The index file: wrong format version, a flipped body byte, a planted
symlink, a full disk while writing, and SIGKILL during a build.  None of
them is ever served: the index is rebuilt, or there is a clear error.  The
truncated, header-flipped, empty and foreign files and the symlink at the
index path itself are in test_mount.py (test_bad_index_files_are_rebuilt,
test_symlinked_index_is_refused).
"""

import errno
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402

sys.path.insert(0, os.path.join(harness.SRC, "tests", "s3server"))
import s3server  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

BIG = 20000             # keys of the listing-fault bucket: 20 pages
BIG_SIZE = 64
KILL = 200000           # keys of the SIGKILL bucket
# A failed build must end well within this (it is "doesn't hang", not a
# performance bound): max_attempts=3 with backoff and 2 s connects.
BOUND = 90
FAST = "max_attempts=3,retry_deadline=0,connect_timeout=2,stall_timeout=5"


# -- XXH64, to reseal a header we changed (the index's checksum) ----------

P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F,
                      0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                      0x27D4EB2F165667C5)
M64 = (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, v):
    acc = (acc + v * P2) & M64
    return (_rotl(acc, 31) * P1) & M64


def xxh64(data, seed=0):
    n = len(data)
    i = 0
    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed,
             (seed - P1) & M64]
        while i + 32 <= n:
            for j in range(4):
                v[j] = _round(v[j], struct.unpack_from("<Q", data,
                                                       i + 8 * j)[0])
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) +
             _rotl(v[3], 18)) & M64
        for j in range(4):
            h = ((h ^ _round(0, v[j])) * P1 + P4) & M64
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", data, i)[0])
        h = (_rotl(h, 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * P1) & M64
        h = (_rotl(h, 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M64
        h = (_rotl(h, 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    return h ^ (h >> 32)


def reseal_header(buf):
    """Recomputes the header checksum (docs/INDEX-FORMAT.md: bytes 16..23,
    XXH64 of the header with those bytes taken as zero)."""
    hlen = struct.unpack_from("<I", buf, 12)[0]
    h = bytearray(buf[:hlen])
    h[16:24] = bytes(8)
    struct.pack_into("<Q", buf, 16, xxh64(bytes(h)))


def section(buf, k):
    """(offset, length) of section k from the header's descriptors."""
    off, ln = struct.unpack_from("<QQ", buf, 144 + 24 * k)
    return off, ln


# -- the tests -------------------------------------------------------------

def big_key(i, n=BIG):
    return f"train/img_{i:0{len(str(n))}d}_of_{n}.jpeg"


class Base(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-faults-index-")
        cls.server = harness.TestServer(
            "--synthetic", f"big:{BIG}:{BIG_SIZE}",
            "--synthetic", f"kill:{KILL}:16")

    def index(self, name):
        d = os.path.join(self.tmp, name)
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, "i.idx")

    def build(self, bucket, idx, opts=FAST, url=None, timeout=BOUND):
        t0 = time.monotonic()
        r = harness.run([harness.binary("bucketfs-index"), "build", "-q",
                         "-o", f"endpoint={url or self.server.url},"
                         f"index={idx},{opts}", f"s3://{bucket}"],
                        timeout=timeout)
        return r, time.monotonic() - t0

    def mount(self, bucket, idx, *opts, url=None):
        log = os.path.join(self.tmp, f"mount-{time.monotonic_ns()}.log")
        m = Mount(f"s3://{bucket}", url or self.server.url, idx, *opts,
                  log=log)
        self.mounts.append(m)
        return m

    def failed_mount(self, bucket, idx, *opts, url=None):
        """A mount that must refuse to start; returns its output."""
        t0 = time.monotonic()
        with self.assertRaises(RuntimeError) as cm:
            self.mount(bucket, idx, *opts, url=url)
        self.assertLess(time.monotonic() - t0, BOUND)
        return str(cm.exception)

    def good_index(self, name, bucket="big"):
        idx = self.index(name)
        r, _ = self.build(bucket, idx)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(idx, "rb") as f:
            return idx, f.read()

    def assert_only_index(self, idx, present=True):
        """Nothing but the index (if @present) in its directory: no
        temporary, stream or spool file left behind."""
        left = sorted(os.listdir(os.path.dirname(idx)))
        self.assertEqual(left, ["i.idx"] if present else [])

    def assert_complete(self, idx, bucket="big", n=BIG):
        m = self.mount(bucket, idx)
        names = sorted(os.listdir(m.path("train")))
        self.assertEqual(names, [big_key(i, n)[6:] for i in range(n)])
        self.assertNotIn("rebuilding", m.output())
        self.unmount(m)

    def assert_serves_old(self, idx, old, bucket="big", n=BIG, url=None):
        """@idx is byte-identical to @old, and a mount serves it without
        listing; its bytes are the server's."""
        with open(idx, "rb") as f:
            self.assertEqual(f.read(), old, "the old index was changed")
        before = self.server.stats()["requests"]["LIST"] if url is None \
            else None
        m = self.mount(bucket, idx, url=url)
        names = os.listdir(m.path("train"))
        self.assertEqual(len(names), n)
        key = big_key(n // 2, n)
        with open(m.path(key), "rb") as f:
            self.assertEqual(f.read(), s3server.synthetic_bytes(
                bucket, key.encode(), os.stat(m.path(key)).st_size))
        if before is not None:
            self.assertEqual(self.server.stats()["requests"]["LIST"],
                             before)
        self.assertNotIn("rebuilding", m.output())
        self.unmount(m)


class ListingFaults(Base):
    """Listing faults during `bucketfs-index build` and a first mount."""

    def check_failing_fault(self, name, rules, cause):
        self.server.control("POST", "stats/reset")
        idx, old = self.good_index(name)
        n = self.server.stats()["requests"]["LIST"]
        # The fault lands on the first LIST (plan), on the probes that cut
        # the key space, and on the parallel range listings (skip).
        for skip in (0, 1, n // 2, n - 3):
            with self.subTest(skip=skip):
                self.server.faults([dict(r, skip=skip) for r in rules])
                r, secs = self.build("big", idx)
                err = r.stderr.decode()
                self.assertLess(secs, BOUND)
                self.server.clear_faults()
                if r.returncode == 0 and skip == n - 3:
                    # Near the end a fault may be harmless (a range that
                    # is complete never follows its token): then the
                    # index must be complete and right.
                    self.assert_complete(idx)
                    with open(idx, "rb") as f:
                        old = f.read()
                    continue
                self.assertEqual(r.returncode, 1, err)
                self.assertRegex(err, r"^bucketfs-index: listing s3://big/")
                self.assertRegex(err, cause)
                self.assertEqual(err.count("\n"), 1, err)
                self.assert_only_index(idx)
                self.assert_serves_old(idx, old)
        # A first mount (no index) refuses to start, and leaves nothing.
        fresh = self.index(name + "-fresh")
        self.server.faults(rules)
        out = self.failed_mount("big", fresh, FAST)
        self.assertIn("cannot mount s3://big/", out)
        self.assertRegex(out, r"listing s3://big/")
        self.assertRegex(out, cause)
        self.assertFalse(os.path.exists(fresh))
        self.assert_only_index(fresh, present=False)
        # A mount over the old index needs no listing: it serves.
        self.assert_serves_old(idx, old)

    def test_malformed_xml(self):
        self.check_failing_fault(
            "malformed",
            [{"op": "LIST", "kind": "malformed_xml"}],
            r"LIST s3://big/ via http://\S+ \(attempt [1-3]/3, [\d.]+ s\): "
            r"malformed ListObjectsV2 response: line \d+: .*\(RequestId: ")

    def test_repeated_continuation_token(self):
        self.check_failing_fault(
            "repeat",
            [{"op": "LIST", "kind": "repeat_token"}],
            r"continuation token '[^']+' repeats after \d+ pages: the server "
            r"is looping")

    def test_empty_truncated_pages_are_followed(self):
        # Empty pages that are still truncated are legal S3: the listing
        # must follow them and the index must hold every key, whether the
        # empty page is the very first one or lands anywhere later.
        for rules in ([{"op": "LIST", "kind": "empty_truncated",
                        "count": 1}],
                      [{"op": "LIST", "kind": "empty_truncated",
                        "count": 3}],
                      [{"op": "LIST", "kind": "empty_truncated",
                        "probability": 0.3}]):
            with self.subTest(rules=rules):
                idx = self.index(f"empty-{time.monotonic_ns()}")
                self.server.faults(rules, seed=7)
                r, _ = self.build("big", idx)
                self.assertEqual(r.returncode, 0, r.stderr)
                hits = sum(x["hits"] for x in
                           self.server.control("GET", "faults")["rules"])
                self.assertGreater(hits, 0)
                self.server.clear_faults()
                m = self.mount("big", idx)
                names = sorted(os.listdir(m.path("train")))
                self.assertEqual(names, [big_key(i)[6:] for i in range(BIG)])
                self.unmount(m)
        # And a first mount through them.
        idx = self.index("empty-mount")
        self.server.faults([{"op": "LIST", "kind": "empty_truncated",
                             "probability": 0.3}], seed=3)
        m = self.mount("big", idx)
        self.assertEqual(len(os.listdir(m.path("train"))), BIG)
        self.unmount(m)

    def test_server_killed_mid_listing(self):
        idx, old = self.good_index("killed")
        fresh = self.index("killed-fresh")
        for what in ("build", "mount"):
            with self.subTest(what=what):
                srv = harness.TestServer("--synthetic",
                                         f"big:{BIG}:{BIG_SIZE}")
                try:
                    # Slow pages, so the listing is surely in flight.
                    srv.faults([{"op": "LIST", "kind": "delay",
                                 "seconds": 0.1}])
                    args = [f"endpoint={srv.url}", FAST]
                    if what == "build":
                        p = subprocess.Popen(
                            [harness.binary("bucketfs-index"), "build",
                             "-q", "-o", ",".join(args + [f"index={idx}"]),
                             "s3://big"], env=harness.client_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                    else:
                        mnt = tempfile.mkdtemp(prefix="bfs-killed-",
                                               dir=self.tmp)
                        p = subprocess.Popen(
                            [harness.binary("bucketfs"), "-f", "-o",
                             ",".join(args + [f"index={fresh}",
                                             "list_workers=4"]),
                             "s3://big", mnt], env=harness.client_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                    self.procs.append(p)
                    deadline = time.monotonic() + 30
                    while srv.stats()["requests"]["LIST"] < 8:
                        if p.poll() is not None:
                            self.fail(p.stderr.read())
                        self.assertLess(time.monotonic(), deadline)
                        time.sleep(0.05)
                    srv.proc.kill()
                    srv.proc.wait()
                    t0 = time.monotonic()
                    out, err = p.communicate(timeout=BOUND)
                    self.assertLess(time.monotonic() - t0, BOUND)
                finally:
                    srv.stop()
                err = err.decode()
                self.assertEqual(p.returncode, 1, err)
                self.assertRegex(err, r"listing s3://big/")
                self.assertRegex(err, r"attempt 3/3.*(Couldn't connect|"
                                 r"Connection refused|Recv failure|"
                                 r"reset|Empty reply)")
                if what == "build":
                    self.assert_only_index(idx)
                    self.assert_serves_old(idx, old)
                else:
                    self.assertIn("cannot mount s3://big/", err)
                    self.assertFalse(os.path.ismount(mnt))
                    self.assertFalse(os.path.exists(fresh))
                    self.assert_only_index(fresh, present=False)
                    os.rmdir(mnt)


class IndexFileFaults(Base):
    """The index file: wrong version, a flipped body byte, a planted
    symlink, a full disk, SIGKILL during a build."""

    def test_wrong_version_is_rebuilt(self):
        idx, good = self.good_index("version")
        buf = bytearray(good)
        struct.pack_into("<I", buf, 8, 2)
        reseal_header(buf)
        with open(idx, "wb") as f:
            f.write(buf)
        r = harness.run([harness.binary("bucketfs-index"), "info", "-o",
                         f"endpoint={self.server.url},index={idx}",
                         "s3://big"])
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"format version 2, this bucketfs reads version 1",
                      r.stderr)
        before = self.server.stats()["requests"]["LIST"]
        m = self.mount("big", idx)
        self.assertEqual(len(os.listdir(m.path("train"))), BIG)
        self.assertRegex(m.output(), r"format version 2, this bucketfs reads"
                         r" version 1.*rebuilding|rebuilding.*format "
                         r"version 2")
        self.assertGreater(self.server.stats()["requests"]["LIST"], before)
        self.unmount(m)
        with open(idx, "rb") as f:
            self.assertEqual(f.read(8), b"BFSINDX\n")
        r = harness.run([harness.binary("bucketfs-index"), "verify", "-o",
                         f"endpoint={self.server.url},index={idx}",
                         "s3://big"])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_flipped_body_byte_is_caught_and_rebuilt(self):
        # The header check at open is O(1); the body is checked in the
        # background after mounting, and a corrupt one is rebuilt.
        idx, good = self.good_index("flip")
        off, ln = section(good, 3)          # 'names'
        buf = bytearray(good)
        buf[off + ln // 2] ^= 0x01
        with open(idx, "wb") as f:
            f.write(buf)
        r = harness.run([harness.binary("bucketfs-index"), "verify", "-o",
                         f"endpoint={self.server.url},index={idx}",
                         "s3://big"])
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"checksum mismatch", r.stderr)
        m = self.mount("big", idx)
        deadline = time.monotonic() + BOUND
        while "rebuilt after a failed check: now serving" not in m.output():
            self.assertLess(time.monotonic(), deadline, m.output())
            time.sleep(0.1)
        self.assertRegex(m.output(), r"the index being served is corrupt; "
                         r"rebuilding it: .*checksum mismatch")
        names = sorted(os.listdir(m.path("train")))
        self.assertEqual(names, [big_key(i)[6:] for i in range(BIG)])
        self.unmount(m)

    def test_planted_symlink_is_not_followed_by_a_build(self):
        # A symlink at the index path: the build replaces the link itself
        # (rename), and never writes through it.
        victim = os.path.join(self.tmp, "victim")
        with open(victim, "wb") as f:
            f.write(b"precious")
        idx = self.index("symlink")
        os.symlink(victim, idx)
        r, _ = self.build("big", idx)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.islink(idx))
        with open(victim, "rb") as f:
            self.assertEqual(f.read(), b"precious")
        self.assert_only_index(idx)

    def tmpfs(self, name, size):
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}",
                            "tmpfs", d], capture_output=True)
        if r.returncode != 0:
            self.skipTest(f"cannot mount a tmpfs: {r.stderr!r}")
        self.addCleanup(lambda: (subprocess.run(["umount", d]),
                                 os.rmdir(d)))
        return d

    def test_disk_full_while_writing(self):
        # An empty 64 KiB cache dir: 20,000 keys overflow it.
        d = self.tmpfs("full-empty", "64k")
        idx = os.path.join(d, "i.idx")
        r, secs = self.build("big", idx)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertLess(secs, BOUND)
        err = r.stderr.decode()
        self.assertIn("No space left on device", err)
        self.assertEqual(err.count("\n"), 1, err)
        self.assertEqual(os.listdir(d), [], "a partial file was left")
        # A first mount with that cache dir refuses, and says why.
        out = self.failed_mount("big", idx)
        self.assertIn("cannot mount s3://big/", out)
        self.assertIn("No space left on device", out)
        self.assertEqual(os.listdir(d), [])

        # An old index that fits, but a rebuild does not: the old one
        # stays, byte-identical, and is served.
        idx2, old = self.good_index("full-src")
        d2 = self.tmpfs("full-old", f"{len(old) + 256 * 1024}")
        idx = os.path.join(d2, "i.idx")
        shutil.copyfile(idx2, idx)
        r, _ = self.build("big", idx)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"No space left on device", r.stderr)
        self.assertEqual(os.listdir(d2), ["i.idx"])
        self.assert_serves_old(idx, old)

    def kill_build(self, idx, when):
        """Starts a build of 'kill' and SIGKILLs it when @when(proc) says
        so; returns how far it got (the server's LIST count)."""
        self.server.control("POST", "stats/reset")
        p = subprocess.Popen(
            [harness.binary("bucketfs-index"), "build", "-q", "-o",
             f"endpoint={self.server.url},index={idx},{FAST}",
             "s3://kill"], env=harness.client_env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.procs.append(p)
        deadline = time.monotonic() + BOUND
        while not when(p):
            if p.poll() is not None:
                return None   # finished first
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.002)
        p.kill()
        p.wait()
        p.stderr.close()
        return self.server.stats()["requests"]["LIST"]

    def test_sigkill_during_build(self):
        idx = self.index("kill")
        d = os.path.dirname(idx)

        def lists(n):
            return lambda p: self.server.stats()["requests"]["LIST"] >= n

        def committing(p):
            # The final file is being written: a temporary file beside
            # the index (named, or an O_TMPFILE one) is open.
            try:
                fds = os.listdir(f"/proc/{p.pid}/fd")
            except FileNotFoundError:
                return False
            for fd in fds:
                try:
                    t = os.readlink(f"/proc/{p.pid}/fd/{fd}")
                except OSError:
                    continue
                if t.startswith(d + "/.i.idx.tmp-"):
                    return True
            return False

        # 1. A first build killed while listing, then while committing:
        # nothing at the path; the next mount builds afresh.
        for when in (lists(5), lists(60), committing):
            with self.subTest(first=when):
                got = self.kill_build(idx, when)
                self.assertIsNotNone(got, "the build ended before the "
                                     "kill: make the bucket bigger")
                self.assertFalse(os.path.exists(idx))
        leftovers = sorted(os.listdir(d))
        m = self.mount("kill", idx)
        self.assertEqual(len(os.listdir(m.path("train"))), KILL)
        for name in leftovers:
            self.assertIn(f"index: removed {d}/{name}, left by an "
                          "interrupted build", m.output())
        self.unmount(m)
        # Whatever a kill left is cleaned by the next build.
        self.assertEqual(sorted(os.listdir(d)), ["i.idx"],
                         f"left by SIGKILL: {leftovers}")
        with open(idx, "rb") as f:
            old = f.read()

        # 2. With an index in place: it stays byte-identical and served.
        for when in (lists(5), committing):
            with self.subTest(rebuild=when):
                got = self.kill_build(idx, when)
                self.assertIsNotNone(got)
                with open(idx, "rb") as f:
                    self.assertEqual(f.read(), old)
        r = harness.run([harness.binary("bucketfs-index"), "verify", "-o",
                         f"endpoint={self.server.url},index={idx}",
                         "s3://kill"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_serves_old(idx, old, bucket="kill", n=KILL)
        r, _ = self.build("kill", idx)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_only_index(idx)


if __name__ == "__main__":
    harness.main()
