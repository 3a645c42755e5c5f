"""An MLP-Mixer on tabular "tokens" with a hand-written RMSNorm and Mish, bf16 autocast.

16 mixer blocks over 64 tokens x 768 channels, batch 96: each block normalises with a hand-written
RMSNorm (``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight``), mixes tokens then
channels through Linear layers, and activates with a hand-written Mish (``x * torch.tanh(F.softplus(x))``,
from a paper's reference code). Every one of those lines is a separate elementwise kernel over a
6 M-element activation, forward and backward. Fused AdamW, data made on the GPU.

Hand-made fix, one flag:
  --compile: ``model = torch.compile(model)`` after building it (the ``compile`` knob's change:
             the knob compiles the outermost module's forward).

EXPECTED on an H100 (written before any run): ``unfused-elementwise`` (the norms' and activations'
chains of memory-bound kernels, a third or more of the step). Hand-made --compile: about x1.3-1.8.
One step = one optimizer step = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--compile", action="store_true")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
tokens, channels, depth, batch = (64, 768, 16, 96) if cuda else (8, 32, 2, 4)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def mish(x):
    return x * torch.tanh(F.softplus(x))


class MixerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(channels), RMSNorm(channels)
        self.token_in, self.token_out = nn.Linear(tokens, 2 * tokens), nn.Linear(2 * tokens, tokens)
        self.chan_in, self.chan_out = nn.Linear(channels, 4 * channels), nn.Linear(4 * channels, channels)

    def forward(self, x):
        y = self.norm1(x).transpose(1, 2)
        x = x + self.token_out(mish(self.token_in(y))).transpose(1, 2)
        return x + self.chan_out(mish(self.chan_in(self.norm2(x))))


class Mixer(nn.Module):
    def __init__(self, features: int = 32, classes: int = 10):
        super().__init__()
        self.embed = nn.Linear(features, channels)
        self.blocks = nn.Sequential(*[MixerBlock() for _ in range(depth)])
        self.norm = RMSNorm(channels)
        self.head = nn.Linear(channels, classes)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.embed(x))).mean(dim=1))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Mixer().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
    if args.compile:
        model = torch.compile(model)
    t0 = time.perf_counter()
    for it in range(1, args.iters + 1):
        x = torch.randn(batch, tokens, 32, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it}: loss {loss.item():.4f}, {(time.perf_counter() - t0) / args.log_every * 1000:.2f} ms/iter",
                  flush=True)
            t0 = time.perf_counter()
