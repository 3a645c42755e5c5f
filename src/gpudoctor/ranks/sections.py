"""The multi-rank part of a report as typed, frozen data: ``Report.ranks`` (one ``RankRow`` a rank)
and ``Report.distributed`` (the job's ``Distributed`` facts). ranks/table.py fills them once, the
renderers (report/ranks_section.py) read their attributes, and ``to_dict`` writes the JSON of
docs/report-schema.md key for key, in its order: the only place they become dicts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RankClock:
    """How a rank's clock offset was found (ranks/align.py ``Clock``) and how sure it is, in us."""

    method: str  # ranks/align.py: "reference", "collectives", "p2p", ..., "none"
    uncertainty_us: float | None  # half-width; None where one side of the bound is open
    bound_us: tuple[float | None, float | None]  # the messages' interval; None: an open side


@dataclass(frozen=True)
class RankRow:
    """One rank in the ranks table: its step, GPU time and communication, in ms per step."""

    rank: int
    source: str  # its trace
    gpu: str
    hostname: str | None  # from its env.json; None without one
    steps: int
    step_ms: float
    busy_ms: float
    idle_ms: float
    idle: dict[str, float]  # idle cause -> ms, largest first
    comm_ms: float
    comm_exposed_ms: float  # not hidden by compute
    comm_wait_ms: float  # of the exposed time, waiting for a later rank
    wait_imposed_ms: float  # the others' wait for this rank
    held_up_per_step: float  # collectives per step this rank arrived last at
    clock_offset_us: float  # its clock minus rank 0's
    clock: RankClock | None  # None when the ranks were not aligned
    straggler: bool
    # the host's own step by cause, largest first; empty when unknown
    host: dict[str, float] = field(default_factory=dict)
    recv_wait_ms: float | None = None  # a pipeline stage's wait to receive; None: not a stage

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "rank": self.rank, "source": self.source, "gpu": self.gpu, "hostname": self.hostname,
            "steps": self.steps, "step_ms": self.step_ms, "busy_ms": self.busy_ms,
            "idle_ms": self.idle_ms, "idle": dict(self.idle), "comm_ms": self.comm_ms,
            "comm_exposed_ms": self.comm_exposed_ms, "comm_wait_ms": self.comm_wait_ms,
            "wait_imposed_ms": self.wait_imposed_ms, "held_up_per_step": self.held_up_per_step,
            "clock_offset_us": self.clock_offset_us,
        }
        if self.clock is not None:
            d |= {"clock_method": self.clock.method,
                  "clock_uncertainty_us": self.clock.uncertainty_us,
                  "clock_bound_us": list(self.clock.bound_us)}
        d["straggler"] = self.straggler
        if self.host:
            d["host"] = dict(self.host)
        if self.recv_wait_ms is not None:
            d["recv_wait_ms"] = self.recv_wait_ms
        return d


@dataclass(frozen=True)
class ExposedComm:
    """The communication compute did not hide, split by why (ranks/comm.py), mean ms per step."""

    exposed_ms: float
    wait_for_slowest_ms: float
    transfer_ms: float
    overlap_not_taken_ms: float
    overlap_not_taken_by_cause: dict[str, float]
    comm_ms: float


@dataclass(frozen=True)
class CollectiveClass:
    """One op and size of collective (ranks/slow_collective.py ``SizeClass``) and its prediction."""

    op: str
    bytes: int
    count_per_step: float
    achieved_busbw_GBps: float
    predicted_busbw_GBps: float


@dataclass(frozen=True)
class PipelineFacts:
    """A pipeline found in the ranks' send/recv (ranks/stages.py ``Stages``) and its bubble."""

    stages: int
    microbatches: int
    stage_ranks: tuple[int, ...]
    slowest_rank: int
    bubble_ms: float  # per step, the slowest stage's wait to receive
    expected_share_of_step: float  # the formula's (p - 1) / (m + p - 1)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"stage_ranks": list(self.stage_ranks)}


@dataclass(frozen=True)
class TimelineRank:
    """One rank's row of the timeline: its step and its bars, in us on rank 0's clock."""

    rank: int
    start_us: float
    end_us: float
    bars: tuple[tuple[float, float, str], ...]  # (start, end, "compute" | "comm")

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "start_us": self.start_us, "end_us": self.end_us,
                "bars": [list(bar) for bar in self.bars]}


@dataclass(frozen=True)
class Timeline:
    """One step on every rank, in us from the step's earliest start."""

    step: int
    span_us: float
    ranks: tuple[TimelineRank, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "span_us": self.span_us,
                "ranks": [r.to_dict() for r in self.ranks]}


@dataclass(frozen=True)
class Distributed:
    """The job as a whole: how many ranks, what matched, who straggles, what communication costs."""

    world_size: int
    matched_collectives: int
    steps: int  # compared on every rank
    straggler_rank: int | None  # None: no rank straggles beyond the profiler's noise
    straggler_cause: str | None
    exposed_comm: ExposedComm
    collectives: tuple[CollectiveClass, ...]
    predicted_from: str  # what the collectives' bandwidth is predicted by
    timeline: Timeline | None  # None (``{}`` in the JSON): no rank had a step to draw
    pipeline: PipelineFacts | None = None  # None: no pipeline was found

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "world_size": self.world_size, "matched_collectives": self.matched_collectives,
            "steps": self.steps,
            "straggler_rank": self.straggler_rank, "straggler_cause": self.straggler_cause,
            "exposed_comm": dataclasses.asdict(self.exposed_comm),
            "collectives": [dataclasses.asdict(c) for c in self.collectives],
            "predicted_from": self.predicted_from,
            "timeline": self.timeline.to_dict() if self.timeline is not None else {},
        }
        return d if self.pipeline is None else {**d, "pipeline": self.pipeline.to_dict()}
