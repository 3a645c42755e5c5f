"""Gradient accumulation: 4 micro-batches per optimizer step, in plain fp32.

A patch-embedding transformer (``nn.TransformerEncoderLayer``, norm_first) on random "images",
trained with AdamW; the loss is divided by the number of micro-batches, ``backward`` runs on each,
and the optimizer steps every 4th micro-batch. The author never turned on mixed precision or TF32:
every matmul runs in full fp32. Prints the mean time per micro-batch every ``--log-every`` micro-batches.

EXPECTED on an H100: ``fp32-matmul`` (the matmuls run on CUDA cores in fp32 while the tensor cores
idle; bf16 autocast or TF32 would speed the step up several times).
One step = one optimizer step = 4 micro-batches (4 forwards + 4 backwards); the printed unit is
the micro-batch, so iterations_per_step = 4.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--micro-batches", type=int, default=80)
parser.add_argument("--accum", type=int, default=4)
parser.add_argument("--log-every", type=int, default=8)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    d_model, n_layers, n_patches, batch = 768, 6, 196, 32
else:
    d_model, n_layers, n_patches, batch = 64, 2, 16, 4
patch_dim = 3 * 16 * 16


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Linear(patch_dim, d_model)
        self.pos = nn.Parameter(torch.zeros(1, n_patches, d_model))
        layer = nn.TransformerEncoderLayer(d_model, d_model // 64, 4 * d_model, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 1000)

    def forward(self, patches):
        x = self.patch(patches) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x.mean(dim=1))


model = ViT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)

t0 = time.perf_counter()
optimizer.zero_grad(set_to_none=True)
for micro in range(1, args.micro_batches + 1):
    x = torch.randn(batch, n_patches, patch_dim, device=device)
    y = torch.randint(1000, (batch,), device=device)
    loss = F.cross_entropy(model(x), y) / args.accum
    loss.backward()
    if micro % args.accum == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if micro % args.log_every == 0:
        lossf = loss.item() * args.accum
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"micro {micro}: loss {lossf:.4f}, {ms:.2f} ms/micro-batch", flush=True)
        t0 = time.perf_counter()
