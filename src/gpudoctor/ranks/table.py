"""The per-rank table and the one-step timeline of a multi-rank report, built from the aligned
ranks as the typed sections of ranks/sections.py (``Report.ranks`` and ``Report.distributed``)."""

from __future__ import annotations

import numpy as np

from gpudoctor.ranks.aligned import Aligned
from gpudoctor.ranks.comm import CommSplit
from gpudoctor.ranks.sections import (
    CollectiveClass,
    Distributed,
    ExposedComm,
    PipelineFacts,
    RankClock,
    RankRow,
    Timeline,
    TimelineRank,
)
from gpudoctor.ranks.slow_collective import SizeClass
from gpudoctor.ranks.stages import Stages
from gpudoctor.ranks.straggler import Straggler, imposed_per_rank


def _largest_first(ms: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in sorted(ms.items(), key=lambda kv: -kv[1])}


def rows(al: Aligned, split: CommSplit, straggler: Straggler | None) -> tuple[RankRow, ...]:
    imposed, last = imposed_per_rank(al)
    return tuple(RankRow(
        rank=s.rank,
        source=s.source,
        gpu=s.gpu,
        hostname=s.env.get("hostname"),
        steps=s.steps,
        step_ms=round(s.step_ms, 4),
        busy_ms=round(s.busy_ms, 4),
        idle_ms=round(s.idle_ms, 4),
        idle=_largest_first(s.idle_by_cause),
        comm_ms=round(float(split.comm[i]), 4),
        comm_exposed_ms=round(float(split.exposed[i]), 4),
        comm_wait_ms=round(float(split.wait[i]), 4),
        wait_imposed_ms=round(float(imposed[i]), 4),
        held_up_per_step=round(float(last[i]), 2),
        clock_offset_us=round(float(al.offsets[i]) / 1e3, 3),
        clock=_clock(al, i),
        straggler=straggler is not None and straggler.index == i,
        # the host's own step by cause: what the straggler's cause is read from
        host=_largest_first(s.host_ms),
        # a pipeline stage: its time blocked receiving from a neighbour
        recv_wait_ms=round(float(np.mean(s.recv_wait_ms)), 4) if s.recv_wait_ms else None,
    ) for i, s in enumerate(al.summaries))


def _us(ns: float | None) -> float | None:
    return None if ns is None else round(ns / 1e3, 3)


def _clock(al: Aligned, i: int) -> RankClock | None:
    """How rank i's offset was found (ranks/align.py) and how sure it is, in us."""
    if al.clock is None:
        return None
    lo, hi = al.clock.bounds[i]
    return RankClock(al.clock.methods[i], _us(al.clock.uncertainty[i]), (_us(lo), _us(hi)))


def distributed(al: Aligned, split: CommSplit, straggler: Straggler | None,
                classes: list[SizeClass], busbw_table: str | None = None,
                stages: Stages | None = None) -> Distributed:
    exposed = ExposedComm(
        exposed_ms=round(split.mean("exposed"), 4),
        wait_for_slowest_ms=round(split.mean("wait"), 4),
        transfer_ms=round(split.mean("transfer"), 4),
        overlap_not_taken_ms=round(split.mean("not_overlapped"), 4),
        overlap_not_taken_by_cause={c: round(v, 4) for c, v in split.by_cause().items()},
        comm_ms=round(split.mean("comm"), 4),
    )
    collectives = tuple(CollectiveClass(c.op, c.nbytes, round(c.count_per_step, 3),
                                        round(c.achieved_busbw_GBps, 2),
                                        round(c.predicted_busbw_GBps, 2)) for c in classes)
    return Distributed(
        world_size=len(al.summaries),
        matched_collectives=len(al.ops),
        steps=al.steps,
        straggler_rank=straggler.rank if straggler else None,
        straggler_cause=straggler.cause if straggler else None,
        exposed_comm=exposed,
        collectives=collectives,
        predicted_from=f"machine profile {busbw_table}" if busbw_table else "plan comm model",
        timeline=timeline(al),
        pipeline=_pipeline(stages) if stages is not None else None,
    )


def _pipeline(stages: Stages) -> PipelineFacts:
    slow = stages.slowest
    return PipelineFacts(stages.p, stages.microbatches, tuple(stages.ranks), stages.ranks[slow],
                         round(float(stages.wait_ms[slow]), 4),
                         round((stages.p - 1) / (stages.microbatches + stages.p - 1), 4))


def timeline(al: Aligned) -> Timeline | None:
    """One step on every rank, on rank 0's clock, in us from the step's earliest start."""
    picked = [(i, s) for i, s in enumerate(al.summaries)
              if s.timeline_step >= 0 and s.steps > s.timeline_step]
    if not picked:
        return None
    k = picked[0][1].timeline_step
    starts = [s.step_start[k] - int(al.offsets[i]) for i, s in picked]
    ends = [s.step_end[k] - int(al.offsets[i]) for i, s in picked]
    t0 = min(starts)
    ranks = []
    for (i, s), st, en in zip(picked, starts, ends):
        off = int(al.offsets[i]) + t0
        bars = tuple((_us(a - off), _us(b - off), kind) for a, b, kind in s.timeline)
        ranks.append(TimelineRank(s.rank, _us(st - t0), _us(en - t0), bars))
    return Timeline(k, round(float(np.max(ends) - t0) / 1e3, 3), tuple(ranks))
