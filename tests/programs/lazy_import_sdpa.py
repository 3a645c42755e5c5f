"""Attention with ``F.scaled_dot_product_attention`` and imports done lazily inside the loop.

After a few warm-up iterations (``--import-at``, default 3) the script imports
``torch.nn.attention.sdpa_kernel`` to pin the attention backend, and a few iterations later
(``--dynamo-at``) imports ``torch._dynamo`` to read a config value, both from inside the training
loop, the way code that "only needs it sometimes" does. bf16 autocast on CUDA.

EXPECTED on an H100: the imports must simply work (a profiler started or stopped in the middle of
an import broke this once). Diagnosis: a 4-layer, 1024-wide attention model at batch 16 x 512 in
bf16 with fused SDPA: healthy, or ``unfused-elementwise`` (eager LayerNorm / GELU / residuals).
One step = one optimizer step = one iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=50)
parser.add_argument("--import-at", type=int, default=3)
parser.add_argument("--dynamo-at", type=int, default=8)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
d, heads, n_layers, seq, batch = (1024, 16, 4, 512, 16) if cuda else (32, 2, 1, 16, 2)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.mlp = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, backend_ctx=None):
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(B, T, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
        if backend_ctx is not None:
            with backend_ctx():
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(x)


layers = nn.ModuleList([Attention() for _ in range(n_layers)]).to(device)
optimizer = torch.optim.AdamW(layers.parameters(), lr=3e-4)
backend_ctx = None

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    if it == args.import_at:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]

        def backend_ctx(backends=backends):
            return sdpa_kernel(backends)

    if it == args.dynamo_at:
        import torch._dynamo

        print(f"iter {it}: dynamo cache_size_limit={torch._dynamo.config.cache_size_limit}", flush=True)
    x = torch.randn(batch, seq, d, device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        h = x
        for layer in layers:
            h = layer(h, backend_ctx)
        loss = h.float().pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
