"""host-sync: ``.item()``, ``.cpu()``, ``nonzero`` or explicit synchronizes drain the GPU queue.

Detects reads that wait for the GPU: ``.item()``, ``.cpu()``, ``nonzero`` and explicit
synchronizes, each followed by GPU idle until the host refills its queue (the "host-sync" idle
cause). A read right after ``torch.isnan`` / ``torch.isinf`` / ``torch.isfinite`` (``if
torch.isnan(loss) or torch.isinf(loss):``, as the Hugging Face ``Trainer`` does every step unless
``logging_nan_inf_filter=False``) is named as a finiteness check, and its fix comes first.

Priced as what removing the read-backs takes away: the idle after each sync where the GPU otherwise
stays busy. On a step the host holds back (GPU busy under rules/shared.GPU_BOUND_SHARE of it), that
idle is largely the host's pace with or without the sync, and what goes is the host's own work:
the reads, and the checks computed only to be read (``x.abs().amax().item()``,
``torch.isfinite(g).all().item()``: a full reduction right before the read and the elementwise
operator feeding it, on the same shape), priced at the host's time from the check's first operator
to the read's end less the time it waited in a sync. That is the saving there when larger than the
idle (evidence HOST_WORK_REMOVED: calibrated like the step).
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import SYNC_OPS, sync_calls
from gpudoctor.analysis.intervals import contains, overlap_per_window, union
from gpudoctor.core.arrays import distinct, intersection
from gpudoctor.core.finding import ALL_IDLE, HOST_WORK_REMOVED, Evidence, Finding, Fix, make_finding
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import sources_of_host, top_names
from gpudoctor.rules.shared import GPU_BOUND_SHARE, INTERVAL_COST_SHARE, every_n_steps, step_ops
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import HostCat

ID = "host-sync"
# A check read back to the host: a full reduction right before the read, and an elementwise
# operator feeding it on the same shape
_REDUCTIONS = frozenset({"aten::all", "aten::any", "aten::amax", "aten::amin", "aten::max",
                         "aten::min", "aten::sum", "aten::mean", "aten::norm",
                         "aten::linalg_vector_norm", "aten::count_nonzero"})
# A read of one of these, right before it on its thread: a finiteness check (the Trainer's NaN
# filter)
_FINITENESS_CHECKS = frozenset({"aten::isnan", "aten::isinf", "aten::isfinite"})
_ELEMENTWISE_CHECKS = frozenset({"aten::abs", "aten::isfinite", "aten::isnan", "aten::isinf",
                                 "aten::eq", "aten::ne", "aten::gt", "aten::ge", "aten::lt",
                                 "aten::le", "aten::logical_not"})


CHECK_OPS = "check_ops_per_step"  # evidence key; present on a step the host holds


def check(a: Analysis) -> Finding | None:
    idle = a.idle.ms(ID)
    culprits = a.idle.culprits.get(ID, np.empty(0, np.int64))
    if idle <= 0 or culprits.size == 0:
        return None
    trace, host = a.trace, a.trace.host
    weights = a.idle.culprit_idle_ns[ID].astype(float)
    # name each sync by the operator the user called (aten::item rather than cudaStreamSynchronize)
    named = host.outermost(culprits)
    n_steps = max(len(a.steps), 1)
    syncs = distinct(named).size
    if syncs == 0 or round(idle, 3) <= 0:
        return None  # no sync, or no idle to show for it: nothing to report
    shown = f"{idle:.2f}" if idle >= 0.005 else f"{idle:.3f}"  # never "0.00 ms"
    saving, numbers = idle, {}
    ops = step_ops(a)
    finiteness = _finiteness_reads(a, named, ops) / n_steps
    if finiteness > 0:
        numbers["finiteness_check_reads_per_step"] = round(finiteness, 2)
    if a.breakdown.busy_ms < GPU_BOUND_SHARE * a.step_ms:
        reads = _own_reads(a, culprits, ops)
        starts, ends, checks = _read_spans(a, ops, reads)
        host_ms = _host_work_ns(a, reads, starts, ends) / 1e6 / n_steps
        numbers = {CHECK_OPS: round(checks / n_steps, 2)}
        if host_ms > idle:
            saving = host_ms
            numbers[HOST_WORK_REMOVED] = round(host_ms, 3)
    evidence = Evidence(
        numbers={
            "gpu_idle_after_syncs_ms_per_step": round(idle, 3),
            "syncs_per_step": round(syncs / n_steps, 2),
            "share_of_step_pct": round(100 * idle / a.step_ms, 1),
            **numbers,
        },
        ops=top_names(trace, host.name[named], weights),
        sources=sources_of_host(trace, culprits, weights),
    )
    return make_finding(
        ID,
        "Host-device syncs stall the GPU",
        a.step_ms,
        saving,
        f"{_how_often(syncs, n_steps)} the host wait for the GPU, then the GPU wait for the "
        f"host to refill its queue: {shown} ms idle per step."
        + (" On this host-bound step the reads and the checks computed only for them hold "
           f"{saving:.2f} ms of the host's time." if HOST_WORK_REMOVED in numbers else ""),
        evidence,
        (*((_FINITENESS_FIX,) if finiteness > 0 else ()),
            _read_every_fix(saving, a.step_ms),
            Fix("Replace data-dependent Python branches with tensor ops",
                "x = torch.where(cond, a, b)   # instead of: if cond.item(): ..."),
            Fix("Find every hidden sync (.item, .cpu, .tolist, nonzero, bool(tensor))",
                "torch.cuda.set_sync_debug_mode('warn')"),
        ),
        wrong_fix="Adding DataLoader workers or CUDA streams will not help while the loop "
                  "itself blocks.",
        idle_ms=ALL_IDLE,
    )


_FINITENESS_FIX = Fix(
    "Stop reading a NaN/Inf check back every step (the Hugging Face Trainer does, unless "
    "told not to)",
    "TrainingArguments(..., logging_nan_inf_filter=False)   # Trainer: no torch.isnan(loss) / "
    "isinf read a step\n"
    "bad = bad | ~torch.isfinite(loss)   # your own loop: keep the flag on the GPU, read it "
    "every N steps")


def _finiteness_reads(a: Analysis, named: np.ndarray, ops: np.ndarray) -> int:
    """How many of the syncs' operators (``named``) read a finiteness check made right before them
    on their thread (``bool(torch.isnan(loss))``); ``ops``: the steps' top-level operators."""
    names, host = a.trace.strings, a.trace.host
    before = _op_before(a, ops, intersection(named, ops))
    return sum(1 for prev in before.tolist() if prev >= 0
               and names[host.name[prev]] in _FINITENESS_CHECKS)


def _op_before(a: Analysis, ops: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each operator of ``at`` (among ``ops``, the steps' top-level operators in time order),
    the operator right before it on its thread; -1 where none is."""
    host = a.trace.host
    before = np.full(at.size, -1, np.int64)
    for thread in distinct(host.thread[at]).tolist():
        seq = ops[host.thread[ops] == thread]
        mine = np.flatnonzero(host.thread[at] == thread)
        k = np.searchsorted(seq, at[mine]) - 1
        before[mine] = np.where(k >= 0, seq[np.maximum(k, 0)], -1)
    return before


# Syncs inside these causes' spans are part of that work, priced and fixed with it: an optimizer
# written per parameter reads its step count back once a parameter (the lab's optimizer_loop:
# 66 reads a step, gone with the foreach / fused optimizer), an autotuner times its trials (the
# multiscale_cudnn_benchmark twin: 41 convolutions a step waiting on their trial kernels).
_OWNED_BY = ("input-pipeline", "op-setup", "optimizer", "pageable-copy")


def _own_reads(a: Analysis, culprits: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """The steps' top-level operators (among ``ops``) that read a value back for the program
    itself: a sync operator (``.item()``, ``nonzero``...) or a copy to the host, holding a sync
    outside the work of another cause. An upload from pageable memory syncs too, but its fix is
    pinning (pageable-copy)."""
    host, dev = a.trace.host, a.trace.device
    ts = host.ts[culprits]
    own = np.ones(culprits.size, bool)
    for cause in _OWNED_BY:
        starts, ends = a.idle.labels.get(cause, (np.empty(0, np.int64), np.empty(0, np.int64)))
        own &= ~contains(starts, ends, ts)
    culprits = culprits[own]
    named = intersection(host.outermost(culprits), ops)
    sync_ops = a.trace.names_matching(lambda name: name in SYNC_OPS)[host.name[named]]
    readback = np.flatnonzero(np.isin(dev.kind,
                                      (int(Kind.MEMCPY_DTOH_PAGEABLE),
                                       int(Kind.MEMCPY_DTOH_PINNED)))
                              & (dev.launch >= 0))
    at = dev.launch[readback]
    top = host.outermost(at)
    return named[sync_ops | np.isin(named, top)]


def _read_spans(a: Analysis, ops: np.ndarray, reads: np.ndarray) -> tuple[np.ndarray,
                                                                          np.ndarray, int]:
    """Each read's stretch of host time (starts, ends) with the check computed only for it, and
    how many check operators there were. Before a read (``reads``, among ``ops``, the steps'
    top-level operators in time order) on its thread: a full reduction right before it, and the
    elementwise operator feeding the reduction on the same shape."""
    trace, host = a.trace, a.trace.host
    names = trace.strings
    starts, checks = host.ts[reads].copy(), 0
    reduction = _op_before(a, ops, reads)
    feeding = np.full(reads.size, -1, np.int64)
    feeding[reduction >= 0] = _op_before(a, ops, reduction[reduction >= 0])
    for k, (prev, first) in enumerate(zip(reduction.tolist(), feeding.tolist())):
        if prev < 0 or names[host.name[prev]] not in _REDUCTIONS:
            continue
        if (first < 0 or names[host.name[first]] not in _ELEMENTWISE_CHECKS
                or trace.input_dims(first)[:1] != trace.input_dims(prev)[:1]):
            first = prev
        starts[k] = host.ts[first]
        checks += 2 if first != prev else 1
    return starts, host.end[reads], checks


def _host_work_ns(a: Analysis, reads: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> float:
    """The host's time in the reads' stretches less the time it waited there in a sync runtime
    call (the GPU's work, not the host's)."""
    host = a.trace.host
    waits = np.flatnonzero(sync_calls(a.trace) & (host.cat >= HostCat.RUNTIME))
    total = float((ends - starts).sum())
    for thread in distinct(host.thread[reads]).tolist():
        mine = host.thread[reads] == thread
        on = waits[host.thread[waits] == thread]
        s, e = union(host.ts[on], host.end[on])
        total -= float(overlap_per_window(s, e, starts[mine], ends[mine]).sum())
    return max(total, 0.0)


def _how_often(syncs: int, n_steps: int) -> str:
    """"3 blocking syncs per step make", or "1 blocking sync in 3 steps makes" when there are
    fewer than one a step (never "0 ... per step")."""
    per_step = syncs / n_steps
    count, where = (round(per_step), "per step") if per_step >= 1 else (syncs,
                                                                        f"in {n_steps} steps")
    return f"{count} blocking sync{'s' if count > 1 else ''} {where} make{'' if count > 1 else 's'}"



def edit(a: Analysis, finding: Finding) -> Edit | None:
    """The reads leave the step: the syncs behind the idle no longer wait; on a host-bound step
    the reads and the checks computed only for them go too, host time and kernels (as priced)."""
    culprits = a.idle.culprits.get(ID, np.empty(0, np.int64))
    if culprits.size == 0:
        return None
    host, dev = a.trace.host, a.trace.device
    named = host.outermost(culprits)
    s, e = union(host.ts[named], host.end[named])
    syncs = np.flatnonzero(sync_calls(a.trace) & (host.cat >= HostCat.RUNTIME))
    unwait = syncs[contains(s, e, host.ts[syncs])].astype(np.int64)
    # on a step the host holds (its checks counted, HOST_WORK_REMOVED or not) the fix reads less
    # often: its reads and checks go whether or not their host time outweighed the idle
    if CHECK_OPS not in finding.evidence.numbers:
        return Edit(unwait=unwait, note="syncs removed")
    ops = step_ops(a)
    starts, ends, _ = _read_spans(a, ops, _own_reads(a, culprits, ops))
    rs, re_ = union(starts, ends)
    launched = dev.launch >= 0
    gone = np.flatnonzero(launched & contains(rs, re_, host.ts[np.maximum(dev.launch, 0)]))
    return Edit(host_removed_s=rs, host_removed_e=re_, unwait=unwait, device=gone.astype(np.int64),
                device_ns=np.zeros(gone.size), calls_removed=dev.launch[gone].astype(np.int64),
                note="reads and their checks removed")


def _read_every_fix(cost_ms: float, step_ms: float) -> Fix:
    """Reading the values back every N steps, N the smallest round interval at which the reads'
    cost this finding prices falls under INTERVAL_COST_SHARE of the step."""
    every = every_n_steps(cost_ms, step_ms)
    share = cost_ms / step_ms if step_ms > 0 else 0.0
    return Fix("Keep values on the GPU; read them back every N steps, not every step",
               f"running_loss += loss.detach()   # no sync; read it every {every} steps: the reads "
               f"hold {share:.1%} of a step now, under {INTERVAL_COST_SHARE:.0%} then\n"
               f"if step % {every} == 0:\n"
               f"    print((running_loss / {every}).item())")


RULE = Rule(
    ID, "Host-device synchronization in the step", check, __doc__ or "", needs=("launch_links",),
    order=10, idle_cause="host-sync", edit=edit,
)

