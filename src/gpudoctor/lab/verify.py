"""The lab's proof: run each trap and its fixed twin, diagnose the sick one, compare.

For every trap: time the sick workload and its fixed twin in alternating rounds (CUDA events,
median of ``timed`` steps after warm-up, each round a fresh build), record a profiled window of
the sick one, diagnose that trace with the unprofiled step time, and compare the doctor's
predicted speedup for the planted finding with the measured one (sick / fixed). Baselines pass
when they get no major or critical finding.

Why rounds, and why before the capture: the host-bound twins (per_sample_loop's fixed step is a
fraction of a millisecond of launches) moved by 1.8x between lab runs while timed once each, the
fixed twin after the sick one's profiled window (benchmarks/BENCHMARKS-lab.md "The lab: predicted vs
measured speedup on the GPU"). Alternating the twins puts both under the same machine state, the
median of the rounds drops a round that a neighbour disturbed, and no twin is timed after the
profiler has run in the process. A round costs ``warmup + timed`` steps of each twin, so slow traps
(the sick step over SLOW_STEP_MS) take one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpudoctor.errors import NoGpuActivityError
from gpudoctor.lab.trap import Baseline, Trap, Workload

RATIO_BAND = (1 / 1.5, 1.5)  # predicted / measured speedup counted as right: within 1.5x either way
ROUNDS = 3  # alternating sick / fixed timing rounds
SLOW_STEP_MS = 80.0  # a sick step this slow is timed in one round: 25 steps already take 2 s


@dataclass(frozen=True)
class TrapVerdict:
    trap: str
    expected: str | None  # None for a baseline
    top_finding: str | None
    rank: int | None  # 1-based rank of the expected finding (None: not found)
    predicted_speedup: float | None
    measured_speedup: float | None
    sick_ms: float
    fixed_ms: float | None
    profiled_step_ms: float
    verdict: str  # pass | diagnosed | missed | healthy | unhealthy | error
    findings: tuple[tuple[str, str, float], ...]  # (id, severity, saving ms)
    error: str = ""
    report: Any = field(default=None, compare=False, repr=False)  # the sick run's Report
    sick_rounds_ms: tuple[float, ...] = ()  # each round's median: sick_ms is their median
    fixed_rounds_ms: tuple[float, ...] = ()
    # the DataLoader's fetch, of sick_ms (capture/timing.py fetch_in_step); None: no loader
    sick_fetch_ms: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.predicted_speedup and self.measured_speedup:
            return self.predicted_speedup / self.measured_speedup
        return None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(dataclasses.replace(self, report=None))
        d.pop("report")
        d["ratio"] = None if self.ratio is None else round(self.ratio, 3)
        return d


def time_steps(workload: Workload, device: str, warmup: int, timed: int) -> float:
    """Median step time in ms: CUDA events between step boundaries (no sync inside the loop)."""
    return time_steps_and_fetch(workload, device, warmup, timed)[0]


def time_steps_and_fetch(workload: Workload, device: str, warmup: int,
                         timed: int) -> tuple[float, float | None]:
    """``time_steps``, and the DataLoader's share of it (None: the steps fetched no batch)."""
    import torch

    from gpudoctor.capture.fetch_clock import timing_fetches
    from gpudoctor.capture.timing import fetch_in_step

    for _ in range(warmup):
        workload.step()
    fetched: list[float] = []
    with timing_fetches() as clock:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(timed + 1)]
            marks[0].record()
            for i in range(timed):
                workload.step()
                marks[i + 1].record()
                fetched.append(clock.take() * 1e3)
            torch.cuda.synchronize()
            times = [a.elapsed_time(b) for a, b in itertools.pairwise(marks)]
        else:
            times = []
            for _ in range(timed):
                t0 = time.perf_counter()
                workload.step()
                times.append((time.perf_counter() - t0) * 1e3)
                fetched.append(clock.take() * 1e3)
        any_fetch = clock.fetched
    ms = statistics.median(times)
    return ms, fetch_in_step(ms, times, fetched) if any_fetch else None


def capture(workload: Workload, out_dir: Path, steps: int, with_stack: bool) -> Path:
    """A profiled window of ``steps`` steps (after 2 untouched and 1 warm-up), as trace.json.gz."""
    from gpudoctor.capture.session import CaptureConfig, CaptureSession

    session = CaptureSession(CaptureConfig(steps=steps, skip=2, stack=with_stack,
                                           nvml_interval_s=0), out_dir)
    session.start(hook_optimizers=False)
    try:
        while not session.done:
            workload.step()
            session.step()
    finally:
        session.close()
    if session.result.trace_path is None:
        raise RuntimeError(
            f"no trace was written ({session.result.error or 'window never opened'})")
    return session.result.trace_path


def _release(device: str) -> None:
    """Hand a closed workload's cached blocks back to the driver, so the next build starts as a
    fresh process would: a fixed build's workspace left in PyTorch's cache made allocator_churn's
    sick step run at the fixed twin's time (benchmarks/BENCHMARKS-lab.md "Evidence moved from the
    source: lab, diff and report")."""
    import gc

    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


@contextlib.contextmanager
def _built(build: Callable[[str], Workload], device: str) -> Iterator[Workload]:
    """A fresh workload, closed and its memory handed back afterwards (``_release``)."""
    work = build(device)
    try:
        yield work
    finally:
        work.close()
        del work
        _release(device)


def _capture_fresh(build: Callable[[str], Workload], device: str, folder: Path, steps: int,
                   with_stack: bool) -> Path:
    with _built(build, device) as work:
        return capture(work, folder, steps, with_stack)


def _time_and_capture(
    build: Callable[[str], Workload], device: str, folder: Path, steps: int, with_stack: bool,
    warmup: int, timed: int
) -> tuple[float, Path]:
    """The unprofiled step time of a fresh workload, then a profiled window of it."""
    with _built(build, device) as work:
        return time_steps(work, device, warmup, timed), capture(work, folder, steps, with_stack)


def _timed(build: Callable[[str], Workload], device: str, warmup: int,
           timed: int) -> tuple[float, float | None]:
    with _built(build, device) as work:
        return time_steps_and_fetch(work, device, warmup, timed)


def paired_rounds(trap: Trap, device: str, warmup: int, timed: int, rounds: int = ROUNDS,
                  sick_fetch: list[float | None] | None = None) -> tuple[list[float], list[float]]:
    """Each twin's median step time per round, the twins alternating (sick, fixed, sick, ...);
    the sick twin's DataLoader share of each round appended to ``sick_fetch`` when given."""
    sick: list[float] = []
    fixed: list[float] = []
    for r in range(rounds):
        ms, fetch = _timed(trap.build_sick, device, warmup, timed)
        sick.append(ms)
        if sick_fetch is not None:
            sick_fetch.append(fetch)
        fixed.append(_timed(trap.build_fixed, device, warmup, timed)[0])
        if r == 0 and sick[0] > SLOW_STEP_MS:
            break
    return sick, fixed


def verify_trap(trap: Trap, device: str, out_dir: Path, steps: int = 5, warmup: int = 5,
                timed: int = 20, rounds: int = ROUNDS) -> TrapVerdict:
    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.trace import load

    sick_ms = fixed_ms = 0.0
    sick_rounds: list[float] = []
    fixed_rounds: list[float] = []
    fetch_rounds: list[float | None] = []
    sick_fetch_ms = None
    try:
        sick_rounds, fixed_rounds = paired_rounds(trap, device, warmup, timed, rounds,
                                                  sick_fetch=fetch_rounds)
        sick_ms, fixed_ms = statistics.median(sick_rounds), statistics.median(fixed_rounds)
        sick_fetch_ms = rounds_fetch(sick_ms, sick_rounds, fetch_rounds)
        trace = _capture_fresh(trap.build_sick, device, out_dir / trap.id, steps, trap.with_stack)
        report = analyze_loaded(load(trace), unprofiled_step_ms=sick_ms,
                                unprofiled_fetch_ms=sick_fetch_ms)
    except NoGpuActivityError:
        report = None
    except Exception as exc:  # noqa: BLE001 - one broken trap must not stop the gallery
        return TrapVerdict(trap.id, trap.expected_finding, None, None, None, None, 0.0, None, 0.0,
                           "error", (), f"{type(exc).__name__}: {str(exc)[:200]}")
    # a CPU smoke run: both twins ran, there is no GPU time to diagnose
    if report is None or report.host_only:
        return TrapVerdict(trap.id, trap.expected_finding, None, None, None,
                           sick_ms / fixed_ms if fixed_ms else None, sick_ms, fixed_ms, 0.0,
                           "ran-on-cpu", (), sick_rounds_ms=tuple(sick_rounds),
                           fixed_rounds_ms=tuple(fixed_rounds), sick_fetch_ms=sick_fetch_ms)
    _write(out_dir / trap.id, report)
    ids = [f.id for f in report.findings]
    rank = ids.index(trap.expected_finding) + 1 if trap.expected_finding in ids else None
    planted = report.finding(trap.expected_finding)
    predicted = planted.predicted_speedup if planted else None
    measured = sick_ms / fixed_ms if fixed_ms > 0 else None
    verdict = "missed"
    if rank == 1:
        ratio = predicted / measured if predicted and measured else 0.0
        verdict = "pass" if RATIO_BAND[0] <= ratio <= RATIO_BAND[1] else "diagnosed"
    return TrapVerdict(trap.id, trap.expected_finding, ids[0] if ids else None, rank, predicted,
                       measured, sick_ms,
                       fixed_ms, report.step_ms, verdict, _summary(report), report=report,
                       sick_rounds_ms=tuple(round(t, 4) for t in sick_rounds),
                       fixed_rounds_ms=tuple(round(t, 4) for t in fixed_rounds),
                       sick_fetch_ms=None if sick_fetch_ms is None else round(sick_fetch_ms, 4))


def rounds_fetch(sick_ms: float, rounds_ms: list[float],
                 fetch_ms: list[float | None]) -> float | None:
    """The DataLoader's share of ``sick_ms`` (the rounds' median), as a run's is taken
    (capture/timing.py ``fetch_in_step``: the median of one or two rounds is their mean); None where
    a round fetched nothing."""
    from gpudoctor.capture.timing import fetch_in_step

    known = [f for f in fetch_ms if f is not None]
    if not known or len(known) != len(rounds_ms):
        return None
    return fetch_in_step(sick_ms, rounds_ms, known)


def verify_baseline(base: Baseline, device: str, out_dir: Path, steps: int = 5, warmup: int = 5,
                    timed: int = 20) -> TrapVerdict:
    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.trace import load

    step_ms = 0.0
    try:
        step_ms, trace = _time_and_capture(base.build, device, out_dir / base.id, steps,
                                           base.with_stack, warmup, timed)
        report = analyze_loaded(load(trace), unprofiled_step_ms=step_ms)
    except NoGpuActivityError:
        report = None
    except Exception as exc:  # noqa: BLE001 - one broken trap must not stop the gallery
        return TrapVerdict(base.id, None, None, None, None, None, 0.0, None, 0.0, "error", (),
                           f"{type(exc).__name__}: {str(exc)[:200]}")
    if report is None or report.host_only:  # a CPU smoke run
        return TrapVerdict(base.id, None, None, None, None, None, step_ms, None, 0.0,
                           "ran-on-cpu", ())
    _write(out_dir / base.id, report)
    bad = [f for f in report.findings if f.severity in ("major", "critical")]
    return TrapVerdict(base.id, None, report.findings[0].id if report.findings else None, None,
                       None, None, step_ms, None, report.step_ms, "unhealthy" if bad else "healthy",
                       _summary(report))


def _summary(report: Any) -> tuple[tuple[str, str, float], ...]:
    return tuple((f.id, f.severity, round(f.saving_ms, 3)) for f in report.findings[:5])


def _write(folder: Path, report: Any) -> None:
    from gpudoctor.report.json_report import to_json

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(to_json(report) + "\n")


def verify_all(
    names: list[str], device: str, out_dir: Path, steps: int = 5,
    progress: Callable[[str], None] | None = None
) -> list[TrapVerdict]:
    from gpudoctor.lab.registry import BASELINE_IDS, load_baselines, load_trap

    baselines = {b.id: b for b in load_baselines()}
    verdicts = []
    for name in names:
        if progress:
            progress(name)
        if name in BASELINE_IDS:
            verdicts.append(verify_baseline(baselines[name], device, out_dir, steps))
        else:
            verdicts.append(verify_trap(load_trap(name), device, out_dir, steps))
    return verdicts
