"""A pipeline-parallel MLP: each rank holds one stage, micro-batches' activations go forward and
their gradients back through torch.distributed send/recv (gloo on CPUs, NCCL on GPUs).

Expected diagnosis (by the schedule's model): with p stages and m micro-batches the GPipe schedule
(all forwards, then all backwards) and 1F1B both leave each stage idle (p-1)(t_f+t_b) per step,
a bubble of (p-1)/(m+p-1) of the step ((p-1)/m of the compute, core.layout.bubble_fraction):
p=2, m=4 -> 20% of the step; p=2, m=8 -> 11%; p=4, m=4 -> 43%. gpudoctor should report
`pipeline-bubble` near that share, each stage's wait in recv, and price more micro-batches and an
interleaved schedule. With --imbalance the stage --slow-stage (default the last) runs twice the
layers of the others: `stage-imbalance` names that rank, its compute about 2x the others'. With
stage times t_i per micro-batch the step is sum(t_i) + (m-1) max(t_i) ((m+p-1) t when balanced),
so moving layers until every stage computes the mean saves (m-1)(max(t_i) - mean(t_i)), which
`stage-imbalance` prices. ``--balanced``: that fix's twin, the imbalanced run's (p+1) x --layers
layers spread over the stages (p=2, --layers 2: 3 and 3; where they do not divide evenly the first
stages get one more). ``--fixed``: every stage the same --layers, which also removes the extra
layers: it saves the slow stage's extra time, m (t_slow - t_other) for p=2, more than balancing.

    gpudoctor run --nproc 2 pp_two_stage.py --steps 12 --microbatches 4
    gpudoctor run --nproc 2 pp_two_stage.py --steps 12 --microbatches 4 --imbalance
    gpudoctor run --nproc 2 pp_two_stage.py --steps 12 --microbatches 4 --balanced
    gpudoctor run --nproc 4 pp_two_stage.py --steps 12 --schedule 1f1b

Each rank runs its own optimizer step at the end of a step (gpudoctor's step boundary).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn


def stage_model(width: int, layers: int, device: torch.device) -> nn.Module:
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(layers)]).to(device)


class Stage:
    """One rank's stage: forward / backward of one micro-batch, activations and gradients moved
    to the neighbours (sends are asynchronous so that 1F1B cannot deadlock; waited at step end)."""

    def __init__(self, model: nn.Module, rank: int, world: int, batch: int, width: int, device: torch.device):
        self.model, self.rank, self.world = model, rank, world
        self.shape, self.device = (batch, width), device
        self.inputs: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        self.pending: list[dist.Work] = []

    def forward(self, x: torch.Tensor) -> None:
        if self.rank > 0:
            x = torch.empty(self.shape, device=self.device)
            dist.recv(x, self.rank - 1)
            x.requires_grad_(True)
        y = self.model(x)
        self.inputs.append(x)
        self.outputs.append(y)
        if self.rank < self.world - 1:
            self.pending.append(dist.isend(y.detach().contiguous(), self.rank + 1))

    def backward(self) -> None:
        x, y = self.inputs.pop(0), self.outputs.pop(0)
        if self.rank == self.world - 1:
            y.pow(2).mean().backward()
        else:
            g = torch.empty(self.shape, device=self.device)
            dist.recv(g, self.rank + 1)
            y.backward(g)
        if self.rank > 0:
            self.pending.append(dist.isend(x.grad.contiguous(), self.rank - 1))

    def drain(self) -> None:
        for w in self.pending:
            w.wait()
        self.pending.clear()


def run_step(stage: Stage, data: torch.Tensor, m: int, schedule: str) -> None:
    if schedule == "gpipe":
        for k in range(m):
            stage.forward(data[k])
        for _ in range(m):
            stage.backward()
    else:  # 1F1B: warm-up forwards, one forward one backward, cool-down backwards
        warm = min(stage.world - stage.rank - 1, m)
        for k in range(warm):
            stage.forward(data[k])
        for k in range(warm, m):
            stage.forward(data[k])
            stage.backward()
        for _ in range(warm):
            stage.backward()
    stage.drain()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--schedule", choices=("gpipe", "1f1b"), default="gpipe")
    ap.add_argument("--imbalance", action="store_true", help="the slow stage runs twice the layers")
    ap.add_argument("--fixed", action="store_true", help="the twin: every stage the same layers")
    ap.add_argument("--balanced", action="store_true",
                    help="the twin that keeps the work: the imbalanced run's layers spread over the stages")
    ap.add_argument("--slow-stage", type=int, default=-1, help="default: the last stage")
    ap.add_argument("--layers", type=int, default=2, help="layers per stage")
    args = ap.parse_args()
    args.imbalance = args.imbalance and not (args.fixed or args.balanced)
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    width, batch = (4096, 64) if cuda else (512, 128)
    slow = args.slow_stage % world
    layers = args.layers * (2 if args.imbalance and rank == slow else 1)
    if args.balanced:  # the same (world + 1) x --layers as --imbalance, as even as whole layers go
        total = (world + 1) * args.layers
        layers = total // world + (1 if rank < total % world else 0)
    torch.manual_seed(rank)
    model = stage_model(width, layers, device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    stage = Stage(model, rank, world, batch, width, device)
    data = torch.randn(args.microbatches, batch, width, device=device)
    for _ in range(args.steps):
        run_step(stage, data, args.microbatches, args.schedule)
        opt.step()
        opt.zero_grad()
    if cuda:
        torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
