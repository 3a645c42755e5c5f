"""A small GPT-style model trained with DistributedDataParallel, one rank held up.

Expected diagnosis (stated before it ran on GPUs), each plant on rank R only; the other ranks wait
for it in the gradient all-reduce, so the job's step grows by about the plant's cost:

- ``--slow-rank R --delay-ms D``: rank R sleeps D ms in Python before its forward. Top finding
  ``straggler`` rank R, cause host work, near D ms per step.
- ``--slow-loader R --delay-ms D``: rank R's DataLoader worker-less collate sleeps D ms a batch.
  Top finding ``straggler`` rank R, cause input-pipeline (or host work), near D ms per step.
- ``--bigger-batch-rank R``: rank R's batch is 2x the others' (uneven shards). Top finding
  ``straggler`` rank R, cause more-work / slower kernels, near the extra forward+backward time.
- ``--sync-rank R``: a forward hook on rank R reads each block's output norm with ``.item()`` (a
  logging hook left on one host): a device sync after every block. Top finding ``straggler`` rank
  R, cause host-sync, priced near the syncs' cost. A sync costs the GPU work queued behind it: at
  the default batch the step is launch-bound (little queued), so run this one with ``--batch 32``.

``--fixed``: the same command with the plant removed (the twin). Without any plant: no straggler.

    gpudoctor run --nproc 2 ddp_gpt_straggler.py --steps 40 --slow-rank 1 --delay-ms 20
    gpudoctor run --nproc 2 ddp_gpt_straggler.py --steps 40 --slow-loader 1 --delay-ms 20 --fixed

NCCL on GPUs, gloo on CPUs (a tiny model there).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from tiny_gpt import CPU_SIZE, GPU_SIZE, gpt, log_step, setup
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class Tokens(Dataset):
    """Random token rows; ``delay_s`` stands in for a slow decode / augmentation on one host."""

    def __init__(self, vocab: int, seq: int, rows: int, delay_s: float) -> None:
        self.vocab, self.seq, self.rows, self.delay_s = vocab, seq, rows, delay_s

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.randint(0, self.vocab, (self.seq,), generator=torch.Generator().manual_seed(i))


def slow_collate(delay_s: float):
    def collate(rows: list[torch.Tensor]) -> torch.Tensor:
        if delay_s:
            time.sleep(delay_s)  # this host's slow preprocessing, once per batch
        return torch.stack(rows)
    return collate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-loader", type=int, default=-1)
    ap.add_argument("--bigger-batch-rank", type=int, default=-1)
    ap.add_argument("--sync-rank", type=int, default=-1)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--batch", type=int, default=0, help="rows per rank (default: the size's, 8 on a GPU)")
    ap.add_argument("--fixed", action="store_true", help="the twin: every plant off")
    args = ap.parse_args()
    if args.fixed:
        args.slow_rank = args.slow_loader = args.bigger_batch_rank = args.sync_rank = -1
    rank, _, device, cuda = setup()
    d, layers, vocab, batch, seq, heads = GPU_SIZE if cuda else CPU_SIZE
    batch = args.batch or batch
    torch.manual_seed(0)
    model = DDP(gpt(d, layers, vocab, heads).to(device), device_ids=[device.index] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    if rank == args.bigger_batch_rank:
        batch *= 2  # an uneven shard: this rank's sampler hands it twice the rows
    delay = args.delay_ms / 1e3 if rank == args.slow_loader else 0.0
    loader = DataLoader(Tokens(vocab, seq, batch * args.steps, delay), batch_size=batch,
                        collate_fn=slow_collate(delay), pin_memory=cuda)
    norms: list[float] = []
    if rank == args.sync_rank:
        for block in model.module[1:-2]:
            # a per-layer activation-norm log left on this host: a device sync inside every forward
            block.register_forward_hook(lambda _m, _i, out: norms.append(out.float().norm().item()))
    for step, ids in enumerate(loader):
        t0 = time.perf_counter()
        ids = ids.to(device, non_blocking=True)
        if rank == args.slow_rank:
            time.sleep(args.delay_ms / 1e3)  # this host's slow input pipeline
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(ids)
            loss = nn.functional.cross_entropy(logits.view(-1, vocab).float(), ids.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        log_step(step, t0, rank, cuda)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
