"""A small CNN fed by a map-style Dataset that decodes each image on the fly, as an image-folder
tutorial does: the default DataLoader (no workers, no pinned memory), batch 64 of 3 x 96 x 96.

Each sample is made on the CPU (a uint8 image, flipped at random, scaled to float and normalised
per channel) and the batch is copied to the GPU with ``.to(device)``; four conv-BN-ReLU blocks
and a linear head, SGD with momentum, fp32.

EXPECTED on an H200: ``input-pipeline`` first (the training thread builds every batch: about
64 samples x tens of microseconds of tensor work, several ms a step, while the GPU's step is
short); pinned memory alone changes little (x1.0-1.1); DataLoader workers should measure about
x2-4 (bounded by what the workers produce); bf16 autocast and compile little or nothing
(x0.9-1.1): the GPU is not the step. One step = one optimizer step.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=200)
parser.add_argument("--log-every", type=int, default=20)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
side = 96 if device == "cuda" else 32
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class Pictures(Dataset):
    def __init__(self, n):
        self.images = torch.randint(0, 256, (n, side, side, 3), dtype=torch.uint8)
        self.labels = torch.randint(0, 10, (n,))

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        img = self.images[i].permute(2, 0, 1).float() / 255.0
        if torch.rand(()) < 0.5:
            img = img.flip(-1)
        return (img - MEAN) / STD, self.labels[i]


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True), nn.MaxPool2d(2))


model = nn.Sequential(block(3, 32), block(32, 64), block(64, 128), block(128, 256),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loader = DataLoader(Pictures(2048), batch_size=64, shuffle=True, drop_last=True)

it, t0 = 0, time.perf_counter()
while it < args.iters:
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        it += 1
        if it % args.log_every == 0:
            lossf = loss.item()  # waits for the queued steps, so the time covers their GPU work
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
            t0 = time.perf_counter()
        if it >= args.iters:
            break
