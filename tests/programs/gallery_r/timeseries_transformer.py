"""A small Transformer forecaster for multivariate time series, fp32, the way a Kaggle kernel
writes one.

A linear embedding of 32 channels, a learned positional embedding, ``nn.TransformerEncoder``
(4 layers, d_model 128, 4 heads, pre-norm, batch_first), a linear head predicting the next 24
steps of every channel from the last token; MSE loss, Adam. Windows of 96 steps, batch 64,
random data already on the device. Prints the mean time per iteration every ``--log-every``.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=64)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
channels, window, horizon, d_model = 32, 96, 24, 128


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(channels, d_model)
        self.pos = nn.Parameter(torch.zeros(1, window, d_model))
        layer = nn.TransformerEncoderLayer(d_model, 4, 4 * d_model, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, horizon * channels)

    def forward(self, x):
        h = self.encoder(self.embed(x) + self.pos)
        return self.head(h[:, -1]).view(-1, horizon, channels)


model = Forecaster().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(args.batch_size, window, channels, device=device)
    y = torch.randn(args.batch_size, horizon, channels, device=device)
    loss = F.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
