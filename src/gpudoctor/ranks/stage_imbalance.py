"""``stage-imbalance``: in a pipeline-parallel job (every rank sends or receives activations
point to point) the slowest stage sets the pace: each micro-batch waits for it, so the other stages
idle the difference. Compared on each rank's own clock (no alignment needed): the compute per
step of each rank (GPU kernels, or a CPU rank's operators). It fires when the slowest stage computes
at least 10% (and 50 us) more than the median.

Priced by the schedule's model. Where the ranks' send/recv pattern reads as one pipeline
(ranks/stages.py: p stages, m micro-batches per step), stage i's time per micro-batch (forward and
backward) is t_i = its compute per step / m. GPipe and 1F1B run m identical micro-batches through
the p stages in order, a flow shop whose makespan is the sum of the stages' times plus m - 1 times
the slowest's (Huang et al. 2019, GPipe; Narayanan et al. 2021, sec. 2.2):

    step ~ sum(t_i) + (m - 1) max(t_i)          balanced (t_i = t): (m + p - 1) t

Balancing moves work between the stages and keeps the total (sum(t_i) = p mean(t_i)), so the step
becomes (m + p - 1) mean(t_i) and the saving is (m - 1) (max(t_i) - mean(t_i)): nothing with one
micro-batch, where no stage overlaps another. Also given (``extra_work_cost_ms``): what the step
loses to the slowest stage's time above the other stages' median, the saving of removing its extra
work rather than moving it. The model and its constant are checked against a 2-GPU pipeline and its
balanced twin in tests/test_ranks_pipeline.py::test_h200_imbalanced_stage_priced_by_the_schedule
(the run: benchmarks/BENCHMARKS-multi-gpu.md "Evidence moved from the source: ranks"); (m + p - 1)
max(t_i) would put the step above the measured one before any overhead.

The stage times are kernel durations, which the profiler does not stretch (it adds host time per
recorded event), so the saving is not scaled to the unprofiled step as a host-side wait is
(ranks/straggler.py: by unprofiled / profiled step, 5.13 / 9.52 on that run, which would have put
the twin's 2.14 ms at 1.16); its severity is judged against the unprofiled step
(``priced_unprofiled``). The same holds, less exactly, for a CPU rank's operators, which include the
profiler's ~3 us per event recorded inside them. The saving is capped at the others' measured wait
in recv beyond the slowest stage's own (its bubble, ``pipeline-bubble``): when they did not wait for
it, moving work off it saves nothing. Where no pipeline pattern is read (m unknown), it is priced as
the slowest stage's compute above the mean, m / (m - 1) times the model's saving."""

from __future__ import annotations

import msgspec
import numpy as np

from gpudoctor.core.arrays import median
from gpudoctor.core.finding import (
    MAX_SAVING_SHARE,
    Evidence,
    Finding,
    Fix,
    make_finding,
    severity_for,
    speedup,
)
from gpudoctor.ranks.stages import Stages
from gpudoctor.ranks.summary import RankSummary

ID = "stage-imbalance"
TITLE = "Pipeline stages of unequal compute: the slowest sets the pace"  # the rule's line in `gpudoctor rules`
MIN_EXCESS = 0.10  # of the median stage's compute
MIN_MS = 0.05


def is_pipeline(summaries: list[RankSummary]) -> bool:
    """Every rank moves activations point to point (send / recv kernels)."""
    return len(summaries) >= 2 and all(any(c.op == "p2p" for c in s.collectives) for s in summaries)


def pipeline_step_ms(per_mb: np.ndarray, m: int) -> float:
    """The schedule's step (GPipe or 1F1B, m micro-batches) for stage times ``per_mb`` [P] per
    micro-batch: sum(t_i) + (m - 1) max(t_i)."""
    return float(per_mb.sum() + (m - 1) * per_mb.max())


def check(summaries: list[RankSummary], step_ms: float,
          stages: Stages | None = None) -> Finding | None:
    if not is_pipeline(summaries):
        return None
    ranks = list(stages.ranks) if stages else [s.rank for s in summaries]
    compute = stages.compute_ms if stages else np.array([s.compute_ms for s in summaries])
    slow = int(np.argmax(compute))
    typical, mean = float(median(compute)), float(compute.mean())
    if compute[slow] - typical < max(MIN_MS, MIN_EXCESS * typical):
        return None
    saving = float(compute[slow]) - mean
    rank = ranks[slow]
    numbers: dict[str, float | int | str] = {
        "slowest_rank": rank, "slowest_compute_ms": round(float(compute[slow]), 4),
        "median_compute_ms": round(typical, 4), "mean_compute_ms": round(mean, 4),
        "compute_ms_by_rank": ", ".join(f"{r}: {c:.2f}" for r, c in zip(ranks, compute))}
    how = "the slowest stage's compute above the mean (the micro-batches per step are unknown)"
    if stages is not None:
        saving, model = _schedule_saving(stages, slow)
        numbers.update(model)
        how = (f"by the schedule, {stages.p} stages of {stages.microbatches} micro-batches: the "
               f"step is sum(t) + (m-1) max(t) = {model['model_step_ms']:.2f} ms of stage time, "
               f"balanced (m+p-1) mean(t) = {model['balanced_step_ms']:.2f} ms")
    return make_finding(
        ID,
        f"Pipeline stage on rank {rank} computes {compute[slow] / typical:.2f}x the median stage",
        step_ms, saving,
        f"Rank {rank}'s stage computes {compute[slow]:.2f} ms per step against a median of "
        f"{typical:.2f} ms; every micro-batch waits for it, so the other stages idle the "
        f"difference. Balanced, each stage would compute {mean:.2f} ms; the saving, {saving:.2f} "
        f"ms per step, is priced {how}.",
        Evidence(numbers=numbers),
        (Fix(
            "Move layers off the slow stage: set the split points by measured per-layer time, not "
            "layer count"),
         Fix("Count the embedding and the output layer + loss: the first and last stages often "
             "need fewer transformer blocks")),
        wrong_fix="More micro-batches: they shrink the bubble, not the slowest stage's time per "
                  "micro-batch",
    )


def _schedule_saving(st: Stages, slow: int) -> tuple[float, dict[str, float | int | str]]:
    """The saving of balancing the stages by the schedule's model, capped at the others' measured
    wait for the slowest stage, and the numbers behind it."""
    m = st.microbatches
    per_mb = st.compute_ms / m  # [P] ms per micro-batch, forward and backward
    now, balanced = pipeline_step_ms(per_mb, m), (m + st.p - 1) * float(per_mb.mean())
    at_median = per_mb.copy()
    at_median[slow] = float(median(np.delete(per_mb, slow)))
    waited = max(float(np.delete(st.wait_ms, slow).mean() - st.wait_ms[slow]), 0.0)
    saving = min(now - balanced, waited)
    return saving, {
        "stages": st.p, "microbatches": m,
        "ms_per_microbatch_by_rank": ", ".join(f"{r}: {t:.3f}" for r, t in zip(st.ranks, per_mb)),
        "model_step_ms": round(now, 4), "balanced_step_ms": round(balanced, 4),
        "balance_saving_ms": round(now - balanced, 4),
        "extra_work_cost_ms": round(now - pipeline_step_ms(at_median, m), 4),
        "others_wait_for_it_ms": round(waited, 4),
        "recv_wait_ms_by_rank": ", ".join(f"{r}: {w:.2f}" for r, w in zip(st.ranks, st.wait_ms)),
    }


def priced_unprofiled(finding: Finding, unprofiled_step_ms: float | None) -> Finding:
    """A stage-imbalance finding judged against the unprofiled step: its saving, kernel time, stays
    (capped at MAX_SAVING_SHARE of that step); its speedup and severity move. Any other finding
    unchanged."""
    u = unprofiled_step_ms
    if finding.id != ID or not u:
        return finding
    saving = min(finding.saving_ms, MAX_SAVING_SHARE * u)
    return msgspec.structs.replace(
        finding, saving_ms=saving, predicted_speedup=speedup(u, saving),
        severity=severity_for(saving, u, finding.severity_floor, finding.major_share))
