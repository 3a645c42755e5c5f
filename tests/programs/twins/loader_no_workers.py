"""An image classifier whose DataLoader does heavy numpy augmentation in the training process.

``Dataset.__getitem__`` "decodes" a 80x80 RGB image and augments it with numpy the slow way
(random crop to 64x64, horizontal flip, a 3x3 sharpen done as 9 shifted adds, colour jitter, a
gamma curve, normalisation): about 0.3 ms a sample, ~15-25 ms a batch of 64. The DataLoader is
left at its defaults (``num_workers=0``, no pinned memory), so batches are built on the training
thread; the model is a small CNN trained under bf16 autocast with SGD.

--fixed: ``num_workers=6, pin_memory=True, persistent_workers=True`` and ``.to(device,
non_blocking=True)`` copies; the dataset, model and loop are unchanged.

EXPECTED on an H100: ``input-pipeline`` (the GPU idles while the training thread runs
``__getitem__``; the small pageable batch copy, 3 MB, is minor). Measured speedup with --fixed:
about x3.5-6 (sick ~15-22 ms, fixed ~max(batch time / 6 workers, GPU step) ~3-5 ms).
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
parser.add_argument("--fixed", action="store_true", help="6 loader workers, pinned memory, non-blocking copies")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
crop, batch = (64, 64) if cuda else (16, 8)
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
    if args.fixed:
        loader = DataLoader(dataset, batch_size=batch, shuffle=True, drop_last=True, num_workers=6,
                            pin_memory=cuda, persistent_workers=True)
    else:
        loader = DataLoader(dataset, batch_size=batch, shuffle=True, drop_last=True)

    t0 = time.perf_counter()
    for it, (x, y) in enumerate(loader, start=1):
        x, y = x.to(device, non_blocking=args.fixed), y.to(device, non_blocking=args.fixed)
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
