"""An LSTM text classifier over variable-length sequences with ``pack_padded_sequence``.

Each batch is built on the host like a collate function does: token ids padded to the batch's own
longest sequence, plus a lengths tensor; both are moved to the GPU. The loop then sorts the batch
by length on the GPU and packs it with ``lengths.cpu()`` (pack_padded_sequence wants its lengths on
the CPU), runs a 2-layer cuDNN LSTM, classifies from the last hidden state; Adam (foreach on
CUDA); a log line every ``--log-every`` iterations.

EXPECTED on an H100: ``host-sync``. ``lengths.cpu()`` at the start of every forward waits for the
GPU to finish the previous step's backward and Adam update, so the GPU then idles while the host
launches the embedding, the sort, the packing and the LSTM again; the step itself is a handful of
large cuDNN RNN kernels, so that refill is a visible share of it. ``launch-bound`` is the
acceptable second reading (the packed sequence's batch_sizes make the cuDNN call's own host setup
per batch). ``dynamic-shapes`` is not expected: the padded length changes every batch, but cuDNN's
RNN does not autotune per shape as its convolutions do under ``cudnn.benchmark``.
One step = one optimizer step = one batch = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    vocab, embed, hidden, batch, min_len, max_len, n_classes = 20000, 256, 512, 64, 64, 512, 5
else:
    vocab, embed, hidden, batch, min_len, max_len, n_classes = 500, 16, 32, 4, 4, 16, 5


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed, padding_idx=0)
        self.lstm = nn.LSTM(embed, hidden, num_layers=2, batch_first=True, dropout=0.1)
        self.fc = nn.Linear(hidden, n_classes)

    def forward(self, tokens, lengths):
        lengths, order = lengths.sort(descending=True)
        tokens = tokens[order]
        packed = pack_padded_sequence(self.embedding(tokens), lengths.cpu(), batch_first=True)
        _, (h, _) = self.lstm(packed)
        return self.fc(h[-1]), order


def make_batch():
    """What a collate_fn does: random-length sequences padded to the longest one."""
    lengths = torch.randint(min_len, max_len + 1, (batch,))
    tokens = torch.zeros(batch, int(lengths.max()), dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        tokens[i, :n] = torch.randint(1, vocab, (n,))
    labels = torch.randint(n_classes, (batch,))
    return tokens, lengths, labels


model = Classifier().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    tokens, lengths, labels = make_batch()
    tokens, lengths, labels = tokens.to(device), lengths.to(device), labels.to(device)
    logits, order = model(tokens, lengths)
    loss = F.cross_entropy(logits, labels[order])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
