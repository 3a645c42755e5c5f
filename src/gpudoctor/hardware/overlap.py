"""Compute under overlapped communication: GEMM (and a memory-bound kernel) throughput while an NCCL
all-reduce runs on another stream, vs alone; and the all-reduce's time under the GEMMs. One process
per GPU under torchrun, run by ``gpudoctor.hardware.collective_bandwidth --overlap`` (2+ GPUs only).

DDP's gradient all-reduce and FSDP's all-gathers / reduce-scatters run on NCCL's stream while the
backward (forward) runs: NCCL's kernels hold SMs and HBM bandwidth for as long as they run, so the
compute they overlap runs slower. Measured here, per rank, the slower rank kept:

- ``gemm_slowdown``: seconds of ``GEMMS`` bf16 (8192, 8192, 8192) matmuls while all-reduces of a
  ``AR_BYTES`` buffer run back to back on a side stream (longer than the GEMMs, so every GEMM is
  overlapped) / the same GEMMs alone;
- ``memory_slowdown``: the same for a contiguous bf16 multiply of 2 x 256 MiB operands;
- ``allreduce_slowdown``: seconds of the all-reduces while GEMMs run (longer than them) / alone.

Result: ``{"gemm": {...}, "memory": {...}, "allreduce": {...}, "gemm_slowdown": x, ...}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

AR_BYTES = 256 * 1024**2  # bf16 all-reduce buffer: 10 DDP buckets of 25 MiB, about one FSDP layer
GEMM_SIZE = 8192
MEMORY_ELEMENTS = 1 << 27
SPIN_CYCLES = 100_000_000  # ~50 ms at the H100/H200's 1.98 GHz: time to enqueue a few hundred calls


def _span(torch: Any, fn: Callable[[], Any], stream: Any, start: Any) -> tuple[Any, Any]:
    """Enqueue ``fn`` on ``stream`` after ``start``; return its (start, end) events."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        stream.wait_event(start)
        begin.record(stream)
        fn()
        end.record(stream)
    return begin, end


def _alone(torch: Any, fn: Callable[[], Any], reps: int = 3) -> float:
    """Median seconds of ``fn`` on the current stream (one call of warm-up)."""
    from gpudoctor.hardware.probe import median_ms

    return median_ms(torch, fn, reps, warmup=1) / 1e3


def _together(torch: Any, dist: Any, work: Callable[[], Any],
              comm: Callable[[], Any]) -> tuple[float, float]:
    """Seconds of ``work`` (main stream) and ``comm`` (side stream) started together: the main
    stream spins ~50 ms first (``torch.cuda._sleep``) while the host enqueues both, then releases
    them."""
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    dist.barrier()
    torch.cuda.synchronize()
    torch.cuda._sleep(SPIN_CYCLES)
    start = torch.cuda.Event()
    start.record(main)
    c0, c1 = _span(torch, comm, side, start)
    w0, w1 = _span(torch, work, main, start)
    torch.cuda.synchronize()
    return w0.elapsed_time(w1) / 1e3, c0.elapsed_time(c1) / 1e3


def _slowest(torch: Any, dist: Any, value: float, device: Any) -> float:
    t = torch.tensor([value], device=device, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def measure_overlap(torch: Any, dist: Any, device: Any, quick: bool = False) -> dict[str, Any]:
    """The slowdowns of the module doc, each the slowest rank's, with the seconds they come from."""
    bf16 = torch.bfloat16
    buf = torch.randn(AR_BYTES // 2, device=device, dtype=bf16)
    a = torch.randn(GEMM_SIZE, GEMM_SIZE, device=device, dtype=bf16)
    b = torch.randn(GEMM_SIZE, GEMM_SIZE, device=device, dtype=bf16)
    x = torch.randn(MEMORY_ELEMENTS, device=device, dtype=bf16)
    y = torch.randn(MEMORY_ELEMENTS, device=device, dtype=bf16)
    ar_s = _slowest(torch, dist, _alone(torch, lambda: dist.all_reduce(buf)), device)
    gemm_s = _alone(torch, lambda: a @ b)
    mem_s = _alone(torch, lambda: x * y)
    target = 0.05 if quick else 0.15  # seconds of overlapped work per measurement

    def times(fn: Callable[[], Any], count: int) -> Callable[[], None]:
        def run() -> None:
            for _ in range(count):
                fn()
        return run

    out: dict[str, Any] = {"allreduce_bytes": AR_BYTES, "dtype": "bf16",
                           "world_size": dist.get_world_size()}
    for name, fn, alone in (("gemm", lambda: a @ b, gemm_s), ("memory", lambda: x * y, mem_s)):
        n = max(3, int(target / alone))
        comm_n = max(3, int(1.5 * target / ar_s) + 1)  # the all-reduces outlast the work
        base = _alone(torch, times(fn, n), reps=2)
        both, _ = _together(torch, dist, times(fn, n), times(lambda: dist.all_reduce(buf), comm_n))
        both = _slowest(torch, dist, both, device)
        base = _slowest(torch, dist, base, device)
        out[name] = {"op": f"{GEMM_SIZE}^3 bf16 matmul" if name == "gemm"
                     else f"[{MEMORY_ELEMENTS}] * [{MEMORY_ELEMENTS}] bf16",
                     "calls": n, "alone_s": base, "overlapped_s": both}
        out[f"{name}_slowdown"] = both / base
    comm_n = max(3, int(target / ar_s))
    gemm_n = max(3, int(1.5 * target / gemm_s) + 1)  # the GEMMs outlast the all-reduces
    base = _slowest(torch, dist,
                    _alone(torch, times(lambda: dist.all_reduce(buf), comm_n), reps=2), device)
    _, both = _together(torch, dist, times(lambda: a @ b, gemm_n),
                        times(lambda: dist.all_reduce(buf), comm_n))
    both = _slowest(torch, dist, both, device)
    out["allreduce"] = {"calls": comm_n, "alone_s": base, "overlapped_s": both,
                        "busbw_alone_Bps": AR_BYTES * 2 * (dist.get_world_size() - 1)
                        / dist.get_world_size()
                        / (base / comm_n)}
    out["allreduce_slowdown"] = both / base
    return out
