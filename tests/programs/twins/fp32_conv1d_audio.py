"""A raw-waveform audio classifier (a wav2vec-style 1-D conv encoder) trained in fp32.

Seven Conv1d layers of 512 channels (kernels 10,3,3,3,3,2,2, strides 5,2,2,2,2,2,2) with
GroupNorm/GELU turn 1 s of 16 kHz audio into 49 frames, then mean-pool and a linear head; batch
32 clips, waveforms already on the GPU, AdamW (foreach). Everything runs in float32: cuDNN's
default lets convolutions use TF32, so the convolutions do touch the tensor cores, at TF32's rate
(half of bf16's) and with fp32 activations (twice the bytes) in GroupNorm and GELU.

--fixed: bf16 autocast around the forward and loss (fp32 weights, the optimizer unchanged).

EXPECTED on an H100: ``fp32-matmul`` first (TF32 convolutions and fp32 memory-bound layers).
Measured speedup with --fixed: about x1.5-2.2.
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
parser.add_argument("--fixed", action="store_true", help="bf16 autocast")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
channels, samples, batch = (512, 16000, 32) if cuda else (32, 1600, 2)
torch.manual_seed(0)

layers, c_in = [], 1
for i, (k, s) in enumerate(zip((10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2))):
    layers += [nn.Conv1d(c_in, channels, k, s, bias=False),
               nn.GroupNorm(channels, channels) if i == 0 else nn.Identity(), nn.GELU()]
    c_in = channels
encoder = nn.Sequential(*layers)
head = nn.Linear(channels, 35)
model = nn.Sequential(encoder, nn.AdaptiveAvgPool1d(1), nn.Flatten(), head).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)

waves = torch.randn(4 * batch, 1, samples, device=device)
labels = torch.randint(35, (4 * batch,), device=device)
t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    rows = slice((it % 4) * batch, (it % 4 + 1) * batch)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=args.fixed and cuda):
        loss = F.cross_entropy(model(waves[rows]), labels[rows])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
