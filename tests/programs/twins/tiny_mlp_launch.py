"""A deep, narrow MLP trained at a small batch: thousands of tiny kernels per step.

48 blocks of Linear(256, 256) + LayerNorm + GELU, batch 64, cross-entropy, Adam(fused=True), the
data already on the GPU. Every kernel runs a few microseconds; the host needs longer than that to
get each op through Python, autograd and the dispatcher, so the GPU waits between kernels.

--fixed: the whole training step (forward, loss, backward, optimizer step) captured once in a
CUDA graph the way the PyTorch docs show it (static input / target tensors, warm-up iterations on a
side stream, ``torch.cuda.CUDAGraph()``, ``Adam(capturable=True, fused=True)``), then replayed each
step after copying the batch into the static tensors. On the CPU (no graphs) it trains eagerly.

EXPECTED on an H100: ``launch-bound`` (about 470 kernels per step of 2-5 us each, launched every
~10-15 us). Measured speedup with --fixed: about x3-5 (sick ~4.5-6 ms, the graph replays the same
kernels back to back in ~1.3 ms).
One step = one optimizer step = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=200)
parser.add_argument("--log-every", type=int, default=20)
parser.add_argument("--fixed", action="store_true", help="capture the training step in a CUDA graph")
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
width, depth, batch, n_classes = (256, 48, 64, 10) if device == "cuda" else (32, 4, 16, 10)
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return F.gelu(self.norm(self.fc(x)))


model = nn.Sequential(*[Block() for _ in range(depth)], nn.Linear(width, n_classes)).to(device)
use_graph = args.fixed and device == "cuda"
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True, capturable=use_graph)

n_batches = 64
inputs = torch.randn(n_batches, batch, width, device=device)
targets = torch.randint(n_classes, (n_batches, batch), device=device)


def train_step(x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


if use_graph:
    static_x = inputs[0].clone()
    static_y = targets[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up before capture (allocator, cuBLAS workspaces, optimizer state)
            optimizer.zero_grad(set_to_none=True)
            train_step(static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = train_step(static_x, static_y)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    b = it % n_batches
    if use_graph:
        static_x.copy_(inputs[b])
        static_y.copy_(targets[b])
        graph.replay()
        loss = static_loss
    else:
        optimizer.zero_grad(set_to_none=True)
        loss = train_step(inputs[b], targets[b])
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
