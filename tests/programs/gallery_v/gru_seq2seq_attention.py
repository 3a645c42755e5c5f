"""A sequence-to-sequence model with attention, the way the PyTorch "translation with a
sequence to sequence network and attention" tutorial writes it, batched: a GRU encoder over the
source (``nn.GRU``, 256 hidden), and a decoder that steps through the target one token at a time
in a Python loop (an embedding, dot-product attention over the encoder's outputs, ``nn.GRUCell``
on the embedding and the context, a linear layer to a 4,000-word vocabulary), with teacher
forcing and the loss summed over the steps.

Batch 64, source and target of 32 tokens, random, fp32, Adam, gradient clipping at 1.0. Prints
the mean time per iteration every ``--log-every``.
"""

import argparse
import time

import torch
from torch import nn
from torch.nn import functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--length", type=int, default=32)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB, HIDDEN, BOS = 4000, 256, 1


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_embed = nn.Embedding(VOCAB, HIDDEN)
        self.encoder = nn.GRU(HIDDEN, HIDDEN, batch_first=True)
        self.tgt_embed = nn.Embedding(VOCAB, HIDDEN)
        self.cell = nn.GRUCell(2 * HIDDEN, HIDDEN)
        self.out = nn.Linear(2 * HIDDEN, VOCAB)

    def forward(self, src, tgt):
        enc, h = self.encoder(self.src_embed(src))
        h = h[0]
        prev = torch.full((src.size(0),), BOS, dtype=torch.long, device=src.device)
        loss = 0.0
        for t in range(tgt.size(1)):
            scores = torch.bmm(enc, h.unsqueeze(2)).squeeze(2)
            context = torch.bmm(F.softmax(scores, dim=1).unsqueeze(1), enc).squeeze(1)
            h = self.cell(torch.cat([self.tgt_embed(prev), context], dim=1), h)
            logits = self.out(torch.cat([h, context], dim=1))
            loss = loss + F.cross_entropy(logits, tgt[:, t])
            prev = tgt[:, t]  # teacher forcing
        return loss / tgt.size(1)


model = Seq2Seq().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    src = torch.randint(2, VOCAB, (args.batch_size, args.length), device=device)
    tgt = torch.randint(2, VOCAB, (args.batch_size, args.length), device=device)
    loss = model(src, tgt)
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {loss.item():.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
