"""Record a 2-GPU DistributedDataParallel training trace (rank 0) as a fixture with NCCL kernels.

    torchrun --standalone --nproc-per-node 2 scripts/record_ddp_fixture.py --out DIR

bf16 autocast GPT-like model from the lab, fused AdamW, DDP gradient all-reduce overlapping the
backward pass; rank 0 writes DIR/trace.json.gz.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule

from gpudoctor.lab.common import TinyGPT, adamw, autocast, seed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    seed(0)
    model = TinyGPT(vocab=8192, d_model=1024, n_heads=16, n_layers=4, seq=1024).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = adamw(ddp.parameters(), "cuda")
    tokens = torch.randint(0, 8192, (8, 1024), device="cuda")

    def step() -> None:
        with autocast("cuda"):
            logits = ddp(tokens)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=0, warmup=2, active=3, repeat=1),
        record_shapes=True,
        with_flops=True,
        profile_memory=True,
    ) as prof:
        for _ in range(6):
            step()
            prof.step()
    if dist.get_rank() == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        raw = args.out / "trace.json"
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(args.out / "trace.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
