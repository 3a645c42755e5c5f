"""A plain batched inference loop under ``torch.inference_mode()``: no optimizer, no backward.

A transformer encoder (``nn.TransformerEncoder``, batch_first) converted to bf16 on CUDA scores
batches of token ids; each batch comes from the CPU with ``.to(device)`` and the predictions go
back with ``.cpu()`` into a Python list, as most evaluation scripts do. Prints the mean time per
batch every ``--log-every`` batches.

EXPECTED on an H100: the per-batch ``.cpu()`` of the predictions drains the queue and the host
then launches the next batch's ~150 kernels while the GPU waits: ``host-sync`` (minor to major);
healthy is acceptable if the encoder's GPU time hides it.
One step = one batch = one forward (there is no optimizer: steps must come from the model's calls).
"""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batches", type=int, default=80)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if device.type == "cuda":
    d_model, n_layers, n_heads, seq, batch, vocab = 1024, 12, 16, 256, 32, 30000
else:
    d_model, n_layers, n_heads, seq, batch, vocab = 64, 2, 4, 32, 8, 1000


class TextClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.1, batch_first=True,
                                           activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, 5)

    def forward(self, ids):
        h = self.encoder(self.embed(ids))
        return self.head(h.mean(dim=1))


model = TextClassifier().to(device).eval()
if device.type == "cuda":
    model = model.to(torch.bfloat16)

dataset = [torch.randint(vocab, (batch, seq)) for _ in range(16)]
predictions = []
t0 = time.perf_counter()
with torch.inference_mode():
    for i in range(1, args.batches + 1):
        ids = dataset[i % len(dataset)].to(device)
        logits = model(ids)
        predictions.append(logits.argmax(dim=-1).cpu())
        if i % args.log_every == 0:
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"batch {i}: {ms:.2f} ms/batch", flush=True)
            t0 = time.perf_counter()
print(f"scored {sum(len(p) for p in predictions)} examples")
