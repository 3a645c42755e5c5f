"""A text classifier on ``nn.TransformerEncoder``, trained in plain float32.

6 encoder layers (d 768, 12 heads, FF 3072, batch_first, dropout 0.1), learned positions, mean
pooling and a linear head over 20 classes; batch 32 of 256 tokens drawn on the GPU; AdamW
(the default foreach path), gradient clipping at 1.0. Nothing was set for precision: the matmuls
run in full fp32 (TF32 is off by default for them), and so does attention.

--fixed: ``torch.autocast("cuda", dtype=torch.bfloat16)`` around the forward pass and the loss;
fp32 master weights, optimizer and everything else unchanged.

EXPECTED on an H100: ``fp32-matmul`` first (about 2 TFLOP of GEMMs a step, at the fp32 rate
~40-50 ms). Measured speedup with --fixed: about x3-5 (sick ~45-60 ms, fixed ~11-16 ms: the
GEMMs at the bf16 rate plus the elementwise work, the casts and the optimizer, which stay).
One step = one optimizer step = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--log-every", type=int, default=5)
parser.add_argument("--fixed", action="store_true", help="bf16 autocast around forward and loss")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
d_model, heads, ff, layers, seq, batch = (768, 12, 3072, 6, 256, 32) if cuda else (64, 4, 128, 2, 16, 4)
vocab, n_classes = 30000, 20
torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(seq, d_model))
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.1, batch_first=True,
                                           norm_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos
        x = self.norm(self.encoder(x))
        return self.head(x.mean(dim=1))


model = Classifier().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    tokens = torch.randint(vocab, (batch, seq), device=device)
    labels = torch.randint(n_classes, (batch,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=args.fixed and cuda):
        loss = F.cross_entropy(model(tokens), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
