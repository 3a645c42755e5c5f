"""The per-rank table and the one-step timeline of a multi-rank report, as plain data
(``Report.ranks`` and ``Report.distributed``; docs/report-schema.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpudoctor.ranks.aligned import Aligned
from gpudoctor.ranks.comm import CommSplit
from gpudoctor.ranks.slow_collective import SizeClass
from gpudoctor.ranks.stages import Stages
from gpudoctor.ranks.straggler import Straggler, imposed_per_rank


def rows(al: Aligned, split: CommSplit, straggler: Straggler | None) -> tuple[dict[str, Any], ...]:
    imposed, last = imposed_per_rank(al)
    out = []
    for i, s in enumerate(al.summaries):
        out.append({
            "rank": s.rank,
            "source": s.source,
            "gpu": s.gpu,
            "hostname": s.env.get("hostname"),
            "steps": s.steps,
            "step_ms": round(s.step_ms, 4),
            "busy_ms": round(s.busy_ms, 4),
            "idle_ms": round(s.idle_ms, 4),
            "idle": {k: round(v, 4) for k, v in sorted(s.idle_by_cause.items(), key=lambda kv: -kv[1])},
            "comm_ms": round(float(split.comm[i]), 4),
            "comm_exposed_ms": round(float(split.exposed[i]), 4),
            "comm_wait_ms": round(float(split.wait[i]), 4),
            "wait_imposed_ms": round(float(imposed[i]), 4),
            "held_up_per_step": round(float(last[i]), 2),
            "clock_offset_us": round(float(al.offsets[i]) / 1e3, 3),
            **_clock(al, i),
            "straggler": straggler is not None and straggler.index == i,
        })
        if s.host_ms:  # the host's own step by cause: what the straggler's cause is read from
            out[-1]["host"] = {k: round(v, 4) for k, v in sorted(s.host_ms.items(), key=lambda kv: -kv[1])}
        if s.recv_wait_ms:  # a pipeline stage: its time blocked receiving from a neighbour
            out[-1]["recv_wait_ms"] = round(float(np.mean(s.recv_wait_ms)), 4)
    return tuple(out)


def _clock(al: Aligned, i: int) -> dict[str, Any]:
    """How rank i's offset was found (ranks/align.py) and how sure it is, in us."""
    if al.clock is None:
        return {}
    unc, (lo, hi) = al.clock.uncertainty[i], al.clock.bounds[i]
    return {"clock_method": al.clock.methods[i],
            "clock_uncertainty_us": None if unc is None else round(unc / 1e3, 3),
            "clock_bound_us": [None if lo is None else round(lo / 1e3, 3), None if hi is None else round(hi / 1e3, 3)]}


def distributed(al: Aligned, split: CommSplit, straggler: Straggler | None,
                classes: list[SizeClass], busbw_table: str | None = None,
                stages: Stages | None = None) -> dict[str, Any]:
    out = {
        "world_size": len(al.summaries),
        "matched_collectives": len(al.ops),
        "steps": al.steps,
        "straggler_rank": straggler.rank if straggler else None,
        "straggler_cause": straggler.cause if straggler else None,
        "exposed_comm": {
            "exposed_ms": round(split.mean("exposed"), 4),
            "wait_for_slowest_ms": round(split.mean("wait"), 4),
            "transfer_ms": round(split.mean("transfer"), 4),
            "overlap_not_taken_ms": round(split.mean("not_overlapped"), 4),
            "overlap_not_taken_by_cause": {c: round(v, 4) for c, v in split.by_cause().items()},
            "comm_ms": round(split.mean("comm"), 4),
        },
        "collectives": [{"op": c.op, "bytes": c.nbytes, "count_per_step": round(c.count_per_step, 3),
                         "achieved_busbw_GBps": round(c.achieved_busbw_GBps, 2),
                         "predicted_busbw_GBps": round(c.predicted_busbw_GBps, 2)} for c in classes],
        "predicted_from": f"machine profile {busbw_table}" if busbw_table else "plan comm model",
        "timeline": timeline(al),
    }
    if stages is not None:
        slow = stages.slowest
        out["pipeline"] = {"stages": stages.p, "microbatches": stages.microbatches,
                           "stage_ranks": list(stages.ranks), "slowest_rank": stages.ranks[slow],
                           "bubble_ms": round(float(stages.wait_ms[slow]), 4),
                           "expected_share_of_step": round((stages.p - 1) / (stages.microbatches + stages.p - 1), 4)}
    return out


def timeline(al: Aligned) -> dict[str, Any]:
    """One step on every rank, on rank 0's clock, in us from the step's earliest start."""
    picked = [(i, s) for i, s in enumerate(al.summaries) if s.timeline_step >= 0 and s.steps > s.timeline_step]
    if not picked:
        return {}
    k = picked[0][1].timeline_step
    starts = [s.step_start[k] - int(al.offsets[i]) for i, s in picked]
    ends = [s.step_end[k] - int(al.offsets[i]) for i, s in picked]
    t0 = min(starts)
    ranks = []
    for (i, s), st, en in zip(picked, starts, ends):
        off = int(al.offsets[i]) + t0
        ranks.append({"rank": s.rank, "start_us": round((st - t0) / 1e3, 3), "end_us": round((en - t0) / 1e3, 3),
                      "bars": [[round((a - off) / 1e3, 3), round((b - off) / 1e3, 3), kind] for a, b, kind in s.timeline]})
    return {"step": k, "span_us": round(float(np.max(ends) - t0) / 1e3, 3), "ranks": ranks}
