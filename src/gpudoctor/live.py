"""Capture, then diagnose: ``gpudoctor run`` and ``gpudoctor.profile()``.

Capture (capture/) knows nothing of analysis; this module joins the two: it runs the window,
analyzes the trace with the unprofiled step time, and writes the run bundle.
"""

from __future__ import annotations

import json
import shlex
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import msgspec

from gpudoctor.capture.bundle import (
    capture_facts,
    cut_after,
    environment,
    global_rank,
    median_or_none,
    new_run_dir,
    program_facts,
    rank_suffix,
    unprofiled_step,
    write_json,
)
from gpudoctor.capture.rank_window import DEFAULT_TIMEOUT_S, RankSync, rank_info
from gpudoctor.capture.runner import Outcome, Target, run_program
from gpudoctor.capture.session import CaptureConfig, CaptureResult, CaptureSession
from gpudoctor.core.card import problem_reasons
from gpudoctor.errors import GpuDoctorError, IncompleteTraceError, NoGpuActivityError
from gpudoctor.report.model import Report
from gpudoctor.report.sections import AnnotatedTraceSection, GenerateTiming, UnprofiledSection

if TYPE_CHECKING:
    from gpudoctor.pipeline import Diagnosis

DEFAULT_BASE = Path("gpudoctor-runs")
# The annotated copy is about as big as the trace it copies (the same events gzipped alike, a few
# thousand added). A bundle gets one up to this size of trace file: about 1 GB of JSON (Kineto's
# JSON gzips 10-16x), as much as Perfetto's UI opens in a browser, which holds a trace in about
# 2 GB, several times its file (perfetto.dev/docs/visualization/large-traces); gzipped at ~50 MB of
# JSON a second (benchmarks/BENCHMARKS-loading.md, "Annotated trace"), a copy of that takes ~20 s.
ANNOTATED_COPY_UP_TO = 64 << 20
# ... and while its disk keeps this much free beside it: the program, or the next run, writes there
# too
DISK_KEPT_FREE = 1 << 30


class RunStatus(str, Enum):
    """What a captured window came to; the CLI's exit code and its try-fixes follow from it."""

    DIAGNOSED = "diagnosed"  # a report
    NO_GPU_ACTIVITY = "no-gpu-activity"  # a window, but the program ran no GPU work in it
    NOT_DIAGNOSED = "not-diagnosed"  # no window, or one nothing sound can be said of (the note says why)


@dataclass(frozen=True)
class Diagnosed:
    """A window's diagnosis: its report (None when there is none), a note for the user, and the
    status. Unpacks as ``report, note``."""

    report: Report | None
    note: str
    status: RunStatus

    def __iter__(self) -> Iterator[Any]:
        return iter((self.report, self.note))


@dataclass(frozen=True)
class RunDiagnosis:
    """``run_and_diagnose``'s outcome: the program's, where the bundle went, and the diagnosis."""

    outcome: Outcome
    run_dir: Path
    report: Report | None
    note: str
    status: RunStatus


def diagnose_capture(result: CaptureResult, config: CaptureConfig, run_dir: Path,
                     rank: int | None = None, program: dict[str, Any] | None = None,
                     facts: dict[str, Any] | None = None) -> Diagnosed:
    """Analyze what a session captured and write env.json, report.json, report.html and
    annotated.trace.json.gz (each name carries ``rank`` when given: ``report.rank3.json``,
    ``annotated.trace.rank3.json.gz``); ``program`` (what ran, its git commit:
    bundle.program_facts) and ``facts`` (a rank's place in the job: RankSync.env_facts) go into
    env.json.

    Returns the report (None when there is nothing to diagnose), a note for the user and the status.
    """
    from gpudoctor.pipeline import diagnose_loaded
    from gpudoctor.report.html import render_html
    from gpudoctor.report.json_report import to_json
    from gpudoctor.trace import load

    env = environment()
    env.update(facts or {})
    if program:
        env["program"] = program
    report: Report | None = None
    found: Diagnosis | None = None
    note = ""
    status = RunStatus.NOT_DIAGNOSED
    suffix = rank_suffix(rank)
    unprofiled = unprofiled_step(result)
    if result.trace_path is not None:
        try:
            found = diagnose_loaded(load(result.trace_path), unprofiled_step_ms=unprofiled,
                                    model_state=result.model_state, step_source=result.step_source,
                                    cut_after=cut_after(result.error, result.steps_recorded),
                                    unprofiled_fetch_ms=getattr(result, "unprofiled_fetch", None),
                                    loader=getattr(result, "loader", None),
                                    unprofiled_lead_ms=median_or_none(
                                        getattr(result, "unprofiled_lead_ms", None)),
                                    root_module=getattr(result, "root_module", "") or "")
            report = found.report
        except NoGpuActivityError:
            status = RunStatus.NO_GPU_ACTIVITY
            note = (f"no GPU activity in the window (device: {result.device}): the CPU-only "
                    f"profile is in {result.trace_path}; the doctor needs a CUDA device to "
                    "diagnose GPU time")
        # the window holds nothing sound to report (its message names the file)
        except IncompleteTraceError as exc:
            note = f"the recorded window cannot be diagnosed: {exc}"
    if report is not None:
        report = _with_capture_facts(report, result)
    env["capture"] = capture_facts(result, config, report.step_ms if report else None)
    run_dir.mkdir(parents=True, exist_ok=True)
    if report is not None and found is not None and result.trace_path is not None:
        env["ceilings"] = report.ceilings.to_dict()
        annotated = run_dir / f"annotated.trace{suffix}.json.gz"
        report, why = _with_annotated_trace(report, found, result.trace_path, annotated)
        note = _join(note, why)
        (run_dir / f"report{suffix}.json").write_text(to_json(report) + "\n")
        (run_dir / f"report{suffix}.html").write_text(render_html(report))
    write_json(run_dir / f"env{suffix}.json", env)
    return Diagnosed(report, note, RunStatus.DIAGNOSED if report is not None else status)


def _with_annotated_trace(report: Report, found: Diagnosis, trace: Path,
                          target: Path) -> tuple[Report, str]:
    """Write the trace with the diagnosis drawn on it beside the trace (report/perfetto.py); the
    report then says where each finding lies in it. A trace with no GPU work has nothing to draw.
    Failing costs that file and a note, never the bundle."""
    from gpudoctor.report.perfetto import write_annotated

    if found.analysis is None:
        return report, ""
    skipped = annotated_copy_skipped([trace], target, target.name)
    if skipped:
        return report, skipped
    try:
        annotation = write_annotated(trace, found.analysis, report.findings, target,
                                     option="annotated trace")
    except Exception as exc:  # noqa: BLE001 - the report and env.json must still be written
        return report, f"the annotated trace was not written ({type(exc).__name__}: {exc})"
    entry = AnnotatedTraceSection.from_dict(annotation.entry(target.name))
    return msgspec.structs.replace(report, annotated_trace=entry), ""


def free_bytes(folder: Path) -> int:
    """Bytes free on the disk of ``folder``."""
    return shutil.disk_usage(folder).free


def annotated_copy_skipped(sources: Sequence[Path], target: Path, what: str) -> str:
    """Why an annotated copy of ``sources`` is not written to ``target`` with the bundle (too big a
    trace, too full a disk: ANNOTATED_COPY_UP_TO, DISK_KEPT_FREE), saying how to write it; "" to
    write it."""
    size = sum(p.stat().st_size for p in sources)
    if size > ANNOTATED_COPY_UP_TO:
        copied = "the trace it copies is" if len(sources) == 1 else f"the {len(sources)} traces it copies are"
        why = (f"{copied} {_mb(size)} and the copy would be about as big (a bundle holds one up to "
               f"{_mb(ANNOTATED_COPY_UP_TO)}, about as much as Perfetto's UI opens in a browser)")
    else:
        free = free_bytes(target.parent)
        if size + DISK_KEPT_FREE <= free:
            return ""
        why = (f"its disk has {_mb(free)} free and the copy would take about {_mb(size)} of the "
               f"{_mb(DISK_KEPT_FREE)} kept free")
    run = shlex.quote(str(target.parent))
    return f"{what} was not written: {why}; to write it: gpudoctor analyze {run} --perfetto {shlex.quote(str(target))}"


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MB"


def _with_capture_facts(report: Report, result: CaptureResult) -> Report:
    """What only the live capture knows: what marked the steps, per-token generate() timing, how
    far to trust the unprofiled step, and its notes (thin calibration, a window cut short)."""
    steps = report.steps  # its source: set by analyze_loaded from step_source
    if result.root_module:
        steps = msgspec.structs.replace(steps, root_module=result.root_module)
    if result.generate:
        steps = msgspec.structs.replace(steps, generate=GenerateTiming.from_dict(result.generate))
    warnings = tuple(report.warnings) + tuple(n for n in result.notes if n not in report.warnings)
    unprofiled = (UnprofiledSection.from_dict(result.unprofiled.to_dict())
                  if result.unprofiled is not None
                  else report.unprofiled)
    return msgspec.structs.replace(report, steps=steps, warnings=warnings, unprofiled=unprofiled)


def run_and_diagnose(
    target: Target,
    config: CaptureConfig,
    base: Path = DEFAULT_BASE,
    exit_after: bool = True,
    wait_s: float = 30.0,
    window_s: float = 3.0,
    rank_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> RunDiagnosis:
    """Run, capture, diagnose. In a distributed job (torchrun) every rank records the agreed steps
    into ``RUN/rank<R>/`` and rank 0 returns ``RUN`` with the combined report (finish_ranked); the
    others return their own bundle and report."""
    info = rank_info()
    # before the program can chdir
    program = program_facts(target.path_or_module, target.args, target.is_module)
    if info is not None:
        sync = RankSync(info, base, target.name, config.steps, rank_timeout_s)
        outcome = run_program(target, config, sync.bundle_dir(), exit_after=exit_after,
                              wait_s=wait_s, window_s=window_s, sync=sync)
        run_dir, report, note = finish_ranked(outcome.result, config, sync, program)
        if outcome.result.trace_path is None:
            note = _join(_why_nothing(outcome, config, wait_s), note)
        status = RunStatus.DIAGNOSED if report is not None else RunStatus.NOT_DIAGNOSED
        return RunDiagnosis(outcome, run_dir, report,
                            _with_capture_notes(note, outcome.result), status)
    run_dir = new_run_dir(base, target.name)
    outcome = run_program(target, config, run_dir, exit_after=exit_after, wait_s=wait_s,
                          window_s=window_s)
    result = outcome.result
    if result.trace_path is None:
        return RunDiagnosis(outcome, run_dir, None, _why_nothing(outcome, config, wait_s),
                            RunStatus.NOT_DIAGNOSED)
    found = diagnose_capture(result, config, run_dir, None, program)
    return RunDiagnosis(outcome, run_dir, found.report, _with_capture_notes(found.note, result),
                        found.status)


def _with_capture_notes(note: str, result: CaptureResult) -> str:
    """The user's note, plus the GPU's held-back clocks and a window cut short."""
    throttled = problem_reasons(result.nvml.get("throttle_reasons_seen"))
    if throttled:
        note = _join(note,
                     f"the GPU's clocks were held back during the window ({', '.join(throttled)})")
    if result.error:
        note = _join(note,
                     f"the window ended early ({result.error}): the report covers what was captured")
    if result.internal_error:
        note = _join(note,
                     f"gpudoctor failed while recording ({result.internal_error}) and detached")
    return note


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a and b else a or b


def finish_ranked(result: CaptureResult, config: CaptureConfig, sync: RankSync,
                  program: dict[str, Any] | None = None) -> tuple[Path, Report | None, str]:
    """One rank of a distributed job after its window: write its bundle into ``RUN/rank<R>/``,
    tell rank 0, and on rank 0 wait (bounded) for the other ranks' bundles and write the
    combined report. Returns (RUN and the combined report on rank 0; the bundle and its own
    report elsewhere) and a note. ``gpudoctor run`` and the framework hooks both end here."""
    bundle = sync.bundle_dir()
    report: Report | None = None
    note = ""
    try:
        if result.trace_path is not None:
            report, note = diagnose_capture(result, config, bundle, None, program, sync.env_facts())
    finally:  # a diagnosis that raised still tells rank 0 not to wait
        sync.bundle_done((bundle / "env.json").is_file())
    if sync.info.rank != 0 or sync.window is None or not sync.window.agreed:
        return bundle, report, note
    combined, combined_note = combine_ranks(sync, report)
    return sync.run_dir(), combined, _join(note, combined_note)


def combine_ranks(sync: RankSync, own: Report | None) -> tuple[Report | None, str]:
    """Rank 0: wait for every rank's bundle, then write ``RUN/ranks.json`` and the combined
    ``RUN/report.json`` / ``report.html`` (pipeline.analyze_ranks). Where this build has no
    multi-rank analysis, or it fails, RUN's report is rank 0's own, and a warning says so."""
    from gpudoctor.report.html import render_html
    from gpudoctor.report.json_report import to_json

    state, waited = sync.wait_bundles()
    run = sync.run_dir()
    window = sync.window
    notes = [*(window.notes if window is not None else ()), *waited]  # the ranks left out, and why
    ranks = [{"rank": r, "path": f"rank{r}", "state": state[r]} for r in sorted(state)]
    write_json(run / "ranks.json", {"world_size": sync.info.world_size,
                                    "window": window.facts() if window is not None else None,
                                    "ranks": ranks})
    report, why = _analyze_ranks(run)
    if report is None:
        report = own
        if report is not None:
            notes.append(f"this is rank 0's report, not a combined one ({why}); each rank's "
                         f"own is in {run}/rank<R>/report.json")
    if report is None:
        return None, _join(why, "; ".join(notes))
    added = tuple(n for n in notes if n not in report.warnings)
    report = msgspec.structs.replace(report, warnings=tuple(report.warnings) + added)
    report = _with_rank_annotation(report, run)
    merge_failed = _merge_rank_annotations(report, run)
    if merge_failed:
        report = msgspec.structs.replace(report, warnings=(*report.warnings, merge_failed))
    (run / "report.json").write_text(to_json(report) + "\n")
    (run / "report.html").write_text(render_html(report))
    return report, ""


def _merge_rank_annotations(report: Report, run: Path) -> str:
    """RUN/annotated.trace.json.gz: every rank's annotated trace on rank 0's clock, the straggler
    marked (report/perfetto_merge.py). Failing costs that file and says why, never the report."""
    from gpudoctor.report.perfetto_merge import merge_ranks

    def file_of(rank: int) -> Path:
        return run / f"rank{rank}" / "annotated.trace.json.gz"

    target = run / "annotated.trace.json.gz"
    files = [f for row in report.ranks if (f := file_of(row.rank)).is_file()]
    skipped = annotated_copy_skipped(files, target, "the ranks' merged annotated trace") if len(files) > 1 else ""
    if skipped:
        return skipped
    try:
        merge_ranks(report.ranks, file_of, target, option="the merged annotated trace")
    except Exception as exc:  # noqa: BLE001 - the combined report must still be written
        return f"the ranks' merged annotated trace was not written ({type(exc).__name__}: {exc})"
    return ""


def _with_rank_annotation(report: Report, run: Path) -> Report:
    """RUN's report is one rank's (the straggler's, else the first rank's: ranks/combine.py; rank
    0's own where there is no combined one): it points at that rank's annotated trace, in its
    bundle (``rank<R>/annotated.trace.json.gz``), as that rank's report.json does."""
    rank = next((row.rank for row in report.ranks if row.straggler),
                report.ranks[0].rank if report.ranks else 0)
    entry = report.annotated_trace
    if entry is None:
        try:
            saved = json.loads((run / f"rank{rank}"
                                / "report.json").read_text()).get("annotated_trace")
            entry = AnnotatedTraceSection.from_dict(saved) if saved else None
        # no bundle, or not one this gpudoctor wrote
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            entry = None
    if entry is None or not entry.file:
        return report
    moved = msgspec.structs.replace(entry, file=f"rank{rank}/{Path(entry.file).name}")
    return msgspec.structs.replace(report, annotated_trace=moved)


def _analyze_ranks(run: Path) -> tuple[Report | None, str]:
    """The combined report of a run directory's ranks, or None and why not."""
    try:
        from gpudoctor.pipeline import analyze_ranks  # type: ignore[attr-defined]
    except ImportError:
        return None, "this gpudoctor has no multi-rank analysis (pipeline.analyze_ranks)"
    try:
        return analyze_ranks([run]), ""
    except GpuDoctorError as exc:
        return None, f"the multi-rank analysis failed: {exc}"
    except Exception as exc:  # noqa: BLE001 - every bundle is written by now: a failure here must not lose them
        return None, f"the multi-rank analysis failed ({type(exc).__name__}: {exc})"


def _why_nothing(outcome: Outcome, config: CaptureConfig, wait_s: float) -> str:
    """Why no window was recorded, and what to do about it: one line for the user."""
    result = outcome.result
    seen = result.steps_seen
    if outcome.message:
        return outcome.message
    if result.internal_error:
        return (f"gpudoctor failed while recording ({result.internal_error}) and detached, leaving "
                "the program to run on: nothing was recorded")
    code = outcome.exit_code
    if seen == 0 and code != 0:
        return f"the program stopped (exit code {code}) before its first step: nothing was recorded"
    ran = f"after {result.program_s:.1f} s" if result.program_s > 0 else ""
    # the time window could still have opened, had it run on
    ended_early = result.program_s < wait_s
    mark = "call gpudoctor.step() once per iteration (import gpudoctor)"
    if seen == 0 and result.training_forwards:
        return (f"the program ended with exit code 0 {ran}; it called {result.root_module} "
                f"{result.training_forwards} times with gradients and never stepped a torch.optim "
                "optimizer, so its steps could not be told apart (forwards count as steps after "
                f"{config.patience} such calls): nothing was recorded; {mark}"
                + (f", or lower --wait ({wait_s:g} s)" if ended_early else ""))
    if seen == 0 and ended_early:
        return (f"the program ended with exit code 0 {ran}, before any step and before the "
                f"time window (--wait {wait_s:g} s): nothing was recorded; if it has iterations, "
                f"{mark}, or lower --wait")
    if seen == 0:
        return (f"the program ran {result.program_s:.1f} s (exit code 0) and nothing in it marks "
                "an iteration: no module call, optimizer step, backward(), DataLoader batch, "
                "generate() or CUDA graph replay, so no window could open (a time window, after "
                f"--wait {wait_s:g} s, also opens only at one of those calls): nothing was "
                f"recorded; {mark}")
    source = result.step_source or "steps"
    return (f"the program ran {seen} step{'s' * (seen != 1)} ({source}) and ended with exit code "
            f"{code} before the window, which opens after --skip {config.skip}: nothing was "
            "recorded; lower --skip")


class Doctor:
    """``with gpudoctor.profile(steps=5, skip=3) as doc: ... doc.step()``; then ``doc.report()``."""

    def __init__(self, steps: int = 5, skip: int = 3, stack: bool = False,
                 out: str | Path | None = None, name: str = "profile") -> None:
        self.config = CaptureConfig(steps=steps, skip=skip, stack=stack)
        self.rank = global_rank()
        base = Path(out) if out else DEFAULT_BASE
        # distributed: the ranks agree on the steps and share RUN/ (finish_ranked)
        info = rank_info()
        self.sync = RankSync(info, base, name, steps) if info is not None else None
        self.run_dir = self.sync.bundle_dir() if self.sync is not None else new_run_dir(base, name)
        self.session = CaptureSession(self.config, self.run_dir, sync=self.sync)
        self._report: Report | None = None
        self._note = ""

    def __enter__(self) -> Doctor:  # noqa: PYI034 - Doctor is not meant to be subclassed; no typing_extensions
        self.session.start()
        return self

    def step(self) -> None:
        """Mark the end of one iteration (optimizer steps are counted without it)."""
        self.session.step()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            self.session.fail(f"{type(exc).__name__}: {exc}")
        else:
            self.session.close()
        if self.sync is not None:
            self.run_dir, self._report, self._note = finish_ranked(self.session.result,
                                                                   self.config, self.sync)
        elif self.session.result.trace_path is not None:
            self._report, self._note = diagnose_capture(self.session.result, self.config,
                                                        self.run_dir)

    def report(self) -> Report:
        """The diagnosis of the recorded window."""
        if self._report is None:
            result = self.session.result
            why = self._note or (
                f"no window was recorded: {result.steps_seen} steps seen, "
                f"{self.config.skip + 1 + self.config.steps} needed (skip + 1 warm-up + steps); "
                "call doc.step() once per iteration"
            )
            raise GpuDoctorError(why)
        return self._report

    def _repr_html_(self) -> str:
        return self._report._repr_html_() if self._report is not None else f"<pre>{self._note}</pre>"


def profile(steps: int = 5, skip: int = 3, stack: bool = False,
            out: str | Path | None = None) -> Any:
    """Profile ``steps`` steps of the code inside the ``with`` block, after ``skip`` untouched
    ones."""
    return Doctor(steps=steps, skip=skip, stack=stack, out=out)
