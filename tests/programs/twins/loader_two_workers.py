"""An image classifier whose DataLoader already has two workers, and needs more.

The same numpy augmentation as a hand-written ``Dataset`` would do it (random crop of 112x112 to
96x96, flip, a 3x3 sharpen as shifted adds, colour jitter, gamma, normalisation; about 0.6-0.8 ms
a sample, ~40-50 ms a batch of 64 per worker) behind ``DataLoader(num_workers=2,
pin_memory=True)``; a small CNN trained under bf16 autocast with SGD.

--fixed: ``num_workers=8`` and ``persistent_workers=True``; the dataset, model and loop are
unchanged.

EXPECTED on an H100: ``input-pipeline`` (the two workers deliver a batch every ~20-25 ms; the GPU
needs ~4-6 ms for it); measured speedup with --fixed about x3-4.5 (fixed ~max(batch time / 8
workers, GPU step) ~5-7 ms).
One step = one optimizer step = one batch = one printed iteration.
"""

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--fixed", action="store_true", help="8 loader workers instead of 2")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
crop, batch = (96, 64) if cuda else (16, 8)
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


class AugmentedImages(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        raw = rng.integers(0, 256, (crop + 16, crop + 16, 3), dtype=np.uint8)  # the "decoded JPEG"
        img = raw.astype(np.float32) / 255.0
        top, left = rng.integers(0, 16, 2)
        img = img[top : top + crop, left : left + crop]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        # sharpen: 3x3 kernel as shifted adds
        padded = np.pad(img, ((1, 1), (1, 1), (0, 0)), mode="edge")
        kernel = np.array([[0, -1, 0], [-1, 5, -1], [0, -1, 0]], np.float32)
        out = np.zeros_like(img)
        for dy in range(3):
            for dx in range(3):
                if kernel[dy, dx]:
                    out += kernel[dy, dx] * padded[dy : dy + crop, dx : dx + crop]
        img = np.clip(out, 0.0, 1.0)
        # colour jitter, gamma, normalise
        img = img * rng.uniform(0.8, 1.2, 3).astype(np.float32) + rng.uniform(-0.1, 0.1, 3).astype(np.float32)
        img = np.power(np.clip(img, 0.0, 1.0), rng.uniform(0.8, 1.25))
        img = (img - MEAN) / STD
        label = int(rng.integers(0, 100))
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32)), label


def conv_bn(c_in, c_out, stride):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(
        conv_bn(3, 64, 1), conv_bn(64, 64, 1), conv_bn(64, 128, 2), conv_bn(128, 128, 1),
        conv_bn(128, 256, 2), conv_bn(256, 256, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 100),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    dataset = AugmentedImages(batch * (args.iters + 16))
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, drop_last=True, pin_memory=cuda,
                        num_workers=8 if args.fixed else 2, persistent_workers=args.fixed)

    t0 = time.perf_counter()
    for it, (x, y) in enumerate(loader, start=1):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            lossf = loss.item()
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
            t0 = time.perf_counter()
        if it >= args.iters:
            break
