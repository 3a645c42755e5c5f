"""fp32-matmul: large matrix multiplies in full float32 precision.

With ``torch.backends.cuda.matmul.allow_tf32 = False`` (PyTorch's default) a float32 matmul
cannot use the tensor cores' low-precision paths and runs on the much slower float32 pipeline,
so a GEMM-dominated training step runs far below the GPU's matrix throughput. The fixed twin
runs the same model and optimizer under bf16 autocast (float32 master weights are kept).
"""

from __future__ import annotations

import torch

from gpudoctor.lab.common import gelu_mlp_regression, seed, size
from gpudoctor.lab.trap import Trap, Workload


def _build(device: str, bf16: bool) -> Workload:
    seed(4)
    torch.backends.cuda.matmul.allow_tf32 = False
    step, flops = gelu_mlp_regression(device, size(device, 2048, 128),
                                      size(device, 4096, 64), 4, bf16)
    return Workload(step, flops_per_step=flops)


TRAP = Trap(
    id="fp32_matmul",
    title="GEMM-heavy training in float32 without TF32 or bf16",
    expected_finding="fp32-matmul",
    build_sick=lambda device: _build(device, bf16=False),
    build_fixed=lambda device: _build(device, bf16=True),
    description="4-layer MLP (2048 wide, batch 4096) trained in float32 with allow_tf32=False. "
    "Fixed: bf16 autocast.",
)
