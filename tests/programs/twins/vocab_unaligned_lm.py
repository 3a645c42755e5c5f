"""A GPT-2-style language model with the GPT-2 tokenizer's vocabulary size, 50257, as its output layer.

4 layers, d_model 768, 12 heads of 64, context 512, batch 16, tied input / output embeddings of
``vocab_size`` rows, bf16 autocast around the forward and the loss, ``F.scaled_dot_product_attention``
(flash), AdamW(fused=True), gradient clipping. The token stream (ids below 50257) lives on the GPU
and batches are sampled there; the loop syncs only at log points. 50257 is odd: the LM head's
three GEMMs (logits = x @ W.T, dX = dlogits @ W, dW = dlogits.T @ x; 8192 x 50257 x 768 each,
~1.9 TFLOP a step, more than the whole transformer body) all have a dimension, and a leading
dimension, that is not a multiple of 8, so cuBLAS cannot use its 16-byte-aligned tensor-core
kernels for them.

--fixed: the embedding / LM head is given 50304 rows (the next multiple of 64, as nanoGPT does);
the data, the loss over the real 50257 ids and everything else are unchanged (the 47 extra rows
are never a target and their logits only learn to be small).

EXPECTED on an H100: ``misaligned-gemm``. Estimate, written before any run: the aligned step is
~13-15 ms (LM head GEMMs ~4 ms, body GEMMs ~3 ms, the float32 cross-entropy over 8192 x 50k logits
~4 ms, the rest ~3 ms); the misaligned head GEMMs take ~1.2-2x as long. Measured speedup with
--fixed: modest, about x1.05-1.35 (nanoGPT's author reported from ~4% to ~25% on whole GPT-2
runs, where the head is a smaller share of the step than here).
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
parser.add_argument("--fixed", action="store_true", help="pad the vocabulary to a multiple of 64 (50304)")
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    n_layer, n_head, n_embd, block_size, batch_size, vocab_size = 4, 12, 768, 512, 16, 50257
else:
    n_layer, n_head, n_embd, block_size, batch_size, vocab_size = 2, 2, 64, 32, 4, 1001
model_vocab = (vocab_size + 63) // 64 * 64 if args.fixed else vocab_size  # 50304 with --fixed

torch.manual_seed(0)
ctx = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=(device == "cuda"))


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as GPT-2
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))


model = GPT(model_vocab).to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, vocab {model_vocab}, fixed={args.fixed}")
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                              fused=(device == "cuda"))

tokens = torch.randint(vocab_size, (2_000_000,), device=device)  # the tokenized corpus, on the GPU
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
