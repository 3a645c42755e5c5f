"""A ResNet-18-style image classifier trained in float32, as a torchvision-era script is written.

Basic residual blocks (two 3x3 convolutions with BatchNorm and ReLU, [2, 2, 2, 2] blocks at 64,
128, 256 and 512 channels), a 7x7 stem, global pooling and a linear head; batch 128 of 3x128x128
images and 100 classes made on the GPU, SGD with momentum (PyTorch's default foreach), no autocast,
NCHW. cuDNN runs float32 convolutions as TF32 by default (``torch.backends.cudnn.allow_tf32``), so
the tensor cores are used at half the bf16 rate, and every activation is 4 bytes.

--fixed: bf16 autocast around the forward and the loss (float32 master weights and the optimizer
unchanged, still NCHW).

EXPECTED on an H100 (written before any run): ``fp32-matmul`` (its convolutions run TF32 /
float32; the same cause as fp32 GEMMs). Measured speedup with --fixed: about x1.4-2.2 (sick
~35-60 ms; BatchNorm and ReLU stay memory-bound, in half the bytes).
One step = one optimizer step = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=50)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--fixed", action="store_true", help="bf16 autocast")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
batch, size, classes, width = (128, 128, 100, 64) if cuda else (4, 32, 10, 8)
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], width
        for i, cout in enumerate([width, 2 * width, 4 * width, 8 * width]):
            blocks += [Block(cin, cout, 1 if i == 0 else 2), Block(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


model = ResNet().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
n_batches = 4
images = torch.randn(n_batches, batch, 3, size, size, device=device)
targets = torch.randint(classes, (n_batches, batch), device=device)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x, y = images[it % n_batches], targets[it % n_batches]
    with torch.autocast(device, dtype=torch.bfloat16, enabled=args.fixed and cuda):
        loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()  # waits for the queued steps, so the time below covers their GPU work
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
