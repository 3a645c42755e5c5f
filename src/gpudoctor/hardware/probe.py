"""Probes: what this card reaches today (GPU only).

Every probe times with CUDA events after warm-up and reports the median of its repeats, on random
data (never zeros: they can run faster than real data). Memory probes use buffers far larger
than L2 (so they measure HBM); the L2 probe uses one that fits. Bytes counted: each input read
once plus each output written once (copy = 2x the buffer, triad = 3x).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpudoctor.capture.quiet import kineto_chatter_filtered

GIB = 1024**3


@dataclass(frozen=True)
class Measurement:
    probe: str  # e.g. "hbm.copy", "gemm.bf16"
    value: float  # in `unit`
    unit: str  # "B/s" | "FLOP/s" | "s"
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ProbePlan:
    """What a bench run measures; ``quick`` trades repeats and sizes for time."""

    quick: bool = False

    @property
    def hbm_bytes(self) -> int:
        return 1 * GIB if self.quick else 2 * GIB

    @property
    def repeats(self) -> int:
        return 8 if self.quick else 30

    @property
    def gemm_size(self) -> int:
        return 8192

    def names(self) -> list[str]:
        gemms = ["gemm.fp32", "gemm.tf32", "gemm.bf16", "gemm.fp16", "gemm.fp8"]
        shapes = [] if self.quick else ["gemm.bf16.misaligned", "gemm.bf16.skinny",
                                        "gemm.bf16.small"]
        return ["hbm.read", "hbm.write", "hbm.copy", "hbm.triad", "l2.copy", *gemms, *shapes,
                "launch.eager", "launch.graph", "h2d.pageable", "h2d.pinned", "d2h.pinned",
                "profiler.event"]


def median_ms(
    torch: Any, fn: Callable[[], Any], repeats: int, warmup: int = 3,
    before: Callable[[], Any] | None = None
) -> float:
    """Median of ``repeats`` event-timed calls; ``before`` runs untimed ahead of each (an L2
    flush)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for s, e in zip(starts, ends):
        if before is not None:
            before()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def memory_probes(torch: Any, plan: ProbePlan) -> list[Measurement]:
    n = plan.hbm_bytes // 4
    a = torch.rand(n, device="cuda")
    b = torch.rand(n, device="cuda")
    c = torch.rand(n, device="cuda")
    size = n * 4
    out: list[Measurement] = []

    def bandwidth(name: str, fn: Callable[[], Any], nbytes: int) -> None:
        ms = median_ms(torch, fn, plan.repeats)
        out.append(Measurement(name, nbytes / (ms / 1e3), "B/s",
                               {"buffer_bytes": size, "ms": round(ms, 4)}))

    bandwidth("hbm.read", lambda: torch.sum(a), size)
    bandwidth("hbm.write", lambda: c.fill_(1.5), size)
    bandwidth("hbm.copy", lambda: c.copy_(a), 2 * size)
    bandwidth("hbm.triad", lambda: torch.add(a, b, alpha=0.5, out=c), 3 * size)
    out.append(_l2_copy(torch, plan))
    return out


def _l2_copy(torch: Any, plan: ProbePlan) -> Measurement:
    """Copies between two 8 MiB buffers (both stay in an A100/H100 L2), replayed from a CUDA graph:
    one copy takes about as long as one eager launch, so launches would be measured instead."""
    small = 8 * 1024**2 // 4
    x, y = torch.rand(small, device="cuda"), torch.rand(small, device="cuda")
    copies = 50
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        y.copy_(x)
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(copies):
                y.copy_(x)
    ms = median_ms(torch, graph.replay, plan.repeats)
    return Measurement("l2.copy", copies * 2 * small * 4 / (ms / 1e3), "B/s",
                       {"buffer_bytes": small * 4})


def gemm_probes(torch: Any, plan: ProbePlan) -> list[Measurement]:
    size = plan.gemm_size
    out: list[Measurement] = []
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dtype, allow in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                                   ("bf16", torch.bfloat16, False), ("fp16", torch.float16, False)):
            torch.backends.cuda.matmul.allow_tf32 = allow
            out.append(_gemm(torch, f"gemm.{name}", dtype, size, size, size, plan.repeats))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    fp8 = _fp8_gemm(torch, size, plan.repeats)
    if fp8 is not None:
        out.append(fp8)
    if not plan.quick:
        odd = size - 1
        out.append(_gemm(torch, "gemm.bf16.misaligned", torch.bfloat16, odd, odd, odd,
                         plan.repeats))
        # operands of these fit in L2: flush it between repeats so each call reads them from HBM
        flush = l2_flusher(torch)
        out.append(_gemm(torch, "gemm.bf16.skinny", torch.bfloat16, 16, size, size,
                         plan.repeats, flush))
        out.append(_gemm(torch, "gemm.bf16.small", torch.bfloat16, 512, 512, 512,
                         plan.repeats, flush))
    return out


def l2_flusher(torch: Any) -> Callable[[], Any]:
    """Writes 256 MiB (several times any current L2) so that nothing of the next call is cached."""
    scratch = torch.empty(64 * 1024**2, device="cuda")
    return lambda: scratch.fill_(0.5)


def _gemm(torch: Any, name: str, dtype: Any, m: int, n: int, k: int, repeats: int,
          flush: Callable[[], Any] | None = None) -> Measurement:
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    ms = median_ms(torch, lambda: a @ b, repeats, before=flush)
    return Measurement(name, 2.0 * m * n * k / (ms / 1e3), "FLOP/s",
                       {"shape_MxNxK": f"{m}x{n}x{k}", "ms": round(ms, 4)})


def _fp8_gemm(torch: Any, size: int, repeats: int) -> Measurement | None:
    """fp8 e4m3 through torch._scaled_mm (Hopper and later); None where unsupported."""
    if not hasattr(torch, "_scaled_mm") or torch.cuda.get_device_capability() < (8, 9):
        return None
    try:
        a = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn).t()  # column-major
        one = torch.tensor(1.0, device="cuda")
        ms = median_ms(torch,
                       lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                out_dtype=torch.bfloat16),
                        repeats)
    except (RuntimeError, TypeError) as exc:
        return Measurement("gemm.fp8", 0.0, "FLOP/s",
                           {"error": f"{type(exc).__name__}: {exc}"[:200]})
    return Measurement("gemm.fp8", 2.0 * size**3 / (ms / 1e3), "FLOP/s",
                       {"shape_MxNxK": f"{size}x{size}x{size}"})


def launch_probes(torch: Any, plan: ProbePlan) -> list[Measurement]:
    """Per-kernel cost of a tiny op: launched one by one from Python, and replayed from a graph."""
    x = torch.rand(1, device="cuda")
    n = 500 if plan.quick else 2000
    for _ in range(50):
        x.add_(1e-3)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        x.add_(1e-3)
    torch.cuda.synchronize()
    eager = (time.perf_counter() - start) / n
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        x.add_(1e-3)
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(n):
                x.add_(1e-3)
    graph.replay()
    torch.cuda.synchronize()
    start = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    replay = (time.perf_counter() - start) / n
    return [Measurement("launch.eager", eager, "s", {"ops": n}),
            Measurement("launch.graph", replay, "s", {"ops": n})]


def host_copy_probes(torch: Any, plan: ProbePlan) -> list[Measurement]:
    nbytes = (128 if plan.quick else 512) * 1024**2
    pageable = torch.rand(nbytes // 4)
    pinned = torch.rand(nbytes // 4).pin_memory()
    device = torch.empty(nbytes // 4, device="cuda")
    repeats = max(plan.repeats // 3, 4)
    out = []
    for name, fn in (
        ("h2d.pageable", lambda: device.copy_(pageable)),
        ("h2d.pinned", lambda: device.copy_(pinned, non_blocking=True)),
        ("d2h.pinned", lambda: pinned.copy_(device, non_blocking=True)),
    ):
        ms = median_ms(torch, fn, repeats, warmup=2)
        out.append(Measurement(name, nbytes / (ms / 1e3), "B/s", {"bytes": nbytes}))
    return out


def profiler_probes(torch: Any, plan: ProbePlan, device: str = "cuda") -> list[Measurement]:
    """The profiler's own host time per event it records, recorded as ``gpudoctor run`` records
    (CPU and CUDA activities, shapes, FLOPs): a host-bound loop of tiny launches timed plainly and
    under the profiler, the difference over the host events the profiler recorded in the loop.
    replay/observer.py takes it out of every recorded event (the prior its fit scales)."""
    from torch.profiler import ProfilerActivity, profile

    x = torch.rand(1, device=device)
    n = 500 if plan.quick else 2000
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])

    def loop() -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            x.add_(1e-3)
        host = time.perf_counter() - start  # the host's time: the loop is launch-bound
        torch.cuda.synchronize()
        return host

    loop()
    plain = min(loop() for _ in range(3))
    profiled, events = [], 0
    with kineto_chatter_filtered():
        with profile(activities=activities, record_shapes=True, with_flops=True):
            loop()  # the profiler's first start loads and warms CUPTI
        for _ in range(3):
            with profile(activities=activities, record_shapes=True, with_flops=True) as prof:
                profiled.append(loop())
            events = _host_events(prof)
    per_iteration = max(events / n, 1.0)  # the op and its launch (the runtime call)
    extra = max(min(profiled) - plain, 0.0) / n
    return [Measurement("profiler.event", extra / per_iteration, "s",
                        {"ops": n, "events": events, "events_per_op": round(per_iteration, 2),
                         "plain_us_per_op": round(plain / n * 1e6, 3),
                         "profiled_us_per_op": round(min(profiled) / n * 1e6, 3)})]


# the trace-event categories the profiler records on the host: replay/graph.py's event classes
HOST_EVENT_CATS = frozenset({"cpu_op", "cuda_runtime", "cuda_driver", "user_annotation",
                             "python_function"})


def _host_events(prof: Any) -> int:
    """The host events a profile recorded, counted in its exported trace as the replay counts
    them."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "probe.json"
        prof.export_chrome_trace(str(path))
        data = json.loads(path.read_text())
    return sum(1 for e in data.get("traceEvents", []) if isinstance(e, dict)
               and e.get("cat") in HOST_EVENT_CATS)


PROBE_GROUPS: list[tuple[str, Callable[[Any, ProbePlan], list[Measurement]]]] = [
    ("memory bandwidth", memory_probes),
    ("matrix multiply", gemm_probes),
    ("kernel launch", launch_probes),
    ("host <-> device copies", host_copy_probes),
    ("the profiler's own cost", profiler_probes),
]


def run_probes(plan: ProbePlan, progress: Callable[[str], None] | None = None) -> list[Measurement]:
    import torch

    results: list[Measurement] = []
    for label, group in PROBE_GROUPS:
        if progress:
            progress(label)
        results += group(torch, plan)
        torch.cuda.empty_cache()
    return results
