#!/usr/bin/env python3
"""FUSE passthrough of files fetched whole (fs/passthrough.h), asked for
with -o passthrough=always or auto (off by default): on a kernel that offers it
(Linux >= 6.9 built with CONFIG_FUSE_PASSTHROUGH) and with
CAP_SYS_ADMIN, INIT negotiates it and says so; a small file's open is
answered in passthrough from a memfd (counted in user.bucketfs.stats) and
its reads and mappings never reach the daemon, byte-exact; two processes
holding the same file open at once, and many opening it at the same
moment, all pass through with the node's one backing file; the GET's
body is the backing file, and idle memfds are reused, never while a
reader still maps one; auto passes through only what is here at open,
the rest direct_io, never both ways at once on a node; a file opened
while the node is open in cached mode (the first open fell back: its
memfd could not be made) is opened cached too, counted, with the right
bytes, and passes through again once those are closed; the default,
passthrough=off and direct_io= leave it off, and say why in the log."""

import errno
import json
import mmap
import multiprocessing
import os
import random
import resource
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

MiB = 1 << 20


def kernel_offers_passthrough():
    """FUSE passthrough came with Linux 6.9 (FUSE 7.40), if configured."""
    release = os.uname().release.split("-")[0].split(".")
    if tuple(int(x) for x in release[:2]) < (6, 9):
        return False
    for cfg in (f"/boot/config-{os.uname().release}", "/proc/config.gz"):
        if os.path.exists(cfg):
            import gzip
            opener = gzip.open if cfg.endswith(".gz") else open
            with opener(cfg, "rt") as f:
                return "CONFIG_FUSE_PASSTHROUGH=y" in f.read()
    return True  # no config to read: the INIT log line decides


def may_pass_through():
    return kernel_offers_passthrough() and os.geteuid() == 0


def read_all(path, chunk=65536):
    with open(path, "rb", buffering=0) as f:
        got = b""
        while c := f.read(chunk):
            got += c
        return got


def hold_and_read(path, ready, go, out):
    """A second process: opens @path, says so, reads once told to."""
    with open(path, "rb", buffering=0) as f:
        ready.set()
        go.wait(30)
        out.put(f.read())


def open_read_many(path, start, n, out):
    start.wait(30)
    data = None
    for _ in range(n):
        try:
            got = read_all(path)
        except OSError as e:
            out.put(repr(e))
            return
        if data is not None and got != data:
            out.put("reads differ")
            return
        data = got
    out.put(data)


class PassthroughTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-pt-")
        cls.server = harness.TestServer("--bucket",
                                        f"ptfs={cls.mkdir('pt-data')}")
        rnd = random.Random(2510)
        cls.objects = {f"f{i}.bin": rnd.randbytes(322_624 + i * 4099)
                       for i in range(6)}
        cls.objects["large.bin"] = rnd.randbytes(12 * MiB + 17)
        cls.objects["empty.bin"] = b""
        cls.objects["same.bin"] = rnd.randbytes(200_003)
        cls.objects["grows.bin"] = rnd.randbytes(150_001)
        # Below BUFPOOL_HEAP_MAX: bodies of the heap, written into memfds.
        for i in range(3):
            cls.objects[f"s{i}.bin"] = rnd.randbytes(20_000 + i * 777)
        for k, v in cls.objects.items():
            harness.put_object(cls.server.url, "ptfs", k, v)
        cls.idx = os.path.join(cls.tmp, "pt.idx")
        cls.build_index()

    @classmethod
    def build_index(cls):
        harness.build_index(cls.server.url, "ptfs", cls.idx)

    def mount(self, *opts, pt="passthrough=always"):
        log = os.path.join(self.tmp, f"m{time.monotonic_ns()}.log")
        m = Mount("s3://ptfs", self.server.url, self.idx,
                  *([pt] if pt else []), *opts, log=log)
        self.mounts.append(m)
        return m

    def stats(self, m):
        return json.loads(os.getxattr(m.dir, "user.bucketfs.stats"))

    def pt(self, m):
        return self.stats(m)["passthrough"]

    def setUp(self):
        super().setUp()
        if not may_pass_through():
            self.skipTest("no FUSE passthrough here (Linux < 6.9, no "
                          "CONFIG_FUSE_PASSTHROUGH, or not root)")

    def test_init_negotiates_and_small_files_pass_through(self):
        m = self.mount()
        self.assertTrue(m.wait_output("FUSE_PASSTHROUGH negotiated"),
                        m.output())
        s0 = self.stats(m)
        self.assertTrue(s0["passthrough"]["on"])
        for name in ("f0.bin", "f1.bin"):
            self.assertEqual(read_all(m.path(name), 4096),
                             self.objects[name])
        with open(m.path("f2.bin"), "rb") as f:
            with mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED,
                           prot=mmap.PROT_READ) as mm:
                self.assertEqual(mm[:], self.objects["f2.bin"])
        # Large and empty files are not fetched whole: never passed.
        self.assertEqual(read_all(m.path("large.bin"), MiB),
                         self.objects["large.bin"])
        self.assertEqual(read_all(m.path("empty.bin")), b"")
        s1 = self.stats(m)
        self.assertEqual(s1["passthrough"]["opens"]
                         - s0["passthrough"]["opens"], 3, s1)
        self.assertEqual(sum(s1["passthrough"]["fallbacks"].values()), 0)
        # No read of a small file reached the daemon, nor was any stored
        # in the page cache: only the large file's reads did.
        self.assertEqual(s1["files"]["handed_over"],
                         s0["files"]["handed_over"])
        self.assertGreater(s1["files"]["reads"], s0["files"]["reads"])
        reads = s1["files"]["reads"]
        for _ in range(3):
            self.assertEqual(read_all(m.path("f3.bin"), 1000),
                             self.objects["f3.bin"])
        self.assertEqual(self.stats(m)["files"]["reads"], reads)
        self.unmount(m)

    def test_two_processes_share_the_backing_file(self):
        m = self.mount()
        path = m.path("f4.bin")
        ctx = multiprocessing.get_context("fork")
        ready, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
        child = ctx.Process(target=hold_and_read,
                            args=(path, ready, go, out))
        child.start()
        try:
            self.assertTrue(ready.wait(30))
            # The child holds the node open in passthrough: this open
            # must name the same backing file, or the kernel fails it.
            with open(path, "rb") as f:
                self.assertEqual(f.read(), self.objects["f4.bin"])
                go.set()
                self.assertEqual(out.get(timeout=30), self.objects["f4.bin"])
        finally:
            go.set()
            child.join(30)
        self.assertEqual(child.exitcode, 0)
        pt = self.pt(m)
        self.assertEqual(pt["opens"], 2, pt)
        self.assertEqual(sum(pt["fallbacks"].values()), 0, pt)

        # Many processes opening one file at the same moment: every open
        # succeeds with the right bytes, in passthrough.
        start, out = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=open_read_many,
                             args=(m.path("f5.bin"), start, 10, out))
                 for _ in range(8)]
        for p in procs:
            p.start()
        start.set()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
            self.assertEqual(p.exitcode, 0)
        for r in results:
            self.assertEqual(r, self.objects["f5.bin"])
        pt = self.pt(m)
        self.assertEqual(pt["opens"], 2 + 80, pt)
        self.assertEqual(sum(pt["fallbacks"].values()), 0, pt)
        self.unmount(m)

    def test_open_while_open_cached(self):
        m = self.mount()
        # A small file: its body is on the heap, not a memfd of its own,
        # so its open needs a new memfd (the pool is empty).
        name = "s1.bin"
        # Fetched ahead, so that its open needs no socket.
        os.setxattr(m.dir, "user.bucketfs.prefetch", name.encode())
        deadline = time.monotonic() + 20
        while self.stats(m)["readahead"]["objects_fetched"] < 1 or \
                self.stats(m)["readahead"]["memory_used"] < \
                len(self.objects[name]):
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        time.sleep(0.3)  # its GET done, its buffer held
        pid = m.proc.pid
        limit = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        first = None
        try:
            # No descriptor left for a memfd: the open falls back to the
            # page cache, and the node is open cached.
            # The limit caps descriptor numbers, not their count: at the
            # lowest free number, no new one can be made.
            fds = {int(x) for x in os.listdir(f"/proc/{pid}/fd")}
            lowest = min(set(range(len(fds) + 1)) - fds)
            resource.prlimit(pid, resource.RLIMIT_NOFILE,
                             (lowest, limit[1]))
            first = open(m.path(name), "rb")
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, limit)
        try:
            pt = self.pt(m)
            self.assertEqual(pt["fallbacks"]["memfd"], 1, pt)
            self.assertEqual(pt["opens"], 0, pt)
            # Descriptors again, but the node is open cached: this open
            # is cached too (else the kernel would fail it).
            with open(m.path(name), "rb") as second:
                self.assertEqual(second.read(), self.objects[name])
            pt = self.pt(m)
            self.assertEqual(pt["fallbacks"]["cached"], 1, pt)
            self.assertEqual(pt["opens"], 0, pt)
            self.assertEqual(first.read(), self.objects[name])
            with open(m.path(name), "rb") as f:
                with mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED,
                               prot=mmap.PROT_READ) as mm:
                    self.assertEqual(mm[:], self.objects[name])
            self.assertEqual(self.pt(m)["fallbacks"]["cached"], 2)
        finally:
            first.close()
        # RELEASE is sent after close(2) returns: wait for the daemon.
        deadline = time.monotonic() + 10
        while True:
            self.assertEqual(read_all(m.path(name)), self.objects[name])
            if self.pt(m)["opens"] == 1:
                break
            self.assertLess(time.monotonic(), deadline, self.pt(m))
            time.sleep(0.05)
        self.unmount(m)

    def test_memfds_reused_and_mappings_kept(self):
        """A file's GET body is its backing file (lent, no copy); a small
        one's bytes, from the heap, go into a memfd of the pool, reused for
        the next file whatever its size.  Neither is written again while a
        reader still maps it after closing the file: the mappings keep
        their bytes while other files of other sizes churn both."""
        m = self.mount()
        self.assertTrue(m.wait_output("FUSE_PASSTHROUGH negotiated"),
                        m.output())
        names = [f"f{i}.bin" for i in range(6)] + \
            [f"s{i}.bin" for i in range(3)]
        for _ in range(3):
            for name in names:
                self.assertEqual(read_all(m.path(name)), self.objects[name])
        memfds = self.pt(m)["memfds"]
        if not memfds["reused_when_idle"]:
            self.assertIn("each file gets a new memfd", m.output())
        else:
            self.assertEqual(memfds["bodies_lent"], 18, memfds)
            # Sequential opens of the small files: one memfd, reused.
            self.assertLessEqual(memfds["made"], 2, memfds)
            self.assertGreaterEqual(memfds["reused"], 7, memfds)
        maps = []
        try:
            for name in ("f0.bin", "f5.bin", "s0.bin", "s2.bin"):
                with open(m.path(name), "rb") as f:
                    maps.append((name, mmap.mmap(
                        f.fileno(), 0, flags=mmap.MAP_SHARED,
                        prot=mmap.PROT_READ)))
            # Closed, mapped: the pools go on around them.
            for _ in range(4):
                for name in reversed(names):
                    self.assertEqual(read_all(m.path(name)),
                                     self.objects[name])
            for name, mm in maps:
                self.assertTrue(mm[:] == self.objects[name],
                                f"the mapping of {name} changed")
        finally:
            for _, mm in maps:
                mm.close()
        for name in names:
            self.assertEqual(read_all(m.path(name)), self.objects[name])
        pt = self.pt(m)
        self.assertEqual(sum(pt["fallbacks"].values()), 0, pt)
        self.assertEqual(pt["direct"], 0, pt)
        self.assertLessEqual(pt["memfds"]["idle"], 128, pt)
        self.unmount(m)

    def fetch_ahead(self, m, name):
        """Announces @name and waits until its object is here."""
        before = self.stats(m)["readahead"]["objects_fetched"]
        os.setxattr(m.dir, "user.bucketfs.prefetch", name.encode())
        deadline = time.monotonic() + 20
        while self.stats(m)["readahead"]["objects_fetched"] <= before or \
                self.stats(m)["readahead"]["memory_used"] < \
                len(self.objects[name]):
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        time.sleep(0.3)  # its GET done, its buffer held

    def test_auto_passes_through_what_is_here(self):
        """passthrough=auto: a file whose object is still to be fetched is
        opened direct_io (the open returns before its GET); one fetched
        ahead passes through; while a node is open direct_io, its other
        opens are too, even once its object is here (the kernel refuses a
        direct_io open of a node in passthrough).  Auto is the default.
        Hints only: a stream or lookup guess would fetch f2 ahead, and
        its open would pass through (the next test)."""
        for pt in ("passthrough=auto", None):
            with self.subTest(pt=pt):
                self.check_auto(self.mount("readahead=hints", pt=pt))

    def test_auto_waits_for_a_fetch_on_its_way(self):
        """passthrough=auto: the open of a file whose GET is on its way
        (announced here; a stream or a lookup guess alike) waits for it
        and passes through, so that no READ of it reaches the daemon; the
        object is fetched once.  Its open fails with the GET's error."""
        m = self.mount(pt=None)
        self.assertTrue(m.wait_output("FUSE_PASSTHROUGH negotiated"),
                        m.output())
        self.server.faults([{"op": "GET", "key_regex": "^s0\\.bin$",
                             "kind": "delay", "seconds": 1.0, "count": 1}])
        try:
            before = self.stats(m)
            os.setxattr(m.dir, "user.bucketfs.prefetch", b"s0.bin")
            deadline = time.monotonic() + 20
            while self.stats(m)["readahead"]["objects_fetched"] == \
                    before["readahead"]["objects_fetched"]:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.02)
            # Its GET is waiting out the delay now.
            self.assertEqual(read_all(m.path("s0.bin")),
                             self.objects["s0.bin"])
        finally:
            self.server.clear_faults()
        after = self.stats(m)
        self.assertEqual(after["passthrough"]["opens"],
                         before["passthrough"]["opens"] + 1, after)
        self.assertEqual(after["passthrough"]["direct"],
                         before["passthrough"]["direct"], after)
        self.assertEqual(after["files"]["reads"], before["files"]["reads"])
        self.assertEqual(after["readahead"]["objects_fetched"],
                         before["readahead"]["objects_fetched"] + 1, after)
        self.assertEqual(after["readahead"]["prefetch_hits"],
                         before["readahead"]["prefetch_hits"] + 1, after)

        # A GET on its way that fails: the open fails, with the cause.
        self.server.faults([{"op": "GET", "key_regex": "^s1\\.bin$",
                             "kind": "status", "status": 403,
                             "code": "AccessDenied"}])
        try:
            os.setxattr(m.dir, "user.bucketfs.prefetch", b"s1.bin")
            with self.assertRaises(OSError) as cm:
                read_all(m.path("s1.bin"))
            self.assertEqual(cm.exception.errno, errno.EACCES)
        finally:
            self.server.clear_faults()
        self.assertTrue(m.wait_output("AccessDenied"), m.output())
        self.unmount(m)

    def check_auto(self, m):
        self.assertTrue(m.wait_output("FUSE_PASSTHROUGH negotiated"),
                        m.output())
        self.assertEqual(read_all(m.path("f0.bin")), self.objects["f0.bin"])
        pt = self.pt(m)
        self.assertEqual((pt["direct"], pt["opens"]), (1, 0), pt)

        self.fetch_ahead(m, "f1.bin")
        with open(m.path("f1.bin"), "rb") as f:
            with mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED,
                           prot=mmap.PROT_READ) as mm:
                self.assertEqual(mm[:], self.objects["f1.bin"])
        pt = self.pt(m)
        self.assertEqual((pt["direct"], pt["opens"]), (1, 1), pt)

        with open(m.path("f2.bin"), "rb", buffering=0) as held:
            self.assertEqual(held.read(), self.objects["f2.bin"])
            # Its object is here now, but the node is open direct_io.
            for _ in range(3):
                self.assertEqual(read_all(m.path("f2.bin")),
                                 self.objects["f2.bin"])
            pt = self.pt(m)
            self.assertEqual((pt["direct"], pt["opens"]), (5, 1), pt)
        self.assertEqual(sum(pt["fallbacks"].values()), 0, pt)
        self.unmount(m)

    def test_refresh_while_held_open(self):
        """After a SIGHUP to an index where the object changed (the same
        size, or now too large to fetch whole), a new open of the node a
        reader holds open in passthrough fails ESTALE, logged with the
        key, never gets the old object's bytes (or the kernel's EIO); once
        the reader closes, the new object's bytes."""
        rnd = random.Random(2511)
        cases = (("same.bin", rnd.randbytes(200_003)),
                 ("grows.bin", rnd.randbytes(12 * MiB + 5)))
        try:
            for name, new in cases:
                with self.subTest(name=name):
                    # A mount each: one SIGHUP per mount.
                    m = self.mount()
                    self.assertTrue(
                        m.wait_output("FUSE_PASSTHROUGH negotiated"),
                        m.output())
                    path = m.path(name)
                    old = self.objects[name]
                    held = open(path, "rb", buffering=0)
                    try:
                        self.assertEqual(held.read(), old)
                        harness.put_object(self.server.url, "ptfs", name,
                                           new)
                        self.build_index()
                        m.proc.send_signal(signal.SIGHUP)
                        self.assertTrue(
                            m.wait_output("SIGHUP: now serving"),
                            m.output())
                        # The node the kernel knows is in passthrough
                        # from the old object: ESTALE, after which the
                        # kernel may look the name up again and open the
                        # new node.  Never the old bytes.
                        try:
                            got = read_all(path, MiB)
                        except OSError as e:
                            self.assertEqual(e.errno, errno.ESTALE,
                                             m.output())
                        else:
                            self.assertEqual(len(got), len(new))
                            self.assertTrue(got == new, "not the new bytes")
                        self.assertTrue(m.wait_output(
                            f"open '{name}': Stale file handle"),
                            m.output())
                        pt = self.pt(m)
                        self.assertEqual(pt["stale"], 1, pt)
                        # The reader still reads its object.
                        held.seek(0)
                        self.assertEqual(held.read(), old)
                    finally:
                        held.close()
                    # RELEASE comes after close(2) returns.
                    deadline = time.monotonic() + 10
                    while True:
                        try:
                            got = read_all(path, MiB)
                            break
                        except OSError as err:
                            self.assertEqual(err.errno, errno.ESTALE)
                            self.assertLess(time.monotonic(), deadline)
                            time.sleep(0.05)
                    self.assertEqual(got, new)
                    self.unmount(m)
        finally:
            for name, _ in cases:
                harness.put_object(self.server.url, "ptfs", name,
                                   self.objects[name])
            self.build_index()

    def test_turned_off(self):
        for pt, opts, why in (
                # The default is auto, but not with direct_io=none.
                (None, ("direct_io=none",), "direct_io=none keeps files"),
                ("passthrough=off", (), "-o passthrough=off"),
                ("passthrough=auto", ("direct_io=all",),
                 "direct_io= is small or all"),
                ("passthrough=auto", ("direct_io=small",),
                 "direct_io= is small or all")):
            with self.subTest(pt=pt, opts=opts):
                m = self.mount(*opts, pt=pt)
                self.assertTrue(m.wait_output("no FUSE passthrough"),
                                m.output())
                self.assertIn(why, m.output())
                self.assertEqual(read_all(m.path("f0.bin")),
                                 self.objects["f0.bin"])
                with open(m.path("f0.bin"), "rb") as f:
                    with mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED,
                                   prot=mmap.PROT_READ) as mm:
                        self.assertEqual(mm[:], self.objects["f0.bin"])
                pt = self.pt(m)
                self.assertFalse(pt["on"])
                self.assertEqual(pt["opens"], 0)
                self.unmount(m)
        with self.assertRaises(RuntimeError) as e:
            self.mount("passthrough=maybe")
        self.assertIn("option 'passthrough': 'maybe' is not",
                      str(e.exception))


if __name__ == "__main__":
    harness.main()
