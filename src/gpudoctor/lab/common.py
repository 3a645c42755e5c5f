"""Helpers shared by the trap workloads: seeding, device-dependent sizes and a small GPT model."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def on_gpu(device: str) -> bool:
    return torch.device(device).type == "cuda"


def size(device: str, gpu: int, cpu: int) -> int:
    """``gpu`` on a CUDA device (sizes are tuned for an H100), ``cpu`` for CPU smoke tests."""
    return gpu if on_gpu(device) else cpu


def seed(value: int = 0) -> None:
    torch.manual_seed(value)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(value)


@contextmanager
def matmul_precision(value: str) -> Iterator[None]:
    """``torch.set_float32_matmul_precision(value)`` inside the block, the previous setting after
    it.

    The lab runs every workload in one process: a trap that turns TF32 on for its float32 matmuls
    must not leave it on for the next. ``"high"`` is what users write to allow TF32.
    """
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(value)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def autocast(device: str, enabled: bool = True) -> torch.autocast:
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=enabled)


def adamw(params, device: str, **kwargs) -> torch.optim.AdamW:
    """AdamW with the fused (multi-tensor, single-kernel) implementation."""
    return torch.optim.AdamW(params, lr=1e-4, fused=True, **kwargs)


class Block(nn.Module):
    """A pre-norm transformer block with causal ``scaled_dot_product_attention``."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.n_heads, d // self.n_heads).unbind(2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.proj(y.transpose(1, 2).reshape(b, s, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class TinyGPT(nn.Module):
    """A GPT-like language model: token and position embeddings, blocks, tied LM head."""

    def __init__(self, vocab: int, d_model: int, n_layers: int, n_heads: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=1.0 / math.sqrt(p.shape[-1]))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.ln(x) @ self.tok.weight.t()


def gelu_mlp_regression(device: str, width: int, batch: int, layers: int,
                        bf16: bool) -> tuple[Callable[[], None], float]:
    """A float32 MLP (Linear + GELU) x layers trained on a regression step with AdamW; under bf16
    autocast when ``bf16`` (fp32 master weights kept). Returns the step and its FLOPs per step
    (forward + backward GEMMs). Seed first: the weights, then x and the target, are drawn here."""
    model = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width),
                                                               nn.GELU())]).to(device)
    opt = adamw(model.parameters(), device)
    x = torch.randn(batch, width, device=device)
    target = torch.randn(batch, width, device=device)

    def step() -> None:
        with autocast(device, enabled=bf16):
            loss = F.mse_loss(model(x).float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, 3 * 2 * batch * width * width * layers


def gpt_flops(batch: int, seq: int, d_model: int, n_layers: int, vocab: int, train: bool) -> float:
    """Matrix-multiply FLOPs of one TinyGPT pass (x3 for a training step)."""
    tokens = batch * seq
    dense = 2 * tokens * (12 * d_model * d_model * n_layers + d_model * vocab)
    attn = 2 * 2 * batch * seq * seq * d_model * n_layers // 2
    return float((dense + attn) * (3 if train else 1))


def gpt_train_step(model: TinyGPT, opt: torch.optim.Optimizer, idx, targets, device: str):
    with autocast(device):
        logits = model(idx)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def graphed(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` captured in a CUDA graph (after warm-up on a side stream, as capture requires);
    calling the result replays the graph and returns what the captured call returned."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay() -> Any:
        graph.replay()
        return out

    return replay
