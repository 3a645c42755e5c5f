"""A small ResNet trained on CIFAR-sized images, the way a course notebook writes it: the images
sit in memory as uint8 arrays, a ``Dataset`` augments each one in its ``__getitem__`` (random crop
with 4 pixels of padding, horizontal flip, per-channel normalisation, in NumPy), and a plain
``DataLoader`` (batch 256, shuffled, the default ``num_workers=0``) feeds the model.

The model: a ResNet for 32 x 32 inputs (a 3 x 3 stem of 64 channels, three stages of two basic
blocks at 64, 128 and 256 channels, global average pooling, a linear classifier over 10 classes),
fp32, SGD with momentum 0.9 and weight decay, cross-entropy with label smoothing 0.1. 50,000
random images stand in for the data set. Prints the mean time per iteration every
``--log-every``.
"""

import argparse
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=256)
parser.add_argument("--images", type=int, default=50_000)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32).reshape(3, 1, 1)
STD = np.array([0.2470, 0.2435, 0.2616], np.float32).reshape(3, 1, 1)


class AugmentedImages(Dataset):
    def __init__(self, n):
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        self.labels = rng.integers(0, 10, n)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        img = np.pad(self.images[i], ((4, 4), (4, 4), (0, 0)), mode="reflect")
        y0, x0 = np.random.randint(0, 9, 2)
        img = img[y0:y0 + 32, x0:x0 + 32]
        if np.random.rand() < 0.5:
            img = img[:, ::-1]
        img = (img.transpose(2, 0, 1).astype(np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(img), int(self.labels[i])


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                          nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU())
        blocks, c_in = [], 64
        for c_out, stride in ((64, 1), (128, 2), (256, 2)):
            blocks += [BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out, 1)]
            c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c_in, n_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


loader = DataLoader(AugmentedImages(args.images), batch_size=args.batch_size, shuffle=True,
                    drop_last=True)
model = ResNet().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)

it = 0
t0 = time.perf_counter()
while it < args.iters:
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        loss = criterion(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        it += 1
        if it % args.log_every == 0:
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"iter {it}: loss {loss.item():.4f}, {ms:.3f} ms/iter", flush=True)
            t0 = time.perf_counter()
        if it >= args.iters:
            break
