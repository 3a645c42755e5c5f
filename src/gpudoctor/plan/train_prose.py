"""The training planner's answer in words: why the winning layout wins (``explain``) and how a
layout is named in the notes (``describe``). Text only: the numbers come from plan/train.py's cost
model and plan/train_search.py's search."""

from __future__ import annotations

from gpudoctor.core.layout import Layout
from gpudoctor.plan.limits import gib
from gpudoctor.plan.train import TIE_TOLERANCE, Plan


def describe(lay: Layout) -> str:
    """One layout in words, as the infeasibility notes name it."""
    return (f"dp {lay.dp} x tp {lay.tp} x pp {lay.pp} x cp {lay.cp}, ZeRO-{lay.zero}, micro-batch "
            f"{lay.microbatch}, checkpointing {lay.checkpointing}")


def explain(plans: list[Plan], gpus: int, gpn: int, cap: int, replicated=None) -> str:
    """A few sentences: the winner's layout, why each axis, and the margin over the runner-up (the
    fastest plan with a different DP x TP x PP x CP x ZeRO). ``replicated``: with a ZeRO winner,
    ``gpudoctor memory``'s estimate of the same layout replicated (DDP), None when the memory
    planner refuses it."""
    w = plans[0]
    s = [f"Best: {w.label}, {w.step_s:.3g} s/step, MFU {w.mfu:.0%}."]
    fastest = min(plans, key=lambda p: p.step_s)
    if fastest is not w:
        s.append(f"It is within {TIE_TOLERANCE:.0%} of the fastest ({fastest.label}, "
                 f"{fastest.step_s:.3g} s), closer than this model can tell apart, and simpler: "
                 "the lowest sharding that fits wins.")
    if gpus == 1:
        s.append("The model fits one GPU: no parallelism, no communication.")
    elif w.tp == w.pp == w.cp == 1 and w.zero == 0:
        s.append(f"The model fits without sharding -> DDP: replicate it on all {gpus:,} GPUs and "
                 "all-reduce gradients, overlapped with backward "
                 f"({w.breakdown['dp_comm_s'] * 1e3:.0f} ms exposed).")
    if w.tp > 1:
        s.append(f"TP={w.tp} inside the node over NVLink ({w.breakdown['tp_comm_s']:.3g} s of "
                 "exposed all-reduces per step); TP never crosses a node: its per-layer "
                 "all-reduces would run at network speed.")
    if w.pp > 1:
        where = "across nodes" if w.tp * w.cp * w.dp >= gpn else "inside the node"
        s.append(f"PP={w.pp} {where}: point-to-point traffic only, at the cost of a "
                 f"{w.breakdown['bubble_s']:.3g} s bubble with {w.microbatches} micro-batches.")
    if w.zero:
        base = replicated
        stage = {1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}[w.zero]
        if base is not None and not base.fits:
            s.append(f"{stage} because the same layout replicated (DDP) needs "
                     f"{gib(base.total_bytes)} of the {gib(cap)} card: shard the states over the "
                     f"{w.dp} DP ranks.")
        else:
            opt = w.breakdown["optimizer_s"]
            s.append(f"{stage} although DDP also fits: it shards the optimizer step "
                     f"({opt * 1e3:.1f} ms instead of {opt * w.dp * 1e3:.1f} ms replicated) for "
                     f"{w.breakdown['zero_comm_s'] * 1e3:.1f} ms of exposed extra traffic.")
    if w.checkpointing != "none":
        s.append(f"{w.checkpointing.capitalize()} checkpointing is needed to fit "
                 f"(+{w.breakdown['recompute_s']:.3g} s of recompute).")
    runner = next((p for p in plans[1:]
                   if (p.dp, p.tp, p.pp, p.cp, p.zero) != (w.dp, w.tp, w.pp, w.cp, w.zero)), None)
    if runner is not None:
        diff = {k: runner.breakdown[k] - w.breakdown.get(k, 0.0) for k in runner.breakdown}
        worst = max(diff, key=diff.get)
        gap = runner.step_s / w.step_s - 1
        if gap >= 0:
            s.append(f"Runner-up: {runner.label}, {gap:.1%} slower; it spends "
                     f"{diff[worst]:+.3g} s on {worst.removesuffix('_s').replace('_', ' ')}.")
        # _rank put the simpler layout first: the difference is inside what the model can resolve
        else:
            s.append(f"Runner-up: {runner.label}, predicted {-gap:.1%} faster, which is within the "
                     f"{TIE_TOLERANCE:.0%} the model cannot resolve, so the simpler layout leads.")
    return " ".join(s)
