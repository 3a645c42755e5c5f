"""A small GPT-style model trained with DistributedDataParallel, one rank held up on the host.

Expected diagnosis (stated before it ran on GPUs): with --slow-rank R --delay-ms D, rank R spends D
ms per step in Python before its forward (a stand-in for a slow data pipeline on one host); the
other ranks wait for it in the gradient all-reduce, so the job's step is about D ms longer than
the healthy run's. gpudoctor should name rank R as the straggler, its cause host work /
input pipeline on that rank, priced near D ms per step; without --slow-rank: no straggler.

    torchrun --nproc-per-node 2 ddp_gpt_straggler.py --steps 40 --slow-rank 1 --delay-ms 20
    gpudoctor run --nproc 2 ddp_gpt_straggler.py --steps 40 --slow-rank 1 --delay-ms 20

NCCL on GPUs, gloo on CPUs (a tiny model there).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False, is_causal=False)[0]
        return x + self.mlp(self.ln2(x))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    d, layers, vocab, batch, seq = (768, 6, 8192, 8, 512) if cuda else (64, 2, 256, 2, 16)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(vocab, d), *[Block(d, 12 if cuda else 4) for _ in range(layers)],
                          nn.LayerNorm(d), nn.Linear(d, vocab)).to(device)
    model = DDP(model, device_ids=[local] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    for step in range(args.steps):
        t0 = time.perf_counter()
        if rank == args.slow_rank:
            time.sleep(args.delay_ms / 1e3)  # this host's slow input pipeline
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(ids)
            loss = nn.functional.cross_entropy(logits.view(-1, vocab).float(), ids.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 10 == 0:
            if cuda:
                torch.cuda.synchronize()
            if rank == 0:
                print(f"step {step}: {(time.perf_counter() - t0) * 1e3:.2f} ms", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
