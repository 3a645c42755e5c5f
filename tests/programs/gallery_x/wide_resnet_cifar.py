"""A Wide ResNet (WRN-16-4) trained on CIFAR-sized images in fp32, the way a paper's reference
code writes it: pre-activation blocks (BatchNorm2d, ReLU, Conv2d), NCHW, no mixed precision, SGD
with momentum, Nesterov and weight decay (PyTorch's default implementation), a cosine schedule
stepped every iteration and label smoothing. The dataset (10,000 random 32 x 32 images, 10
classes) sits on the GPU; each step takes a shuffled batch of 128 and flips half of it. Prints the
mean time per iteration every ``--log-every``.
"""

import argparse
import time

import torch
from torch import nn
from torch.nn import functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=400)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--width", type=int, default=4)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"


class PreActBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.shortcut = None
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Conv2d(c_in, c_out, 1, stride, bias=False)

    def forward(self, x):
        out = F.relu(self.bn1(x))
        skip = x if self.shortcut is None else self.shortcut(out)
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        return out + skip


class WideResNet(nn.Module):
    def __init__(self, depth=16, width=4, n_classes=10):
        super().__init__()
        n = (depth - 4) // 6
        widths = [16, 16 * width, 32 * width, 64 * width]
        self.conv = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        blocks, c_in = [], widths[0]
        for i, c_out in enumerate(widths[1:]):
            for j in range(n):
                blocks.append(PreActBlock(c_in, c_out, 2 if (i > 0 and j == 0) else 1))
                c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(c_in)
        self.fc = nn.Linear(c_in, n_classes)

    def forward(self, x):
        x = F.relu(self.bn(self.blocks(self.conv(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


torch.manual_seed(0)
images = torch.randn(10_000, 3, 32, 32, device=device)
labels = torch.randint(0, 10, (10_000,), device=device)
model = WideResNet(width=args.width).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.iters)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    idx = torch.randint(0, images.shape[0], (args.batch_size,), device=device)
    x, y = images[idx], labels[idx]
    flip = torch.rand(args.batch_size, 1, 1, 1, device=device) < 0.5
    x = torch.where(flip, x.flip(3), x)
    loss = criterion(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {loss.item():.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
