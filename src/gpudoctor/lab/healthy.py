"""Healthy baselines: GPU-bound workloads with no planted problem.

``healthy_train`` trains a small GPT-like model in bf16 autocast with
``scaled_dot_product_attention`` and fused AdamW on data already on the GPU, with no
synchronization in the step, so the host runs ahead and the GPU is kept busy.
``healthy_infer`` runs the same architecture, narrower, in bf16 under ``torch.inference_mode()``
at a large batch. ``build_bench_train`` is the same training with more layers, used for a large
benchmark trace.
"""

from __future__ import annotations

import torch

from gpudoctor.lab.common import TinyGPT, adamw, gpt_flops, gpt_train_step, seed, size
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

HEALTHY_INFER = Baseline(
    id="healthy_infer",
    title="GPT-like inference, bf16 weights, inference_mode, batch 32",
    build=build_infer,
    description="healthy_train's architecture at d_model 1024 in bf16 under "
    "torch.inference_mode(), batch 32, seq 1024.",
)
