"""A sequence tagger that steps a ``GRUCell`` through time in Python, small batch.

Batch 16, 48 time steps, an embedding of 64, a GRUCell of 256 and a per-step Linear tagger over 20
tags, all written as a ``for t in range(T)`` loop inside ``forward`` (the way a first RNN is written);
fused Adam, data made on the GPU, fp32. Each time step launches a dozen small kernels forward and
backward, each a few microseconds of GPU work.

Hand-made fix, one flag:
  --reduce-overhead: ``model = torch.compile(model, mode="reduce-overhead")`` after building it
                     (the ``compile-reduce-overhead`` knob's change: the knob compiles the outermost
                     module's forward under CUDA graphs).

EXPECTED on an H100 (written before any run): ``launch-bound`` (about 1,500 kernels a step of a few
us each; the GPU waits on the Python loop and the launches). Hand-made --reduce-overhead: about
x3-8 (one graph replay for forward and one for backward, the optimizer stays a fused kernel).
One step = one optimizer step = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=80)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--reduce-overhead", action="store_true")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
vocab, tags, steps, batch, hidden = 5000, 20, (48 if cuda else 8), 16, (256 if cuda else 32)


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(vocab, 64)
        self.cell = nn.GRUCell(64, hidden)
        self.out = nn.Linear(hidden, tags)

    def forward(self, words):
        h = torch.zeros(words.shape[0], hidden, device=words.device)
        logits = []
        for t in range(words.shape[1]):
            h = self.cell(self.embed(words[:, t]), h)
            logits.append(self.out(h))
        return torch.stack(logits, dim=1)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Tagger().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=cuda)
    if args.reduce_overhead:
        model = torch.compile(model, mode="reduce-overhead")
    t0 = time.perf_counter()
    for it in range(1, args.iters + 1):
        words = torch.randint(0, vocab, (batch, steps), device=device)
        labels = torch.randint(0, tags, (batch, steps), device=device)
        loss = F.cross_entropy(model(words).reshape(-1, tags), labels.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it}: loss {loss.item():.4f}, {(time.perf_counter() - t0) / args.log_every * 1000:.2f} ms/iter",
                  flush=True)
            t0 = time.perf_counter()
