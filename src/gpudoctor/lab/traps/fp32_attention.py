"""fp32-matmul (attention): float32 q/k/v keep ``scaled_dot_product_attention`` off flash.

``F.scaled_dot_product_attention`` picks its kernel by the inputs' dtype: the flash kernels
(FlashAttention-2, cuDNN's) take only fp16 / bf16, so a model trained in float32 silently falls
back to the memory-efficient CUTLASS kernel in fp32 (``fmha_cutlassF_f32_*`` forward,
``fmha_cutlassB_f32_*`` backward), several times slower than flash; no error or warning says so.
TF32 is on for the ordinary matmuls (``torch.set_float32_matmul_precision("high")``, as users set
it), so the projections and the MLP are already on tensor cores, and with a long sequence the
fp32 attention is most of the step. The fixed twin runs the same model under bf16 autocast
(float32 master weights kept, same TF32 setting): q/k/v arrive in bf16 and SDPA takes flash.

The lab runs every workload in one process, so the precision is set for each step and restored
after it (``common.matmul_precision``).
"""

from __future__ import annotations

import torch
from torch import nn

from gpudoctor.lab.common import Block, adamw, autocast, matmul_precision, seed, size
from gpudoctor.lab.trap import Trap, Workload


def _build(device: str, bf16: bool) -> Workload:
    seed(17)
    batch, seq = size(device, 4, 2), size(device, 4096, 128)
    d, heads, layers = size(device, 1024, 64), size(device, 16, 4), 2
    model = nn.Sequential(*[Block(d, heads) for _ in range(layers)]).to(device)
    opt = adamw(model.parameters(), device)
    x = torch.randn(batch, seq, d, device=device)

    def step() -> None:
        with matmul_precision("high"):
            with autocast(device, enabled=bf16):
                loss = model(x).float().square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    dense = 2 * batch * seq * 12 * d * d  # qkv, proj and the 4x MLP, forward
    attention = 4 * batch * seq * seq * d // 2  # QK^T and PV, causal half, forward
    return Workload(step, flops_per_step=3 * layers * (dense + attention))


TRAP = Trap(
    id="fp32_attention",
    title="Float32 attention: SDPA falls back from flash to the fp32 memory-efficient kernel",
    expected_finding="fp32-matmul",
    build_sick=lambda device: _build(device, bf16=False),
    build_fixed=lambda device: _build(device, bf16=True),
    description="2 float32 transformer blocks (d_model 1024, 16 heads of 64, MLP 4x), batch 4, "
    "seq 4096, training; causal F.scaled_dot_product_attention on fp32 q/k/v runs the fp32 "
    "memory-efficient kernel, not flash; TF32 on for the other matmuls "
    "(set_float32_matmul_precision('high')). Fixed: bf16 autocast, same setting: SDPA takes flash.",
)
