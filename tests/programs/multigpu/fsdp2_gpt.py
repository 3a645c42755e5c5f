"""A small GPT-style model trained with FSDP2 (``torch.distributed.fsdp.fully_shard``).

Expected diagnosis (stated before it ran on GPUs):

- default (sick): ``fully_shard`` on the root module only, the common first try. The whole model is
  one parameter group: one all-gather of every weight before the forward (nothing to overlap it
  with), and one reduce-scatter of every gradient after the backward, and again an all-gather
  before the backward. FSDP2 cannot prefetch a group that does not exist: top finding
  ``exposed-comm``, most of the communication exposed, its "overlap not taken" part priced near
  (comm - one block's share).
- ``--fixed``: ``fully_shard`` on each block, then the root: a group per block, whose all-gather
  FSDP2 issues ahead of the block (its default prefetch: the next block's in backward, and in
  forward the all-gather runs on its own stream while the host, ahead of the GPU, reaches the
  next block). The healthy FSDP2 run: no major multi-GPU finding.

On a GPU the model is tiny_gpt's COMM_SIZE on 32 rows (16 k tokens, 43 TFLOP of model FLOPs a step): FSDP2's
hooks cost the host about 3.7 ms per group and step (4x H200, 2026-11-26: on 4
rows per-block groups with explicit prefetch ran 56.9 ms, host-bound, against 27.2 ms for the root
alone; a known cost, pytorch/pytorch#173680), so per-block groups pay only where the GPU has more
to do than that.

FSDP2 keeps a one-ahead backward prefetch by default and offers no switch to turn it off, so the
sick twin removes the groups to prefetch rather than the prefetch itself.

    gpudoctor run --nproc 2 fsdp2_gpt.py --steps 40
    gpudoctor run --nproc 2 fsdp2_gpt.py --steps 40 --fixed

NCCL on GPUs (bf16 parameters, fp32 reduction); gloo on CPUs where this torch's FSDP2 supports it.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from tiny_gpt import COMM_SIZE, CPU_SIZE, gpt, log_step, setup
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

GPU_ROWS = 32  # rows per rank on a GPU: GPU-bound with a group per block (see above)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--fixed", action="store_true", help="the twin: one FSDP group per block")
    args = ap.parse_args()
    rank, world, device, cuda = setup()
    d, layers, vocab, batch, seq, heads = COMM_SIZE if cuda else CPU_SIZE
    batch = GPU_ROWS if cuda else batch
    torch.manual_seed(0)
    model = gpt(d, layers, vocab, heads).to(device)
    mesh = init_device_mesh(device.type, (world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if cuda else MixedPrecisionPolicy()
    blocks = list(model[1:-2])
    if args.fixed:
        for block in blocks:
            fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    for step in range(args.steps):
        t0 = time.perf_counter()
        logits = model(ids)
        loss = nn.functional.cross_entropy(logits.view(-1, vocab).float(), ids.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        log_step(step, t0, rank, cuda)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
