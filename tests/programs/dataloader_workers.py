"""A ``DataLoader`` with ``num_workers=4`` whose ``Dataset.__getitem__`` does heavy CPU work.

Each sample is "decoded" and augmented in Python/numpy (a random-resized crop done with a Python
loop over rows, a 5x5 box blur, colour jitter, normalisation). Four workers cannot keep up with a
small CNN on the GPU, so the loop waits in ``next(iterator)``. The loader uses pinned memory and
non-blocking copies, as the tutorials say. Prints the mean time per batch every ``--log-every``.

EXPECTED on an H100: ``input-pipeline`` (the GPU idles while the main process waits for the
workers' batches); the fix is more workers / cheaper augmentation / GPU-side augmentation.
One step = one optimizer step = one batch.
"""

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--workers", type=int, default=4)
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
image, batch = (96, 64) if cuda else (16, 4)


class AugmentedImageFolder(Dataset):
    """Pretends to read JPEGs: builds a raw image, then augments it the slow way."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        raw = rng.integers(0, 256, (image + 32, image + 32, 3)).astype(np.float32)
        # random resized crop, one output row at a time
        top, left = rng.integers(0, 32, 2)
        scale = rng.uniform(0.8, 1.0)
        rows = []
        for r in range(image):
            src = top + int(r * scale)
            cols = (left + (np.arange(image) * scale).astype(int)).clip(0, raw.shape[1] - 1)
            rows.append(raw[src, cols])
        img = np.stack(rows)
        # 5x5 box blur
        padded = np.pad(img, ((2, 2), (2, 2), (0, 0)), mode="reflect")
        blurred = np.zeros_like(img)
        for dy in range(5):
            for dx in range(5):
                blurred += padded[dy : dy + image, dx : dx + image]
        img = blurred / 25.0
        # colour jitter and normalisation
        img = img * rng.uniform(0.7, 1.3, 3) + rng.uniform(-20, 20, 3)
        img = (img / 255.0 - 0.45) / 0.25
        label = int(rng.integers(0, 100))
        return torch.from_numpy(img.transpose(2, 0, 1).astype(np.float32)), label


if __name__ == "__main__":
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
        nn.Conv2d(64, 128, 3, 2, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 100),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(AugmentedImageFolder(batch * (args.iters + 8)), batch_size=batch, shuffle=True,
                        num_workers=args.workers, pin_memory=cuda, persistent_workers=False)

    t0 = time.perf_counter()
    for it, (x, y) in enumerate(loader, start=1):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            lossf = loss.item()
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
            t0 = time.perf_counter()
        if it >= args.iters:
            break
