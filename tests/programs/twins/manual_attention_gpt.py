"""A small GPT whose causal self-attention is written out by hand, the way the tutorials write it.

6 layers, d_model 768, 12 heads of 64, context 1024, batch 8, vocab 8192, tied embeddings, bf16
autocast around the forward and the loss, AdamW(fused=True), gradient clipping. The attention is
the textbook formula: ``att = (q @ k.transpose(-2, -1)) * (1 / sqrt(head_dim))``, then
``att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))`` with a registered lower-triangular
mask buffer, ``F.softmax(att, dim=-1)`` (no dropout) and ``att @ v``. Each of these materializes
the full 8 x 12 x 1024 x 1024 score tensor (100M elements: 200 MB in bf16, 400 MB for the float32
softmax that autocast asks for) and streams it through HBM, forward and backward, in every layer;
the causal half of the scores is computed and then thrown away. The token stream lives on the GPU
and batches are sampled there; the loop syncs only at log points (``loss.item()``).

--fixed: ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` (flash attention: the
scores stay on chip, the masked half is skipped); weights, shapes and the rest of the loop
unchanged.

EXPECTED on an H100: ``naive-attention``. Estimate, written before any run: the non-attention
GEMMs are ~2.4 TFLOP a step (6 x 49M parameters x 8192 tokens), ~5-6 ms at a realistic bf16 rate,
plus ~2 ms of LayerNorm / GELU / cross-entropy / optimizer; the hand-written attention moves
~6-7 GB of scores per layer forward and backward (~40 GB a step, ~13-16 ms) and runs ~0.46 TFLOP
of score matmuls (~1.3 ms), where flash runs the causal half in well under 1 ms. Sick ~20-25 ms,
fixed ~8-10 ms: measured speedup with --fixed about x2.0-3.0.
One step = one optimizer step = one printed iteration.
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--log-every", type=int, default=5)
parser.add_argument("--fixed", action="store_true", help="F.scaled_dot_product_attention(is_causal=True)")
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    n_layer, n_head, n_embd, block_size, batch_size, vocab_size = 6, 12, 768, 1024, 8, 8192
else:
    n_layer, n_head, n_embd, block_size, batch_size, vocab_size = 2, 2, 64, 32, 4, 256

torch.manual_seed(0)
ctx = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=(device == "cuda"))


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        if args.fixed:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
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


t0 = time.perf_counter()
for it in range(1, args.iters + 1):
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
