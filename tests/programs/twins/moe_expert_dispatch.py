"""A mixture-of-experts MLP stack that dispatches tokens to experts by boolean indexing.

4 blocks of LayerNorm + a top-1 routed MoE (8 experts, each Linear(512, 1024) -> GELU ->
Linear(1024, 512)) + residual; 4096 tokens a step (batch 8 x 512), bf16 autocast, AdamW (fused),
data on the GPU. Each block loops over its experts: ``rows = (choice == e).nonzero()``, gathers
those rows, runs the expert, and ``index_add_``s the gated result back: ``nonzero`` has to know
how many rows there are, so each expert's dispatch waits for the GPU (32 waits a step), and the
experts' GEMMs (about 512 rows each) launch one by one.

--fixed: capacity dispatch without a wait: each token's slot inside its expert from a cumulative
sum of the one-hot choice (capacity 1.25 x 4096 / 8 = 640 rows; a token over capacity is dropped,
as Switch Transformers do), tokens scattered into an [8, 640, 512] buffer, the experts' weights
stacked and run as two batched matmuls (``torch.bmm``), results gathered back; the same routing,
no host wait and 2 GEMMs a block instead of 16.

EXPECTED on an H100: ``host-sync`` first (the nonzero reads); ``launch-bound`` / ``small-gemm`` /
``per-sample-loop`` acceptable (the expert loop). Measured speedup with --fixed: about x3-6 (sick
~10-15 ms of host work and waits, fixed ~2-4 ms).
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
parser.add_argument("--fixed", action="store_true", help="capacity dispatch with batched experts")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
batch, seq, dim, hidden, experts, blocks = (8, 512, 512, 1024, 8, 4) if cuda else (2, 16, 32, 64, 4, 2)
tokens = batch * seq
capacity = int(1.25 * tokens / experts)
torch.manual_seed(0)


class MoE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(dim, experts)
        self.w_in = nn.Parameter(torch.randn(experts, dim, hidden) * dim**-0.5)
        self.b_in = nn.Parameter(torch.zeros(experts, 1, hidden))
        self.w_out = nn.Parameter(torch.randn(experts, hidden, dim) * hidden**-0.5)
        self.b_out = nn.Parameter(torch.zeros(experts, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = self.router(x).float().softmax(-1)
        gate, choice = probs.max(-1)
        if args.fixed:
            return self.capacity_dispatch(x, gate, choice)
        out = torch.zeros_like(x)
        for e in range(experts):
            rows = (choice == e).nonzero().squeeze(1)
            h = F.gelu(x[rows] @ self.w_in[e] + self.b_in[e])
            y = (h @ self.w_out[e] + self.b_out[e]) * gate[rows, None].to(x.dtype)
            out = out.index_add(0, rows, y.to(out.dtype))
        return out

    def capacity_dispatch(self, x, gate, choice):
        onehot = F.one_hot(choice, experts)
        slot = (onehot.cumsum(0) - 1).gather(1, choice[:, None]).squeeze(1)
        kept = slot < capacity
        flat = torch.where(kept, choice * capacity + slot, experts * capacity)  # overflow row
        buf = x.new_zeros(experts * capacity + 1, dim).index_copy(0, flat, x)
        h = F.gelu(torch.bmm(buf[:-1].view(experts, capacity, dim), self.w_in.to(x.dtype)) + self.b_in)
        y = torch.bmm(h, self.w_out.to(h.dtype)) + self.b_out
        y = torch.cat([y.reshape(experts * capacity, dim), y.new_zeros(1, dim)])
        return y[flat] * (gate * kept)[:, None].to(y.dtype)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.moe = MoE()

    def forward(self, x):
        return x + self.moe(self.norm(x))


model = nn.Sequential(*[Block() for _ in range(blocks)], nn.LayerNorm(dim), nn.Linear(dim, 1)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
x_all = torch.randn(4, tokens, dim, device=device)
y_all = torch.randn(4, tokens, device=device)
t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        pred = model(x_all[it % 4]).squeeze(1)
    loss = F.mse_loss(pred.float(), y_all[it % 4])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
