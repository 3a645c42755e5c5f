"""Read one side of a diff: a trace file, a run directory, or a directory of rank traces.

A run directory gives the trace, its ``env.json`` (the unprofiled step samples, the GPU, the
program) and a report that is computed again here, with the same unprofiled step time ``gpudoctor
run`` used, so that both sides are priced by the same version of the doctor. A directory of rank
traces (``trace.rank0.json.gz``, ``trace.rank1.json.gz``...) is compared on rank 0, and the diff
says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudoctor.capture.bundle import env_file_of, facts_of, read_env
from gpudoctor.diff.match import Group, groups
from gpudoctor.diff.samples import unprofiled_samples, usable
from gpudoctor.errors import InputError
from gpudoctor.report.model import Report

_RANK = re.compile(r"trace\.rank(\d+)\.json(?:\.gz)?$")
ACCEPTED = "a torch.profiler trace (.json / .json.gz), a gpudoctor run directory, or a directory of rank traces"


@dataclass(frozen=True)
class Side:
    """Everything the comparison needs from one input; built by ``load_side``."""

    label: str  # "BEFORE" or "AFTER"
    path: str  # as given
    trace_path: str
    kind: str  # "trace", "run" or "ranks"
    report: Report
    groups: tuple[Group, ...]
    unprofiled: tuple[float, ...]  # env.json capture.unprofiled_step_ms_samples (ms)
    env: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def profiled(self) -> tuple[float, ...]:
        """The profiled per-step times of the trace (ms)."""
        return usable(self.report.steps.per_step_ms)

    @property
    def gpu(self) -> str:
        return str(self.report.gpu.name or (self.env.get("gpu") or {}).get("name") or "")


def rank_traces(folder: Path) -> list[tuple[int, Path]]:
    """The ``trace.rankN.json[.gz]`` files of a folder, by rank."""
    found = []
    for p in folder.iterdir():
        m = _RANK.fullmatch(p.name)
        if m and p.is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def resolve(path: Path, label: str) -> tuple[Path, str, tuple[str, ...]]:
    """(trace file, kind, notes) for one input; an InputError naming the side when there is none."""
    from gpudoctor.trace.load import resolve_trace_path

    if not path.exists():
        raise InputError(f"{label} {path} does not exist; give {ACCEPTED}")
    if path.is_dir():
        ranks = rank_traces(path)
        if len(ranks) > 1:
            rank, trace = ranks[0]
            return trace, "ranks", (
                f"{label} holds {len(ranks)} rank traces; rank {rank} ({trace.name}) is compared",)
        if not ranks and not _has_trace(path) and any((path / n).is_file()
                                                      for n in ("env.json", "report.json")):
            raise InputError(f"{label} {path} is a run directory without its trace "
                             "(trace.json.gz): the diff needs the trace's steps and kernels; copy "
                             "the trace back, or give another run directory")
    try:
        trace = resolve_trace_path(path)
    except InputError as exc:
        raise InputError(f"{label}: {exc}") from None
    kind = "run" if env_file_of(trace) is not None else "trace"
    return trace, kind, ()


def _has_trace(folder: Path) -> bool:
    return any(p.name.startswith("trace.") and p.name.endswith((".json", ".json.gz"))
               for p in folder.iterdir())


def load_side(path: str | Path, label: str) -> Side:
    """Read and analyze one input of ``gpudoctor diff``."""
    from gpudoctor.analysis.steps import segment, whole_steps, without_outlier_edges
    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.trace import load

    trace_path, kind, notes = resolve(Path(path), label)
    try:
        trace = load(trace_path)
        env = read_env(trace_path)  # parsed once: the facts analyze needs and the step samples
        facts = facts_of(env)
        report = analyze_loaded(trace, unprofiled_step_ms=facts.unprofiled_step_ms,
                                model_state=facts.model_state, step_source=facts.step_source,
                                cut_after=facts.cut_after)
    except InputError as exc:
        raise InputError(f"{label}: {exc}") from None
    found: list[Group] = []
    if len(trace.device):
        # the steps as analyze counts them
        steps, _ = without_outlier_edges(whole_steps(segment(trace), facts.cut_after), trace,
                                         facts.unprofiled_step_ms)
        if len(steps):
            found = groups(trace, int(steps.start[0]), int(steps.end[-1]), len(steps))
    return Side(label, str(path), str(trace_path), kind, report, tuple(found),
                unprofiled_samples(env), env, notes)
