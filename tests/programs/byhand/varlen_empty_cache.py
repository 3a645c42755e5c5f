"""A text classifier over batches of varying length that calls ``torch.cuda.empty_cache()`` every step.

Batches of 32 sequences padded to the batch's longest, rounded up to a multiple of 128 by the collate
function (lengths drawn from 64-1024 per batch: 8 shapes, all seen within the first steps), a
6-layer ``nn.TransformerEncoder`` (width 512, bf16 autocast), mean pooling, fused AdamW. After every
step the loop calls ``torch.cuda.empty_cache()``, "to stop fragmentation OOMs" (a comment copied
from an issue thread), so every step gives its blocks back to the driver and allocates them again
with ``cudaMalloc`` / ``cudaFree``.

Hand-made fix, one flag:
  --keep-cache: the ``empty_cache()`` line is not called. The ``no-empty-cache`` knob makes
                ``empty_cache`` a no-op and also sets ``expandable_segments:True``; the hand-made
                fix only drops the call.

EXPECTED on an H100 (written before any run): ``allocator-churn`` (cudaFree synchronises the device
and each step's cudaMalloc calls block the host). Hand-made --keep-cache: about x1.2-1.8.
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
parser.add_argument("--keep-cache", action="store_true")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
width, depth, batch, lengths, pad_to = (512, 6, 32, (64, 1024), 128) if cuda else (32, 1, 4, (8, 32), 8)


class Classifier(nn.Module):
    def __init__(self, vocab: int = 30_000, classes: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, 8, 4 * width, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)).mean(dim=1))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Classifier().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    lengths_gen = torch.Generator().manual_seed(1)
    t0 = time.perf_counter()
    for it in range(1, args.iters + 1):
        length = int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=lengths_gen))
        length = -(-length // pad_to) * pad_to
        ids = torch.randint(0, 30_000, (batch, length), device=device)
        y = torch.randint(0, 4, (batch,), device=device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(ids), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if cuda and not args.keep_cache:
            torch.cuda.empty_cache()
        if it % args.log_every == 0:
            print(f"iter {it}: loss {loss.item():.4f}, {(time.perf_counter() - t0) / args.log_every * 1000:.2f} ms/iter",
                  flush=True)
            t0 = time.perf_counter()
