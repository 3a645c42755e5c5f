"""``pipeline-bubble``: a pipeline's stages idle while the schedule fills and drains. With p stages
and m micro-batches GPipe and 1F1B both leave each stage (p-1)(t_f + t_b) idle per step, (p-1)/m of
its compute (``core.layout.bubble_fraction``), (p-1)/(m+p-1) of the step. Measured as the slowest
stage's wait in recv per step (ranks/stages.py): the other stages also wait for the slowest one,
which ``stage-imbalance`` prices. The saving is what the formula takes off that measured bubble
with twice the micro-batches or an interleaved schedule of 2 virtual stages: half, for both."""

from __future__ import annotations

from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.core.layout import bubble_fraction
from gpudoctor.ranks.stages import Stages

ID = "pipeline-bubble"
# the rule's line in `gpudoctor rules`
TITLE = "Pipeline stages idle while the schedule fills and drains"
MIN_MS = 0.05
MIN_SHARE = 0.05  # of the step: below this the bubble is within the schedule's noise


def check(st: Stages | None, step_ms: float) -> Finding | None:
    if st is None:
        return None
    slow, p, m = st.slowest, st.p, st.microbatches
    bubble = float(st.wait_ms[slow])
    if bubble < max(MIN_MS, MIN_SHARE * step_ms):
        return None
    now = bubble_fraction(p, m, "1f1b")
    more_mb = bubble * (1 - bubble_fraction(p, 2 * m, "1f1b") / now)
    interleaved = bubble * (1 - bubble_fraction(p, m, "interleaved", 2) / now)
    share, expected = bubble / float(st.step_ms[slow]), (p - 1) / (m + p - 1)
    rank = st.ranks[slow]
    numbers = {
        "stages": p, "microbatches": m, "bubble_ms_per_step": round(bubble, 4),
        "bubble_share_of_step": round(share, 4), "expected_share_of_step": round(expected, 4),
        "expected_bubble_ms": round(now * float(st.compute_ms[slow]), 4), "measured_on_rank": rank,
        "saving_2x_microbatches_ms": round(more_mb, 4),
        "saving_interleaved_v2_ms": round(interleaved, 4),
        "recv_wait_ms_by_rank": ", ".join(f"{r}: {w:.2f}" for r, w in zip(st.ranks, st.wait_ms)),
        "bubble_ms_by_step": ", ".join(f"{w:.2f}" for w in st.wait_by_step[slow])
        if st.wait_by_step else "",
    }
    return make_finding(
        ID,
        f"Pipeline bubble: each stage idles {bubble:.2f} ms per step ({100 * share:.0f}% of "
            "the step) while the schedule fills and drains",
        step_ms, max(more_mb, interleaved),
        f"{p} stages, {m} micro-batches per step: the schedule leaves (p-1)/(m+p-1) = "
        f"{100 * expected:.0f}% of the step idle; rank {rank}, the slowest stage, waits "
        f"{bubble:.2f} ms per step in recv ({100 * share:.0f}%); the formula, (p-1)/m of its "
        f"{st.compute_ms[slow]:.2f} ms of compute, gives {now * st.compute_ms[slow]:.2f} ms. Twice "
        "the micro-batches or 2 interleaved virtual stages halve it.",
        Evidence(numbers=numbers),
        (Fix(f"Split the batch into more micro-batches: {2 * m} instead of {m} halves the bubble "
             "(smaller micro-batches cost kernel efficiency; keep each stage's GEMMs large)",
             f"ScheduleGPipe(stage, n_microbatches={2 * m})  # or Schedule1F1B"),
         Fix("Interleave the stages (several model chunks per rank): the bubble shrinks by the "
             "chunks per rank, at the cost of that many more send/recv",
             "ScheduleInterleaved1F1B(stages, n_microbatches=...)  # torch.distributed.pipelining"),
         Fix("A zero-bubble schedule splits the backward into input and weight gradients to fill "
             "the drain",
             "ScheduleInterleavedZeroBubble(stages, n_microbatches=...)")),
        wrong_fix="Fewer pipeline stages with the same micro-batches only if the model still fits: "
                  "the bubble is (p-1)/m, but each stage's memory grows by p",
    )
