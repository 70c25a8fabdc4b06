#!/usr/bin/env python3
"""Every file maps: on a default mount, mmap(MAP_SHARED) of a file fetched
whole and of a large one reads the right bytes, and so does numpy's
np.load(mmap_mode="r") of a 1 MB and a 16 MB .npy; under
direct_io=none a file fetched whole reaches the page cache at open, so its
reads never reach the daemon, and under the default (auto) it does so only
where the kernel cannot map direct_io files (else its reads are copied
straight into the reader's buffer); on a kernel with FUSE_DIRECT_IO_ALLOW_MMAP (Linux >= 6.6) INIT
negotiates it, and files opened with direct_io=small or all map
MAP_SHARED with the right bytes (ENODEV on an older kernel); and
after a SIGHUP switch to an index where an object changed, the pages of
the old one are not served."""

import errno
import io
import json
import mmap
import os
import random
import signal
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402

MiB = 1 << 20


def npy_bytes(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def kernel_offers_direct_io_mmap():
    """FUSE_DIRECT_IO_ALLOW_MMAP came with Linux 6.6 (FUSE 7.39)."""
    release = os.uname().release.split("-")[0].split(".")
    return tuple(int(x) for x in release[:2]) >= (6, 6)


def mapped(path, flags=mmap.MAP_SHARED):
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        with mmap.mmap(f.fileno(), size, flags=flags,
                       prot=mmap.PROT_READ) as mm:
            return mm[:]


class MmapTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-mmap-")
        cls.server = harness.TestServer("--bucket",
                                        f"maps={cls.mkdir('maps-data')}")
        rnd = random.Random(25)
        cls.small_arr = np.frombuffer(rnd.randbytes(MiB),
                                      dtype=np.uint8).reshape(1024, 1024)
        cls.large_arr = np.frombuffer(rnd.randbytes(16 * MiB),
                                      dtype=np.uint32).reshape(-1, 1024)
        cls.objects = {
            "small.bin": rnd.randbytes(322_624),
            "large.bin": rnd.randbytes(20 * MiB + 4321),
            "small.npy": npy_bytes(cls.small_arr),
            "large.npy": npy_bytes(cls.large_arr),
            "change.bin": rnd.randbytes(100_000),
        }
        for k, v in cls.objects.items():
            harness.put_object(cls.server.url, "maps", k, v)
        cls.idx = os.path.join(cls.tmp, "maps.idx")
        cls.build_index()

    @classmethod
    def build_index(cls):
        harness.build_index(cls.server.url, "maps", cls.idx)

    def mount(self, *opts):
        log = os.path.join(self.tmp, f"m{time.monotonic_ns()}.log")
        m = Mount("s3://maps", self.server.url, self.idx, *opts, log=log)
        self.mounts.append(m)
        return m

    def stats(self, m):
        return json.loads(os.getxattr(m.dir, "user.bucketfs.stats"))

    def test_every_file_maps_shared(self):
        for pt in ("off", "auto"):
            with self.subTest(passthrough=pt):
                self.check_every_file_maps(self.mount(f"passthrough={pt}"))

    def check_every_file_maps(self, m):
        for name in ("small.bin", "large.bin", "small.npy", "large.npy"):
            with self.subTest(name=name):
                self.assertEqual(mapped(m.path(name)), self.objects[name])
                self.assertEqual(mapped(m.path(name), mmap.MAP_PRIVATE),
                                 self.objects[name])
        small = np.load(m.path("small.npy"), mmap_mode="r")
        self.assertIsInstance(small, np.memmap)
        self.assertTrue(np.array_equal(small, self.small_arr))
        large = np.load(m.path("large.npy"), mmap_mode="r")
        self.assertTrue(np.array_equal(large, self.large_arr))
        del small, large

    def read_small_in_chunks(self, m):
        """small.bin read as DLIO does (4 KiB, then 64 KiB at a time); the
        change of the mount's file counters over it."""
        before = self.stats(m)["files"]
        with open(m.path("small.bin"), "rb", buffering=0) as f:
            got = b""
            while chunk := f.read(4096 if not got else 65536):
                got += chunk
        self.assertEqual(got, self.objects["small.bin"])
        after = self.stats(m)["files"]
        return {k: after[k] - before[k] for k in ("handed_over", "reads")}

    def test_small_file_reaches_the_page_cache_at_open(self):
        # direct_io=none, without FUSE passthrough (test_passthrough).
        d = self.read_small_in_chunks(self.mount("direct_io=none"))
        self.assertEqual(d["handed_over"], 1)
        # Every read(2) was answered by the kernel from the stored pages.
        self.assertEqual(d["reads"], 0, d)

    def test_small_file_by_default(self):
        # direct_io=auto: past the page cache where direct_io files map,
        # each read(2) a READ answered from the object's bytes (6 of 64
        # KiB or less, and the one at EOF); stored at open elsewhere.
        d = self.read_small_in_chunks(self.mount())
        if kernel_offers_direct_io_mmap():
            self.assertEqual(d, {"handed_over": 0, "reads": 7})
        else:
            self.assertEqual(d, {"handed_over": 1, "reads": 0})

    def test_init_negotiates_direct_io_mmap(self):
        m = self.mount()
        if kernel_offers_direct_io_mmap():
            self.assertTrue(m.wait_output(
                "FUSE_DIRECT_IO_ALLOW_MMAP negotiated"), m.output())
        else:
            self.assertTrue(m.wait_output(
                "no FUSE_DIRECT_IO_ALLOW_MMAP"), m.output())

    def test_direct_io_files_map_shared(self):
        for mode in ("small", "all"):
            with self.subTest(direct_io=mode):
                self.check_direct_io_maps(self.mount(f"direct_io={mode}"))
        with self.assertRaises(RuntimeError) as e:
            self.mount("direct_io=sometimes")
        self.assertIn("option 'direct_io': 'sometimes' is not", str(e.exception))

    def check_direct_io_maps(self, m):
        for name in ("small.bin", "large.bin"):
            self.assertEqual(mapped(m.path(name), mmap.MAP_PRIVATE),
                             self.objects[name])
        if not kernel_offers_direct_io_mmap():
            with self.assertRaises(OSError) as cm:
                mapped(m.path("small.bin"))
            self.assertEqual(cm.exception.errno, errno.ENODEV)
            return
        for name in ("small.bin", "large.bin"):
            self.assertEqual(mapped(m.path(name)), self.objects[name])
        # A mapping outlives its file's close: its faults are READs of
        # the handle the kernel keeps until munmap.
        small = np.load(m.path("small.npy"), mmap_mode="r")
        large = np.load(m.path("large.npy"), mmap_mode="r")
        self.assertTrue(np.array_equal(small, self.small_arr))
        self.assertTrue(np.array_equal(large, self.large_arr))
        del small, large
        with open(m.path("small.bin"), "rb") as f:
            self.assertEqual(f.read(), self.objects["small.bin"])

    def test_index_switch_drops_the_old_pages(self):
        m = self.mount()
        path = m.path("change.bin")
        old = self.objects["change.bin"]
        self.assertEqual(mapped(path), old)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), old)
        new = bytes(b ^ 0x5A for b in old)  # the same size, other bytes
        harness.put_object(self.server.url, "maps", "change.bin", new)
        try:
            self.build_index()
            m.proc.send_signal(signal.SIGHUP)
            self.assertTrue(m.wait_output("SIGHUP: now serving"),
                            m.output())
            # The kernel still knows the old node: its pages are dropped
            # at open, and the reads are the new object's.
            with open(path, "rb") as f:
                self.assertEqual(f.read(), new)
            self.assertEqual(mapped(path), new)
        finally:
            harness.put_object(self.server.url, "maps", "change.bin", old)
            self.build_index()


if __name__ == "__main__":
    harness.main()
