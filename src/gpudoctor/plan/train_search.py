"""The training planner's search: every DP x TP x PP x CP x ZeRO x micro-batch x checkpointing
layout that fits the card, priced by plan/train.py's cost model (``predict_step``) and ranked.

``plan_training(spec, gpus=..., gpu=..., global_batch=..., seq=...)`` enumerates the layouts
(TP inside a node and dividing the heads, PP dividing the layers, CP from 8192 tokens), keeps those
whose ``gpudoctor memory`` estimate fits, prices and ranks them (``TIE_TOLERANCE``: the simplest of
the near-fastest leads), and says why the winner wins (plan/train_prose.py) or why nothing fits.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from gpudoctor.core.layout import CHECKPOINTING, Layout, bubble_fraction
from gpudoctor.core.spec import ModelSpec
from gpudoctor.errors import InputError
from gpudoctor.memory.options import (
    TrainOptions,
    bytes_per_param,
    check_common_train,
    master_weights_note,
    precision_summary,
)
from gpudoctor.plan.calibration import Calibration, load_calibration
from gpudoctor.plan.collective_cost import DEFAULT_FABRIC
from gpudoctor.plan.comm import COMM_MODEL, Net, make_net
from gpudoctor.plan.limits import check_gpus, gib, half_precision, plural
from gpudoctor.plan.pins import Pins, check_pins, whole
from gpudoctor.plan.traffic import implementation
from gpudoctor.plan.train import (
    ASSUMPTIONS,
    COMPUTE_ASSUMED,
    TIE_TOLERANCE,
    Plan,
    TrainPlanResult,
    calibrated_assumptions,
    param_counts,
    predict_step,
)
from gpudoctor.plan.train_prose import describe, explain

MICROBATCHES = (1, 2, 4, 8)
# Under ZeRO-3 the weights, gradients and Adam states are spread over every GPU; a layout needs at
# least this share of the card left for them (the rest for activations, buffers and the allocator's
# slack) before more GPUs are what is missing.
STATES_SHARE = 0.8


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _check_inputs(gpus: int, global_batch: int, seq: int, gpus_per_node: int, top: int) -> None:
    check_gpus(gpus)
    check_gpus(gpus_per_node, "gpus-per-node")
    for name, v in (("global-batch", global_batch), ("seq", seq), ("top", top)):
        whole(name, v)
    if gpus > gpus_per_node and gpus % gpus_per_node:
        lo = gpus // gpus_per_node * gpus_per_node
        raise InputError(f"--gpus {gpus} is not a whole number of {gpus_per_node}-GPU nodes "
                         f"(--gpus-per-node {gpus_per_node}); use {lo} or {lo + gpus_per_node}")


def _shapes(spec: ModelSpec, gpus: int, seq: int, gpus_per_node: int,
            pinned_cp: int | None = None) -> list[tuple[int, int, int, int]]:
    """(dp, tp, pp, cp) with TP inside a node (dividing its GPUs) and dividing the heads (and
    compatible with the KV heads), PP dividing the layers, CP only for seq >= 8192 (or the one the
    user fixed)."""
    tps = [t for t in spec.tp_degrees(_divisors(spec.heads)) if min(gpus_per_node, gpus) % t == 0]
    cps = [pinned_cp] if pinned_cp else [c for c in (1, 2, 4) if c == 1
                                         or (seq >= 8192 and seq % c == 0)]
    out = []
    for tp in tps:
        for cp in cps:
            for pp in _divisors(spec.layers):
                if gpus % (tp * pp * cp) == 0:
                    out.append((gpus // (tp * pp * cp), tp, pp, cp))
    return out


def plan_training(spec: str | ModelSpec, *, gpus: int, gpu: str = "h100-sxm", global_batch: int,
                  seq: int = 4096, gpus_per_node: int = 8, fabric: str | None = None, top: int = 5,
                  schedule: str = "1f1b", calibration: str | Path | Calibration | None = None,
                  sp: bool = True, impl: str = "eager-hf", pins: Pins | None = None,
                  nvls: bool = False, precision: dict | None = None) -> TrainPlanResult:
    """Every layout that fits ``gpu``'s memory, ranked by predicted step time (see module doc).
    ``calibration``: a ``gpudoctor bench --json`` file of this GPU (or its loaded Calibration).
    ``sp``: sequence parallelism on every layout with TP > 1 (it moves the same TP bytes and keeps
    less, so it is a switch, not an enumerated axis). Selective checkpointing is kept only where the
    memory planner says it saves memory over none (with SDPA/flash it saves nothing). ``impl``: what
    runs the step (plan/traffic.py's IMPLEMENTATIONS: eager-hf, fused or fused-noflash). ``pins``:
    layout values the user fixed (plan/pins.py), checked against the model first; the rest is
    enumerated. ``nvls``: NVLink SHARP on, for the all-reduces that stay inside one NVSwitch node
    (plan/collective_cost.py). ``precision``: ``gpudoctor memory``'s precision and optimizer options
    by name (params_dtype, autocast, optimizer, master_weights; None or absent: memory's defaults),
    priced by the same estimator, so that ``memory`` and ``plan train`` give one number for one
    layout."""
    implementation(impl)  # validates the name
    prec = _precision(precision)
    from gpudoctor.hardware.specs import require_spec
    from gpudoctor.memory import load_spec

    _check_inputs(gpus, global_batch, seq, gpus_per_node, top)
    bubble_fraction(2, 1, schedule)  # validates the name
    model = spec if isinstance(spec, ModelSpec) else load_spec(spec)
    hw = require_spec(gpu)
    dtype, peak, precision_note = half_precision(hw)
    cal = load_calibration(calibration, hw.key) if isinstance(calibration, (str, Path)) else calibration
    net = make_net(hw.key, gpus_per_node, fabric, nvls)
    pins = check_pins(pins or Pins(), heads=model.heads, kv_heads=model.kv_heads,
                      layers=model.layers, gpus=gpus,
                      gpus_per_node=gpus_per_node, seq=seq, global_batch=global_batch,
                      checkpointing_choices=CHECKPOINTING)
    shapes = [s for s in _shapes(model, gpus, seq, gpus_per_node, pinned_cp=pins.cp)
              if global_batch % s[0] == 0 and pins.allows(*s)]
    if not shapes and pins.any():
        fixed = math.prod(v for v in (pins.dp, pins.tp, pins.pp) if v is not None)
        if None not in (pins.dp, pins.tp, pins.pp) and pins.cp is None and gpus > fixed:
            raise InputError(f"{pins.describe()} use {fixed} of the {gpus} GPUs and leave a "
                             f"factor of {gpus // fixed} to context parallelism, which is only "
                             f"tried at --seq >= 8192; fix --cp {gpus // fixed} or free a degree")
        raise InputError(f"no layout of {gpus} GPUs has {pins.describe()} and a data-parallel "
                         f"degree dividing --global-batch {global_batch}; free one of them or "
                         "change --gpus")
    if not shapes:
        dps = sorted({s[0] for s in _shapes(model, gpus, seq, gpus_per_node)})
        near = sorted({(global_batch // d + k) * d for d in dps for k in (0, 1)
                       if (global_batch // d + k) * d > 0},
                      key=lambda b: (abs(b - global_batch), b))[:2]
        raise InputError(f"--global-batch {global_batch} is not a multiple of any data-parallel "
                         f"degree possible for {model.name} on {gpus} GPUs (dp in "
                         f"{', '.join(map(str, dps))}); use {' or '.join(map(str, near))}")
    plans, considered, smallest = [], 0, None
    for dp, tp, pp, cp in shapes:
        zeros = (0, 1, 2, 3) if dp > 1 else (0,)
        for zero in zeros if pins.zero is None else (z for z in zeros if z == pins.zero):
            for ckpt in CHECKPOINTING if pins.checkpointing is None else (pins.checkpointing,):
                for mb in MICROBATCHES if pins.microbatch is None else (pins.microbatch,):
                    if (global_batch // dp) % mb:
                        continue
                    lay = Layout(dp, tp, pp, cp, zero, mb, ckpt, schedule, sp=sp)
                    considered += 1
                    est = _memory(model, hw.key, lay, global_batch, seq, prec)
                    if est is not None and (
                        smallest is None or est.total_bytes < smallest[0].total_bytes):
                        smallest = (est, lay)
                    if est is None or not est.fits:
                        break  # a larger micro-batch needs more memory still
                    if ckpt == "selective" and pins.checkpointing is None and _dominated(
                            model, hw.key, lay, est, global_batch, seq, prec):
                        continue
                    plans.append(_price(model, lay, est, global_batch, seq, peak, net,
                                        hw.hbm_bytes_per_s, cal, impl))
    plans = _rank(plans)
    if not considered:  # only pins can leave nothing to price
        raise InputError(f"the fixed values leave no layout to price: {pins.describe(every=True)} "
                         f"{'needs dp > 1 (ZeRO shards over data-parallel ranks)' if pins.zero else 'admit none'}; "
                         "free one of them")
    if plans:
        infeasible = None
    elif pins.any() and smallest is not None:
        est, lay = smallest
        infeasible = (f"no layout with {pins.describe(every=True)} fits the {hw.name}'s "
                      f"{gib(hw.memory_bytes)}: the smallest peak, {gib(est.peak_bytes)} allocated "
                      f"({gib(est.total_bytes)} with the allocator's reserve and the CUDA "
                      f"context), is {describe(lay)}; free a value or add GPUs")
    else:
        infeasible = _infeasible(model, hw, gpus, gpus_per_node, shapes, smallest,
                                 global_batch, seq, prec)
    assumptions = ASSUMPTIONS if cal is None else calibrated_assumptions(cal)
    memory_model = precision_summary(TrainOptions(**prec))
    ignored = master_weights_note(TrainOptions(**{k: v for k, v in (precision or {}).items()
                                                  if v is not None}))
    if precision_note:
        assumptions = (precision_note, *assumptions)
    assumptions = (*assumptions, f"memory: {memory_model}", *((ignored,) if ignored else ()))
    return TrainPlanResult(
        model=model.name, gpus=gpus, gpu=hw.key, global_batch=global_batch, seq=seq,
        gpus_per_node=gpus_per_node, fabric=fabric or DEFAULT_FABRIC, plans=plans[:top],
        explanation=explain(plans, gpus, gpus_per_node, hw.memory_bytes,
                            _replicated(model, hw.key, plans[0], global_batch, seq, prec))
        if plans else "", infeasible=infeasible, considered=considered, fitting=len(plans),
        comm_model=COMM_MODEL,
        assumptions=assumptions,
        compute_model=COMPUTE_ASSUMED.replace("bf16", dtype) if cal is None else cal.label,
        memory_model=memory_model)


def _precision(given: dict | None) -> dict:
    """The precision options as ``gpudoctor memory`` takes them, checked the same way (one-line
    errors naming the option), with memory's defaults for those not given."""
    names = ("params_dtype", "autocast", "optimizer", "master_weights")
    given = {k: v for k, v in (given or {}).items() if v is not None}
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"precision options {unknown} are not among {names}")
    o = check_common_train(TrainOptions(**given))
    return {k: getattr(o, k) for k in names}


def _dominated(spec: ModelSpec, gpu: str, lay: Layout, est, global_batch: int, seq: int,
               prec: dict) -> bool:
    """Selective checkpointing that keeps as much as no checkpointing: more FLOPs for nothing."""
    plain = _memory(spec, gpu, replace(lay, checkpointing="none"), global_batch, seq, prec)
    return plain is not None and plain.peak_bytes <= est.peak_bytes


def _replicated(spec: ModelSpec, gpu: str, w: Plan, global_batch: int, seq: int, prec: dict):
    """With a ZeRO winner, the memory of the same layout replicated (DDP), for the explanation."""
    if not w.zero:
        return None
    return _memory(spec, gpu,
                   Layout(w.dp, w.tp, w.pp, w.cp, 0, w.microbatch, w.checkpointing, w.schedule,
                                     sp=w.sp or w.tp == 1), global_batch, seq, prec)


def _complexity(p: Plan) -> tuple[int, int]:
    return (p.tp > 1) + (p.pp > 1) + (p.cp > 1), p.zero


def _rank(plans: list[Plan]) -> list[Plan]:
    """Fastest first, except that the simplest plan within ``TIE_TOLERANCE`` of the fastest
    leads."""
    plans = sorted(plans, key=lambda p: (p.step_s, _complexity(p)))
    if not plans:
        return plans
    close = [p for p in plans if p.step_s <= plans[0].step_s * (1 + TIE_TOLERANCE)]
    lead = min(close, key=lambda p: (_complexity(p), p.step_s))
    return [lead] + [p for p in plans if p is not lead]


_MEMORY_CACHE: dict = {}


def _memory(spec: ModelSpec, gpu: str, lay: Layout, global_batch: int, seq: int,
            prec: dict | None = None):
    """``gpudoctor memory`` for the layout, at the precision options ``prec`` (``_precision``; None:
    memory's defaults), cached; None when the memory planner refuses the combination."""
    from gpudoctor.memory import estimate_from_options

    prec = prec if prec is not None else _precision(None)
    m = global_batch // (lay.dp * lay.microbatch)
    key = (spec, gpu, lay, m, seq, tuple(sorted(prec.items())))
    if key not in _MEMORY_CACHE:
        try:
            _MEMORY_CACHE[key] = estimate_from_options(
                spec, gpu=gpu, suggest=False, batch=lay.microbatch, seq=seq, tp=lay.tp, pp=lay.pp,
                dp=lay.dp, zero=lay.zero if lay.zero < 3 else 0, fsdp=lay.zero == 3,
                sp=lay.sequence_parallel,
                cp=lay.cp, microbatches=m, checkpointing=lay.checkpointing, **prec,
                virtual_stages=lay.virtual_stages if lay.schedule == "interleaved"
                and lay.pp > 1 else 1)
        except InputError:
            _MEMORY_CACHE[key] = None
    return _MEMORY_CACHE[key]


def _price(spec: ModelSpec, lay: Layout, est, global_batch: int, seq: int, peak: float, net: Net,
           hbm: float, cal: Calibration | None = None, impl: str = "eager-hf") -> Plan:
    r = predict_step(spec, lay, global_batch=global_batch, seq=seq, peak_flops=peak, net=net,
                     hbm_bytes_per_s=hbm, calibration=cal, impl=impl)
    breakdown = {k: v for k, v in r.items() if k.endswith("_s") and k != "step_s"}
    return Plan(dp=lay.dp, tp=lay.tp, pp=lay.pp, cp=lay.cp, zero=lay.zero,
                microbatch=lay.microbatch, microbatches=int(r["microbatches"]),
                checkpointing=lay.checkpointing, schedule=lay.schedule, step_s=r["step_s"],
                mfu=r["model_flops"] / (r["step_s"] * lay.gpus * peak),
                tokens_per_s=global_batch * seq / r["step_s"], peak_bytes=int(est.peak_bytes),
                total_bytes=int(est.total_bytes), breakdown=breakdown, sp=lay.sequence_parallel)


def _infeasible(spec: ModelSpec, hw, gpus: int, gpus_per_node: int, shapes, smallest,
                global_batch: int, seq: int, prec: dict) -> str:
    """Why no layout fits, and what would: more GPUs when the weights, gradients and Adam states do
    not fit even fully sharded over all of them; otherwise the activations, with the layout that
    came closest and the --seq it would fit at."""
    n = param_counts(spec).total
    _, tp, pp, _ = max(shapes, key=lambda s: (s[1] * s[2], s[1]))
    cap = hw.memory_bytes
    o = TrainOptions(**prec)
    per_param = bytes_per_param(o)
    weights = n * {"fp32": 4, "bf16": 2, "fp16": 2}[o.params_dtype] / (tp * pp)
    states = per_param * n / gpus
    what = f"weights + gradients + optimizer states ({per_param:.3g} bytes per parameter"
    head = f"no layout of {spec.name} fits the {hw.name}'s {gib(cap)} on {plural(gpus, 'GPU')}: "
    if states > STATES_SHARE * cap:
        need = math.ceil(per_param * n / (STATES_SHARE * cap))
        need = need if need <= gpus_per_node else math.ceil(need / gpus_per_node) * gpus_per_node
        why = (f"the weights alone need {gib(weights)} per GPU at the largest TP x PP ({tp} x "
               f"{pp}), and "
               if weights > cap else "")
        return (head + why + f"{what}, {gib(per_param * n)}) need "
                f"{gib(states)} per GPU even fully sharded (ZeRO-3) over {plural(gpus, 'GPU')}, "
                f"more than {STATES_SHARE:.0%} of the card; need >= {max(need, gpus + 1):,} GPUs "
                "(with activations, more)")
    states_fit = (f"{what}) fit, {gib(states)} per GPU fully "
                  f"sharded (ZeRO-3) over {plural(gpus, 'GPU')}, so more GPUs will not help; ")
    beyond = (f"; --seq {seq:,} is also beyond the model's {spec.max_positions:,} positions"
              if spec.max_positions and seq > spec.max_positions else "")
    if smallest is None:
        return (head + states_fit
                + f"the memory planner accepts no layout at --seq {seq:,}: shorten --seq" + beyond)
    est, lay = smallest
    longest, at = max((_longest_seq(spec, hw.key, s, global_batch, seq, prec) for s in shapes),
                      key=lambda r: r[0])
    shorter = (f"--seq {longest:,} fits {describe(at)}" if at
               else "no --seq fits: even one token per sequence "
               "needs more than the card, so check the model and --global-batch")
    return (head + states_fit
            + f"the activations do not: the layout that needs least, {describe(lay)}, needs "
            f"{gib(est.total_bytes)}; shorten --seq ({shorter}) or fix a larger --cp than the 1, "
            "2, 4 tried" + beyond)


def _longest_seq(spec: ModelSpec, gpu: str, shape: tuple[int, int, int, int], global_batch: int,
                 seq: int, prec: dict) -> tuple[int, Layout | None]:
    """The longest sequence below ``seq`` (rounded down to a multiple of 1024 above 4096) at which
    the shape's leanest layout (micro-batch 1, full checkpointing, ZeRO-3 where DP > 1) fits, with
    that layout; (0, None) if none does. CP > 1 counts only from 8192 tokens, where the planner
    tries it."""
    dp, tp, pp, cp = shape
    lay = Layout(dp, tp, pp, cp, 3 if dp > 1 else 0, 1, "full")

    def fits(k: int) -> bool:
        if cp > 1 and k * cp < 8192:
            return False
        est = _memory(spec, gpu, lay, global_batch, k * cp, prec)
        return est is not None and bool(est.fits)

    lo, hi = 0, seq // cp  # fits(lo) or lo == 0; not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    best = lo * cp
    best = best // 1024 * 1024 if best > 4096 else best
    return (best, lay) if best else (0, None)
