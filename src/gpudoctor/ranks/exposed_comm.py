"""``exposed-comm``: communication no compute hides, per step, split into the wait for the slowest
rank, the transfer at the achieved bus bandwidth, and the overlap possible but not taken
(ranks/comm.py says how). Each part is priced on its own; the finding's saving leaves out the wait
when ``straggler`` claims it, and the transfer that one bucket must leave exposed."""

from __future__ import annotations

from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.ranks.aligned import Aligned
from gpudoctor.ranks.comm import BUCKET_BYTES, CommSplit

ID = "exposed-comm"
MIN_MS = 0.05  # per step: below this the exposed time is within launch jitter
MIN_SHARE = 0.01  # of the step


def check(al: Aligned, split: CommSplit, straggler_fired: bool) -> Finding | None:
    exposed = split.mean("exposed")
    if exposed < max(MIN_MS, MIN_SHARE * al.step_ms):
        return None
    wait, transfer, missed = split.mean("wait"), split.mean("transfer"), split.mean("not_overlapped")
    saving = missed + (0.0 if straggler_fired else wait)
    numbers = {
        "exposed_ms_per_step": round(exposed, 4),
        "wait_for_slowest_ms": round(wait, 4),
        "transfer_ms": round(transfer, 4),
        "overlap_not_taken_ms": round(missed, 4),
        "comm_ms_per_step": round(split.mean("comm"), 4),
        "exposed_share_of_comm": round(exposed / split.mean("comm"), 4) if split.mean("comm") > 0 else 0.0,
    }
    return make_finding(
        ID, f"{exposed:.2f} ms per step of communication is not hidden behind compute",
        al.step_ms, saving,
        f"Of {split.mean('comm'):.2f} ms of collectives per step, {exposed:.2f} ms runs with no compute beside "
        f"it (mean over ranks): {wait:.2f} ms waiting for the slowest rank, {missed:.2f} ms that could have "
        f"overlapped the backward pass (issued earlier or in smaller buckets), {transfer:.2f} ms of transfer "
        "left with nothing to hide it.",
        Evidence(numbers=numbers), _fixes(missed, wait, straggler_fired),
        wrong_fix="A faster interconnect alone: the wait and the missed overlap stay",
    )


def _fixes(missed: float, wait: float, straggler_fired: bool) -> tuple[Fix, ...]:
    fixes = []
    if missed > 0:
        fixes.append(Fix(f"Overlap the all-reduces with backward: keep DDP's buckets near {BUCKET_BYTES >> 20} MiB "
                         "so the first ones start during backward",
                         "DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)"))
        fixes.append(Fix("With FSDP, prefetch the next all-gather",
                         "FSDP(model, backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=True)"))
        fixes.append(Fix("With gradient accumulation, skip the all-reduce on the accumulation steps",
                         "with model.no_sync(): loss.backward()  # all but the last micro-batch"))
    if wait > 0 and not straggler_fired:
        fixes.append(Fix("Even out the ranks' arrival: see the per-rank table for who arrives last"))
    fixes.append(Fix("Move fewer bytes: bf16 gradients (DDP comm hook) or a larger micro-batch per all-reduce",
                     "model.register_comm_hook(None, default_hooks.bf16_compress_hook)"))
    return tuple(fixes)
