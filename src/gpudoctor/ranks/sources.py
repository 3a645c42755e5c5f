"""Where the ranks of a distributed run are: one run directory with ``rank{R}/`` bundles (what
``gpudoctor run`` writes under torchrun), ``trace.rank{R}.json[.gz]`` files side by side (the
layout written before), separate ``<name>-rank{R}-<stamp>/`` directories, or trace files named
one by one."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import msgspec

from gpudoctor.errors import InputError

_RANK_DIR = re.compile(r"rank(\d+)")
_LEGACY_DIR = re.compile(r".*-rank(\d+)-[^/]*")
_RANK_TRACE = re.compile(r"trace\.rank(\d+)\.json(?:\.gz)?")
_ANY_RANK = re.compile(r"rank[._-]?(\d+)")
_TRACE_SUFFIXES = (".json", ".json.gz")


class RankSource(msgspec.Struct, frozen=True):
    """One rank's trace and the env.json that goes with it (None when there is none)."""

    rank: int
    trace: Path
    env: Path | None


def is_rank_set(path: str | Path) -> bool:
    """A directory holding ``rank*/`` bundles or ``trace.rankN.json[.gz]`` files."""
    p = Path(path)
    if not p.is_dir():
        return False
    try:
        return bool(_rank_dirs(p) or _rank_traces(p))
    except OSError:
        return False


def rank_sources(paths: Sequence[str | Path]) -> list[RankSource]:
    """The ranks named by ``paths``, ordered by rank: one run directory, or several trace files /
    rank directories. A path naming no rank number takes its place in the list as its rank."""
    items = [Path(p) for p in paths]
    if not items:
        raise InputError(
            "no trace given; pass a run directory with rank*/ bundles or several trace files")
    if len(items) == 1 and items[0].is_dir() and is_rank_set(items[0]):
        return _of_run_dir(items[0])
    found = [_of_path(p, i) for i, p in enumerate(items)]
    return _checked(found, ", ".join(str(p) for p in items))


def traces_of(paths: Sequence[str | Path]) -> list[Path]:
    """The trace each of several paths names (a trace file, or a directory holding one), before
    anything says whether they are ranks of one job (ranks/job.py)."""
    return [_of_path(Path(p), i).trace for i, p in enumerate(paths)]


def _of_run_dir(run: Path) -> list[RankSource]:
    dirs = _rank_dirs(run)
    if dirs:
        return _checked([_of_dir(d, r) for r, d in dirs], str(run))
    return _checked([RankSource(r, f, _env_beside(f, r)) for r, f in _rank_traces(run)], str(run))


def _rank_dirs(run: Path) -> list[tuple[int, Path]]:
    out = []
    for d in run.iterdir():
        m = _RANK_DIR.fullmatch(d.name) or _LEGACY_DIR.fullmatch(d.name)
        if m and d.is_dir() and _trace_in(d) is not None:
            out.append((int(m.group(1)), d))
    return sorted(out)


def _rank_traces(run: Path) -> list[tuple[int, Path]]:
    return sorted((int(m.group(1)), f) for f in run.iterdir()
                  if (m := _RANK_TRACE.fullmatch(f.name)) and f.is_file())


def _trace_in(d: Path) -> Path | None:
    traces = sorted(f for f in d.iterdir() if f.name.startswith("trace")
                    and f.name.endswith(_TRACE_SUFFIXES))
    gz = [f for f in traces if f.name.endswith(".gz")]
    if len(traces) > 1 and len(gz) == 1:  # trace.json beside its gzipped copy: one trace
        return gz[0]
    return traces[0] if len(traces) == 1 else None


def _of_dir(d: Path, rank: int) -> RankSource:
    trace = _trace_in(d)
    if trace is None:
        raise InputError(
            f"{d} holds no single trace*.json[.gz]; each rank directory needs exactly one trace")
    return RankSource(rank, trace, _env_beside(trace, rank))


def _of_path(p: Path, position: int) -> RankSource:
    if not p.exists():
        raise InputError(f"{p} does not exist; pass trace files or rank directories")
    m = _ANY_RANK.search(p.name)
    rank = int(m.group(1)) if m else position
    if p.is_dir():
        return _of_dir(p, rank)
    return RankSource(rank, p, _env_beside(p, rank))


def _env_beside(trace: Path, rank: int) -> Path | None:
    for name in (f"env.rank{rank}.json", "env.json"):
        candidate = trace.parent / name
        if candidate.is_file():
            return candidate
    return None


def _checked(found: list[RankSource], where: str) -> list[RankSource]:
    ranks = [s.rank for s in found]
    if len(set(ranks)) != len(ranks):
        dup = sorted({r for r in ranks if ranks.count(r) > 1})
        raise InputError(f"{where}: rank {dup[0]} appears twice; pass each rank's trace once")
    if len(found) < 2:
        raise InputError(
            f"{where}: found {len(found)} rank(s); a multi-rank analysis needs at least 2")
    return sorted(found, key=lambda s: s.rank)
