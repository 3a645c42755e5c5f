"""fp32-matmul (TF32): a float32 model whose matmuls run as TF32 instead of bf16.

``torch.set_float32_matmul_precision("high")`` (the same as ``allow_tf32 = True``) is the usual
advice for float32 training: its matmuls take the tensor cores in TF32, far faster than float32
on CUDA cores. But TF32 runs at half the tensor-core rate of bf16 (H100 SXM datasheet: 495 vs
989 dense TFLOP/s) and its operands are float32, twice the bytes. A GEMM-dominated training step
left in float32 with TF32 on therefore runs at about half the speed it would under bf16. The
fixed twin runs the same model, optimizer and TF32 setting under bf16 autocast (float32 master
weights kept).

The lab runs every workload in one process, so the precision is set for each step and restored
after it (``common.matmul_precision``) rather than left on for the traps that follow.
"""

from __future__ import annotations

from gpudoctor.lab.common import gelu_mlp_regression, matmul_precision, seed, size
from gpudoctor.lab.trap import Trap, Workload


def _build(device: str, bf16: bool) -> Workload:
    seed(16)
    step, flops = gelu_mlp_regression(device, size(device, 6144, 128),
                                      size(device, 8192, 64), 4, bf16)

    def step_with_tf32() -> None:
        with matmul_precision("high"):
            step()

    return Workload(step_with_tf32, flops_per_step=flops)


TRAP = Trap(
    id="tf32_matmul",
    title="GEMM-heavy training in float32 with TF32 instead of bf16",
    expected_finding="fp32-matmul",
    build_sick=lambda device: _build(device, bf16=False),
    build_fixed=lambda device: _build(device, bf16=True),
    description="4-layer MLP (6144 wide, batch 8192) trained in float32 with "
    "torch.set_float32_matmul_precision('high'): TF32 tensor cores. Fixed: bf16 autocast, same "
    "setting.",
)
