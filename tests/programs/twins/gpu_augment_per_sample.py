"""A small CNN whose GPU-side augmentation flips and rescales each image in a Python loop.

The batch (256 images of 3x64x64, already on the GPU) is augmented sample by sample: a random
horizontal flip and a random brightness scale per image, written back in place (``x[i] =
x[i].flip(-1)``, ``x[i] *= scale[i]``), under ``torch.no_grad()``; then a small CNN trains on it
under bf16 autocast with fused AdamW.

--fixed: the same augmentation on the whole batch at once (``torch.where`` on a flip mask, one
multiply by the scales); everything else unchanged.

EXPECTED on an H100: ``per-sample-loop`` (256 iterations of the same few operators on one slice
each, no backward), or ``launch-bound``; measured speedup with --fixed about x2-4 (sick ~10-15 ms,
of which the loop ~7-10 ms; fixed ~3-5 ms).
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
parser.add_argument("--fixed", action="store_true", help="augment the whole batch at once")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
batch, side = (256, 64) if cuda else (16, 16)


@torch.no_grad()
def augment(x, flip, scale):
    if args.fixed:
        return torch.where(flip[:, None, None, None], x.flip(-1), x) * scale[:, None, None, None]
    x = x.clone()
    for i in range(x.shape[0]):
        if flip[i]:
            x[i] = x[i].flip(-1)
        x[i] *= scale[i]
    return x


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(128, 10),
    ).to(device).to(memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
    images = torch.rand(4, batch, 3, side, side, device=device)
    labels = torch.randint(0, 10, (4, batch), device=device)
    # the flip decisions live on the CPU, as a Python-side random draw would
    flips = torch.rand(4, batch) < 0.5
    scales = (0.8 + 0.4 * torch.rand(4, batch)).to(device)

    t0 = time.perf_counter()
    for it in range(1, args.iters + 1):
        k = it % 4
        x = augment(images[k], flips[k].to(device) if args.fixed else flips[k], scales[k])
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), labels[k])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            lossf = loss.item()
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
            t0 = time.perf_counter()
