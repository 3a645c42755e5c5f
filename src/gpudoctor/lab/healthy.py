"""Healthy baselines: GPU-bound workloads with no planted problem.

``healthy_train`` trains a small GPT-like model in bf16 autocast with
``scaled_dot_product_attention`` and fused AdamW on data already on the GPU, with no
synchronization in the step, so the host runs ahead and the GPU is kept busy.
``healthy_infer`` runs the same architecture, narrower, in bf16 under ``torch.inference_mode()``
at a large batch. ``healthy_closure`` is ``healthy_train``'s step written the way Lightning (and
any optimizer that re-evaluates the loss) runs it: zero_grad, forward and backward inside a
closure, and ``opt.step(closure)``; the closure's work runs inside the optimizer's step and is not
the optimizer's own. ``build_bench_train`` is the same training with more layers, used for a large
benchmark trace.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gpudoctor.lab.common import TinyGPT, adamw, autocast, gpt_flops, gpt_train_step, seed, size
from gpudoctor.lab.trap import Baseline, Workload

VOCAB = 8192


def build_train(device: str, n_layers: int = 4) -> Workload:
    seed(20)
    batch, seq, d = size(device, 8, 2), size(device, 1024, 64), size(device, 2048, 64)
    model = TinyGPT(VOCAB, d, n_layers, max(d // 128, 1), seq).to(device)
    opt = adamw(model.parameters(), device)
    idx = torch.randint(0, VOCAB, (batch, seq), device=device)
    targets = torch.randint(0, VOCAB, (batch, seq), device=device)

    def step() -> None:
        gpt_train_step(model, opt, idx, targets, device)

    return Workload(step, flops_per_step=gpt_flops(batch, seq, d, n_layers, VOCAB, train=True))


def build_closure(device: str) -> Workload:
    seed(22)
    batch, seq, d, n_layers = size(device, 8, 2), size(device, 1024, 64), size(device, 2048, 64), 4
    model = TinyGPT(VOCAB, d, n_layers, max(d // 128, 1), seq).to(device)
    opt = adamw(model.parameters(), device)
    idx = torch.randint(0, VOCAB, (batch, seq), device=device)
    targets = torch.randint(0, VOCAB, (batch, seq), device=device)

    def closure() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        with autocast(device):
            loss = F.cross_entropy(model(idx).flatten(0, 1), targets.flatten())
        loss.backward()
        return loss

    def step() -> None:
        opt.step(closure)

    return Workload(step, flops_per_step=gpt_flops(batch, seq, d, n_layers, VOCAB, train=True))


def build_infer(device: str) -> Workload:
    seed(21)
    batch, seq, d, n_layers = size(device, 32, 2), size(device, 1024, 64), size(device, 1024, 64), 4
    model = TinyGPT(VOCAB, d, n_layers, d // 64, seq).to(device, torch.bfloat16).eval()
    idx = torch.randint(0, VOCAB, (batch, seq), device=device)

    def step() -> None:
        with torch.inference_mode():
            model(idx)

    return Workload(step, flops_per_step=gpt_flops(batch, seq, d, n_layers, VOCAB, train=False))


def build_bench_train(device: str) -> Workload:
    return build_train(device, n_layers=size(device, 12, 2))


HEALTHY_TRAIN = Baseline(
    id="healthy_train",
    title="GPT-like training step, bf16 autocast, SDPA, fused AdamW",
    build=build_train,
    with_stack=True,
    description="4 layers, d_model 2048, 16 heads, seq 1024, batch 8, vocab 8192; bf16 autocast, "
    "F.scaled_dot_product_attention, AdamW(fused=True), data on the GPU, no syncs.",
)

HEALTHY_CLOSURE = Baseline(
    id="healthy_closure",
    title="GPT-like training step through opt.step(closure), Lightning-style",
    build=build_closure,
    with_stack=True,
    description="healthy_train's model and data (bf16 autocast, SDPA, AdamW(fused=True), no "
    "syncs); zero_grad, forward and backward in a closure passed to opt.step(closure), as "
    "Lightning runs it.",
)

HEALTHY_INFER = Baseline(
    id="healthy_infer",
    title="GPT-like inference, bf16 weights, inference_mode, batch 32",
    build=build_infer,
    description="healthy_train's architecture at d_model 1024 in bf16 under "
    "torch.inference_mode(), batch 32, seq 1024.",
)
