"""Hand-built DDP ranks on a GPU (tests/synth.py TraceBuilder; times in us): a step of micro-batches,
each a forward (one ``aten::mm`` on the main thread), a backward (autograd nodes on their own
thread, as on a GPU) and the gradient all-reduces the backward launches, then the optimizer. What a
rank does differently is an argument: the all-reduce after every micro-batch or only the last
(``no_sync``), one huge bucket or several overlapped with backward, a larger batch (its matmul
twice the rows and its kernels twice as long), a host sync after the forward (``.item()``) that
holds the backward's launch back, a clock offset.

One micro-batch's timeline from its start ``b`` (GPU):

    forward kernel       b+20 .. b+20+F                        F = FWD_US x scale x slowdown
    backward kernel      from max(b+1200 (+ sync_us), forward end), BWD_US x scale x slowdown
    all-reduces          after the backward kernel, back to back; with ``overlapped``, all but
                         the last beside the backward kernel, from its start + 100
"""

from __future__ import annotations

import json
from pathlib import Path

from synth import TraceBuilder

STEP_US = 20_000.0
MICRO_US = 8_000.0
FWD_US, BWD_US = 1_000.0, 2_000.0
BACKWARD_TID = 200
NCCL_STREAM = 20
MiB = 2**20


def _allreduce(t: TraceBuilder, host: float, gpu: float, dur: float, nbytes: int) -> None:
    t.op("record_param_comms", host, 8, tid=BACKWARD_TID)
    t.events[-1]["args"].update(
        {
            "Collective name": "allreduce",
            "In msg nelems": nbytes // 4,
            "Out msg nelems": nbytes // 4,
            "dtype": "Float",
            "Process Group Name": "0",
        }
    )
    corr = t.runtime("cudaLaunchKernel", host + 1, 4, tid=BACKWARD_TID)
    t.kernel(
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        gpu,
        dur,
        corr,
        stream=NCCL_STREAM,
    )


def ddp_rank(
    steps: int = 3,
    micro: int = 1,
    sync_every_micro: bool = True,
    buckets: tuple[int, ...] = (16 * MiB,),
    allreduce_us: tuple[float, ...] = (500.0,),
    overlapped: bool = False,
    scale: float = 1.0,
    waits_us: float = 0.0,
    offset_us: float = 0.0,
    sync_us: float = 0.0,
    slowdown: float = 1.0,
) -> TraceBuilder:
    """One rank. ``scale``: its batch (the matmul's rows and the kernels' time), ``slowdown``: its
    kernels' time alone (a slower GPU). ``waits_us``: it reaches its (single-bucket) all-reduce that long before the
    other rank, and waits inside the kernel, so that the kernels end together on both."""
    t = TraceBuilder()
    o = offset_us
    for k in range(steps):
        s = k * STEP_US + o
        t.step(k + 1, s, STEP_US - 10)
        for j in range(micro):
            b = s + j * MICRO_US
            fwd = FWD_US * scale * slowdown
            t.launch(
                "gemm_fwd_kernel",
                b + 1,
                b + 20,
                fwd,
                op="aten::mm",
                dims=[[int(512 * scale), 1024], [1024, 1024]],
            )
            if sync_us:  # .item() on the forward's output: the host waits for it, then relaunches
                t.op("aten::item", b + 10, fwd + 15)
                t.runtime("cudaStreamSynchronize", b + 11, fwd + 13)
            b_host = b + sync_us  # the backward is issued that much later
            t.op(
                "autograd::engine::evaluate_function: MmBackward0",
                b_host + 1100,
                60,
                tid=BACKWARD_TID,
            )
            corr = t.runtime("cudaLaunchKernel", b_host + 1101, 4, tid=BACKWARD_TID)
            start = max(b_host + 1200, b + 20 + fwd)
            bwd = BWD_US * scale * slowdown
            t.kernel("gemm_bwd_kernel", start, bwd, corr)
            end = start + bwd
            if not sync_every_micro and j < micro - 1:
                continue
            gpu = end if not overlapped else start + 100
            for i, (nbytes, dur) in enumerate(zip(buckets, allreduce_us)):
                last = i == len(buckets) - 1
                at = end if last else gpu
                _allreduce(t, b_host + 1170 + i, at, dur + waits_us, nbytes)
                if not overlapped:
                    end = at + dur + waits_us
                else:
                    gpu += dur
        t.launch(
            "adam_kernel",
            s + micro * MICRO_US + 100,
            s + micro * MICRO_US + 1000,
            100.0,
            op="aten::_fused_adam_",
        )
    return t


def write_ranks(folder: Path, ranks: list[TraceBuilder]) -> Path:
    for r, t in enumerate(ranks):
        (folder / f"rank{r}").mkdir(parents=True, exist_ok=True)
        t.write(folder / f"rank{r}" / "trace.json.gz", gz=True)
        (folder / f"rank{r}" / "env.json").write_text(
            json.dumps({"rank": r, "world_size": len(ranks)})
        )
    return folder
