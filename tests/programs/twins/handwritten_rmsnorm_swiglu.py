"""A Llama-style decoder trained in bf16 whose RMSNorm is written out by hand, as the reference code does.

8 decoder layers, d_model 1024, 16 heads of 64, SwiGLU feed-forward of 2816, context 1024,
batch 8, vocab 8192 (untied embedding and LM head), the model cast to bf16 (weights, activations
and AdamW(fused=True) state), the loss on ``logits.float()``; token stream on the GPU, syncs only
at log points. Written the way the Llama reference / Hugging Face code writes it:

- RMSNorm: ``x = x.to(float32)``, ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)``,
  ``self.weight * x.to(input_dtype)``: 8 kernels forward and ~12 backward per norm, each
  streaming the 8192 x 1024 activation (half of them in float32) through HBM; 17 norms a step;
- SwiGLU: ``w2(F.silu(w1(x)) * w3(x))``;
- rotary embeddings: ``q * cos + rotate_half(q) * sin`` with ``rotate_half`` = ``cat(-x2, x1)``;
- attention: ``F.scaled_dot_product_attention(is_causal=True)`` (flash).

--fixed: the norms call ``F.rms_norm(x, (d,), self.weight, self.eps)`` (torch >= 2.4; from torch
2.8 on CUDA with input and weight of one dtype it is one fused kernel forward and one backward,
computing in float32 inside like the hand-written one). SwiGLU, rotary, weights and loop unchanged:
``torch.compile`` is not the fix here, it would change everything at once.

EXPECTED on an H100: ``unfused-elementwise`` (the hand-written norms are ~6 ms of ~24 ms: ~0.7 GB
of traffic and ~20 launches each forward and backward, vs ~0.05 ms fused; the GEMMs are ~10 ms,
flash attention ~1.5 ms, the hand-written rotary and SwiGLU products ~4-5 ms more, which the fix
leaves). Measured speedup with --fixed: modest, about x1.15-1.4 (sick ~22-27 ms, fixed ~18-21 ms).
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
parser.add_argument("--fixed", action="store_true", help="F.rms_norm for the norms")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
if cuda:
    n_layers, dim, n_heads, hidden, seq_len, batch, vocab = 8, 1024, 16, 2816, 1024, 8, 8192
else:
    n_layers, dim, n_heads, hidden, seq_len, batch, vocab = 2, 64, 4, 176, 32, 4, 256
dtype = torch.bfloat16 if cuda else torch.float32
head_dim = dim // n_heads
torch.manual_seed(0)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        if args.fixed:
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        input_dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(input_dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rotary_tables(seq, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, n_heads, head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, n_heads, head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, n_heads, head_dim).transpose(1, 2)
        q, k = apply_rotary(q, k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, dim))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = Attention()
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = FeedForward()

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(n_layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        cos, sin = rotary_tables(seq_len)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.tok_embeddings(idx)
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.output(self.norm(x)).float()
        return F.cross_entropy(logits.view(-1, vocab), targets.view(-1))


model = Llama().to(device, dtype)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {dtype}, fixed={args.fixed}")
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)

tokens = torch.randint(vocab, (1_000_000,), device=device)  # the tokenized corpus, on the GPU
offsets = torch.arange(seq_len, device=device)


def get_batch():
    ix = torch.randint(len(tokens) - seq_len - 1, (batch, 1), device=device)
    return tokens[ix + offsets], tokens[ix + offsets + 1]


t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x, y = get_batch()
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
