"""A layout the user fixes (``plan train --tp 4 --pp 2 ...``): every value is checked against the
model and the cluster before anything is priced, and one that cannot work is a one-line error naming
the constraint and the nearest values that would (the layout must divide the model).

Values left out stay free: the planner enumerates them as usual and ranks what remains.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.core.spec import tp_degrees
from gpudoctor.errors import InputError


@dataclass(frozen=True)
class Pins:
    """Fixed layout values; None leaves a dimension to the planner."""

    dp: int | None = None
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    zero: int | None = None
    microbatch: int | None = None
    checkpointing: str | None = None

    def allows(self, dp: int, tp: int, pp: int, cp: int) -> bool:
        return all(p is None or p == v for p, v in ((self.dp, dp), (self.tp, tp), (self.pp, pp),
                                                    (self.cp, cp)))

    def any(self) -> bool:
        return any(v is not None for v in vars(self).values())

    def describe(self, every: bool = False) -> str:
        """The fixed values as options ("--tp 4, --pp 2"); the degrees only, unless ``every``."""
        names = ("dp", "tp", "pp", "cp") + (("zero", "microbatch", "checkpointing")
                                            if every else ())
        return ", ".join(f"--{k} {getattr(self, k)}" for k in names if getattr(self, k) is not None) or "the fixed values"


def _nearest(value: int, valid: list[int], n: int = 2) -> str:
    """The n valid values closest to ``value`` (smaller first on ties), as "a or b"."""
    picks = sorted(valid, key=lambda v: (abs(v - value), v))[:n]
    return " or ".join(map(str, sorted(picks)))


def whole(name: str, value: object, low: int = 1) -> int:
    """``value`` if it is an int >= ``low`` (not a bool), else a one-line error naming
    --``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"--{name} must be a whole number >= {low}, got {value!r}")
    return value


def check_pins(pins: Pins, *, heads: int, kv_heads: int, layers: int, gpus: int,
               gpus_per_node: int, seq: int,
               global_batch: int, checkpointing_choices: tuple[str, ...]) -> Pins:
    """``pins`` if every fixed value can work on this model and cluster, else a one-line
    InputError."""
    if pins.tp is not None:
        tp = whole("tp", pins.tp)
        node = min(gpus_per_node, gpus)
        valid = [t for t in tp_degrees(heads, kv_heads, range(1, node + 1)) if node % t == 0]
        if heads % tp:
            raise InputError(
                f"--tp {tp} does not divide the model's {heads} attention heads; use "
                f"{_nearest(tp, valid)}")
        if kv_heads % tp and tp % kv_heads:
            raise InputError(f"--tp {tp} splits the model's {kv_heads} key/value heads unevenly; "
                             f"use {_nearest(tp, valid)}")
        if node % tp:
            raise InputError(f"--tp {tp} does not fit in one {node}-GPU node (tensor parallelism "
                             f"stays on NVLink); use {_nearest(tp, valid)}")
    if pins.pp is not None:
        pp = whole("pp", pins.pp)
        if layers % pp:
            valid = [d for d in range(1, layers + 1) if layers % d == 0]
            raise InputError(
                f"--pp {pp} does not divide the model's {layers} layers; use {_nearest(pp, valid)}")
    if pins.cp is not None:
        cp = whole("cp", pins.cp)
        if seq % cp:
            valid = [c for c in (1, 2, 4, 8, 16) if seq % c == 0]
            raise InputError(
                f"--cp {cp} does not divide the sequence length {seq}; use {_nearest(cp, valid)}")
    fixed = [v for v in (pins.dp, pins.tp, pins.pp, pins.cp) if v is not None]
    if pins.dp is not None:
        whole("dp", pins.dp)
    product = 1
    for v in fixed:
        product *= v
    if product > gpus:
        raise InputError(f"the fixed degrees multiply to {product}, more than --gpus {gpus}; "
                         "dp x tp x pp x cp must equal the GPU count")
    if gpus % product:
        raise InputError(f"the fixed degrees multiply to {product}, which does not divide --gpus "
                         f"{gpus}; dp x tp x pp x cp must equal the GPU count")
    if len(fixed) == 4 and product != gpus:
        raise InputError(f"dp x tp x pp x cp = {product} but --gpus is {gpus}; "
                         f"use --dp {gpus // (product // pins.dp)} or leave --dp out")
    if pins.dp is not None and global_batch % pins.dp:
        lo = global_batch // pins.dp * pins.dp
        raise InputError(f"--global-batch {global_batch} does not split over --dp {pins.dp} "
                         "data-parallel ranks; use "
                         f"{_nearest(global_batch, [b for b in (lo, lo + pins.dp) if b > 0])}")
    if pins.zero is not None and pins.zero not in (0, 1, 2, 3):
        raise InputError(
            f"--zero must be 0, 1, 2 or 3 (3 is FSDP full sharding), got {pins.zero!r}")
    if pins.microbatch is not None:
        mb = whole("microbatch", pins.microbatch)
        if pins.dp is not None and (global_batch // pins.dp) % mb:
            per = global_batch // pins.dp
            valid = [d for d in range(1, per + 1) if per % d == 0]
            raise InputError(f"--microbatch {mb} does not divide the {per} sequences each "
                             f"data-parallel rank gets per step; use {_nearest(mb, valid)}")
    if pins.checkpointing is not None and pins.checkpointing not in checkpointing_choices:
        raise InputError(f"--checkpointing must be one of {', '.join(checkpointing_choices)}, "
                         f"got {pins.checkpointing!r}")
    return pins
