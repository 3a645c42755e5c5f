"""A tiny diffusion-style UNet training step with an EMA copy of the weights updated in a Python loop.

DDPM-like: random 32x32 "images", a random timestep per sample, noise added on a cosine schedule,
the UNet (ResBlocks with GroupNorm + SiLU, a sinusoidal time embedding, two downsamplings and
skip connections) predicts the noise; MSE loss, bf16 autocast on CUDA, AdamW (foreach on CUDA).
After each optimizer step the EMA model is updated the way many diffusion repositories write it:

    for ema_p, p in zip(ema.parameters(), model.parameters()):
        ema_p.mul_(decay).add_(p, alpha=1 - decay)

A log line every ``--log-every`` iterations.

EXPECTED on an H100: ``launch-bound``. The model is small for an H100 (32x32, 64-256 channels), so
its forward/backward is already many short kernels (GroupNorm, SiLU, adds), and the EMA loop adds
two more tiny kernels for each of the model's 122 parameter tensors every step, each paid a
launch; the GPU waits on the host. ``unfused-elementwise`` is the acceptable second reading (the
GroupNorm/SiLU chains). ``optimizer-loop`` describes the EMA loop best (``torch._foreach_mul_`` /
``_foreach_add_`` or ``torch._foreach_lerp_`` would update all tensors in a few kernels), but that
rule looks only inside ``Optimizer.step``, and the EMA loop runs after it, so it is not expected.
One step = one optimizer step (+ its EMA update) = one batch = one printed iteration.
"""

import argparse
import copy
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
image, batch, ch = (32, 128, 64) if device == "cuda" else (16, 4, 8)
T = 1000
ema_decay = 0.999


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / half)
    args_ = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args_), torch.sin(args_)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.norm1 = nn.GroupNorm(8, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.norm2 = nn.GroupNorm(8, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.skip(x)


class UNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        tdim = 4 * c
        self.c = c
        self.time_mlp = nn.Sequential(nn.Linear(c, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(3, c, 3, padding=1)
        self.down1 = nn.ModuleList([ResBlock(c, c, tdim), ResBlock(c, c, tdim)])
        self.ds1 = nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.down2 = nn.ModuleList([ResBlock(c, 2 * c, tdim), ResBlock(2 * c, 2 * c, tdim)])
        self.ds2 = nn.Conv2d(2 * c, 2 * c, 3, stride=2, padding=1)
        self.mid = nn.ModuleList([ResBlock(2 * c, 4 * c, tdim), ResBlock(4 * c, 4 * c, tdim)])
        self.up2 = nn.ModuleList([ResBlock(4 * c + 2 * c, 2 * c, tdim), ResBlock(2 * c, 2 * c, tdim)])
        self.up1 = nn.ModuleList([ResBlock(2 * c + c, c, tdim), ResBlock(c, c, tdim)])
        self.out = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, 3, 3, padding=1))

    def forward(self, x, t):
        temb = self.time_mlp(timestep_embedding(t, self.c))
        h = self.inp(x)
        for b in self.down1:
            h = b(h, temb)
        s1 = h
        h = self.ds1(h)
        for b in self.down2:
            h = b(h, temb)
        s2 = h
        h = self.ds2(h)
        for b in self.mid:
            h = b(h, temb)
        h = torch.cat([F.interpolate(h, scale_factor=2, mode="nearest"), s2], dim=1)
        for b in self.up2:
            h = b(h, temb)
        h = torch.cat([F.interpolate(h, scale_factor=2, mode="nearest"), s1], dim=1)
        for b in self.up1:
            h = b(h, temb)
        return self.out(h)


model = UNet(ch).to(device)
ema = copy.deepcopy(model).eval().requires_grad_(False)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.0)
steps = torch.arange(T + 1, device=device, dtype=torch.float32) / T
alphas_bar = torch.cos((steps + 0.008) / 1.008 * math.pi / 2) ** 2
ctx = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else torch.autocast("cpu", enabled=False)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x0 = torch.randn(batch, 3, image, image, device=device)
    t = torch.randint(1, T, (batch,), device=device)
    noise = torch.randn_like(x0)
    a = alphas_bar[t].view(-1, 1, 1, 1)
    xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
    with ctx:
        loss = F.mse_loss(model(xt, t).float(), noise)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        for ema_p, p in zip(ema.parameters(), model.parameters()):
            ema_p.mul_(ema_decay).add_(p, alpha=1 - ema_decay)
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
