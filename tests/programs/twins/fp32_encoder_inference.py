"""A BERT-base-sized encoder serving batches for embeddings in plain float32.

12 ``nn.TransformerEncoderLayer`` (d 768, 12 heads, FFN 3072, post-norm, GELU) under
``torch.inference_mode()``, batches of 64 sequences of 256 tokens already on the GPU, mean-pooled
embeddings kept on the GPU and read at log points. No autocast and PyTorch's default matmul
precision ("highest": TF32 off), so every projection runs on the CUDA cores in full fp32, and
the attention (the fast path's fused kernel in fp32) too.

--fixed: bf16 autocast around the forward; everything else unchanged.

EXPECTED on an H100: ``fp32-matmul`` first. Measured speedup with --fixed: about x4-8.
One step = one forward = one printed iteration.
"""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--log-every", type=int, default=5)
parser.add_argument("--fixed", action="store_true", help="bf16 autocast")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
d, heads, depth, seq, batch, vocab = (768, 12, 12, 256, 64, 30522) if cuda else (64, 4, 2, 16, 2, 1000)
torch.manual_seed(0)

embed = nn.Embedding(vocab, d)
layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, activation="gelu", batch_first=True)
encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
model = nn.ModuleDict({"embed": embed, "encoder": encoder}).to(device).eval()
ids = torch.randint(vocab, (4 * batch, seq), device=device)
pooled = []
with torch.inference_mode():
    t0 = time.perf_counter()
    for it in range(1, args.iters + 1):
        rows = slice((it % 4) * batch, (it % 4 + 1) * batch)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=args.fixed and cuda):
            hidden = model["encoder"](model["embed"](ids[rows]))
            pooled.append(hidden.mean(1).float())
        if it % args.log_every == 0:
            norm = torch.cat(pooled).norm(dim=1).mean().item()
            pooled.clear()
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"iter {it}: mean norm {norm:.3f}, {ms:.2f} ms/iter", flush=True)
            t0 = time.perf_counter()
