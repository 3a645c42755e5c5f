"""``stage-imbalance``: in a pipeline-parallel job (every rank sends or receives activations
point to point) the slowest stage sets the pace: each micro-batch waits for it, so the other stages
idle the difference. Compared on each rank's own clock (no alignment needed): the compute per
step of each rank (GPU kernels, or a CPU rank's operators). It fires when the slowest stage computes
at least 10% (and 50 us) more than the median. Where the ranks' receive waits were recorded and
read as one pipeline (ranks/stages.py), it is priced as the others' wait: their mean wait in recv
beyond the slowest stage's own (which is the schedule's bubble, ``pipeline-bubble``); else as the
slowest stage's compute above the mean (with balanced stages each would compute the mean)."""

from __future__ import annotations

import numpy as np

from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.ranks.stages import Stages
from gpudoctor.ranks.summary import RankSummary

ID = "stage-imbalance"
MIN_EXCESS = 0.10  # of the median stage's compute
MIN_MS = 0.05


def is_pipeline(summaries: list[RankSummary]) -> bool:
    """Every rank moves activations point to point (send / recv kernels)."""
    return len(summaries) >= 2 and all(any(c.op == "p2p" for c in s.collectives) for s in summaries)


def check(summaries: list[RankSummary], step_ms: float, stages: Stages | None = None) -> Finding | None:
    if not is_pipeline(summaries):
        return None
    ranks = list(stages.ranks) if stages else [s.rank for s in summaries]
    compute = stages.compute_ms if stages else np.array([s.compute_ms for s in summaries])
    slow = int(np.argmax(compute))
    median, mean = float(np.median(compute)), float(compute.mean())
    if compute[slow] - median < max(MIN_MS, MIN_EXCESS * median):
        return None
    saving = float(compute[slow]) - mean
    rank = ranks[slow]
    numbers: dict[str, float | int | str] = {
        "slowest_rank": rank, "slowest_compute_ms": round(float(compute[slow]), 4),
        "median_compute_ms": round(median, 4), "mean_compute_ms": round(mean, 4),
        "compute_ms_by_rank": ", ".join(f"{r}: {c:.2f}" for r, c in zip(ranks, compute))}
    if stages is not None:
        others = np.delete(stages.wait_ms, slow)
        saving = max(float(others.mean() - stages.wait_ms[slow]), 0.0)
        numbers.update(others_wait_for_it_ms=round(saving, 4),
                       recv_wait_ms_by_rank=", ".join(f"{r}: {w:.2f}" for r, w in zip(ranks, stages.wait_ms)))
    return make_finding(
        ID, f"Pipeline stage on rank {rank} computes {compute[slow] / median:.2f}x the median stage",
        step_ms, saving,
        f"Rank {rank}'s stage computes {compute[slow]:.2f} ms per step against a median of {median:.2f} ms; every "
        f"micro-batch waits for it, so the other stages idle the difference"
        + (f" ({saving:.2f} ms per step in recv beyond its own wait)" if stages is not None else "")
        + f". Balanced, each stage would compute {mean:.2f} ms.",
        Evidence(numbers=numbers),
        (Fix("Move layers off the slow stage: set the split points by measured per-layer time, not layer count"),
         Fix("Count the embedding and the output layer + loss: the first and last stages often need fewer "
             "transformer blocks")),
        wrong_fix="More micro-batches: they shrink the bubble, not the slowest stage's time per micro-batch",
    )
