"""The GPT-style model the multi-GPU programs share, sized for GPUs or for a CPU (gloo) try."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch import nn

# (d_model, layers, vocab, batch, seq, heads): 6 x d=768 on a GPU (an 8-bucket DDP step on an H100
# is about 19 ms); a tiny model on the CPU so that 2 gloo ranks on 2 cores finish in seconds.
GPU_SIZE = (768, 6, 8192, 8, 512, 12)
CPU_SIZE = (64, 2, 256, 2, 16, 4)
# The communication cases (one DDP bucket, accumulation without no_sync, FSDP without per-block
# groups) need a step that is GPU-bound and whose gradients take as long to reduce as a good part of
# the backward: 8 x d=2048 (436 M parameters, 1.7 GB of fp32 gradients, about 5-7 ms to all-reduce
# over NVLink) on 4 x 512 tokens (about 5 TFLOP a step). At GPU_SIZE the 55 M parameters reduce in
# under 1 ms and the step is bound by launches, so a bucket layout cannot show.
COMM_SIZE = (2048, 8, 8192, 4, 512, 16)


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


def gpt(d: int, layers: int, vocab: int, heads: int) -> nn.Sequential:
    return nn.Sequential(nn.Embedding(vocab, d), *[Block(d, heads) for _ in range(layers)],
                         nn.LayerNorm(d), nn.Linear(d, vocab))


def setup() -> tuple[int, int, torch.device, bool]:
    """Join the job: NCCL and one GPU per rank where CUDA is, gloo on the CPU otherwise."""
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, local = dist.get_rank(), int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    return rank, dist.get_world_size(), device, cuda


def log_step(step: int, t0: float, rank: int, cuda: bool) -> None:
    """Every 10th step, rank 0 prints that step's time (after the GPU has finished it)."""
    if step % 10 == 0:
        if cuda:
            torch.cuda.synchronize()
        if rank == 0:
            print(f"step {step}: {(time.perf_counter() - t0) * 1e3:.2f} ms", flush=True)
