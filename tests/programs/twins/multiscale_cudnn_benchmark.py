"""A detector-style CNN trained at a random input size every step, with cuDNN's autotuner on.

Multi-scale training, as YOLO-style detectors do it: each step the batch of 32 images is resized
to a random square size between 320 and 640 pixels (any multiple of 4), and the training script
sets ``torch.backends.cudnn.benchmark = True`` because "it makes convolutions faster". The model is
a plain convolutional backbone (a 3x3 stem and five stages of two 3x3 conv + BatchNorm + SiLU
blocks, stride 2 between stages, 32->512 channels), global pooling and a linear head, in
channels_last under bf16 autocast, SGD with momentum; data are made on the GPU (random tensors
resized with ``F.interpolate``); the loop syncs only at log points.

With ``benchmark = True`` cuDNN times every candidate algorithm of every convolution the first
time it sees a shape, forward and backward; a new size every step means the autotuner runs every
step, for every layer.

--fixed: the size is drawn from 6 buckets (320, 384, 448, 512, 576, 640): the autotuner runs once
per bucket and layer, then every step reuses its choice. Model, data, autotuner flag and loop
otherwise unchanged.

EXPECTED on an H100: ``dynamic-shapes`` (convolutions setting themselves up for a new shape every
step). The autotuner's trial runs are GPU kernels, so part of the cost is GPU time the doctor
may count as busy rather than idle: its saving may fall short of the measured one. Measured
speedup with --fixed: large, about x3-15 (sick ~100-400 ms, fixed ~15-30 ms). Written before any
run on a GPU.
One step = one optimizer step = one printed iteration.
"""

import argparse
import random
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--log-every", type=int, default=5)
parser.add_argument("--fixed", action="store_true", help="sizes from 6 buckets instead of any multiple of 4")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
torch.backends.cudnn.benchmark = True  # "it makes convolutions faster"
if cuda:
    batch, lo, hi, widths, n_classes = 32, 320, 640, (32, 64, 128, 256, 512), 80
else:
    batch, lo, hi, widths, n_classes = 2, 32, 64, (8, 16), 10
buckets = [lo + k * (hi - lo) // 5 for k in range(6)]
torch.manual_seed(0)
rng = random.Random(0)


def block(c_in, c_out, stride):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.SiLU())


layers = [block(3, widths[0], 2)]
for i, w in enumerate(widths):
    c_in = widths[i - 1] if i else widths[0]
    layers += [block(c_in, w, 2 if i else 1), block(w, w, 1)]
model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(widths[-1], n_classes))
model = model.to(device, memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, fixed={args.fixed}")

source = torch.rand(batch, 3, hi, hi, device=device)  # the decoded images, full size
targets = torch.randint(n_classes, (batch,), device=device)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    side = rng.choice(buckets) if args.fixed else rng.randrange(lo, hi + 1, 4)
    x = F.interpolate(source, size=(side, side), mode="bilinear", align_corners=False)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        loss = F.cross_entropy(model(x), targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, size {side}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
