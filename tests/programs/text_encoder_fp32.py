"""A text classifier on nn.TransformerEncoder in fp32, trained the way a first project does.

Token ids come from a CPU tensor, batch 32 of 256 tokens, moved with ``.to(device)`` each step;
four encoder layers of width 512 (8 heads, feed-forward 2048), mean-pooled into 4 classes, AdamW.
The loop reads ``loss.item()`` every step for a running average. No autocast, no TF32.

EXPECTED on an H200: ``fp32-matmul`` first (the GEMMs and attention run in full fp32, the step is
the GPU's); the per-step ``.item()`` costs little (the host is ahead). bf16 autocast should
measure about x2-3, TF32 about x1.5-2.2, compile about x1.1-1.3. One step = one optimizer step.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=200)
parser.add_argument("--log-every", type=int, default=20)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
vocab, width, heads, layers, classes = 8000, 512, 8, 4, 4
batch, seq = (32, 256) if device == "cuda" else (2, 16)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens))
        return self.head(h.mean(dim=1))


model = Classifier().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
corpus = torch.randint(0, vocab, (64, batch, seq))
labels = torch.randint(0, classes, (64, batch))

running, t0 = 0.0, time.perf_counter()
for it in range(1, args.iters + 1):
    tokens = corpus[it % 64].to(device)
    target = labels[it % 64].to(device)
    loss = F.cross_entropy(model(tokens), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    running += loss.item()
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"step {it}: loss {running / args.log_every:.4f}, {ms:.3f} ms/step", flush=True)
        running, t0 = 0.0, time.perf_counter()
