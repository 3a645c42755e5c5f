"""A small ConvNeXt on 128x128 images, fp32, written as the paper's reference code writes its blocks.

A 4x4 patchify stem, then four stages (dims 64, 128, 256, 512; depths 2, 2, 4, 2) of blocks:
a 7x7 depthwise convolution, a LayerNorm over channels (permuted to channels-last), a 4x inverted
MLP as two ``nn.Linear`` with GELU, a learned layer scale, and the residual; downsampling between
stages by a LayerNorm and a 2x2 strided convolution. Cross-entropy over 100 classes, AdamW,
batch 128 of random images already on the device. Prints the mean time per iteration every
``--log-every``.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--image", type=int, default=128)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, dims=(64, 128, 256, 512), depths=(2, 2, 4, 2), classes=100):
        super().__init__()
        layers = [nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0], eps=1e-6)]
        for i, (dim, depth) in enumerate(zip(dims, depths)):
            if i > 0:
                layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, stride=2)]
            layers += [Block(dim) for _ in range(depth)]
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.head(self.norm(self.features(x).mean(dim=(2, 3))))


model = ConvNeXt().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.05)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    images = torch.randn(args.batch_size, 3, args.image, args.image, device=device)
    labels = torch.randint(0, 100, (args.batch_size,), device=device)
    loss = F.cross_entropy(model(images), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
