"""Match the GPU kernels of two traces: what appeared, what disappeared, what changed most.

Each GPU event in the steps is summarised by its kernel name, the aten op that launched it
(the launch's innermost ``cpu_op``, linked by correlation id as the trace's ``External id``
links them), that op's ``Input Dims``, the Python frame of the launch (traces recorded with
stacks) and the outermost op above it (the op tree). Names are normalized first: a trailing
``_<number>`` and hash-like runs of hex digits are dropped, so that ``torch.compile`` numbering
its Triton kernels differently (``triton_poi_fused_add_mul_0`` in one build, ``..._1`` in the
next) does not break a match.

Groups are then matched in a cascade, most specific key first; what matches at one level leaves
the pool, what is left tries the next:

1. name + op + shapes + call site
2. name + op + shapes
3. name + op
4. name
5. op tree: the outermost op + the op (the kernel itself changed: fp32 SIMT GEMM -> bf16 tensor-core
   GEMM under the same ``aten::mm`` of ``AddmmBackward0``)

What is never matched appeared (AFTER only) or disappeared (BEFORE only).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from gpudoctor.trace.kernels import Kind, short_name
from gpudoctor.trace.model import Trace

LEVELS = ("name+op+shapes+site", "name+op+shapes", "name+op", "name", "op tree")
_HEX_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_HASH = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{12,}(?![0-9A-Za-z])")
_SUFFIX = re.compile(r"_\d+$")
MAX_SHAPE_CHARS = 160


def normalize(name: str) -> str:
    """A kernel or op name without the parts that change from build to build."""
    text = _HEX_ADDRESS.sub("0x*", name)
    text = _HASH.sub("*", text)
    return _SUFFIX.sub("", text)


@dataclass(frozen=True)
class Key:
    """What identifies a group of GPU events in one trace."""

    name: str  # normalized kernel name
    op: str  # normalized innermost aten op ("" when none)
    shapes: str  # the op's Input Dims as text ("" when not recorded)
    site: str  # Python frame of the launch ("" without stacks)
    top_op: str  # normalized outermost op ("" when none)


@dataclass(frozen=True)
class Group:
    """GPU events of one trace sharing a Key, per step."""

    key: Key
    display: str  # a readable raw name (the first seen)
    kind: str  # Kind label
    calls_per_step: float
    ms_per_step: float


@dataclass(frozen=True)
class KernelChange:
    """One matched, appeared (before is None) or disappeared (after is None) group."""

    before: Group | None
    after: Group | None
    level: str  # how it was matched (LEVELS), "appeared" or "disappeared"

    @property
    def ms_before(self) -> float:
        return self.before.ms_per_step if self.before else 0.0

    @property
    def ms_after(self) -> float:
        return self.after.ms_per_step if self.after else 0.0

    @property
    def delta_ms(self) -> float:
        return self.ms_after - self.ms_before

    @property
    def name(self) -> str:
        a, b = self.before, self.after
        if a and b and short_name(a.display) != short_name(b.display):
            return f"{short_name(a.display)} → {short_name(b.display)}"
        return short_name((a or b).display)  # type: ignore[union-attr]


def _shapes(trace: Trace, op: int, cache: dict[int, str]) -> str:
    if op < 0:
        return ""
    if op not in cache:
        text = str(trace.input_dims(op)) if trace.host.raw_args[op] is not None else ""
        cache[op] = text if len(text) <= MAX_SHAPE_CHARS else text[: MAX_SHAPE_CHARS - 1] + "…"
    return cache[op]


def groups(trace: Trace, start_ns: int, end_ns: int, steps: int) -> list[Group]:
    """The GPU events starting within [start_ns, end_ns), grouped by Key, per step."""
    d, h, s = trace.device, trace.host, trace.strings
    n_steps = max(steps, 1)
    acc: dict[Key, list] = {}
    shape_cache: dict[int, str] = {}
    norm_cache: dict[int, str] = {}

    def norm(sid: int) -> str:
        if sid not in norm_cache:
            norm_cache[sid] = normalize(s[sid])
        return norm_cache[sid]

    for i in range(len(d)):
        if not start_ns <= int(d.ts[i]) < end_ns:
            continue
        op, top, launch = int(d.op[i]), int(d.top_op[i]), int(d.launch[i])
        frame = int(h.frame[launch]) if launch >= 0 else -1
        key = Key(norm(int(d.name[i])), norm(int(h.name[op])) if op >= 0 else "",
                  _shapes(trace, op, shape_cache), s[int(h.name[frame])] if frame >= 0 else "",
                  norm(int(h.name[top])) if top >= 0 else "")
        slot = acc.get(key)
        if slot is None:
            acc[key] = [0, 0, s[int(d.name[i])], Kind(int(d.kind[i])).label]
            slot = acc[key]
        slot[0] += 1
        slot[1] += int(d.end[i] - d.ts[i])
    return [Group(k, v[2], v[3], v[0] / n_steps, v[1] / 1e6 / n_steps) for k, v in acc.items()]


_LEVEL_KEYS: tuple[Callable[[Key], tuple[str, ...] | None], ...] = (
    lambda k: (k.name, k.op, k.shapes, k.site),
    lambda k: (k.name, k.op, k.shapes),
    lambda k: (k.name, k.op),
    lambda k: (k.name,),
    lambda k: (k.top_op, k.op) if k.op else None,
)


def _merge(items: list[Group]) -> Group:
    """Several groups of one side matched together: summed, named after the largest."""
    if len(items) == 1:
        return items[0]
    big = max(items, key=lambda g: g.ms_per_step)
    return Group(big.key, big.display, big.kind, sum(g.calls_per_step for g in items),
                 sum(g.ms_per_step for g in items))


def match(before: list[Group], after: list[Group]) -> list[KernelChange]:
    """Every group of both sides, matched by the cascade of the module docstring."""
    left, right = list(before), list(after)
    out: list[KernelChange] = []
    for level, keyf in zip(LEVELS, _LEVEL_KEYS):
        by_left: dict[tuple[str, ...], list[Group]] = {}
        by_right: dict[tuple[str, ...], list[Group]] = {}
        for g in left:
            k = keyf(g.key)
            if k is not None:
                by_left.setdefault(k, []).append(g)
        for g in right:
            k = keyf(g.key)
            if k is not None:
                by_right.setdefault(k, []).append(g)
        common = [k for k in by_left if k in by_right]
        taken_left, taken_right = set(), set()
        for k in common:
            out.append(KernelChange(_merge(by_left[k]), _merge(by_right[k]), level))
            taken_left.update(id(g) for g in by_left[k])
            taken_right.update(id(g) for g in by_right[k])
        left = [g for g in left if id(g) not in taken_left]
        right = [g for g in right if id(g) not in taken_right]
    out += [KernelChange(g, None, "disappeared") for g in left]
    out += [KernelChange(None, g, "appeared") for g in right]
    return out
