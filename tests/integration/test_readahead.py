#!/usr/bin/env python3
"""The readahead engine through a real mount: whole-object prefetch, large
objects read through growing windows, random reads, listing-order and
hinted prefetch, one fetch per object in use, the memory budget, several
endpoints with one dead, and the live counters."""

import errno
import json
import os
import random
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402

MiB = 1 << 20


def in_threads(fn, arg_lists):
    """Runs fn(*args) for each of @arg_lists in its own thread, at once,
    and waits for all."""
    ts = [threading.Thread(target=fn, args=a) for a in arg_lists]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


class ReadaheadTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.tmp = tempfile.mkdtemp(prefix="bfs-ra-")
        data = os.path.join(cls.tmp, "data")
        os.makedirs(os.path.join(data, "small"))
        rnd = random.Random(11)
        cls.small = {}
        for i in range(40):
            name = f"small/f{i:03d}.bin"
            cls.small[name] = rnd.randbytes(rnd.randrange(1000, 400_000))
        # A loader's dataset: 8 workers x 6 rounds of batches of 24.
        os.makedirs(os.path.join(data, "loader"))
        cls.loader = {f"loader/s{i:05d}.bin": rnd.randbytes(2000 + i % 7)
                      for i in range(8 * 6 * 24)}
        cls.big = rnd.randbytes(40 * MiB + 12345)
        cls.mid = rnd.randbytes(3 * MiB)
        for name, body in [*cls.small.items(), *cls.loader.items(),
                           ("big.bin", cls.big),
                           ("mid.bin", cls.mid)]:
            with open(os.path.join(data, name), "wb") as f:
                f.write(body)
        cls.server = harness.TestServer("--bucket", f"rahead={data}")

    def mount(self, *opts, endpoints=None):
        eps = endpoints or [self.server.url]
        log = os.path.join(self.tmp, f"m{time.monotonic_ns()}.log")
        extra = [f"endpoint={e}" for e in eps[1:]]
        m = Mount("s3://rahead", eps[0], os.path.join(self.tmp, "ra.idx"),
                  *extra, *opts, log=log)
        self.mounts.append(m)
        return m

    def gets(self):
        return self.server.stats()["requests"]["GET"]

    def stats(self, m):
        return json.loads(os.getxattr(m.dir, "user.bucketfs.stats"))

    def settled_stats(self, m):
        """The counters once no GET is queued or in flight."""
        deadline = time.monotonic() + 10
        while True:
            st = self.stats(m)
            if st["queued"] == 0 and st["readahead"]["prefetch_queued"] == 0 \
                    and all(e["inflight"] == 0 for e in st["endpoints"]):
                return st
            self.assertLess(time.monotonic(), deadline, st)
            time.sleep(0.02)

    def test_small_object_is_one_get(self):
        m = self.mount()
        before = self.gets()
        with open(m.path("mid.bin"), "rb") as f:
            got = b""
            while chunk := f.read(128 * 1024):
                got += chunk
        self.assertEqual(got, self.mid)
        self.assertEqual(self.gets() - before, 1)

    def test_io_block_sizes_buffered_reads(self):
        """st_blksize is a file's size rounded up to a power of two,
        between 4 KiB and 1 MiB, so a buffered reader takes a file fetched
        whole in one read: PIL's way of opening an image (16 bytes, back
        to 0, then 64 KiB at a time through open()'s BufferedReader) makes
        3 FUSE reads of a 315 KB file under direct_io (the file, then end
        of file twice), where a 4 KiB st_blksize made 7."""
        m = self.mount("direct_io=small")
        for name, body in [*self.small.items(), ("big.bin", self.big),
                           ("mid.bin", self.mid)]:
            want = 4096
            while want < len(body) and want < MiB:
                want *= 2
            self.assertEqual(os.stat(m.path(name)).st_blksize, want, name)
        self.assertEqual(os.stat(m.path("small")).st_blksize, 4096)
        name, body = max(((n, b) for n, b in self.small.items()
                          if len(b) < 400_000), key=lambda nb: len(nb[1]))
        before = self.stats(m)["files"]["reads"]
        with open(m.path(name), "rb") as f:
            self.assertEqual(f.read(16), body[:16])
            f.seek(0)
            got = b""
            while chunk := f.read(65536):
                got += chunk
        self.assertEqual(got, body)
        self.assertEqual(self.stats(m)["files"]["reads"] - before, 3,
                         (name, len(body)))

    def test_same_object_fetched_once_while_open(self):
        m = self.mount()
        before = self.gets()
        f1 = open(m.path("small", "f001.bin"), "rb")
        f2 = open(m.path("small", "f001.bin"), "rb", buffering=0)
        self.assertEqual(f1.read(), self.small["small/f001.bin"])
        os.posix_fadvise(f2.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        self.assertEqual(f2.read(), self.small["small/f001.bin"])
        f1.close()
        f2.close()
        self.assertEqual(self.gets() - before, 1)

    def test_large_object_sequential_windows(self):
        m = self.mount()
        before = self.gets()
        r = subprocess.run(["dd", f"if={m.path('big.bin')}", "of=/dev/stdout",
                            "bs=1M", "status=none"], capture_output=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, self.big)
        # 8 MiB parts: 6 GETs, not one per 128 KiB or 1 MiB read, though
        # the kernel's readahead sends its 1 MiB reads in any order.
        self.assertEqual(self.gets() - before, 6)
        st = self.stats(m)["readahead"]
        self.assertEqual(st["parts_fetched"], 6)
        self.assertEqual(st["direct_reads"], 0)

    def test_kernel_readahead(self):
        """Root mounts raise the mount's read_ahead_kb to kernel_readahead
        (2 MiB by default); 0 leaves FUSE's 128 KiB; a bad value is
        refused before mounting."""
        def read_ahead_kb(m):
            dev = os.stat(m.dir).st_dev
            with open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/"
                      "read_ahead_kb") as f:
                return int(f.read())

        m = self.mount()
        self.assertEqual(read_ahead_kb(m), 2048)
        with open(m.path("big.bin"), "rb") as f:
            self.assertEqual(f.read(), self.big)
        m.unmount()
        self.mounts.remove(m)
        m = self.mount("kernel_readahead=0")
        self.assertEqual(read_ahead_kb(m), 128)
        m.unmount()
        self.mounts.remove(m)
        m = self.mount("kernel_readahead=16777216")
        self.assertEqual(read_ahead_kb(m), 16384)
        # The kernel's 1 MiB reads of a 16 MiB batch arrive in any order:
        # still one stream, each part fetched once.
        before = self.gets()
        r = subprocess.run(["dd", f"if={m.path('big.bin')}", "of=/dev/stdout",
                            "bs=1M", "status=none"], capture_output=True)
        self.assertEqual(r.stdout, self.big)
        self.assertEqual(self.gets() - before, 6)
        self.assertEqual(self.stats(m)["readahead"]["direct_reads"], 0)
        m.unmount()
        self.mounts.remove(m)
        with self.assertRaises(RuntimeError) as cm:
            self.mount("kernel_readahead=4G")
        self.assertIn("option 'kernel_readahead': '4G' is not a number",
                      str(cm.exception))

    def test_large_object_random_reads(self):
        m = self.mount()
        rnd = random.Random(5)
        with open(m.path("big.bin"), "rb", buffering=0) as f:
            for _ in range(60):
                off = rnd.randrange(0, len(self.big) + 10)
                n = rnd.choice([1, 4096, 100_000, MiB])
                f.seek(off)
                self.assertEqual(f.read(n), self.big[off:off + n], off)

    def test_listing_order_prefetch(self):
        for opts in ((), ("direct_io=none",)):
            with self.subTest(opts=opts):
                self.check_listing_order_prefetch(self.mount(*opts))

    def check_listing_order_prefetch(self, m):
        names = sorted(self.small)
        for n in names:
            with open(m.path(n), "rb") as f:
                self.assertEqual(f.read(), self.small[n])
        st = self.settled_stats(m)
        self.assertGreater(st["readahead"]["prefetch_hits"], 20, st)
        self.assert_reads_per_file(m, st, len(names))

    def assert_reads_per_file(self, m, st, files):
        """Under direct_io=none, files here at their open were handed to
        the page cache whole: their reads never reached the daemon.  Under
        the default, where direct_io files map, none is: each read(2) is
        a READ answered from the object's bytes, a few per file."""
        handed = st["files"]["handed_over"]
        if "direct_io=none" in m.opts or not m.direct_io_maps():
            self.assertGreater(handed, 0, st)
        else:
            self.assertEqual(handed, 0, st)
        self.assertLessEqual(st["files"]["reads"], (files - handed) * 8, st)

    def test_hint_prefetches_in_order(self):
        m = self.mount()
        order = list(self.small)
        random.Random(3).shuffle(order)
        before = self.gets()
        os.setxattr(m.dir, "user.bucketfs.prefetch",
                    "\n".join(order[:10]).encode())
        deadline = time.monotonic() + 10
        while self.gets() - before < 10:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.02)
        for n in order[:10]:
            with open(m.path(n), "rb") as f:
                self.assertEqual(f.read(), self.small[n])
        self.assertEqual(self.gets() - before, 10)
        self.assertEqual(self.stats(m)["readahead"]["prefetch_hits"], 10)
        # Unknown paths are ignored; other names and the tree stay
        # read-only.
        os.setxattr(m.dir, "user.bucketfs.prefetch", b"no/such\n")
        with self.assertRaises(OSError) as cm:
            os.setxattr(m.path("mid.bin"), "user.x", b"1")
        self.assertEqual(cm.exception.errno, errno.EROFS)

    def test_readahead_switch_turns_each_source_off(self):
        """-o readahead=: hints only, streams only, lookups only, two of
        them, none; each read still right, one GET per file, and the other
        sources' counters at 0."""
        names = sorted(self.small)
        hinted = names[20:30]
        for value, hints_on, streams_on, lookups_on in (
                ("hints", True, False, False),
                ("streams", False, True, False),
                ("lookups", False, False, True),
                ("hints+streams", True, True, False),
                ("none", False, False, False)):
            with self.subTest(readahead=value):
                m = self.mount(f"readahead={value}")
                before = self.gets()
                os.setxattr(m.dir, "user.bucketfs.prefetch",
                            "\n".join(hinted).encode())
                deadline = time.monotonic() + 10
                while hints_on and self.gets() - before < len(hinted):
                    self.assertLess(time.monotonic(), deadline)
                    time.sleep(0.02)
                for n in names:  # listing order: a stream
                    with open(m.path(n), "rb") as f:
                        self.assertEqual(f.read(), self.small[n])
                st = self.settled_stats(m)
                ra = st["readahead"]
                self.assertEqual(self.gets() - before, len(names), st)
                self.assertEqual(ra["stream_fetched"] > 0, streams_on, st)
                self.assertEqual(ra["lookup_fetched"] > 0, lookups_on, st)
                self.assertEqual(st["lookups"]["fetched"] > 0, lookups_on,
                                 st)
                self.assertEqual(ra["prefetch_hits"] - ra["stream_hits"] -
                                 ra["lookup_hits"] > 0, hints_on, st)
                if not (hints_on or streams_on or lookups_on):
                    self.assertEqual(ra["prefetch_hits"], 0, st)
                m.unmount()
                self.mounts.remove(m)
        for bad in ("some", "hints+", "+streams", "", "all+hints",
                    "hints+hint"):
            with self.subTest(bad=bad), \
                    self.assertRaises(RuntimeError) as cm:
                self.mount(f"readahead={bad}")
            self.assertIn(f"option 'readahead': '{bad}' is "
                          "not all, none, or sources joined by '+'",
                          str(cm.exception))

    def test_lookup_starts_the_fetch_before_the_open(self):
        """A loader in random order: each file's LOOKUP starts its GET (a
        lookup guess the OPEN then finds), one GET per file, bytes right.
        A stat of many files and no open (du) fetches at most the credit
        those opens earned (64 at most); once those fetches are 2 s old
        and unopened, the credit is spent, and a second sweep fetches
        nothing.  (On a fresh mount a stat fetches nothing: test_conformance
        test_remount_sends_zero_list.)"""
        m = self.mount()
        order = sorted(self.small)
        random.Random(5).shuffle(order)
        before = self.gets()
        for n in order:
            with open(m.path(n), "rb") as f:
                self.assertEqual(f.read(), self.small[n])
        st = self.settled_stats(m)
        self.assertEqual(self.gets() - before, len(order), st)
        self.assertGreaterEqual(st["lookups"]["lookups"], len(order), st)
        self.assertEqual(st["lookups"]["followed"], len(order), st)
        self.assertGreater(st["readahead"]["lookup_hits"], 0, st)
        self.assertEqual(st["readahead"]["lookup_hits"],
                         st["readahead"]["lookup_fetched"], st)

        sweep = sorted(self.loader)
        half = len(sweep) // 2
        before = self.gets()
        for n in sweep[:half]:
            os.stat(m.path(n))
        st = self.settled_stats(m)
        self.assertGreaterEqual(st["lookups"]["lookups"], len(order) + half,
                                st)
        self.assertLessEqual(self.gets() - before, 64, st)
        time.sleep(2.2)
        before = self.gets()
        for n in sweep[half:]:
            os.stat(m.path(n))
        st = self.settled_stats(m)
        self.assertEqual(self.gets() - before, 0, st)
        self.assertEqual(st["lookups"]["credit"], 0, st)
        self.assertEqual(st["lookups"]["wasted"],
                         st["lookups"]["fetched"] - st["lookups"]["hits"], st)

    def test_hint_overtaken_by_readers_is_not_fetched_again(self):
        # A reader ahead of the prefetcher opens announced files whose
        # fetch has not started (depth 2): those are fetched on demand
        # once, their announcements used up, and the prefetcher goes on
        # with the rest instead of fetching them again for nobody.
        m = self.mount("prefetch_depth=2")
        order = sorted(self.small)[:12]
        before = self.gets()
        os.setxattr(m.dir, "user.bucketfs.prefetch", "\n".join(order).encode())
        # No two opens in listing order, which would announce more.
        for i in (11, 9, 7, 10, 8, 6, 5, 3, 1, 4, 2, 0):
            with open(m.path(order[i]), "rb") as f:
                self.assertEqual(f.read(), self.small[order[i]])
        st = self.stats(m)["readahead"]
        self.assertEqual(self.gets() - before, 12, st)
        # The prefetcher, held at depth 2 until files 0 and 1 were opened,
        # got to file 2 first (1 was opened before it), not to the others.
        self.assertEqual(st["prefetch_hits"], 3, st)
        self.assertEqual(st["prefetch_late"], 9, st)
        self.assertEqual(st["prefetch_queued"], 0, st)
        self.assertEqual(st["prefetch_wasted"], 0, st)

    def test_memory_budget_bounds_prefetch(self):
        m = self.mount("memory_max=1000000")
        before = self.gets()
        os.setxattr(m.dir, "user.bucketfs.prefetch",
                    "\n".join(sorted(self.small)).encode())
        time.sleep(0.5)
        st = self.stats(m)["readahead"]
        self.assertLessEqual(st["memory_used"], 1_000_000)
        self.assertGreater(st["prefetch_queued"], 0)
        self.assertLess(self.gets() - before, len(self.small))
        # Demand reads still go through.
        with open(m.path("mid.bin"), "rb") as f:
            self.assertEqual(f.read(), self.mid)

    def test_dead_endpoint_among_several(self):
        dead = f"http://127.0.0.1:{harness.free_port()}"
        m = self.mount("max_attempts=4",
                       endpoints=[self.server.url, dead,
                                  f"http://localhost:{self.server.port}"])
        errors = []

        def reader(names):
            for n in names:
                try:
                    with open(m.path(n), "rb") as f:
                        if f.read() != self.small[n]:
                            errors.append(f"{n}: wrong bytes")
                except OSError as e:
                    errors.append(f"{n}: {e}")
        names = sorted(self.small)
        in_threads(reader, [(names[i::4],) for i in range(4)])
        self.assertEqual(errors, [])
        eps = {e["url"]: e for e in self.stats(m)["endpoints"]}
        self.assertEqual(eps[dead]["bytes"], 0)
        self.assertGreater(eps[self.server.url]["requests"], 0)
        self.assertIn(dead, m.output())

    def test_dlio_workers_prefetch_hits(self):
        """DLIO's pytorch loader: 8 workers, each reading whole batches of
        24 consecutive files in listing order (worker w: batches w, w+8,
        ...), at once.  The streams are found, the jump to each worker's
        next batch is learned, most opens find their file fetched ahead,
        and no file is fetched twice or for nothing."""
        m = self.mount()
        names = sorted(self.loader)
        before = self.gets()
        errors = []

        def worker(w):
            for b in range(w, len(names) // 24, 8):
                for n in names[24 * b:24 * b + 24]:
                    fd = os.open(m.path(n), os.O_RDONLY)
                    try:
                        got = b""
                        while chunk := os.read(fd, 65536):
                            got += chunk
                    finally:
                        os.close(fd)
                    if got != self.loader[n]:
                        errors.append(n)
        in_threads(worker, [(w,) for w in range(8)])
        self.assertEqual(errors, [])
        st = self.settled_stats(m)
        ra, streams = st["readahead"], st["streams"]
        # Fetched once each; the last batches' guesses run past the end
        # into files nobody opens (a few each).
        self.assertEqual(self.gets() - before,
                         len(names) + ra["prefetch_unopened"], st)
        self.assertLessEqual(ra["prefetch_unopened"], 8 * 4, st)
        self.assertEqual((streams["batch_len"], streams["batch_jump"]),
                         (24, 8 * 24 - 23), st)
        self.assertGreater(streams["jumps"], 0, st)
        self.assertGreaterEqual(ra["stream_hits"], len(names) // 2, st)
        self.assertEqual(ra["stream_wasted"], 0, st)
        self.assert_reads_per_file(m, st, len(names))
        print(f"\nDLIO pattern: {ra['stream_hits']} stream hits in "
              f"{len(names)} opens, {ra['stream_late']} late",
              file=sys.stderr)
        self.mounts.remove(m)
        self.assertEqual(m.unmount(), (0, 0))
        self.assertRegex(m.output(), r"streams: \d+ confirmed in 1152 opens")

    def test_random_order_prefetches_nothing(self):
        """The same files in random order by 8 readers: no stream is
        guessed, nothing is fetched ahead, one GET per file."""
        m = self.mount()
        names = sorted(self.loader)
        random.Random(17).shuffle(names)
        before = self.gets()

        def reader(part):
            for n in part:
                with open(m.path(n), "rb") as f:
                    f.read()
        in_threads(reader, [(names[i::8],) for i in range(8)])
        st = self.settled_stats(m)
        self.assertEqual(self.gets() - before, len(names), st)
        self.assertEqual(st["streams"]["announced"], 0, st)
        self.assertEqual(st["readahead"]["stream_fetched"], 0, st)
        self.assertEqual(st["readahead"]["prefetch_wasted"], 0, st)
        self.assertEqual(st["readahead"]["prefetch_unopened"], 0, st)

    def test_hint_and_stream_fetch_once(self):
        """A hint announcing the files a listing-order reader reads: each
        file is fetched once, whichever of the two gets to it first."""
        m = self.mount()
        names = sorted(self.loader)[:200]
        before = self.gets()
        for i, n in enumerate(names):
            if i == 100:
                # Over what the stream has fetched ahead and beyond.
                os.setxattr(m.dir, "user.bucketfs.prefetch",
                            "\n".join(names[90:150]).encode())
            with open(m.path(n), "rb") as f:
                self.assertEqual(f.read(), self.loader[n])
        st = self.settled_stats(m)
        # Past the last file read, the stream's lookahead fetched some
        # nobody opened: counted, and fetched once too.
        self.assertEqual(self.gets() - before,
                         len(names) + st["readahead"]["prefetch_unopened"], st)
        self.assertGreater(st["readahead"]["stream_hits"], 50, st)

    def test_unmount_with_hints_queued_and_fetches_in_flight(self):
        """Unmount while announced files wait and their GETs are in
        flight: the cancelled fetches start the next announced ones, which
        the closed engine refuses at once; the daemon must still exit (it
        hung in a self-deadlock on the readahead lock before)."""
        m = self.mount("prefetch_depth=8")
        self.server.faults([{"op": "GET", "kind": "delay", "seconds": 3}])
        os.setxattr(m.dir, "user.bucketfs.prefetch",
                    "\n".join(self.loader).encode())
        time.sleep(0.5)
        self.mounts.remove(m)
        t0 = time.monotonic()
        rc, status = m.unmount()
        self.assertEqual((rc, status), (0, 0), m.output())
        self.assertLess(time.monotonic() - t0, 20)

    def test_counters_summarized_at_unmount(self):
        m = self.mount()
        with open(m.path("mid.bin"), "rb") as f:
            f.read()
        st = self.stats(m)
        self.assertEqual(len(st["endpoints"]), 1)
        self.assertGreaterEqual(st["endpoints"][0]["requests"], 1)
        self.assertIn("user.bucketfs.stats", os.listxattr(m.dir))
        self.mounts.remove(m)
        rc, status = m.unmount()
        self.assertEqual((rc, status), (0, 0))
        self.assertRegex(m.output(), r"endpoint http://\S+: \d+ requests")
        self.assertIn("readahead: ", m.output())

    def test_request_stages(self):
        """Where requests' time went: a server that answers each GET
        after 0.3 s shows in the first byte's stage, not in the others,
        live in the stats and in the unmount summary."""
        m = self.mount()
        self.server.faults([{"op": "GET", "kind": "delay", "seconds": 0.3}])
        try:
            for name in ("small/f010.bin", "small/f011.bin", "small/f012.bin"):
                with open(m.path(*name.split("/")), "rb") as f:
                    self.assertEqual(f.read(), self.small[name])
        finally:
            self.server.clear_faults()
        st = self.stats(m)["stages"]
        self.assertGreaterEqual(st["samples"], 3, st)
        self.assertGreaterEqual(st["first_byte"]["p50_ms"], 300, st)
        for stage in ("wait", "body", "handoff"):
            self.assertLess(st[stage]["p50_ms"], 250, st)
            self.assertGreaterEqual(st[stage]["p50_ms"], 0, st)
        self.mounts.remove(m)
        rc, status = m.unmount()
        self.assertEqual((rc, status), (0, 0))
        self.assertRegex(m.output(), r"requests \(the last \d+\), p50/p99 ms: "
                                     r"waiting [\d.]+/[\d.]+, first byte [\d.]+/")


if __name__ == "__main__":
    harness.main()
