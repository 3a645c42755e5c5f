"""unfused-elementwise: memory-bound kernels a compiler would fuse, each a pass through HBM.

A region is a run of consecutive memory-bound kernels (elementwise, reduction, normalization,
softmax, cast / copy, index) on one stream: any other kernel (a GEMM, a convolution, fused
attention, an optimizer's multi-tensor kernel, a collective) ends it; scalar kernels neither
join nor end one. Inside a region, the kernels whose ops work on one tensor shape are a chain,
interleaved or not: an RMSNorm's square, scale and weight multiply on [B, T, D] around its mean
and rsqrt on [B, T, 1], or a cross-entropy's softmax, loss and gradient on the logits. A chain
needs two distinct ops (one op's several kernels are not a chain a compiler can shorten). A region
ends with its step: a compiled function is called once a step. torch.compile (Inductor) fuses a chain into about one pass
over its tensor for each flow of data through it: the times its sequence of op names repeats
(``_passes_of_flow``: 12 separate tensors drawn and summed alike are 12 passes; a rotary
embedding's products on q and then on k are two; a gated activation's seven ops are one). In a
training step (one with a backward) each pass is priced as 1.25x the traffic of the chain's largest
kernels, one per pass, at the rate the chain's kernels averaged (its bytes over its time), no lower
than 15% of the memory roof (``COMPILED_PASS_SHARE``: an eager kernel far under the roof is
rewritten, not kept): the compiler still writes what the backward saves, and a norm's backward
reduction runs no faster fused than its chain ran, while one slow kernel (a broadcast mask's
in-place fill) does not set the pass. In a step without a backward nothing is saved: each pass is
1.25x the traffic of the chain's largest kernel at the best rate its kernels reach. Either way an
eager kernel over an upcast copy of the tensor (fp32 inside a bf16 model: a hand-written RMSNorm,
autocast's norms, losses and softmax, forward and backward) counts at the tensor's stored dtype
(``_storage_share``): the fused kernel widens it in registers. No pass is
shorter than the shortest memory-bound kernel of the trace (``kernel_floor_ns``: a fused kernel
still takes the card's per-kernel time), and no chain is slower than its kernels ran
(benchmarks/BENCHMARKS-replay.md "A fused chain in its stored dtype, a pass for each flow" and "A
fused pass at its chain's own rate").

Kernels on tensors of another shape in the same region (a weight's cast between two activation
ops) are their own chain: fusing independent tensors saves launches, not bytes. A view of one
tensor under another shape ([B, T, V] cast, [B * T, V] log-softmax) is two chains too; grouping by
element count was tried and not kept (benchmarks/BENCHMARKS-replay.md "A fused chain no slower
than it ran"). In a step that waits on host syncs, the kernels' time is hidden behind the host's:
the syncs come first (``blocked_by``).

Chains inside naive attention belong to that rule.
"""

from __future__ import annotations

import weakref

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import AUTOGRAD_NODE, ran_backward
from gpudoctor.analysis.opcost import DTYPE_BYTES
from gpudoctor.core.arrays import distinct
from gpudoctor.core.finding import KERNELS_REMOVED, Evidence, Finding, Fix, make_finding
from gpudoctor.kernels.prescribe import kernel_fix
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import (
    compile_line,
    kernel_names_of_events,
    op_names_of_events,
    sources_of_events,
)
from gpudoctor.rules.shared import attention_events
from gpudoctor.trace.kernels import BATCH_NORM_NAME, MEMORY_BOUND_KINDS
from gpudoctor.trace.model import Trace

ID = "unfused-elementwise"
MIN_CHAIN = 2
FUSED_PASS_FACTOR = 1.25
# An eager kernel far under the memory roof is a layout the compiler writes anew, not a floor for
# the fused pass (bf16 BatchNorm backward on NCHW ran at 6-12% of the roof); where a compiler stops
# doing better is not measured (chain kernels at 17% and 32-37% were left as they ran), so the share
# stays under both: benchmarks/BENCHMARKS-twins.md "Evidence moved from the source: rule pricing",
# unfused-elementwise.
COMPILED_PASS_SHARE = 0.15
# Inductor's fused kernel, which the compile knob prices, moves its traffic at this share of the
# memory roof whatever rate the eager chain averaged: manual_attention_gpt's compiled kernels ran
# its attention softmax at 0.61 of it forward and 0.88 backward, its cross-entropy at 0.95; the
# median (benchmarks/BENCHMARKS-replay.md "The compile knob's fused pass at Inductor's rate")
INDUCTOR_PASS_SHARE = 0.88
# A batch norm in training reads its input once more than its kernel's recorded bytes say: the
# statistics (forward) and the gradient sums (backward) are a reduction over the whole tensor before
# the elementwise pass, eager or fused; the fused chain keeps that pass (half the kernel's bytes:
# its input, not its output). tests/test_batch_norm_fusion.py; benchmarks/BENCHMARKS-replay.md
# "Knob set v".
BATCH_NORM_STATS_SHARE = 0.5
# Major from 10% of the step, not 5%: the gain is priced from kernel times alone (the compiler's
# warm-up, graph breaks and recompiles are not), and at a tenth of the step the price is within its
# error of nothing (same benchmarks/BENCHMARKS-twins.md entry: the lab's healthy GPT step).
MAJOR_SHARE = 0.10


def chains(a: Analysis, with_attention: bool = False, by_numel: bool = False) -> list[np.ndarray]:
    """The chains (event indices in time order) of every region of memory-bound kernels inside
    the steps (the module docstring says what a region and a chain are). A naive attention's
    kernels are naive-attention's to price, unless ``with_attention``. ``by_numel``: a chain is
    one region's kernels on one element count rather than one shape, so that a view of a tensor
    under another shape ([B, T, V] logits sliced and made contiguous, then log-softmaxed as
    [B * T, V]) stays in its chain: what Inductor fuses (the compile knob, rules/knob_prices.py),
    where a fused kernel written by hand may stop at the view; a ``cat`` of two halves joins the
    chain that reads it (``_halves_joined``) (benchmarks/BENCHMARKS-replay.md "Chains across
    views, for the compile knob")."""
    dev = a.trace.device
    live = (a.roofline.event_in_steps_ns > 0) & (dev.cat == 0)
    if not with_attention:
        live[attention_events(a)] = False
    shape_id, numel = _event_shapes(a)
    order = np.lexsort((dev.ts, dev.stream))
    # scalar kernels (a loss's 1-element fill, grad clipping's norms) neither join a region nor
    # end one: the compiler folds them into their neighbours (nanoGPT's cross-entropy forward and
    # backward, 2.9 ms a step, were cut in two by the scalar fill between them)
    order = order[(dev.cat[order] == 0) & (numel[order] != 1)]
    fusable = np.isin(dev.kind[order], [int(k) for k in MEMORY_BOUND_KINDS]) & live[order]
    # a new region starts at every kernel that is not fusable, at every stream change and at
    # every step's start
    stream = dev.stream[order]
    step = np.searchsorted(a.steps.start, dev.ts[order], side="right")
    changed = np.concatenate(([True], (stream[1:] != stream[:-1]) | (step[1:] != step[:-1])))
    region = np.cumsum(changed | ~fusable)[fusable]
    members = order[fusable]
    # a chain: one region's kernels on one tensor shape (or element count)
    key = _halves_joined(a, members, region, numel[members]) if by_numel else shape_id[members]
    _, chain_id = np.unique(np.stack([region, key]), axis=1, return_inverse=True)
    chain_id = chain_id.reshape(-1)
    # several kernels of one op are one op: a chain needs MIN_CHAIN distinct ops
    ops = _distinct_per_chain(chain_id, dev.op[members])
    good = np.array([c for c, count in ops.items() if count >= MIN_CHAIN], np.int64)
    keep = np.isin(chain_id, good)
    if not keep.any():
        return []
    members, chain_id = members[keep], chain_id[keep]
    by_chain = np.argsort(chain_id, kind="stable")  # time order kept inside each chain
    bounds = np.flatnonzero(np.diff(chain_id[by_chain])) + 1
    runs = np.split(members[by_chain], bounds)
    return sorted(runs, key=lambda r: int(dev.ts[r[0]]))


def _halves_joined(a: Analysis, members: np.ndarray, region: np.ndarray,
                   numel: np.ndarray) -> np.ndarray:
    """The element count a chain is grouped by (``chains(..., by_numel=True)``), with a ``cat``
    counted at twice its largest input where its region holds work on that many elements: a
    rotary embedding's ``cat([-x2, x1])`` of two halves, which Inductor writes into the product
    that reads it rather than into a tensor of its own."""
    trace = a.trace
    cat = trace.names_matching(lambda s: s == "aten::cat")[
        trace.host.name[np.maximum(trace.device.op[members], 0)]]
    if not cat.any():
        return numel
    doubled = np.where(cat, numel * 2, numel)
    present = {(int(r), int(n)) for r, n in zip(region[~cat], numel[~cat])}
    joins = np.array([(int(r), int(n)) in present for r, n in zip(region, doubled)], bool)
    return np.where(cat & joins, doubled, numel)


def _passes(a: Analysis, chain: np.ndarray) -> int:
    """How many passes over memory a chain of a training step keeps once fused: one for each flow
    of data (``_passes_of_flow``), and one more for each kernel beyond an operator's first: an
    operator that launches several kernels (native_layer_norm_backward: the input's gradient row
    by row, then the weight's across the rows) needs the passes apart, fused or not."""
    ops = a.trace.device.op[chain]
    return (_passes_of_flow(a, chain) + int(chain.size - distinct(ops).size)
            + int(_crosses_into_backward(a.trace, chain)))


def _crosses_into_backward(trace: Trace, chain: np.ndarray) -> bool:
    """Whether a chain runs on both sides of autograd: a loss's forward and its gradient, a
    dropout's mask and its backward. The compiler fuses the forward and the backward as two
    graphs, so such a chain keeps a pass on each side (Inductor's log-softmax, one kernel forward
    and one backward). A chain runs in time order, so its first and last kernels tell."""
    calls = trace.device.launch[chain[[0, -1]]]
    if (calls < 0).any():
        return False
    first, last = _in_autograd_node(trace, calls).tolist()
    return first != last


def _passes_of_flow(a: Analysis, chain: np.ndarray) -> int:
    """How many passes a chain keeps once fused: the times its sequence of op names repeats (12
    separate tensors drawn and summed alike are 12 passes; a gated activation's seven ops, one
    flow of data, are one)."""
    dev, host = a.trace.device, a.trace.host
    names = host.name[np.maximum(dev.op[chain], 0)]
    n = names.size
    for period in range(1, n // 2 + 1):
        if n % period == 0 and np.array_equal(names, np.tile(names[:period], n // period)):
            return n // period
    return 1


def kernel_floor_ns(a: Analysis) -> float:
    """The shortest memory-bound kernel recorded in the steps (ns, whole kernels): the least a
    kernel takes on this card, which a fused pass over a tiny tensor takes too; without it a chain
    on tiny activations is priced at its bytes (nanoseconds) and under-predicts the step."""
    dev = a.trace.device
    live = (a.roofline.event_in_steps_ns > 0) & (dev.cat == 0) & np.isin(
        dev.kind, [int(k) for k in MEMORY_BOUND_KINDS])
    whole = (dev.end - dev.ts)[live]
    whole = whole[whole > 0]
    return float(whole.min()) if whole.size else 0.0


def fused_ns(a: Analysis, chain: np.ndarray, t: np.ndarray, floor_ns: float = 0.0,
             training: bool = True, inductor: bool = False) -> float:
    """The chain's time once fused (the module docstring says how; ``training``: the step has a
    backward, analysis/host_events.py ``ran_backward``); no faster than ``floor_ns``
    (``kernel_floor_ns``) a pass, and no slower than the chain's kernels ran: a chain whose every
    kernel is its own pass (three casts of one shape, each on its own tensor) is priced as it ran,
    not at FUSED_PASS_FACTOR times that. ``inductor``: in training, each pass's traffic at
    INDUCTOR_PASS_SHARE of the memory roof (the compile knob's price), not at the chain's rate."""
    ran = float(t[chain].sum())
    narrow = _storage_share(a, chain)
    if not training:
        passes = _passes_of_flow(a, chain)
        nbytes = a.roofline.event_bytes[chain]
        rate = min(float((nbytes / np.maximum(t[chain], 1.0)).max()), a.ceilings.hbm_bytes_per_s / 1e9)
        stored = (nbytes * narrow)[: chain.size // passes]
        per_pass = float(stored.max()) / rate if rate > 0 else 0.0
        return min(float(FUSED_PASS_FACTOR * passes * max(per_pass, floor_ns)), ran)
    passes = _passes(a, chain)
    nbytes = a.roofline.event_bytes[chain]
    largest = np.sort(nbytes * narrow)[::-1][:passes]
    hbm = a.ceilings.hbm_bytes_per_s / 1e9  # bytes a ns
    if inductor and hbm > 0:
        stats = BATCH_NORM_STATS_SHARE * float(nbytes[_batch_norms(a, chain)].sum())
        return min(float(np.maximum(largest / (INDUCTOR_PASS_SHARE * hbm), floor_ns).sum())
                   + stats / (INDUCTOR_PASS_SHARE * hbm), ran)
    # the rate the chain's kernels averaged, no lower than the share a rewritten kernel reaches
    rate = min(max(float(nbytes.sum()) / max(ran, 1.0), COMPILED_PASS_SHARE * hbm), hbm)
    if rate <= 0:
        return ran
    return min(float(FUSED_PASS_FACTOR * np.maximum(largest / rate, floor_ns).sum()), ran)


def _batch_norms(a: Analysis, chain: np.ndarray) -> np.ndarray:
    """Which kernels of ``chain`` are a batch norm's (trace/kernels.py ``BATCH_NORM_NAME``)."""
    names = a.trace.names_matching(lambda s: BATCH_NORM_NAME.search(s.lower()) is not None)
    return names[a.trace.device.name[chain]]


def _storage_share(a: Analysis, chain: np.ndarray) -> np.ndarray:
    """Per kernel of ``chain``: the element size its tensor is stored in over the one the kernel
    works in (1 where either is unknown, or the chain widens nothing). A chain that upcasts its
    input (a hand-written RMSNorm's ``x.to(float32)`` ... ``.to(input_dtype)`` in a bf16 model)
    runs its eager kernels over an fp32 copy; the fused kernel reads and writes the tensor in its
    stored dtype and widens it in registers, so each wider eager kernel's traffic shrinks by that
    ratio. A chain over a tensor stored wide (autocast's fp32 residual stream, cast to bf16 only
    for the next matmul) is left as it ran, and so is a chain of the backward that adds into a
    gradient in place (an fp32 residual stream's, accumulated beside a bf16 branch's): its casts do
    not say the gradient is kept narrow. A backward chain that widens and narrows back without
    accumulating (autocast's softmax backward over bf16 attention scores) is narrowed like a
    forward one (benchmarks/BENCHMARKS-replay.md "A fused chain in its stored dtype, a pass for
    each flow" and "A fused pass at its chain's own rate")."""
    trace = a.trace
    ops = trace.device.op[chain]
    calls = trace.device.launch[chain]
    if (calls < 0).any() or _accumulates_backward(trace, ops, calls):
        return np.ones(chain.size)
    stored = _upcast_from(trace, ops)
    if stored == 0:
        return np.ones(chain.size)
    # a kernel works in its widest tensor's type (bf16 x times an fp32 tanh is an fp32 multiply; a
    # Python number, recorded as a 0-d "double", is not one)
    size = np.array([_widest_tensor(trace, int(op)) for op in ops.tolist()], float)
    return np.where(size > stored, stored / np.maximum(size, 1.0), 1.0)


def _accumulates_backward(trace: Trace, ops: np.ndarray, calls: np.ndarray) -> bool:
    """Whether a chain of the backward adds into a gradient in place (``aten::add_``): an fp32
    residual stream's gradient, accumulated beside a bf16 branch's, is kept wide whatever the
    chain's casts say."""
    add_id = trace.string_ids.get("aten::add_", -1)
    accumulates = bool((trace.host.name[np.maximum(ops, 0)] == add_id).any())
    return accumulates and _in_backward(trace, calls)


def _in_backward(trace: Trace, calls: np.ndarray) -> bool:
    """Whether any of the launching calls (host events) runs inside an autograd node."""
    return bool(_in_autograd_node(trace, calls).any())


def _in_autograd_node(trace: Trace, calls: np.ndarray) -> np.ndarray:
    """Per launching call (host event): whether its outermost operator is an autograd node. The
    few names looked up, not the whole host table (``autograd_nodes``), for each of a step's
    chains."""
    names = trace.host.name[trace.host.outermost(calls)].tolist()
    return np.fromiter((trace.strings[i].startswith(AUTOGRAD_NODE) for i in names), bool,
                       len(names))


def _widest_tensor(trace: Trace, op: int) -> int:
    """The largest element size among host event ``op``'s tensor arguments of one or more dims
    (0 where none is known)."""
    dims, types = trace.input_dims(op), trace.input_types(op)
    return max((DTYPE_BYTES.get(t, 0) for d, t in zip(dims, types)
                if isinstance(t, str) and isinstance(d, list) and d), default=0)


def _upcast_from(trace: Trace, ops: np.ndarray) -> int:
    """The element size a chain of ``ops`` (host events) widens its tensor from and narrows it back
    to: a ``copy_`` into a wider destination and one back into that size (a tensor that comes in
    narrow and leaves narrow). 0 where the chain does not do both: a cast that only widens (a
    bf16 gradient into an fp32 residual stream's) or only narrows (an fp32 activation cast for the
    next matmul) changes what is stored."""
    copy_id = trace.string_ids.get("aten::copy_", -1)
    copies = distinct(ops[(ops >= 0) & (trace.host.name[np.maximum(ops, 0)] == copy_id)])
    widened, narrowed = set(), set()
    for op in copies.tolist():
        types = trace.input_types(op)
        if len(types) < 2:
            continue
        dst, src = DTYPE_BYTES.get(types[0], 0), DTYPE_BYTES.get(types[1], 0)
        if 0 < src < dst:
            widened.add(src)
        elif 0 < dst < src:
            narrowed.add(dst)
    both = widened & narrowed
    return min(both) if both else 0


def _distinct_per_chain(chain: np.ndarray, op: np.ndarray) -> dict[int, int]:
    """Number of distinct ops in each chain id."""
    if chain.size == 0:
        return {}
    order = np.lexsort((op, chain))
    chain, op = chain[order], op[order]
    first = np.concatenate(([True], (chain[1:] != chain[:-1]) | (op[1:] != op[:-1])))
    ids, counts = np.unique(chain[first], return_counts=True)
    return dict(zip(ids.tolist(), counts.tolist()))


def _event_shapes(a: Analysis) -> tuple[np.ndarray, np.ndarray]:
    """Id of the largest input shape of each device event's op (numbered in the order the ops
    first show each shape; -1 without a cost), and its element count."""
    dev, costs = a.trace.device, a.roofline.op_costs
    if not len(costs):
        return np.full(len(dev), -1, np.int64), np.zeros(len(dev), np.int64)
    ids: dict[tuple[int, ...], int] = {}
    shape = np.array([ids.setdefault(c.shape, len(ids)) for c in costs.table],
                     np.int64)[costs.which]
    numel = np.array([c.numel for c in costs.table], np.int64)[costs.which]
    _, first, shape = np.unique(shape, return_index=True, return_inverse=True)
    renumbered = np.empty(len(first), np.int64)
    renumbered[np.argsort(first, kind="stable")] = np.arange(len(first))
    shape = renumbered[shape.reshape(-1)]
    slot = costs.slots(dev.op)
    found = slot >= 0
    return np.where(found, shape[slot], -1), np.where(found, numel[slot], 0)


# The last analysis' chains and their fused times, held by a weak reference to its per-event times
# so that nothing is kept alive: ``check`` prices them and ``edit`` replays the same, computed once
# (benchmarks/BENCHMARKS-replay.md "The fused chains priced once").
_LAST_PRICED: list = []


def _priced_chains(a: Analysis) -> tuple[list[np.ndarray], np.ndarray]:
    """``chains(a)`` and each one's ``fused_ns``, computed once per analysis."""
    t = a.roofline.event_in_steps_ns
    hbm = a.ceilings.hbm_bytes_per_s
    if _LAST_PRICED and _LAST_PRICED[0]() is t and _LAST_PRICED[1] == hbm:
        return _LAST_PRICED[2], _LAST_PRICED[3]
    runs = chains(a)
    floor_ns, training = kernel_floor_ns(a), ran_backward(a.trace)
    fused = np.array([fused_ns(a, r, t, floor_ns, training) for r in runs], float)
    _LAST_PRICED[:] = [weakref.ref(t), hbm, runs, fused]
    return runs, fused


def check(a: Analysis) -> Finding | None:
    runs, fused = _priced_chains(a)
    if not runs:
        return None
    t = a.roofline.event_in_steps_ns
    n = max(len(a.steps), 1)
    chain_ns = np.array([t[r].sum() for r in runs], float)
    saving_ns = np.clip(chain_ns - fused, 0, None)
    idx = np.concatenate(runs)
    nbytes = float(a.roofline.event_bytes[idx].sum())
    bw = nbytes / (t[idx].sum() / 1e9) if t[idx].sum() else 0.0
    time_ms = chain_ns.sum() / 1e6 / n
    saving = saving_ns.sum() / 1e6 / n
    heaviest = runs[int(np.argmax(saving_ns))]
    fixes = [
        Fix("Let the compiler fuse the chain into one kernel", compile_line(a)),
        Fix("Use the fused built-ins instead of hand-written formulas",
            "F.gelu(x, approximate='tanh')   # not 0.5*x*(1+tanh(...))\n"
            "F.rms_norm(x, (d,), weight) / F.layer_norm(x, (d,), w, b)"),
        Fix("Write one fused kernel (Triton) for what the compiler cannot fuse",
            "# e.g. bias + activation + dropout + residual in one Triton kernel"),
    ]
    fused = kernel_fix(op_names_of_events(a.trace, idx))
    if fused is not None:  # a ready kernel for exactly this chain comes before writing one
        fixes.insert(2, fused)
    return make_finding(
        ID,
        "Chains of unfused memory-bound kernels",
        a.step_ms,
        saving,
        f"{len(runs) / n:.0f} chains per step of {idx.size / len(runs):.1f} memory-bound kernels "
        f"on average ({time_ms:.2f} ms per step) each read and write the whole tensor through HBM; "
        "fused, each chain is about one pass.",
        Evidence(
            numbers={
                "chained_kernel_ms_per_step": round(time_ms, 3),
                "chains_per_step": round(len(runs) / n, 1),
                "kernels_per_chain": round(idx.size / len(runs), 1),
                "achieved_bandwidth_GBps": round(bw / 1e9, 1),
                "hbm_roof_GBps": round(a.ceilings.hbm_bytes_per_s / 1e9, 0),
                "share_of_step_pct": round(100 * time_ms / a.step_ms, 1),
                # each chain becomes one kernel
                KERNELS_REMOVED: round((idx.size - len(runs)) / n, 1),
            },
            ops=op_names_of_events(a.trace, heaviest),
            kernels=kernel_names_of_events(a.trace, idx),
            sources=sources_of_events(a.trace, heaviest),
        ),
        tuple(fixes),
        wrong_fix="Lower-precision matmuls will not help: these kernels are bound by memory "
                  "bandwidth, not FLOPs.",
        major_share=MAJOR_SHARE,
    )


def edit(a: Analysis, finding: Finding | None = None) -> Edit | None:
    """Each chain's kernels at their share of its fused time (``fused_ns``), as ``check`` priced
    them; their launches stay (the fused built-ins and the compiler still launch; a compiled
    region's own host cost is the compile knob's: rules/knob_prices.py)."""
    runs, fused = _priced_chains(a)
    if not runs:
        return None
    t, dur = a.roofline.event_in_steps_ns, a.trace.device.dur
    shares = [np.full(r.size, min(f / ran, 1.0)) if (ran := float(t[r].sum())) > 0
              else np.ones(r.size) for r, f in zip(runs, fused.tolist())]
    idx = np.concatenate(runs).astype(np.int64)
    return Edit(device=idx, device_ns=dur[idx] * np.concatenate(shares),
                note="each chain at its fused time")


RULE = Rule(
    ID, "Unfused chains of elementwise kernels", check, __doc__ or "",
    needs=("launch_links", "cpu_ops"), order=40, blocked_by=("host-sync",), edit=edit,
)
