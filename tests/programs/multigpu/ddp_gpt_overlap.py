"""A small GPT-style model under DistributedDataParallel, its gradient all-reduce not overlapped.

Expected diagnosis (stated before it ran on GPUs):

- ``--huge-bucket``: ``DDP(..., bucket_cap_mb=10_000)``, one bucket for every gradient, so the
  all-reduce starts only when the whole backward has ended and nothing hides it. Top finding
  ``exposed-comm``, its "overlap not taken" part near the all-reduce's time less one 25 MB
  bucket's. ``--fixed``: the default ``bucket_cap_mb=25``. Run it with ``--batch 16`` on a GPU: at 4
  rows the backward is shorter than the all-reduce of the 1.7 GB of gradients, so the default
  buckets cannot hide it either (4x H200, 2026-11-26: 6.1 ms of it left exposed).
- ``--accum K``: K micro-batches per optimizer step, each ``loss.backward()`` outside
  ``model.no_sync()``, so every micro-batch all-reduces the gradients and K-1 of the K all-reduces
  are wasted. Top finding ``exposed-comm`` (the extra all-reduces' exposed tails), priced at most
  near (K-1)/K of the step's communication. ``--fixed``: the first K-1 micro-batches under
  ``with model.no_sync():``, one all-reduce per step.
- neither flag (or ``--fixed`` alone): the healthy DDP run, no major multi-GPU finding.

    gpudoctor run --nproc 2 ddp_gpt_overlap.py --steps 40 --huge-bucket
    gpudoctor run --nproc 2 ddp_gpt_overlap.py --steps 40 --accum 4 --fixed

NCCL on GPUs, gloo on CPUs (a tiny model there: under 25 MB of gradients, so one bucket either way).
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
import torch.distributed as dist
from tiny_gpt import COMM_SIZE, CPU_SIZE, gpt, log_step, setup
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

HUGE_BUCKET_MB = 10_000  # larger than any model here: a single bucket
DEFAULT_BUCKET_MB = 25  # DistributedDataParallel's default


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--huge-bucket", action="store_true")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--batch", type=int, default=0, help="rows per rank (default: the size's, 4 on a GPU)")
    ap.add_argument("--fixed", action="store_true", help="the twin: default buckets, no_sync on micro-batches")
    args = ap.parse_args()
    rank, _, device, cuda = setup()
    d, layers, vocab, batch, seq, heads = COMM_SIZE if cuda else CPU_SIZE
    batch = args.batch or batch
    torch.manual_seed(0)
    bucket = HUGE_BUCKET_MB if args.huge_bucket and not args.fixed else DEFAULT_BUCKET_MB
    model = DDP(gpt(d, layers, vocab, heads).to(device), device_ids=[device.index] if cuda else None,
                bucket_cap_mb=bucket)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    micro = [torch.randint(0, vocab, (batch, seq), device=device) for _ in range(args.accum)]
    for step in range(args.steps):
        t0 = time.perf_counter()
        for i, ids in enumerate(micro):
            last = i == len(micro) - 1
            skip_sync = args.fixed and not last  # gradients reduced once, on the last micro-batch
            with model.no_sync() if skip_sync else contextlib.nullcontext():
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                    logits = model(ids)
                    loss = nn.functional.cross_entropy(logits.view(-1, vocab).float(), ids.view(-1))
                (loss / len(micro)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        log_step(step, t0, rank, cuda)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
