"""naive-attention: attention written as matmul -> softmax -> matmul materializes the S x S scores.

Detected from shapes: a softmax over a square [.., S, S] tensor (S >= 128) marks S; every kernel
whose op reads an [.., S, S] tensor, or is a matmul producing one, belongs to the pattern (forward
and backward). Priced as that time minus the pattern's matmul FLOPs at a fused-attention rate.
``scaled_dot_product_attention``'s own math fallback on float32 inputs is not this finding's but
fp32-matmul's (rules/fp32_matmul.py): the program already calls the fused API, and what keeps it
from the flash kernels is the dtype.

The fused API given its causal mask as a tensor (``attn_mask=mask``, one [S, S] mask shared by
the batch and the heads, in self-attention: ``masked_sdpa``) runs its fused kernels over every
score tile, where ``is_causal=True`` skips the tiles above the diagonal: priced as the main
attention kernel of each call at CAUSAL_SHARE of its time, forward and backward; the backward's
small kernels over the outputs keep theirs (tests/data/twins_h100/sdpa_float_causal_mask: the main
kernels took 2.1-2.4x the causal ones', the others the same). A mask that varies with the
batch (padding) is not this pattern; a shared square one may still be a window rather than
causal, which the trace cannot tell: the finding says so.
"""

from __future__ import annotations

import re

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.core.arrays import difference, distinct, union
from gpudoctor.core.finding import KERNELS_REMOVED, Evidence, Finding, Fix, make_finding
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import (
    ATTENTION_EFFICIENCY,
    kernel_names_of_events,
    launched_inside,
    op_names_of_events,
    sources_of_events,
)
from gpudoctor.rules.shared import attention_events, attention_seqs, step_of
from gpudoctor.trace.kernels import MATRIX_KINDS_FOR_ATTENTION, Kind
from gpudoctor.trace.model import HostCat

ID = "naive-attention"


# Operators that mask a square score matrix: a causal mask is built with triu / tril and applied
# with masked_fill or where (a padding mask is applied the same way).
MASK_OPS = ("aten::masked_fill", "aten::masked_fill_", "aten::where", "aten::triu", "aten::tril")
SDPA_OP = "aten::scaled_dot_product_attention"
_SDPA_BACKWARD = re.compile(r"^autograd::engine::evaluate_function: ScaledDotProduct\w*Backward")
MIN_MASKED_SEQ = 128
# The causal kernels compute the tiles on and below the diagonal: about half of S x S
CAUSAL_SHARE = 0.5


def _masked(a: Analysis) -> bool:
    """Whether the steps run a masking operator on the attention's S x S scores."""
    names, host_name = a.trace.strings, a.trace.host.name
    seqs = attention_seqs(a)
    return any(c.square in seqs and names[host_name[i]] in MASK_OPS
               for i, c in a.roofline.op_costs.items())


def _fixes(masked: bool) -> tuple[Fix, ...]:
    """SDPA with the program's masking: none where the scores are not masked (an encoder's
    attention), else the causal flag or the program's own mask; the loader call whatever model
    class the program uses."""
    call = ("out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)"
            "   # or attn_mask=mask: the mask the program applies to the scores" if masked else
            "out = torch.nn.functional.scaled_dot_product_attention(q, k, v)   # no mask: the "
            "scores are not masked")
    return (Fix("Use fused attention (FlashAttention / memory-efficient / cuDNN kernels)", call),
            Fix("In Hugging Face models, pick the fused implementation",
                "model = ModelClass.from_pretrained(name, attn_implementation='sdpa')   # the "
                "class the program loads"))


def check(a: Analysis) -> Finding | None:
    idx = attention_events(a)
    if idx.size == 0:
        return _check_masked_sdpa(a)
    dev, rf = a.trace.device, a.roofline
    n = max(len(a.steps), 1)
    time_ns = float(rf.event_in_steps_ns[idx].sum())
    matmul = np.isin(dev.kind[idx], MATRIX_KINDS_FOR_ATTENTION)
    flops = float(rf.event_flops[idx][matmul].sum())
    fused_ns = flops / (a.ceilings.best_matrix_flops * ATTENTION_EFFICIENCY) * 1e9
    saving = max(time_ns - fused_ns, 0.0) / 1e6 / n
    time_ms = time_ns / 1e6 / n
    softmax = dev.kind[idx] == Kind.SOFTMAX
    softmax_ms = float(rf.event_in_steps_ns[idx][softmax].sum()) / 1e6 / n
    # a fused kernel per softmax pass (one forward, one backward per call) replaces the pattern
    removed = (idx.size - int(softmax.sum())) / n
    return make_finding(
        ID,
        "Attention materializes the S x S score matrix",
        a.step_ms,
        saving,
        f"Attention written as matmul + softmax + matmul costs {time_ms:.2f} ms per step "
        f"({softmax_ms:.2f} ms in softmax alone) writing and re-reading the scores through HBM.",
        Evidence(
            numbers={
                "attention_pattern_ms_per_step": round(time_ms, 3),
                "softmax_ms_per_step": round(softmax_ms, 3),
                "fused_estimate_ms_per_step": round(fused_ns / 1e6 / n, 3),
                "share_of_step_pct": round(100 * time_ms / a.step_ms, 1),
                KERNELS_REMOVED: round(removed, 1),
            },
            ops=op_names_of_events(a.trace, idx),
            kernels=kernel_names_of_events(a.trace, idx),
            sources=sources_of_events(a.trace, idx),
        ),
        _fixes(_masked(a)),
        wrong_fix="Fewer heads or a smaller batch shrink the symptom, not the S x S traffic "
                  "per head.",
    )



def edit(a: Analysis, finding: Finding) -> Edit | None:
    """One fused kernel per softmax pass takes the pattern's time at the fused rate; the pattern's
    other kernels go, with their launches and every kernel launched inside the pattern's host
    stretches (the copies of a transposed operand, the mask's). The host loses each stretch of the
    pattern's operators (``pattern_spans``: the matmuls, the scale and mask, the softmax, and the
    views and transposes between them, forward and backward) and pays one operator with its launch
    per fused kernel, at the cost of an added operator (replay/edits.py ``added_op_ns``)."""
    idx = attention_events(a)
    if idx.size == 0:
        return _edit_masked_sdpa(a)
    dev, rf = a.trace.device, a.roofline
    softmax = dev.kind[idx] == Kind.SOFTMAX
    if not softmax.any():
        return None
    matmul = np.isin(dev.kind[idx], MATRIX_KINDS_FOR_ATTENTION)
    fused_ns = float(rf.event_flops[idx][matmul].sum()) / (a.ceilings.best_matrix_flops * ATTENTION_EFFICIENCY) * 1e9
    starts, ends, threads = pattern_spans(a, idx)
    # every kernel launched inside a stretch goes with it (the copies a matmul of a transposed
    # operand makes, the mask's), the fused kernels aside
    kept = idx[softmax]
    gone = difference(union(idx[~softmax], launched_inside(a, starts, ends, threads)), kept)
    kept_ns = np.full(kept.size, min(fused_ns, float(dev.dur[idx].sum())) / kept.size)
    calls = dev.launch[np.concatenate([kept, gone])]
    return Edit(device=np.concatenate([kept, gone]).astype(np.int64),
                device_ns=np.concatenate([kept_ns, np.zeros(gone.size)]),
                calls_removed=calls[calls >= 0].astype(np.int64),
                host_removed_s=starts, host_removed_e=ends,
                added_at=kept.astype(np.int64), added_launches=1.0, note="attention fused")


def masked_sdpa(a: Analysis) -> tuple[np.ndarray, int]:
    """The main fused attention kernel (the longest) of each forward call and backward node of
    ``scaled_dot_product_attention`` calls given one square mask for the whole batch in
    self-attention (mask [S, S] or [1, 1, S, S], query and key of length S >= MIN_MASKED_SEQ), and
    S; empty where any call in the steps has no such mask (the backward's nodes cannot be told
    apart)."""
    trace, host, dev = a.trace, a.trace.host, a.trace.device
    none = (np.empty(0, np.int64), 0)
    ops = host.cat == HostCat.OP
    calls = np.flatnonzero(trace.names_matching(lambda name: name == SDPA_OP)[host.name] & ops)
    calls = calls[step_of(a, host.ts[calls]) >= 0]
    if calls.size == 0:
        return none
    seqs = {_shared_square_mask(trace.input_dims(int(i))) for i in calls.tolist()}
    if len(seqs) != 1 or (seq := seqs.pop()) < MIN_MASKED_SEQ:
        return none
    backward = np.flatnonzero(
        trace.names_matching(lambda name: _SDPA_BACKWARD.match(name) is not None)[host.name] & ops)
    spans = np.concatenate([calls, backward[step_of(a, host.ts[backward]) >= 0]])
    inside = launched_inside(a, host.ts[spans], host.end[spans], host.thread[spans])
    inside = inside[dev.kind[inside] == Kind.ATTENTION]
    at, thread = host.ts[dev.launch[inside]], host.thread[dev.launch[inside]]
    main = set()
    for span in spans.tolist():  # a backward runs small O(S) kernels beside its main one
        mine = inside[(thread == host.thread[span]) & (at >= host.ts[span]) & (at < host.end[span])]
        if mine.size:
            main.add(int(mine[np.argmax(dev.dur[mine])]))
    # under autocast the call re-dispatches to itself: the inner call's kernel is the outer's
    return np.array(sorted(main), np.int64), seq


def _shared_square_mask(dims: list) -> int:
    """S where the recorded inputs are (q, k, v, mask, ...) with q and k of length S and a mask of
    [S, S] or [1, 1, S, S]; 0 otherwise."""
    if len(dims) < 4 or not all(isinstance(d, list) for d in dims[:4]):
        return 0
    q, k, _v, mask = dims[:4]
    if len(q) < 2 or len(k) < 2 or q[-2] != k[-2]:
        return 0
    seq = q[-2]
    shared = mask == [seq, seq] or mask == [1, 1, seq, seq]
    return int(seq) if shared else 0


def _check_masked_sdpa(a: Analysis) -> Finding | None:
    idx, seq = masked_sdpa(a)
    if idx.size == 0:
        return None
    n = max(len(a.steps), 1)
    time_ms = float(a.roofline.event_in_steps_ns[idx].sum()) / 1e6 / n
    saving = time_ms * (1.0 - CAUSAL_SHARE)
    return make_finding(
        ID,
        "Attention given its causal mask as a tensor computes every score tile",
        a.step_ms,
        saving,
        f"scaled_dot_product_attention is given one [{seq}, {seq}] mask for the whole batch "
        f"(attn_mask=...): its fused kernels take {time_ms:.2f} ms a step over all {seq} x {seq} "
        "scores. If the mask is causal, is_causal=True skips the tiles above the diagonal (about "
        "half the work); a window or other pattern shared by every sequence is not, and the trace "
        "cannot tell which.",
        Evidence(
            numbers={
                "attention_kernels_ms_per_step": round(time_ms, 3),
                "sequence_length": float(seq),
                "causal_share": CAUSAL_SHARE,
                "share_of_step_pct": round(100 * time_ms / a.step_ms, 1),
            },
            ops=op_names_of_events(a.trace, idx),
            kernels=kernel_names_of_events(a.trace, idx),
            sources=sources_of_events(a.trace, idx),
        ),
        (
            Fix("A causal mask: drop it and let SDPA skip the masked half",
                "out = F.scaled_dot_product_attention(q, k, v, is_causal=True)"
                f"   # was attn_mask=<[{seq}, {seq}] mask>"),
        ),
        wrong_fix="A boolean mask instead of a float one does not help: any mask tensor keeps "
                  "the kernels on every tile.",
    )


def _edit_masked_sdpa(a: Analysis) -> Edit | None:
    """The masked calls' fused attention kernels at CAUSAL_SHARE of their time."""
    idx, _seq = masked_sdpa(a)
    if idx.size == 0:
        return None
    return Edit(device=idx, device_ns=a.trace.device.dur[idx].astype(float) * CAUSAL_SHARE,
                note="attention kernels causal")


def pattern_spans(a: Analysis, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The host stretches the attention pattern's operators run in: on each thread, from a top-level
    operator that launched one of ``idx`` to the last such operator before any top-level operator
    that launches other GPU work; operators that launch nothing in between (views, transposes, a
    backward node of a reshape) belong to the stretch. Returns starts, ends and threads."""
    trace = a.trace
    host, dev = trace.host, trace.device
    launched = dev.launch >= 0
    top_of = host.outermost()
    owner = np.full(len(dev), -1, np.int64)
    owner[launched] = top_of[dev.launch[launched]]
    mine = np.zeros(len(host), bool)
    mine[owner[idx][owner[idx] >= 0]] = True
    others = np.zeros(len(host), bool)
    rest = np.ones(len(dev), bool)
    rest[idx] = False
    others[owner[rest & (owner >= 0)]] = True
    others &= ~mine
    tops = np.flatnonzero((host.cat == HostCat.OP) & (host.top_op < 0))
    starts: list[int] = []
    ends: list[int] = []
    threads: list[int] = []
    for thread in distinct(host.thread[tops]).tolist():
        seq = tops[host.thread[tops] == thread]
        seq = seq[np.argsort(host.ts[seq], kind="stable")]
        first = last = -1
        for op in seq.tolist():
            if mine[op]:
                first = op if first < 0 else first
                last = op
            elif others[op] and first >= 0:
                starts.append(int(host.ts[first]))
                ends.append(int(host.end[last]))
                threads.append(thread)
                first = last = -1
        if first >= 0:
            starts.append(int(host.ts[first]))
            ends.append(int(host.end[last]))
            threads.append(thread)
    return np.array(starts, np.int64), np.array(ends, np.int64), np.array(threads, np.int64)


RULE = Rule(
    ID, "Unfused (naive) attention", check, __doc__ or "", needs=("launch_links", "cpu_ops"),
    order=50, edit=edit,
)
