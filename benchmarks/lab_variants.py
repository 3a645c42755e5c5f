"""Sixteen traps the doctor's pricing was never fitted to: each a lab trap's cause, written again
the way a user would write it (other models, sizes, libraries' own calls), with its fixed twin.

The lab (src/gpudoctor/lab) is where the rules were built; these are the check that they carry
over. Each variant runs the lab's own protocol (lab/verify.py ``verify_trap``: alternating timing
rounds of the sick workload and its fixed twin, then a profiled window of the sick one diagnosed
with its unprofiled step), so predicted and measured speedups come from the same run. What we
expected of each, diagnosis and measured speedup, is written before the first run in
benchmarks/results/lab-variants-expected-2026-12-03.md; the verdicts go beside it.

    PYTHONPATH=src python3 benchmarks/lab_variants.py --out DIR [--only a,b] [--device cpu]

Writes ``<variant>.trace.json.gz`` (with ``--fixed``, ``<variant>_fixed.trace.json.gz`` too) and ``lab_variants.json`` (each verdict, its rounds, the top
findings, device and versions) under DIR; prints a table last. ``--device cpu`` is a smoke run:
both twins run, nothing is diagnosed.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpudoctor.lab.common import TinyGPT, graphed, on_gpu, seed, size  # noqa: E402
from gpudoctor.lab.trap import Trap, Workload  # noqa: E402

# --- input-pipeline: text tokenized in Python on the training thread ---------------------------


class CharTokens(Dataset):
    """Random "sentences" tokenized a character at a time in Python, as a quick script does."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .,;!?")}
        self.words = [
            "".join(random.Random(i).choices("abcdefghijklmnopqrstuvwxyz", k=1 + i % 9))
            for i in range(5000)
        ]

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, idx: int):
        rng = random.Random(idx)
        text = ""
        while len(text) <= self.seq:
            text += rng.choice(self.words) + rng.choice(" .,; ")
        ids = [self.vocab[c] for c in text[: self.seq + 1]]
        t = torch.tensor(ids, dtype=torch.long)
        return t[:-1], t[1:]


def _char_lm(device: str, workers: int) -> Workload:
    seed(21)
    seq, batch = size(device, 256, 16), size(device, 32, 2)
    model = TinyGPT(32, size(device, 512, 32), size(device, 4, 1), size(device, 8, 2), seq).to(
        device
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loader = DataLoader(
        CharTokens(seq),
        batch_size=batch,
        num_workers=workers,
        pin_memory=workers > 0,
        persistent_workers=workers > 0,
    )
    it = iter(loader)
    if workers:
        next(it)
        time.sleep(3.0)  # the workers' start-up is not the step

    def step() -> None:
        x, y = next(it)
        x, y = x.to(device, non_blocking=workers > 0), y.to(device, non_blocking=workers > 0)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()

    def close() -> None:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()

    return Workload(step, close)


# --- host-sync: metrics read back every step ---------------------------------------------------


def _metrics(device: str, read_back: bool) -> Workload:
    seed(22)
    width, batch = size(device, 2048, 64), size(device, 512, 16)
    model = nn.Sequential(
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 100),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(8, batch, width, device=device)
    y = torch.randint(100, (8, batch), device=device)
    history: list = []
    k = [0]

    def step() -> None:
        i = k[0] % 8
        k[0] += 1
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            logits = model(x[i])
            loss = F.cross_entropy(logits.float(), y[i])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        acc = (logits.argmax(-1) == y[i]).float().mean()
        if read_back:
            history.append({"loss": loss.item(), "acc": acc.item(), "grad_norm": norm.item()})
        else:
            history.append((loss.detach(), acc, norm))
        if len(history) > 100:
            history.clear()

    return Workload(step)


# --- launch-bound: an LSTM cell stepped in Python, inference -----------------------------------


def _lstm_cell(device: str, graph: bool) -> Workload:
    seed(23)
    hidden, batch, steps = size(device, 256, 16), size(device, 32, 2), size(device, 48, 4)
    cell = nn.LSTMCell(hidden, hidden).to(device).eval()
    head = nn.Linear(hidden, 10).to(device).eval()
    xs = torch.randn(steps, batch, hidden, device=device)

    @torch.no_grad()
    def forward() -> torch.Tensor:
        h = torch.zeros(batch, hidden, device=device)
        c = torch.zeros(batch, hidden, device=device)
        for t in range(steps):
            h, c = cell(xs[t], (h, c))
        return head(h).softmax(-1)

    run = graphed(forward) if graph and on_gpu(device) else forward
    return Workload(lambda: run())


# --- fp32-matmul: a wide MLP trained in full fp32 ----------------------------------------------


def _wide_mlp(device: str, bf16: bool) -> Workload:
    seed(24)
    width, batch = size(device, 4096, 64), size(device, 4096, 32)
    model = nn.Sequential(
        nn.Linear(width, width),
        nn.SiLU(),
        nn.Linear(width, width),
        nn.SiLU(),
        nn.Linear(width, 1000),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=on_gpu(device))
    x = torch.randn(batch, width, device=device)
    y = torch.randint(1000, (batch,), device=device)

    def step() -> None:
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Workload(step)


# --- optimizer-loop: Adam over hundreds of small tensors, one at a time ------------------------


def _many_params(device: str, fused: bool) -> Workload:
    seed(25)
    width, depth, batch = size(device, 96, 16), size(device, 64, 4), size(device, 256, 8)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()]
    model = nn.Sequential(*layers).to(device)
    opt = (
        torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
        if fused and on_gpu(device)
        else torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    )
    x = torch.randn(batch, width, device=device)

    def step() -> None:
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return Workload(step)


# --- naive-attention: causal attention written out, with a mask tensor -------------------------


def _causal_attention(device: str, sdpa: bool) -> Workload:
    seed(26)
    b, h, s, d = size(device, 4, 1), size(device, 16, 2), size(device, 2048, 64), 64
    dtype = torch.bfloat16 if on_gpu(device) else torch.float32
    proj = nn.Linear(h * d, 3 * h * d, device=device, dtype=dtype)
    out = nn.Linear(h * d, h * d, device=device, dtype=dtype)
    opt = torch.optim.AdamW([*proj.parameters(), *out.parameters()], lr=1e-4)
    mask = torch.triu(torch.ones(s, s, device=device, dtype=torch.bool), 1)
    x = torch.randn(b, s, h * d, device=device, dtype=dtype)

    def step() -> None:
        q, k, v = proj(x).view(b, s, 3, h, d).permute(2, 0, 3, 1, 4)
        if sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / d**0.5
            scores = scores.masked_fill(mask, float("-inf"))
            y = scores.softmax(-1) @ v
        loss = out(y.transpose(1, 2).reshape(b, s, h * d)).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Workload(step)


# --- small-gemm: one Linear per head ----------------------------------------------------------


class PerHeadProjection(nn.Module):
    def __init__(self, dim: int, heads: int, merged: bool) -> None:
        super().__init__()
        self.heads, self.merged = heads, merged
        if merged:
            self.proj = nn.Linear(dim, dim)
        else:
            self.proj = nn.ModuleList(nn.Linear(dim, dim // heads) for _ in range(heads))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.merged:
            return self.proj(x)
        return torch.cat([p(x) for p in self.proj], dim=-1)


def _per_head(device: str, merged: bool) -> Workload:
    seed(27)
    dim, heads, tokens = size(device, 1024, 64), size(device, 32, 4), size(device, 512, 16)
    model = nn.Sequential(
        PerHeadProjection(dim, heads, merged), nn.GELU(), PerHeadProjection(dim, heads, merged)
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=on_gpu(device))
    x = torch.randn(tokens, dim, device=device)

    def step() -> None:
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Workload(step)


# --- pageable-copy: point clouds streamed from ordinary host memory ----------------------------


def _point_clouds(device: str, pinned: bool) -> Workload:
    seed(28)
    batch, points = size(device, 64, 2), size(device, 32768, 256)
    data = torch.randn(4, batch, points, 4)  # 32 MB a batch
    if pinned and on_gpu(device):
        data = data.pin_memory()
    net = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 128)).to(device)
    head = nn.Linear(128, 10).to(device)
    opt = torch.optim.Adam([*net.parameters(), *head.parameters()], lr=1e-3)
    k = [0]

    def step() -> None:
        cloud = data[k[0] % 4].to(device, non_blocking=pinned)
        k[0] += 1
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            logits = head(net(cloud).amax(dim=1))
        loss = logits.float().logsumexp(-1).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Workload(step)


# --- unfused-elementwise: a gated activation and residual written as tensor expressions --------


def _gated(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    g = a * torch.sigmoid(1.702 * a)
    return x + 0.5 * (g * b + bias)


def _gated_chain(device: str, fused: bool) -> Workload:
    seed(29)
    rows, width = size(device, 16384, 64), size(device, 4096, 64)
    dtype = torch.bfloat16 if on_gpu(device) else torch.float32
    a, b, x = (torch.randn(rows, width, device=device, dtype=dtype) for _ in range(3))
    bias = torch.randn(width, device=device, dtype=dtype)
    fn = torch.compile(_gated) if fused and on_gpu(device) else _gated

    def step() -> None:
        fn(a, b, x, bias)

    if fused and on_gpu(device):
        for _ in range(3):  # compiled before the timing starts
            step()
    return Workload(step)


# --- host-blocking-work: batches built from Python lists every step ----------------------------


def _python_batches(device: str, prebuilt: bool) -> Workload:
    seed(30)
    batch, seq, vocab = size(device, 64, 4), size(device, 512, 16), 8192
    model = TinyGPT(vocab, size(device, 256, 32), size(device, 2, 1), size(device, 4, 2), seq).to(
        device
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=on_gpu(device))
    rng = random.Random(0)
    ready = torch.randint(vocab, (4, batch, seq + 1), device=device)
    k = [0]

    def step() -> None:
        if prebuilt:
            tokens = ready[k[0] % 4]
            k[0] += 1
        else:
            rows = [[rng.randrange(vocab) for _ in range(seq + 1)] for _ in range(batch)]
            tokens = torch.tensor(rows, device=device)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Workload(step)


# --- allocator-churn: empty_cache() after every step of varying batch sizes --------------------


def _empty_cache(device: str, keep_cache: bool) -> Workload:
    seed(31)
    width = size(device, 1024, 32)
    model = nn.Sequential(
        *[
            nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
            for _ in range(size(device, 4, 1))
        ]
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=on_gpu(device))
    sizes = [size(device, n, 4) for n in (768, 1024, 1536, 2048)]
    k = [0]

    def step() -> None:
        x = torch.randn(sizes[k[0] % 4], width, device=device)
        k[0] += 1
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if not keep_cache and on_gpu(device):
            torch.cuda.empty_cache()

    return Workload(step)


# --- per-sample-loop: a batch scored one sample at a time --------------------------------------


def _per_sample(device: str, batched: bool) -> Workload:
    seed(32)
    width, batch = size(device, 1024, 32), size(device, 48, 4)
    model = (
        nn.Sequential(
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, 1),
        )
        .to(device)
        .eval()
    )
    x = torch.randn(batch, width, device=device)

    @torch.no_grad()
    def step() -> None:
        if batched:
            scores = model(x).squeeze(-1)
        else:
            scores = torch.stack([model(x[i]).squeeze(-1) for i in range(batch)])
        scores.sigmoid()

    return Workload(step)


# --- a second set, written 2026-12-04 after the first twelve's misses were studied: each a cause
# the pricing was changed for that day (the profiler's prior, chains without a backward, per-head
# projections), written once more with other models and sizes -----------------------------------


def _swiglu_infer(device: str, compiled: bool) -> Workload:
    """unfused-elementwise without a backward: a SwiGLU MLP served in bf16, its gate written out."""
    seed(33)
    tokens, dim, hidden = size(device, 16384, 64), size(device, 256, 32), size(device, 4096, 64)
    dtype = torch.bfloat16 if on_gpu(device) else torch.float32
    w1, w3 = (torch.randn(hidden, dim, device=device, dtype=dtype) * 0.02 for _ in range(2))
    w2 = torch.randn(dim, hidden, device=device, dtype=dtype) * 0.02
    x = torch.randn(tokens, dim, device=device, dtype=dtype)

    def block(x: torch.Tensor) -> torch.Tensor:
        a, b = x @ w1.t(), x @ w3.t()
        h = a * torch.sigmoid(a) * b
        return x + (h @ w2.t()) * 0.5

    fn = torch.compile(block) if compiled and on_gpu(device) else block

    @torch.no_grad()
    def step() -> None:
        fn(x)

    if compiled and on_gpu(device):
        for _ in range(3):
            step()
    return Workload(step)


class HeadwiseAttentionProjections(nn.Module):
    """Queries, keys and values from one nn.Linear per head, as a from-scratch tutorial writes them."""

    def __init__(self, dim: int, heads: int, merged: bool) -> None:
        super().__init__()
        self.merged = merged
        if merged:
            self.qkv = nn.Linear(dim, 3 * dim)
        else:
            self.q = nn.ModuleList(nn.Linear(dim, dim // heads) for _ in range(heads))
            self.k = nn.ModuleList(nn.Linear(dim, dim // heads) for _ in range(heads))
            self.v = nn.ModuleList(nn.Linear(dim, dim // heads) for _ in range(heads))
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.merged:
            q, k, v = self.qkv(x).chunk(3, dim=-1)
        else:
            q = torch.cat([h(x) for h in self.q], dim=-1)
            k = torch.cat([h(x) for h in self.k], dim=-1)
            v = torch.cat([h(x) for h in self.v], dim=-1)
        return self.out(torch.sigmoid(q * k) * v)


def _headwise_adam(device: str, merged: bool) -> Workload:
    """small-gemm: 16 heads' q, k, v as separate Linears, three blocks, plain Adam (foreach)."""
    seed(34)
    dim, heads, tokens = size(device, 512, 32), size(device, 16, 4), size(device, 1024, 16)
    model = nn.Sequential(*[HeadwiseAttentionProjections(dim, heads, merged) for _ in range(3)]).to(
        device
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(tokens, dim, device=device)

    def step() -> None:
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return Workload(step)


def _encoder_fp32(device: str, bf16: bool) -> Workload:
    """fp32-matmul on a GPU-bound step: nn.TransformerEncoder trained in fp32, TF32 left off."""
    seed(35)
    dim, layers, batch, seq = (
        size(device, 1024, 32),
        size(device, 4, 1),
        size(device, 16, 2),
        size(device, 512, 16),
    )
    layer = nn.TransformerEncoderLayer(dim, 16, 4 * dim, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=on_gpu(device))
    x = torch.randn(batch, seq, dim, device=device)

    def step() -> None:
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Workload(step)


def _scores_infer(device: str, sdpa: bool) -> Workload:
    """naive-attention without a backward: a bf16 encoder's attention served with explicit scores
    and a padding mask."""
    seed(36)
    b, h, s, d = size(device, 8, 1), size(device, 12, 2), size(device, 1024, 64), 64
    dtype = torch.bfloat16 if on_gpu(device) else torch.float32
    q, k, v = (torch.randn(b, h, s, d, device=device, dtype=dtype) for _ in range(3))
    keep = torch.ones(b, 1, 1, s, device=device, dtype=torch.bool)
    keep[:, :, :, s - s // 8 :] = False  # the last eighth is padding

    @torch.no_grad()
    def step() -> None:
        if sdpa:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        else:
            scores = (q @ k.transpose(-2, -1)) * d**-0.5
            scores = scores.masked_fill(~keep, float("-inf"))
            y = torch.softmax(scores, dim=-1) @ v
        y.sum()

    return Workload(step)


VARIANTS = {
    t.id: t
    for t in (
        Trap(
            "char_lm_loader",
            "Characters tokenized in Python by a DataLoader without workers",
            "input-pipeline",
            lambda d: _char_lm(d, 0),
            lambda d: _char_lm(d, 6),
        ),
        Trap(
            "metrics_item",
            "Loss, accuracy and gradient norm read with .item() every step",
            "host-sync",
            lambda d: _metrics(d, True),
            lambda d: _metrics(d, False),
        ),
        Trap(
            "lstm_cell_loop",
            "An LSTM cell stepped 48 times in Python, inference",
            "launch-bound",
            lambda d: _lstm_cell(d, False),
            lambda d: _lstm_cell(d, True),
        ),
        Trap(
            "wide_mlp_fp32",
            "A 4096-wide MLP trained in full fp32",
            "fp32-matmul",
            lambda d: _wide_mlp(d, False),
            lambda d: _wide_mlp(d, True),
        ),
        Trap(
            "adam_many_params",
            "Adam(foreach=False) over 256 small tensors",
            "optimizer-loop",
            lambda d: _many_params(d, False),
            lambda d: _many_params(d, True),
        ),
        Trap(
            "masked_attention",
            "Causal attention written out with a mask tensor",
            "naive-attention",
            lambda d: _causal_attention(d, False),
            lambda d: _causal_attention(d, True),
        ),
        Trap(
            "per_head_linear",
            "One nn.Linear per head, 32 heads, two layers",
            "small-gemm",
            lambda d: _per_head(d, False),
            lambda d: _per_head(d, True),
        ),
        Trap(
            "point_cloud_copy",
            "32 MB point-cloud batches copied from pageable memory",
            "pageable-copy",
            lambda d: _point_clouds(d, False),
            lambda d: _point_clouds(d, True),
        ),
        Trap(
            "gated_chain",
            "A gated activation and residual as separate tensor ops",
            "unfused-elementwise",
            lambda d: _gated_chain(d, False),
            lambda d: _gated_chain(d, True),
        ),
        Trap(
            "python_list_batches",
            "Token batches built from Python lists every step",
            "host-blocking-work",
            lambda d: _python_batches(d, False),
            lambda d: _python_batches(d, True),
        ),
        Trap(
            "empty_cache_varbatch",
            "empty_cache() after every step, four batch sizes",
            "allocator-churn",
            lambda d: _empty_cache(d, False),
            lambda d: _empty_cache(d, True),
        ),
        Trap(
            "per_sample_scoring",
            "48 samples scored one at a time",
            "per-sample-loop",
            lambda d: _per_sample(d, False),
            lambda d: _per_sample(d, True),
        ),
        Trap(
            "swiglu_infer",
            "A SwiGLU MLP served in bf16, its gate as separate tensor ops",
            "unfused-elementwise",
            lambda d: _swiglu_infer(d, False),
            lambda d: _swiglu_infer(d, True),
        ),
        Trap(
            "headwise_adam",
            "q, k, v from one nn.Linear per head, 16 heads, three blocks, Adam",
            "small-gemm",
            lambda d: _headwise_adam(d, False),
            lambda d: _headwise_adam(d, True),
        ),
        Trap(
            "encoder_fp32",
            "nn.TransformerEncoder trained in fp32, TF32 off",
            "fp32-matmul",
            lambda d: _encoder_fp32(d, False),
            lambda d: _encoder_fp32(d, True),
        ),
        Trap(
            "scores_infer",
            "Attention scores written out with a padding mask, inference",
            "naive-attention",
            lambda d: _scores_infer(d, False),
            lambda d: _scores_infer(d, True),
        ),
    )
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="output folder (created)")
    p.add_argument("--device", default="cuda", help="cuda (default), or cpu for a smoke run")
    p.add_argument("--only", default="", help="comma-separated variants (default: all)")
    p.add_argument(
        "--fixed",
        default="",
        help="comma-separated variants whose fixed twin is profiled too, or all",
    )
    args = p.parse_args()

    from gpudoctor.lab.verify import _capture_fresh, verify_trap

    names = [n for n in args.only.split(",") if n] or list(VARIANTS)
    fixed_traces = set(VARIANTS) if args.fixed == "all" else {n for n in args.fixed.split(",") if n}
    args.out.mkdir(parents=True, exist_ok=True)
    env: dict[str, object] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            started = time.perf_counter()
            verdict = verify_trap(VARIANTS[name], args.device, Path(tmp))
            entry = verdict.to_dict()
            entry["seconds"] = round(time.perf_counter() - started, 1)
            found = sorted((Path(tmp) / name).rglob("trace*.json.gz"))
            if found:
                shutil.copy(found[0], args.out / f"{name}.trace.json.gz")
                entry["trace"] = f"{name}.trace.json.gz"
            if name in fixed_traces:
                trap = VARIANTS[name]
                try:
                    fixed = _capture_fresh(
                        trap.build_fixed,
                        args.device,
                        Path(tmp) / "fixed" / name,
                        5,
                        trap.with_stack,
                    )
                    shutil.copy(fixed, args.out / f"{name}_fixed.trace.json.gz")
                    entry["fixed_trace"] = f"{name}_fixed.trace.json.gz"
                except Exception as exc:  # noqa: BLE001 - the verdict is worth keeping without it
                    entry["fixed_trace_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            results.append(entry)
            (args.out / "lab_variants.json").write_text(
                json.dumps({"environment": env, "verdicts": results}, indent=1)
            )
            print(f"{name}: {entry.get('verdict')} {entry.get('seconds')} s", flush=True)
    print(f"\n{'variant':22} {'expected':20} {'top':20} {'pred':>7} {'meas':>7} {'ratio':>6}")
    for e in results:
        pred, meas = e.get("predicted_speedup"), e.get("measured_speedup")
        ratio = f"{pred / meas:.2f}" if pred and meas else "-"
        print(
            f"{e['trap']:22} {e['expected']:20} {e.get('top_finding')!s:20} "
            f"{pred or 0:7.2f} {meas or 0:7.2f} {ratio:>6}"
        )


if __name__ == "__main__":
    main()
