"""A small GPT trained in float32 with TF32 matmuls, the way a float32 reference script ends up.

Someone read that ``torch.set_float32_matmul_precision("high")`` turns on the tensor cores and
stopped there: weights, activations and attention stay float32 (so ``scaled_dot_product_attention``
cannot take a flash kernel), the matmuls run in TF32. 6 layers, d_model 768, 12 heads, context 512,
batch 16, vocab 8192, tied embeddings, fused AdamW, gradient clipping. The token stream lives on
the GPU and batches are sampled there. The loop syncs only at log points (``loss.item()``).

--fixed: bf16 autocast around the forward and the loss (float32 master weights and the optimizer
unchanged; the TF32 setting stays).

EXPECTED on an H100: ``fp32-matmul`` (TF32 runs at half the bf16 tensor-core rate, every operand
is twice the bytes, and fp32 attention takes the memory-efficient kernel instead of flash). Measured
speedup with --fixed: about x1.5-2.0 (sick ~16-25 ms, fixed ~9-14 ms; the fixed step keeps its fp32
LayerNorms, casts and optimizer).
One step = one optimizer step = one printed iteration.
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--fixed", action="store_true", help="train under bf16 autocast")
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    n_layer, n_head, n_embd, block_size, batch_size, vocab_size = 6, 12, 768, 512, 16, 8192
else:
    n_layer, n_head, n_embd, block_size, batch_size, vocab_size = 2, 2, 64, 32, 4, 256

torch.manual_seed(0)
torch.set_float32_matmul_precision("high")  # "use the tensor cores"
if args.fixed:
    ctx = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=(device == "cuda"))
else:
    ctx = torch.autocast(device_type=device, enabled=False)


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(n_embd, dim=2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = SelfAttention()
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        self.tok.weight = self.head.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, vocab_size), targets.view(-1))


model = GPT().to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, fixed={args.fixed}")
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                              fused=(device == "cuda"))

tokens = torch.randint(vocab_size, (1_000_000,), device=device)  # the "dataset", already on the GPU
offsets = torch.arange(block_size, device=device)


def get_batch():
    ix = torch.randint(len(tokens) - block_size - 1, (batch_size, 1), device=device)
    return tokens[ix + offsets], tokens[ix + offsets + 1]


def lr_at(it, warmup=10, max_lr=3e-4):
    return max_lr * min(1.0, (it + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * it / max(args.iters, 1)))


t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    for group in optimizer.param_groups:
        group["lr"] = lr_at(it)
    x, y = get_batch()
    with ctx:
        loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
