"""A pipeline's measured bubble against its schedule's formula.

The formulas (1F1B (pp-1)/m, interleaved (pp-1)/(v m), ZB-H1 (pp-1)/(3m)) come from one place,
``gpudoctor.core.layout.bubble_fraction``, the one the training planner prices layouts with.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from gpudoctor.core.finding import Finding, Fix, make_hypothesis
from gpudoctor.core.layout import SCHEDULES, bubble_fraction
from gpudoctor.errors import InputError
from gpudoctor.explain.tables import (
    real_number,
    stage_times,
    whole_number,
)

FORMULA = {"1f1b": "(pp-1)/m", "interleaved": "(pp-1)/(m v)", "zb-h1": "(pp-1)/(3m)"}
_ALIASES = {"interleaved-1f1b": "interleaved", "interleaved_1f1b": "interleaved", "zbh1": "zb-h1",
            "zb_h1": "zb-h1"}

# -- pipeline bubble
# ----------------------------------------------------------------------------------------


def pipeline_hypotheses(pp: int, microbatches: int, measured_bubble: float, virtual_stages: int = 1,
                        stage_ms: list[float | None] | None = None, p2p_ms: float | None = None,
                        recompute: Any = None, schedule: Any = None) -> list[Finding]:
    """The measured bubble against its schedule's formula (``core.layout.bubble_fraction``), and
    where it breaks.

    ``measured_bubble``: idle time over compute time, as a fraction (0.41) or a percent (41).
    ``schedule``: 1f1b, interleaved (interleaved-1f1b) or zb-h1; None: interleaved when
    ``virtual_stages`` > 1, else 1f1b. ``stage_ms``: per-stage compute time per micro-batch (forward
    + backward), pp or pp x v entries. ``p2p_ms``: one send/recv between stages. ``recompute``: None
    (unknown), bool, or "full"/"selective"/"none".
    """
    p, m = whole_number(pp, "pp", 2), whole_number(microbatches, "microbatches", 1)
    v = whole_number(virtual_stages, "virtual_stages", 1)
    bubble = real_number(measured_bubble, "measured_bubble")
    bubble = bubble / 100 if 1 < bubble <= 100 else bubble
    if not 0 <= bubble < 1:
        raise InputError(
            f"measured_bubble {measured_bubble!r}: expected a fraction in [0, 1) or a percent")
    c = None if p2p_ms is None else real_number(p2p_ms, "p2p_ms")
    sched = _schedule(schedule, v)
    stages, partial = stage_times(stage_ms, p, v)
    f1, fv, fz = (bubble_fraction(p, m, name, v) for name in ("1f1b", "interleaved", "zb-h1"))
    expected = bubble_fraction(p, m, sched, v)
    excess = bubble - expected
    base: dict[str, Any] = {"pp": p, "microbatches": m, "virtual_stages": v, "schedule": sched,
                            "measured_bubble": round(bubble, 4), "expected_1f1b": round(f1, 4),
                            "expected_interleaved": round(fv, 4), "expected_zb_h1": round(fz, 4),
                            "expected": round(expected, 4), "excess_points": round(100 * excess, 1)}
    if sched == "interleaved" and v > 1:
        which = (f"interleaved 1F1B with v={v}: (pp-1)/(m v) = {p - 1}/{m * v} = {100 * fv:.1f}% "
                 f"(the often-quoted (pp-1)/m = {p - 1}/{m} = {100 * f1:.1f}% is plain 1F1B's: the "
                 "gap is larger than it looks)")
    elif sched == "zb-h1":
        which = (f"ZB-H1: about (pp-1)/(3m) = {p - 1}/{3 * m} = {100 * fz:.1f}% (a third of 1F1B's "
                 f"(pp-1)/m = {100 * f1:.1f}%)")
    else:
        which = f"1F1B: (pp-1)/m = {p - 1}/{m} = {100 * f1:.1f}%"
    head = (f"Measured bubble {100 * bubble:.0f}% against the formula for {which}: "
            f"{100 * excess:.1f} points the formula does not explain. It assumes balanced stages "
            "and free p2p.")
    note = f" Partial data: {partial}." if partial else ""
    short = f"Measured bubble {100 * bubble:.0f}% against {100 * expected:.1f}% expected (+{100 * excess:.1f} points)."
    if excess <= 0.03:
        f = make_hypothesis("pipeline-bubble-ok", "The bubble is what the schedule predicts", 0.6,
                            f"Measured bubble {100 * bubble:.0f}% against the formula for "
                            f"{which}.{note}", base,
                            _pipeline_fixes(p, m, v, sched)[2:], partial=bool(partial))
        return [msgspec.structs.replace(f, severity="info")]
    return sorted(_pipeline_causes(p, m, v, sched, expected, excess, stages, c, recompute, base,
                                   (head, short), note, bool(partial)),
                  key=lambda f: -(f.confidence or 0))


def _schedule(schedule: Any, v: int) -> str:
    """One of core.layout's SCHEDULES; None follows the virtual stages."""
    if schedule is None:
        return "interleaved" if v > 1 else "1f1b"
    key = str(schedule).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in SCHEDULES:
        raise InputError(f"schedule {str(schedule)[:40]!r}: expected one of {', '.join(SCHEDULES)} "
                         "(interleaved-1f1b is interleaved)")
    if key != "interleaved" and v > 1:
        raise InputError(f"schedule {key} with virtual_stages {v}: only the interleaved schedule "
                         "has virtual stages; give schedule interleaved or virtual_stages 1")
    return key


def _pipeline_causes(p: int, m: int, v: int, sched: str, expected: float, excess: float,
                     stages: np.ndarray | None, c: float | None, recompute: Any,
                     base: dict[str, Any], heads: tuple[str, str], note: str,
                     partial: bool) -> list[Finding]:
    head, short = heads
    fixes = _pipeline_fixes(p, m, v, sched)
    wrong = ("Taking the formula at face value (only adding micro-batches until (pp-1)/m looks "
             "small): it assumes balanced stages and zero communication; find where the model "
             "breaks first.")

    def predicted(t_pace: float, t_mean: float, comm: float, name: str, vv: int) -> float:
        # idle / compute when every stage runs at the pace t_pace (the slowest stage) plus 2 v
        # exposed transfers per micro-batch; the schedule lasts (1 + formula) x m micro-batch slots
        # (1F1B: m + (pp-1)/v). Balanced and free p2p: the formula itself.
        return (1 + bubble_fraction(p, m, name, vv)) * (t_pace + 2 * vv * comm) / t_mean - 1

    imb = dict(base)
    if stages is not None:
        t_max, t_mean = float(stages.max()), float(stages.mean())
        slowest = int(stages.argmax())
        pred = predicted(t_max, t_mean, 0.0, sched, v)
        explained = min(max((pred - expected) / excess, 0.0), 1.0)
        conf_imb = 0.1 if t_max < 1.03 * t_mean else 0.2 + 0.7 * explained
        imb.update(slowest_stage=slowest, slowest_stage_ms=round(t_max, 3),
                   mean_stage_ms=round(t_mean, 3), imbalance=round(t_max / t_mean, 3),
                   predicted_bubble_with_imbalance=round(pred, 4),
                   share_of_excess_explained=round(explained, 3))
        why = (f" With the measured stage times the slowest stage (stage {slowest}, {t_max:.1f} ms "
               f"per micro-batch against a mean of {t_mean:.1f}) sets the pace: bubble ~ (1 + "
               f"{FORMULA[sched]}) x t_max / t_mean - 1 = {100 * pred:.1f}%, "
               f"{100 * explained:.0f}% of the excess.")
    else:
        conf_imb, why = 0.7, (" Embedding (vocab-size GEMM) and output/loss (cross-entropy over "
                              "the vocabulary) stages are the usual suspects; give stage_ms to "
                              "quantify it.")
    out = [make_hypothesis(
        "pipeline-imbalance", "Unbalanced pipeline stages inflate the bubble", conf_imb,
        head + " Imbalanced stages: the faster stages wait for the slowest one every micro-batch."
        + why + note, imb, fixes, wrong_fix=wrong, partial=partial,
        check_next=(("Per-stage forward and backward time per micro-batch (first and last stage "
                     "against the middle)"),
                    "Layers per stage, and where embedding and loss sit",
                    ("A timeline of one iteration (nsys / torch profiler) on the first, a middle "
                     "and the last stage")))]
    rc = str(recompute).strip().lower() if recompute is not None else ""
    off = recompute is False or rc in ("none", "off", "false", "no", "0")
    conf_rc = 0.05 if off else 0.35 if recompute is None else 0.45 if stages is None else 0.3
    out.append(make_hypothesis(
        "recompute-imbalance", "Recomputation costs differ between stages", conf_rc,
        short + (" Activation recompute is off, so this is ruled out." if off else
                " Uniform activation checkpointing on stages with different activation weight "
                "(attention-heavy vs MLP-heavy) makes the backward cost differ per stage.") + note,
        dict(base, recompute=recompute),
        (Fix("Per-stage recompute: selective (attention only) where activations are heavy, none on "
             "light stages",
             "--recompute-granularity selective   # Megatron; or recompute fewer layers on the "
             "heaviest stage"),
         *fixes), wrong_fix=wrong, partial=partial,
        check_next=("Backward time per stage with and without recompute",)))
    p2p = dict(base, p2p_ms=c)
    if c is not None and stages is not None:
        t_mean = float(stages.mean())
        pred_c = predicted(t_mean, t_mean, c, sched, v)
        explained_c = min(max((pred_c - expected) / excess, 0.0), 1.0)
        conf_p2p = 0.15 + 0.7 * explained_c
        p2p.update(p2p_share_of_stage=round(2 * v * c / t_mean, 3),
                   predicted_bubble_with_p2p=round(pred_c, 4),
                   share_of_excess_explained=round(explained_c, 3))
        why_c = (f" {2 * v} sends/receives of {c:.2f} ms per micro-batch per stage are "
                 f"{100 * 2 * v * c / t_mean:.0f}% of a {t_mean:.1f} ms stage: bubble ~ "
                 f"{100 * pred_c:.1f}% if not overlapped, {100 * explained_c:.0f}% of the excess.")
    else:
        conf_p2p = 0.35 if c is not None else 0.3
        why_c = " Give p2p_ms and stage_ms to quantify it."
    out.append(make_hypothesis(
        "pipeline-p2p-overhead", "Send/recv between stages is not amortized", conf_p2p,
        short
        + " P2P transfers between stages have a fixed latency; with small micro-batches (short "
        "sequences) each carries less compute to hide it." + why_c + note, p2p,
        (Fix("Overlap p2p with compute",
             "--overlap-p2p-communication --overlap-p2p-communication-warmup-flush"),
         Fix("Larger micro-batches (fewer of them) if memory allows", ""), *fixes[:1]),
        wrong_fix=wrong, partial=partial,
        check_next=("Send/recv time per micro-batch on a timeline, against the stage's compute",)))
    if sched == "zb-h1":  # no virtual stages to tune
        return out
    vs = dict(base)
    if v > 1 and c is not None and stages is not None:
        t_max, t_mean = float(stages.max()), float(stages.mean())
        pred_v, pred_1 = predicted(t_max, t_mean, c, "interleaved", v), predicted(t_max, t_mean,
                                                                                  c, "1f1b", 1)
        conf_v = 0.6 if pred_v > pred_1 else 0.2
        vs.update(predicted_bubble_v=round(pred_v, 4), predicted_bubble_v1=round(pred_1, 4))
        why_v = (f" With the p2p cost, v={v} predicts {100 * pred_v:.1f}% against "
                 f"{100 * pred_1:.1f}% for plain 1F1B"
                 + (": interleaving costs more than it saves." if pred_v > pred_1 else "."))
    else:
        conf_v = 0.25
        why_v = (" Interleaving divides the formula bubble by v but multiplies the p2p transfers "
                 f"by v; with v={v}"
                 + (" it can cost more than it saves." if v > 1
                    else f", interleaving (v=2) would halve the formula to "
                    f"{100 * bubble_fraction(p, m, 'interleaved', 2):.1f}% (Megatron wants m "
                    "divisible by pp)."))
    out.append(make_hypothesis(
        "virtual-stages", "The virtual-stage setting does not suit this configuration", conf_v,
        short + why_v + note, vs, (fixes[1], fixes[0], *fixes[2:]), wrong_fix=wrong,
        partial=partial, check_next=("Measure the bubble at v=1, 2 and 4 for a few iterations",)))
    return out


def _pipeline_fixes(p: int, m: int, v: int, sched: str) -> tuple[Fix, ...]:
    zb = "" if sched == "zb-h1" else f"; ZB-H1 leaves about (pp-1)/(3m) = {100 * bubble_fraction(p, m, 'zb-h1'):.1f}%"
    return (
        Fix("Rebalance the partition: fewer layers on the first (embedding) and last (output + "
            "loss) stages, more in the middle",
            "--decoder-first-pipeline-num-layers <n> --decoder-last-pipeline-num-layers <n>  # "
            "Megatron\n"
            "# or --pipeline-model-parallel-layout \"Et*k|t*k|...|t*k,L\""),
        Fix("Tune the virtual stages (interleaving): v divides the formula bubble but "
            "multiplies p2p",
            "--num-layers-per-virtual-pipeline-stage <k>  # Megatron; torch: "
            "ScheduleInterleaved1F1B"),
        Fix(f"More micro-batches: m={2 * m} gives {FORMULA[sched]} = "
            f"{100 * bubble_fraction(p, 2 * m, sched, v):.1f}% (more activation memory in flight)",
            "--global-batch-size <2x> (same --micro-batch-size)"),
        Fix("A zero-bubble schedule (ZB-H1/H2, ZB-V): split the backward into input and weight "
            f"gradients to fill the bubble{zb}",
            "torch.distributed.pipelining.ScheduleInterleavedZeroBubble  # or ScheduleZBVZeroBubble"),
    )


