"""A training loop driven by Hugging Face ``accelerate``: ``Accelerator.prepare`` + ``accelerator.backward``.

A small ResNet-style CNN on 128x128 images held in a CPU ``TensorDataset``; the ``DataLoader`` is the
default one (``num_workers=0``, no pinned memory) and ``accelerate`` moves each batch to the GPU.
bf16 mixed precision on CUDA, AdamW, a log line every ``--log-every`` iterations.

EXPECTED on an H100: the 12.6 MB fp32 image batch is copied host-to-device from pageable memory
every step (about 1+ ms that blocks the host), and the eager BatchNorm/ReLU chains are unfused:
``pageable-copy`` first; ``input-pipeline`` or ``unfused-elementwise`` are acceptable readings.
One step = one optimizer step = one batch.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

cuda = torch.cuda.is_available()
accelerator = Accelerator(mixed_precision="bf16" if cuda else "no", cpu=not cuda)
image, batch, width = (128, 64, 64) if cuda else (32, 8, 16)


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = conv_bn(c, c)
        self.b = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return F.relu(x + self.b(self.a(x)))


model = nn.Sequential(
    conv_bn(3, width), ResBlock(width),
    conv_bn(width, 2 * width, 2), ResBlock(2 * width),
    conv_bn(2 * width, 4 * width, 2), ResBlock(4 * width),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, 100),
)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
n = batch * 16
images = torch.randn(n, 3, image, image)
labels = torch.randint(100, (n,))
loader = DataLoader(TensorDataset(images, labels), batch_size=batch, shuffle=True, drop_last=True)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

it = 0
t0 = time.perf_counter()
while it < args.iters:
    for x, y in loader:
        it += 1
        out = model(x)
        loss = F.cross_entropy(out, y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if it % args.log_every == 0:
            lossf = loss.item()
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            accelerator.print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter")
            t0 = time.perf_counter()
        if it >= args.iters:
            break
