"""The multi-rank analysis in one call: summaries in, findings and the per-rank table out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.core.finding import Finding
from gpudoctor.errors import InputError
from gpudoctor.ranks import (
    exposed_comm,
    pipeline_bubble,
    slow_collective,
    stage_imbalance,
    straggler,
)
from gpudoctor.ranks.aligned import align
from gpudoctor.ranks.comm import split
from gpudoctor.ranks.sections import Distributed, RankRow
from gpudoctor.ranks.stages import read_stages
from gpudoctor.ranks.summary import RankSummary
from gpudoctor.ranks.table import distributed, rows

# the multi-rank finding ids (one module each), for listings and tests
RULE_IDS = (straggler.ID, exposed_comm.ID, slow_collective.ID, stage_imbalance.ID,
            pipeline_bubble.ID)
RULE_TITLES = {m.ID: m.TITLE for m in (straggler, exposed_comm, slow_collective, stage_imbalance,
                                       pipeline_bubble)}


@dataclass(frozen=True)
class RanksResult:
    findings: tuple[Finding, ...]
    rows: tuple[RankRow, ...]
    distributed: Distributed
    chosen: int  # index of the rank whose single-GPU report carries the combined one
    source: str
    warnings: tuple[str, ...] = ()


def combine(summaries: Sequence[RankSummary], busbw_table: str | None = None) -> RanksResult:
    """``busbw_table``: a ``gpudoctor bench`` profile with NCCL curves for this GPU, if one
    exists."""
    if len(summaries) < 2:
        raise InputError(f"{len(summaries)} rank(s) given; a multi-rank analysis needs at least 2")
    al = align(summaries)
    cs = split(al)
    st = straggler.find_straggler(al)
    pp = read_stages(summaries)
    found = [straggler.check(al), exposed_comm.check(al, cs, st is not None),
             slow_collective.check(al, cs, busbw_table),
             stage_imbalance.check(list(summaries), al.step_ms, pp),
             pipeline_bubble.check(pp, al.step_ms)]
    warnings = []
    # those inside the steps: a collective launched before the window (the previous step's, still
    # running when one rank's profiler started) is expected on some ranks and matched on none
    # (send/recv are left out: a pipeline's stages send and receive different counts by design)
    counts = {sum(c.step >= 0 and c.op != "p2p" for c in s.collectives) for s in summaries}
    if len(counts) > 1 or len(al.ops) < min(counts):
        warnings.append(f"the ranks' collectives do not all match ({sorted(counts)} per rank, "
                        f"{len(al.ops)} matched): were the same steps profiled on every rank?")
    if any(c.op == "p2p" for s in summaries for c in s.collectives):
        warnings.append("send/recv (pipeline-parallel) traffic bounds the clock alignment (ranks[] "
                        "clock_method) but is left out of the straggler and the exposed "
                        "communication; the stages' compute and recv waits are compared on each "
                        "rank's own clock"
                        + (f" ({pp.p} stages, {pp.microbatches} micro-batches per step)" if pp else
                        ": no pipeline pattern (every rank sending, m receives per step on the "
                        "first and last rank, 2m between) was found, so no bubble is priced"))
    if not len(al.ops):
        placed = al.clock is not None and all(m != "none" for m in al.clock.methods)
        warnings.append("no collective matched across the ranks: " + (
            "clocks are aligned on send/recv only and no skew is computed" if placed else
            "clocks are not aligned and no skew is computed"))
    if al.clock is not None:
        warnings.extend(al.clock.notes)
    # a lateness within the profiler's noise names no one
    real = st if st is not None and st.real else None
    chosen = real.index if real else 0
    warnings.insert(0,
                    f"the single-GPU sections (breakdown, idle causes, roofline, kernels) are rank "
                       f"{summaries[chosen].rank}'s, "
                       f"{'the straggler' if real else 'no rank straggles'}; the ranks table "
                       "compares them all")
    windows = {(w["first_step"], w["steps"]) for s in summaries if (w := s.env.get("window"))}
    if len(windows) > 1:
        warnings.append("the ranks' env.json name different profiled windows (first step, steps: "
                        f"{sorted(windows)}); their steps are compared by position")
    steps = {s.steps for s in summaries}
    if len(steps) > 1:
        warnings.append(f"the ranks recorded different numbers of steps ({sorted(steps)}); "
                        f"the first {al.steps} are compared")
    return RanksResult(
        findings=tuple(f for f in found if f is not None),
        rows=rows(al, cs, real),
        distributed=distributed(al, cs, real, slow_collective.size_classes(al, busbw_table),
                                busbw_table, pp),
        chosen=chosen,
        source=f"{len(summaries)} ranks: " + ", ".join(s.source for s in summaries[:3]) + (
            ", ..." if len(summaries) > 3 else ""),
        warnings=tuple(warnings),
    )
