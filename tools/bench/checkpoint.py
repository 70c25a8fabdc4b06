#!/usr/bin/python3
"""DLIO's checkpoint write pattern through a writable bucketfs mount on Ceph
RGW, step by step as dlio_benchmark's checkpointing does it
(base_checkpointing.save_checkpoint() and pytorch_checkpointing.save_state()):

  os.makedirs(f"{checkpoint_folder}/global_epoch{E}_step{S}", exist_ok=True)
  with open(f"{...}/zero_pp_rank_{DP}_mp_rank_{MP}_model_states.pt", "wb") as f:
      torch.save(state, f)
      os.fsync(f.fileno())          # checkpoint_fsync: True
  ... and the optimizer states the same way, then torch.load() of both.

The real dlio_benchmark runs here too, from its repository with Hydra and
pydftracer beside it (docs/DLIO.md, "The real DLIO on this project's
machine"), but its tensors are random and not kept.  This replays its
calls with Debian's python3-torch (/usr/bin/python3) and compares the
bytes read back with the state written.  The state: int8 tensors (DLIO's
default datatype, from torch.randint as its get_tensor_core() does),
--model-gib for the model file and half of that for the optimizer's.
Prints the seconds and GiB/s of each save and load, checks the bytes
(torch.equal), and that no multipart upload is left.  Run inside the bench lock:

  flock /work/wt/bench.lock /usr/bin/python3 tools/bench/checkpoint.py \\
      [--model-gib 1.25] [--steps 2] [--part-size 16M] [--parts 4]
"""

import argparse
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                "tests", "integration"))
import harness  # noqa: E402

GiB = 1 << 30


def state_of(total, layers=8):
    """A dict of @layers int8 tensors of @total bytes in all."""
    each = total // layers
    return {f"layer_{i}": torch.randint(-128, 128, (each,), dtype=torch.int8)
            for i in range(layers)}


def save_state(name, state, fsync):
    """pytorch_checkpointing.save_state(), verbatim but for the name."""
    with open(name, "wb") as f:
        torch.save(state, f)
        if fsync:
            os.fsync(f.fileno())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-gib", type=float, default=1.25)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--part-size", default=str(16 << 20))
    ap.add_argument("--parts", type=int, default=4)
    a = ap.parse_args()
    rgw = harness.RGW("ckpt")
    tmp = tempfile.mkdtemp(prefix="bfs-ckpt-")
    env = harness.client_env(AWS_ACCESS_KEY_ID=rgw.AK,
                             AWS_SECRET_ACCESS_KEY=rgw.SK)
    m = harness.Mount(f"s3://{rgw.bucket}", rgw.url, os.path.join(tmp, "idx"),
                      "writable", f"part_size={a.part_size}",
                      f"write_parts={a.parts}",
                      log=os.path.join(tmp, "mount.log"), env=env)
    sig = harness.Signer(rgw.url, rgw.AK, rgw.SK)
    try:
        model = state_of(int(a.model_gib * GiB))
        optim = state_of(int(a.model_gib * GiB) // 2)
        folder = m.path("checkpoints")
        for step in range(1, a.steps + 1):
            cid = f"global_epoch1_step{step}"
            os.makedirs(os.path.join(folder, cid), exist_ok=True)
            for what, st in (("model", model), ("optim", optim)):
                name = os.path.join(folder, cid,
                                    f"zero_pp_rank_0_mp_rank_0_{what}_states.pt")
                t0 = time.monotonic()
                save_state(name, st, fsync=True)
                dt = time.monotonic() - t0
                size = os.stat(name).st_size
                print(f"{cid} {what}: saved {size / GiB:.2f} GiB in "
                      f"{dt:.1f} s ({size / GiB / dt:.2f} GiB/s)", flush=True)
                t0 = time.monotonic()
                back = torch.load(name)
                dt = time.monotonic() - t0
                same = all(torch.equal(back[k], st[k]) for k in st)
                print(f"{cid} {what}: loaded in {dt:.1f} s "
                      f"({size / GiB / dt:.2f} GiB/s), identical: {same}",
                      flush=True)
                if not same:
                    raise SystemExit("checkpoint read back differs")
        _, _, text = sig.check("ListMultipartUploads", sig.request(
            "GET", "/" + rgw.bucket, query="uploads="))
        left = [u for u in ET.fromstring(text).iter()
                if u.tag.rpartition("}")[2] == "Upload"]
        print(f"multipart uploads left: {len(left)}")
        print("listing:", sorted(os.listdir(folder)))
    finally:
        sig.close()
        m.unmount()
        rgw.stop()


if __name__ == "__main__":
    main()
