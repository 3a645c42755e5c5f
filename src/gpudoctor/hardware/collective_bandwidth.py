"""Collective bus bandwidth vs message size, one process per GPU (run under torchrun).

    python -m torch.distributed.run --standalone --nproc-per-node N \\
        -m gpudoctor.hardware.collective_bandwidth --out curve.json [--max-bytes 4GiB]

Definitions follow nccl-tests (doc/PERFORMANCE.md): algbw = bytes / time, where bytes is the
buffer each rank holds (all-reduce: its input; all-gather: the gathered output; reduce-scatter:
the full input); busbw = algbw x 2(n-1)/n for all-reduce and x (n-1)/n for all-gather and
reduce-scatter, so that busbw is comparable with the link's speed whatever n is. Time is the
slowest rank's median over the iterations (CUDA events; barrier first).

NVLink multicast (NVLS) is never switched on here: the process keeps the environment it is given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Any

KIB = 1024
OPS = ("all_reduce", "all_gather", "reduce_scatter")


def sizes(max_bytes: int) -> list[int]:
    out, size = [], KIB
    while size <= max_bytes:
        out.append(size)
        size *= 4
    return out


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw / algbw for ``op`` over ``n`` ranks ("all_reduce" or "all-reduce" alike)."""
    op = op.replace("_", "-")
    if op == "all-reduce":
        return 2.0 * (n - 1) / n
    if op in ("all-gather", "reduce-scatter", "all-to-all"):
        return (n - 1) / n
    return 1.0  # broadcast, p2p


def _time_op(torch: Any, dist: Any, op: str, nbytes: int, device: Any) -> float:
    n = dist.get_world_size()
    count = max(nbytes // 4, n)
    count -= count % n
    full = torch.rand(count, device=device)
    part = torch.rand(count // n, device=device)
    if op == "all_reduce":
        run = lambda: dist.all_reduce(full)  # noqa: E731
    elif op == "all_gather":
        run = lambda: dist.all_gather_into_tensor(full, part)  # noqa: E731
    else:
        run = lambda: dist.reduce_scatter_tensor(part, full)  # noqa: E731
    iters = max(5, min(50, (1 << 30) // max(nbytes, 1)))
    cuda = device.type == "cuda"
    for _ in range(3):
        run()
    dist.barrier()
    times = []
    for _ in range(iters):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            import time

            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
    slowest = torch.tensor([statistics.median(times)], device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(slowest.item())


def measure(max_bytes: int, overlap: bool = False) -> dict[str, Any]:
    """The curves of every op in ``OPS``; with ``overlap``, also compute under an overlapped
    all-reduce (hardware/overlap.py) as ``"overlap"`` (or ``{"error": ...}``)."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    n = dist.get_world_size()
    curves: dict[str, list[dict[str, float]]] = {}
    try:
        for op in OPS:
            rows = []
            for nbytes in sizes(max_bytes):
                seconds = _time_op(torch, dist, op, nbytes, device)
                algbw = nbytes / seconds
                rows.append({"bytes": nbytes, "time_s": seconds, "algbw_Bps": algbw,
                             "busbw_Bps": algbw * bus_factor(op, n)})
            curves[op] = rows
        slowdown = _overlap(torch, dist, device) if overlap and cuda else None
    finally:
        dist.destroy_process_group()
    out = {"world_size": n, "backend": "nccl" if cuda else "gloo",
           "gpu": torch.cuda.get_device_name() if cuda else "cpu", "curves": curves,
           "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}
    if slowdown is not None:
        out["overlap"] = slowdown
    return out


def _overlap(torch: Any, dist: Any, device: Any) -> dict[str, Any]:
    from gpudoctor.hardware.overlap import measure_overlap

    try:
        return measure_overlap(torch, dist, device)
    except (RuntimeError, TypeError, ValueError, AttributeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def _parse_bytes(text: str) -> int:
    units = {"k": KIB, "m": KIB**2, "g": KIB**3}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-bytes", default="4GiB")
    parser.add_argument("--overlap", action="store_true",
                        help="also compute under an overlapped all-reduce")
    args = parser.parse_args()
    result = measure(_parse_bytes(args.max_bytes), args.overlap)
    if int(os.environ.get("RANK", "0")) == 0:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
