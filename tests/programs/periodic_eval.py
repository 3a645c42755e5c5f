"""A training loop that evaluates every ``--eval-every`` steps, as most training scripts do.

A small convolutional classifier on 32x32 images in bf16 autocast, AdamW, batch 128, a fresh
batch on the device each step. Every ``--eval-every`` optimizer steps the loop runs a validation
pass (eight batches under ``torch.no_grad()``) and prints the accuracy, read with ``.item()``: the
step that holds it takes several times as long as the others. Prints the mean time per training
iteration every ``--log-every`` (the evaluation included, as a user's own timer would).

EXPECTED on an H200: the training steps GPU-bound on the convolutions and their BatchNorm / ReLU
chains: ``unfused-elementwise`` (the BatchNorm / ReLU chains) and possibly ``launch-bound``; the
evaluation's steps show as ``host-sync`` at most minor (one read every 40 steps). A compile
trial's window and its control's hold different numbers of evaluation steps unless they are
compared over the same steps: ``run --try-fixes`` compile's measured speedup should stay within
1.25x of the same comparison made by hand over matching steps. One step = one optimizer step.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=200)
parser.add_argument("--log-every", type=int, default=20)
parser.add_argument("--eval-every", type=int, default=40)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
width, batch, size = (64, 128, 32) if device == "cuda" else (8, 8, 16)


def block(c_in: int, c_out: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()
    )


model = nn.Sequential(
    block(3, width),
    block(width, width),
    nn.MaxPool2d(2),
    block(width, 2 * width),
    block(2 * width, 2 * width),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(2 * width, 10),
).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
val = [
    (
        torch.randn(batch, 3, size, size, device=device),
        torch.randint(0, 10, (batch,), device=device),
    )
    for _ in range(8)
]


def evaluate() -> float:
    model.eval()
    correct = 0
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        for x, y in val:
            correct += (model(x).argmax(dim=1) == y).sum()
    model.train()
    return correct.item() / (len(val) * batch)


t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if it % args.eval_every == 0:
        print(f"iter {it}: val accuracy {evaluate():.3f}", flush=True)
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
