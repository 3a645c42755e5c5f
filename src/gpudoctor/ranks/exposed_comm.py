"""``exposed-comm``: communication no compute hides, per step, split into the wait for the slowest
rank, the transfer at the achieved bus bandwidth, and the overlap possible but not taken
(ranks/comm.py says how, and its causes: gradient sets reduced again under accumulation, one
bucket too big, collectives issued late). Each part is priced on its own; the finding's saving
leaves out the wait when ``straggler`` claims it, and the transfer that one bucket must leave
exposed."""

from __future__ import annotations

from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.ranks.aligned import Aligned
from gpudoctor.ranks.comm import BUCKET_BYTES, CommSplit

ID = "exposed-comm"
TITLE = "Communication no compute hides (wait, transfer, overlap not taken)"  # the rule's line in `gpudoctor rules`
MIN_MS = 0.05  # per step: below this the exposed time is within launch jitter
MIN_SHARE = 0.01  # of the step
# What hiding a collective under compute costs that compute, per ms of the collective alone
# (plan/comm.py's dp_overlap, same model): under GEMMs an all-reduce takes 1.956x as long and the
# compute beside it runs at 1 / 1.137 of its rate (hardware/overlap.py, mixed as in a transformer
# step), so 1.956 x (1 - 1 / 1.137). Measured: benchmarks/BENCHMARKS-multi-gpu.md "Evidence moved
# from the source: ranks".
OVERLAP_COST = 1.956 * (1.0 - 1.0 / 1.137)

_NO_SYNC = (
    Fix("Skip the gradient all-reduce on all but the last micro-batch of each optimizer step "
        "(accelerate's accumulate() and Lightning's accumulate_grad_batches do this for you)",
        "ctx = model.no_sync() if i < accum - 1 else contextlib.nullcontext()\n"
        "with ctx: loss.backward()"),
    Fix("With FSDP2, turn the reduction off on the micro-batches before the last",
        "model.set_requires_gradient_sync(i == accum - 1)"),
)
_BUCKETS = (
    Fix(f"Overlap the all-reduces with backward: keep DDP's buckets near {BUCKET_BYTES >> 20} MiB "
        "so the first ones start during backward",
        "DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)"),
)
_PREFETCH = (
    Fix("Issue the collectives earlier: with FSDP, prefetch the next all-gather",
        "FSDP(model, backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=True)"),
)


def check(al: Aligned, split: CommSplit, straggler_fired: bool) -> Finding | None:
    exposed = split.mean("exposed")
    if exposed < max(MIN_MS, MIN_SHARE * al.step_ms):
        return None
    wait, transfer, missed = split.mean("wait"), split.mean("transfer"), split.mean(
        "not_overlapped")
    causes = split.by_cause()
    cause = max(causes, key=lambda c: causes[c]) if missed > 0 else ""
    # overlapping is not free: the missed overlap that moves under compute (a bucket too big, a
    # collective issued late; not accumulation's extra sets, which no_sync removes) slows that
    # compute while it runs beside it
    hidden = causes["bucket"] + causes["issued-late"]
    penalty = hidden * OVERLAP_COST
    saving = missed - penalty + (0.0 if straggler_fired else wait)
    numbers = {
        "exposed_ms_per_step": round(exposed, 4),
        "wait_for_slowest_ms": round(wait, 4),
        "transfer_ms": round(transfer, 4),
        "overlap_not_taken_ms": round(missed, 4),
        **{f"overlap_not_taken_{c.replace('-', '_')}_ms": round(v, 4) for c, v in causes.items()},
        "overlap_not_taken_cause": cause,
        "overlap_slows_compute_ms": round(penalty, 4),
        "comm_ms_per_step": round(split.mean("comm"), 4),
        "exposed_share_of_comm": round(exposed / split.mean("comm"), 4)
        if split.mean("comm") > 0 else 0.0,
    }
    if causes["accumulation"] > 0:
        numbers["gradient_sets_per_step"] = round(split.accumulated_sets, 2)
    return make_finding(
        ID, _title(exposed, cause, split.accumulated_sets),
        al.step_ms, saving,
        f"Of {split.mean('comm'):.2f} ms of collectives per step, {exposed:.2f} ms runs with no "
        f"compute beside it (mean over ranks): {wait:.2f} ms waiting for the slowest rank, "
        f"{missed:.2f} ms that could have been overlapped or "
        f"skipped{_missed_parts(causes, split.accumulated_sets)}, {transfer:.2f} ms of transfer "
        "left with nothing to hide it."
        + (" Overlapped, those collectives would slow the compute beside them by about "
           f"{penalty:.2f} ms (measured under NCCL traffic), priced in." if penalty > 0 else ""),
        Evidence(numbers=numbers), _fixes(cause, missed, wait, straggler_fired),
        wrong_fix="A faster interconnect alone: the wait and the missed overlap stay",
    )


def _title(exposed: float, cause: str, sets: float) -> str:
    if cause == "accumulation":
        return (f"The gradients are all-reduced {sets:.0f} times per optimizer step (gradient "
                f"accumulation without no_sync): {exposed:.2f} ms per step of communication "
                "is exposed")
    return f"{exposed:.2f} ms per step of communication is not hidden behind compute"


def _missed_parts(causes: dict[str, float], sets: float) -> str:
    parts = []
    if causes["accumulation"] > 0:
        parts.append(f"{causes['accumulation']:.2f} ms reducing gradient sets that the next "
                     f"micro-batch reduces again ({sets:.0f} backward passes per step, each "
                     "followed by the same all-reduces: only the last set is used)")
    if causes["bucket"] > 0:
        parts.append(f"{causes['bucket']:.2f} ms of a last all-reduce too large to overlap (one "
                     "bucket of gradients started after the whole backward)")
    if causes["issued-late"] > 0:
        parts.append(
            f"{causes['issued-late']:.2f} ms of collectives that could have been issued earlier")
    return f" ({'; '.join(parts)})" if parts else ""


def _fixes(cause: str, missed: float, wait: float, straggler_fired: bool) -> tuple[Fix, ...]:
    order = {"accumulation": (_NO_SYNC, _BUCKETS, _PREFETCH),
             "bucket": (_BUCKETS, _PREFETCH, _NO_SYNC),
             "issued-late": (_BUCKETS, _PREFETCH, _NO_SYNC)}
    fixes = [f for group in order.get(cause, ()) for f in group] if missed > 0 else []
    if wait > 0 and not straggler_fired:
        fixes.append(
            Fix("Even out the ranks' arrival: see the per-rank table for who arrives last"))
    fixes.append(Fix("Move fewer bytes: bf16 gradients (DDP comm hook) or a larger micro-batch per "
                     "all-reduce",
                     "model.register_comm_hook(None, default_hooks.bf16_compress_hook)"))
    return tuple(fixes)
