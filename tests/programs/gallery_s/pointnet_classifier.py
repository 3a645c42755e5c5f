"""PointNet classifying random point clouds, fp32, the way the paper's PyTorch ports write it.

A shared MLP as ``nn.Conv1d`` layers with ``BatchNorm1d`` and ReLU (3 -> 64 -> 128 -> 1024 over
1024 points), a max-pool over the points, and a classifier head (1024 -> 512 -> 256 -> 40) with
dropout; cross-entropy, Adam, batch 32. The clouds are random tensors already on the device.
Prints the mean time per iteration every ``--log-every``.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--points", type=int, default=1024)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"


class PointNet(nn.Module):
    def __init__(self, classes=40):
        super().__init__()
        self.conv1 = nn.Conv1d(3, 64, 1)
        self.conv2 = nn.Conv1d(64, 128, 1)
        self.conv3 = nn.Conv1d(128, 1024, 1)
        self.bn1 = nn.BatchNorm1d(64)
        self.bn2 = nn.BatchNorm1d(128)
        self.bn3 = nn.BatchNorm1d(1024)
        self.fc1 = nn.Linear(1024, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, classes)
        self.bn4 = nn.BatchNorm1d(512)
        self.bn5 = nn.BatchNorm1d(256)
        self.dropout = nn.Dropout(p=0.3)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        x = torch.max(x, 2)[0]
        x = F.relu(self.bn4(self.fc1(x)))
        x = F.relu(self.bn5(self.dropout(self.fc2(x))))
        return self.fc3(x)


model = PointNet().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    points = torch.randn(args.batch_size, 3, args.points, device=device)
    labels = torch.randint(0, 40, (args.batch_size,), device=device)
    loss = F.cross_entropy(model(points), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
