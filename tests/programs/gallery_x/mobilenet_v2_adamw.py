"""A MobileNetV2 (inverted residual blocks: 1x1 expand, 3x3 depthwise, 1x1 project, each with
BatchNorm2d and ReLU6) written out for a 100-class image task at 128 x 128, fp32 and NCHW, trained
with AdamW (PyTorch's default implementation) and gradient clipping, batch 64, random images made
on the GPU. Prints the mean time per iteration every ``--log-every``.
"""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--size", type=int, default=128)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"


def conv_bn(c_in, c_out, k, stride=1, groups=1, act=True):
    layers = [nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=False),
              nn.BatchNorm2d(c_out)]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, c_in, c_out, stride, expand):
        super().__init__()
        hidden = c_in * expand
        self.use_skip = stride == 1 and c_in == c_out
        layers = [conv_bn(c_in, hidden, 1)] if expand != 1 else []
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden),
                   conv_bn(hidden, c_out, 1, act=False)]
        self.body = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.body(x) if self.use_skip else self.body(x)


class MobileNetV2(nn.Module):
    # (expand, channels, repeats, stride), as in the paper's Table 2
    CONFIG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
              (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, n_classes=100):
        super().__init__()
        layers, c_in = [conv_bn(3, 32, 3, 2)], 32
        for t, c, n, s in self.CONFIG:
            for i in range(n):
                layers.append(InvertedResidual(c_in, c, s if i == 0 else 1, t))
                c_in = c
        layers.append(conv_bn(c_in, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, n_classes))

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


torch.manual_seed(0)
model = MobileNetV2().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
criterion = nn.CrossEntropyLoss()

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(args.batch_size, 3, args.size, args.size, device=device)
    y = torch.randint(0, 100, (args.batch_size,), device=device)
    loss = criterion(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {loss.item():.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
