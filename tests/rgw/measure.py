#!/usr/bin/env python3
"""Listing speed of bucketfs-index build per S3 server: keys/s and LIST
requests per 1,000 keys, the parallel lister (default workers) against a
sequential listing (-j 1), on buckets of the sizes given.  Not a test: a
measurement for docs/SCALE.md, "Per server".

  /usr/bin/python3 tests/rgw/measure.py [--server test|s3rver|rgw]...
      [--keys N]... [--runs R] [--layout flat|deep]

Every server is started here (RGW: the suite's if BFS_RGW_URL is set,
else its own via tests/rgw/rgw.sh); each bucket is seeded with N keys by
concurrent PUTs (the test server: a --synthetic bucket, same key shape for
flat).  Prints one Markdown table row per server, size and mode: the
median of R builds straight to the server (the tool's own "built in"
time; after one warm-up build, the modes interleaved), and the LIST requests of
one more build through a relay that counts them (harness.CountingProxy;
it is not in the timed runs, since it costs time of its own)."""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "integration"))
import harness  # noqa: E402


def keys_for(n, layout):
    if layout == "flat":
        return [f"train/img_{i:0{len(str(n))}d}_of_{n}.jpeg"
                for i in range(n)]
    # deep: 10 top dirs x 10 subdirs x files
    return [f"d{i % 10}/s{(i // 10) % 10}/f{i:07d}.bin" for i in range(n)]


class Server:
    def __init__(self, kind, n, layout):
        self.kind = kind
        if kind == "test":
            args = []
            if layout == "flat":
                args = ["--synthetic", f"m{n}:{n}:100:train/"]
            self.srv = harness.TestServer(*args)
            self.bucket = f"m{n}"
            self.url, self.ak, self.sk = self.srv.url, harness.AK, harness.SK
            if layout != "flat":
                harness.Signer(self.url).create_bucket(self.bucket)
        elif kind == "s3rver":
            self.bucket = f"m{n}"
            self.srv = harness.S3rver(self.bucket)
            self.url = self.srv.url
            self.ak, self.sk = harness.S3rver.AK, harness.S3rver.SK
        else:
            self.srv = harness.RGW(f"m{n}")
            self.bucket = self.srv.bucket
            self.url, self.ak, self.sk = self.srv.url, self.srv.AK, \
                self.srv.SK
        if not (kind == "test" and layout == "flat"):
            t0 = time.monotonic()
            harness.put_objects(self.url, self.bucket,
                                {k: b"x" * 100 for k in keys_for(n, layout)},
                                ak=self.ak, sk=self.sk, workers=32)
            print(f"# {kind}: seeded {n} keys in "
                  f"{time.monotonic() - t0:.1f} s", file=sys.stderr)
        self.proxy = harness.CountingProxy(self.url)

    def build(self, idx, workers, counted=False):
        """One build: (seconds, LIST requests or None, stderr).  Timed
        runs go straight to the server; a @counted one goes through the
        relay, which costs time of its own (Python, same 2 cores)."""
        env = harness.client_env(AWS_ACCESS_KEY_ID=self.ak,
                                 AWS_SECRET_ACCESS_KEY=self.sk)
        if os.path.exists(idx):
            os.unlink(idx)
        self.proxy.reset()
        r = subprocess.run(
            [harness.binary("bucketfs-index"), "build", "-j",
             str(workers), "-o",
             f"endpoint={self.proxy.url if counted else self.url},"
             f"index={idx}",
             f"s3://{self.bucket}"], env=env, capture_output=True,
            timeout=3600)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.decode())
        # The tool's own "built in: S s (K keys/s)": listing and writing.
        secs = float(re.search(r"built in:\s+([\d.]+) s",
                               r.stdout.decode()).group(1))
        return secs, self.proxy.count("LIST") if counted else None, \
            r.stderr.decode()

    def stop(self):
        self.proxy.stop()
        self.srv.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", action="append",
                   choices=("test", "s3rver", "rgw"))
    p.add_argument("--keys", action="append", type=int)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--layout", choices=("flat", "deep"), default="flat")
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="bfs-measure-")
    idx = os.path.join(tmp, "m.idx")
    print("| server | keys | listing | median s | keys/s | LIST | "
          "LIST per 1,000 keys |")
    print("|---|---|---|---|---|---|---|")
    for kind in a.server or ["test", "s3rver", "rgw"]:
        for n in a.keys or [3000]:
            s = Server(kind, n, a.layout)
            try:
                modes = (("parallel (default -j)", 0),
                         ("sequential (-j 1)", 1))
                s.build(idx, 0)  # warm-up: the server's caches
                # Interleaved, so that drift of the shared machine hits
                # both modes alike.
                runs = {w: [] for _, w in modes}
                for _ in range(a.runs):
                    for _, w in modes:
                        runs[w].append(s.build(idx, w))
                for mode, w in modes:
                    secs = statistics.median(r[0] for r in runs[w])
                    _, lists, note = s.build(idx, w, counted=True)
                    print(f"| {kind} | {n:,} | {mode} | {secs:.2f} | "
                          f"{n / secs:,.0f} | {lists} | "
                          f"{lists * 1000 / n:.1f} |", flush=True)
                    for text in {r[2].strip() for r in runs[w]} | \
                            {note.strip()}:
                        if text:
                            print(f"#   {text}", file=sys.stderr)
            finally:
                s.stop()
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
