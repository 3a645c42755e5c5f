"""A sequence classifier whose LSTM is written as a Python loop over ``nn.LSTMCell``.

Each step unrolls a 2-layer LSTM cell by cell over 64 time steps (hidden 256, batch 32, fp32 with
TF32 matmuls on), then classifies the last hidden state; AdamW (fused) updates it. Every time step
launches a handful of small kernels forward and more backward, so the card waits on Python.

--fixed: the same 2-layer LSTM as one ``nn.LSTM`` call (cuDNN runs the whole sequence); the data,
sizes, loss and optimizer are unchanged.

EXPECTED on an H100: ``launch-bound`` (or ``per-sample-loop``: the time loop); measured speedup with
--fixed about x4-10 (sick ~10-20 ms a step of ~1,000 tiny kernels, fixed ~1.5-3 ms).
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
parser.add_argument("--fixed", action="store_true", help="one nn.LSTM call instead of the cell loop")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
seq, batch, feat, hidden, classes = (64, 32, 64, 256, 10) if cuda else (8, 4, 8, 16, 3)


class CellLoopLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.cells = nn.ModuleList([nn.LSTMCell(feat, hidden), nn.LSTMCell(hidden, hidden)])
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):  # x: (seq, batch, feat)
        states = [(x.new_zeros(x.shape[1], hidden), x.new_zeros(x.shape[1], hidden)) for _ in self.cells]
        for t in range(x.shape[0]):
            inp = x[t]
            for i, cell in enumerate(self.cells):
                states[i] = cell(inp, states[i])
                inp = states[i][0]
        return self.head(inp)


class FusedLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(feat, hidden, num_layers=2)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[-1])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = (FusedLSTM() if args.fixed else CellLoopLSTM()).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
    xs = torch.randn(8, seq, batch, feat, device=device)
    ys = torch.randint(0, classes, (8, batch), device=device)

    t0 = time.perf_counter()
    for it in range(1, args.iters + 1):
        x, y = xs[it % 8], ys[it % 8]
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            lossf = loss.item()
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
            t0 = time.perf_counter()
