"""host-sync: data-dependent ``.item()`` calls inside the step.

Every ``.item()`` (and ``.cpu()``, ``bool(tensor)``, printing a device tensor) makes the host wait
until the GPU has finished all queued work, then copy one number back. While the host waits
nothing new is queued, and after the wait the GPU idles until the host has launched the next
kernels: the launch latency that asynchronous execution normally hides is paid once per sync.
The sick step checks each layer's activations for overflow with ``.item()``, checks every gradient
for non-finite values with ``.item()`` and logs ``loss.item()``; the fixed twin does the same
arithmetic without reading anything back.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gpudoctor.lab.common import adamw, autocast, seed, size
from gpudoctor.lab.trap import Trap, Workload


def _build(device: str, sync: bool) -> Workload:
    seed(1)
    width = size(device, 1024, 128)
    batch = size(device, 8192, 64)
    layers = nn.ModuleList(nn.Linear(width, width) for _ in range(8)).to(device)
    opt = adamw(layers.parameters(), device)
    x = torch.randn(batch, width, device=device)
    target = torch.randn(batch, width, device=device)
    losses: list[float] = []

    def step() -> None:
        with autocast(device):
            h = x
            for layer in layers:
                h = F.gelu(layer(h)) + h
                if sync and h.abs().amax().item() > 1e4:
                    h = h.clamp(-1e4, 1e4)
            loss = F.mse_loss(h.float(), target)
        loss.backward()
        if sync:
            for p in layers.parameters():
                if not torch.isfinite(p.grad).all().item():
                    p.grad.zero_()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if sync:
            losses.append(loss.item())

    flops = 3 * 2 * batch * width * width * len(layers)
    return Workload(step, flops_per_step=flops)


TRAP = Trap(
    id="host_sync",
    title="Data-dependent .item() syncs inside the training step",
    expected_finding="host-sync",
    build_sick=lambda device: _build(device, sync=True),
    build_fixed=lambda device: _build(device, sync=False),
    with_stack=True,
    description="bf16 MLP training (8 x 1024, batch 8192); per-layer overflow check, "
    "per-gradient finiteness check and loss logging each call .item(). Fixed: no read-backs.",
)
