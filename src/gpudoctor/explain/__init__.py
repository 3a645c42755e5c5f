"""Diagnose from the artifacts engineers already have: Nsight Compute exports, nvidia-smi output,
timing tables and scenario files (the common cases of slow training). Each file is recognised by its
content, turned into ranked hypotheses (``Finding`` with a confidence, what to check next, ordered
fixes and the fix to avoid), and all of them are ranked together."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpudoctor.core.finding import Finding
from gpudoctor.errors import InputError

SCHEMA = "gpudoctor.explain/1"
HEALTHY_IDS = ("gpu-healthy", "kernel-efficient", "step-time-steady", "collective-scaling-ok",
               "pipeline-bubble-ok", "mig-enabled")
# the artifact lacked what every check needs: neither a problem nor health
UNCHECKED_IDS = ("gpu-unchecked",)


@dataclass(frozen=True)
class Source:
    path: str
    kind: str
    detail: str = ""  # e.g. "5 kernels", "8 GPUs"
    partial: str = ""  # what was missing, when conclusions are partial


@dataclass(frozen=True)
class Explanation:
    sources: tuple[Source, ...]
    hypotheses: tuple[tuple[str, Finding], ...]  # (source path, hypothesis), ranked

    def to_dict(self) -> dict:
        items = []
        for path, h in self.hypotheses:
            d = h.to_dict()
            d["source"] = path
            if h.evidence.kernels:
                d["kernel"] = h.subject
            items.append(d)
        return {"schema": SCHEMA,
                "sources": [{"path": s.path, "kind": s.kind, "detail": s.detail,
                             "partial": s.partial or None}
                            for s in self.sources],
                "hypotheses": items}


def explain_paths(paths: list[str | os.PathLike[str]]) -> Explanation:
    if not paths:
        raise InputError("give at least one file to explain")
    sources: list[Source] = []
    found: list[tuple[str, Finding]] = []
    for p in paths:
        try:
            source, hyps = explain_file(Path(p))
        # with several files, say which one (the parsers' messages name no path)
        except InputError as exc:
            if len(paths) > 1 and str(p) not in str(exc):
                raise type(exc)(f"{p}: {exc}") from None
            raise
        sources.append(source)
        found.extend((str(p), h) for h in hyps)
    return Explanation(tuple(sources), tuple(sorted(found, key=lambda item: _rank_key(item[1]))))


def _rank_key(h: Finding) -> tuple[float, float]:
    """Confidence weighted by the share of time at stake (when known), within tiers."""
    conf = h.confidence or 0.0
    # the share of the time at stake is saving / step = 1 - 1 / predicted_speedup
    share = 1 - 1 / h.predicted_speedup if h.saving_ms > 0 and h.predicted_speedup > 1 else None
    weight = conf * (0.5 + 0.5 * share) if share is not None else conf
    # strong problems, then health, then weak (secondary) problems
    tier = 1.0 if h.id in HEALTHY_IDS else (0.0 if conf >= 0.5 else 2.0)
    return (tier, -weight)


def explain_file(path: Path) -> tuple[Source, list[Finding]]:
    from gpudoctor.explain.detect import kind_of, read_text

    if path.suffix == ".ncu-rep":
        from gpudoctor.explain.ncu import import_report

        text, kind = import_report(path), "ncu-csv"
    else:
        text = read_text(path)
        kind = kind_of(path, text)
    return _HANDLERS[kind](path, text)


def _ncu(path: Path, text: str) -> tuple[Source, list[Finding]]:
    from gpudoctor.explain.kernel import kernel_hypotheses
    from gpudoctor.explain.ncu import parse_ncu_csv

    kernels = parse_ncu_csv(text, str(path))
    total = sum(k.duration_us or 0.0 for k in kernels) or None
    hyps: list[Finding] = []
    for k in kernels:
        hyps.extend(kernel_hypotheses(k, total))
    missing = sorted({m for k in kernels for m in k.missing})
    return Source(str(path), "ncu-csv", f"{len(kernels)} kernel(s)",
                  f"missing: {', '.join(missing)}" if missing else ""), hyps


def _smi(path: Path, text: str) -> tuple[Source, list[Finding]]:
    from gpudoctor.explain import smi

    records, notes = smi.read(text)
    by_missing: dict[tuple[str, ...], list[str]] = {}
    for r in records:
        if r.missing:
            by_missing.setdefault(r.missing, []).append(str(r.index))
    notes += [f"not checked on GPU {', '.join(gpus)}: {', '.join(missing)}"
              for missing, gpus in by_missing.items()]
    return (Source(str(path), "nvidia-smi", f"{len(records)} GPU(s)", "; ".join(notes)),
            smi.card_hypotheses(records))


def _ranks(path: Path, text: str) -> tuple[Source, list[Finding]]:
    from gpudoctor.explain import rank_times
    from gpudoctor.explain.tables import cut_last_line

    text, cut = cut_last_line(text)
    with _saying(cut):
        table = rank_times.rank_table(text, notes=(cut,) if cut else ())
        found = rank_times.rank_findings(table)
    return Source(str(path), "rank-timings",
                  f"{table.ranks.size} rank(s) x {table.steps.size} step(s)", table.partial), found


def _collectives(path: Path, text: str) -> tuple[Source, list[Finding]]:
    from gpudoctor.explain import timings
    from gpudoctor.explain.tables import cut_last_line

    text, cut = cut_last_line(text)
    with _saying(cut):
        found = timings.collective_hypotheses(text, notes=(cut,) if cut else ())
    return Source(str(path), "collectives", "", cut), found


@contextmanager
def _saying(note: str) -> Iterator[None]:
    """An InputError raised while reading a cut table also says what was cut (it may be the
    cause)."""
    try:
        yield
    except InputError as exc:
        if not note:
            raise
        raise type(exc)(f"{exc} (note: {note})") from None


def _scenario(path: Path, text: str) -> tuple[Source, list[Finding]]:
    from gpudoctor.explain.scenarios import load_scenario, scenario_hypotheses

    data = load_scenario(path, text)
    return Source(str(path), "scenario",
                  str(data.get("scenario"))), scenario_hypotheses(data, str(path))


_HANDLERS = {"ncu-csv": _ncu, "smi-q": _smi, "smi-csv": _smi, "rank-timings": _ranks,
             "collectives": _collectives, "scenario": _scenario}

