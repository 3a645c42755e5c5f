"""``straggler``: one rank reaches the collectives last and every other rank waits for it.

On aligned clocks each matched collective's latest starter holds up the rest; a rank is the
straggler when the wait it imposes (the other ranks' mean time waiting inside the collectives it
arrived last at) is above noise: 50 us and 1% of the step per step. Unlike a top-k pick, a run
whose ranks arrive together has no straggler.

Why it is late, in the order checked (the first that explains at least half its lateness wins):
its own GPU idle by cause against the other ranks' median (input pipeline, host sync, host
work...); its kernels running slower than the same kernels elsewhere (a slower or throttled GPU:
its NVML clocks and throttle reasons); more GPU work than the others (uneven batches, MoE load).
Priced as the wait it imposes: the others' time waiting in collectives for it, per step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding, severity_for, speedup
from gpudoctor.ranks.aligned import Aligned
from gpudoctor.ranks.summary import RankSummary

ID = "straggler"
NOISE_MS = 0.05  # per step: launch jitter and clock-alignment error stay well below (tests/test_ranks.py)
NOISE_SHARE = 0.01  # of the step
LATE_NS = 10_000  # an instance the others waited >10 us for on average counts as held up
EXPLAINS = 0.5  # a cause must account for this share of the lateness to be named
SLOWER_KERNELS = 1.03  # the same kernels >= 3% slower: the GPU, not the work

_IDLE_FIXES = {
    "input-pipeline": (
        Fix("Give this rank's DataLoader more workers, pinned memory and prefetching",
            "DataLoader(ds, num_workers=8, pin_memory=True, prefetch_factor=4, persistent_workers=True)"),
        Fix("Check the node's CPU and disk: one host serving its GPUs more slowly than the others"),
    ),
    "host-sync": (Fix("Remove the host syncs (.item(), .cpu(), printing a tensor) this rank alone makes, "
                      "e.g. logging only on rank 0"),),
    "host-work": (Fix("Move the host work this rank alone does (logging, checkpointing, evaluation on rank 0) "
                      "off the step, or to a background thread"),),
}
_GPU_FIXES = (
    Fix("Check this GPU's clocks, power and temperature (nvidia-smi -q -d CLOCK,PERFORMANCE,TEMPERATURE)"),
    Fix("Move the job off the node or replace the card if it stays slower"),
)
_WORK_FIXES = (
    Fix("Balance the work per rank: equal batch sizes and sequence lengths (bucketed sampling), "
        "balanced MoE routing (auxiliary load-balancing loss)"),
)


@dataclass(frozen=True)
class Straggler:
    rank: int  # the rank number
    index: int  # its place in Aligned.summaries
    imposed_ms: float  # per step: the others' mean wait in the collectives it arrived last at
    held_per_step: float  # collectives per step it arrived last at, holding the others >10 us
    cause: str  # an idle cause, "slower-gpu", "more-work" or "unexplained"
    numbers: dict[str, float | int | str] = field(default_factory=dict)


def imposed_per_rank(al: Aligned) -> tuple[np.ndarray, np.ndarray]:
    """ms per step each rank made the others wait, and how many collectives per step it held up."""
    r = len(al.summaries)
    rows = al.in_steps()
    wait = al.wait[rows]
    if not len(wait) or r < 2:
        return np.zeros(r), np.zeros(r)
    latest = wait.argmin(axis=1)  # its own wait is 0
    others_mean = wait.sum(axis=1) / (r - 1)
    imposed = np.bincount(latest, weights=others_mean, minlength=r) / max(al.steps, 1) / 1e6
    held = others_mean > LATE_NS  # ties (every rank on time) hold no one up
    return imposed, np.bincount(latest[held], minlength=r) / max(al.steps, 1)


def find_straggler(al: Aligned) -> Straggler | None:
    imposed, last = imposed_per_rank(al)
    if not len(imposed):
        return None
    i = int(np.argmax(imposed))
    if imposed[i] < max(NOISE_MS, NOISE_SHARE * al.step_ms):
        return None
    others = [s for k, s in enumerate(al.summaries) if k != i]
    cause, numbers = _cause(al.summaries[i], others, float(imposed[i]))
    return Straggler(al.summaries[i].rank, i, float(imposed[i]), float(last[i]), cause, numbers)


def _cause(s: RankSummary, others: list[RankSummary], late_ms: float) -> tuple[str, dict]:
    idle = {c: v - float(np.median([o.idle_by_cause.get(c, 0.0) for o in others]))
            for c, v in s.idle_by_cause.items()}
    cause, excess = max(idle.items(), key=lambda kv: kv[1], default=("", 0.0))
    if excess >= EXPLAINS * late_ms:
        return cause, {"idle_cause": cause, "idle_excess_ms": round(excess, 4)}
    common = [k for k in s.kernel_ms if all(k in o.kernel_ms for o in others)]
    mine = sum(s.kernel_ms[k] for k in common)
    theirs = sum(float(np.median([o.kernel_ms[k] for o in others])) for k in common)
    if common and mine - theirs >= EXPLAINS * late_ms and mine >= SLOWER_KERNELS * theirs:
        return "slower-gpu", {"kernel_ms": round(mine, 4), "others_kernel_ms": round(theirs, 4),
                              "kernel_slowdown": round(mine / theirs, 4), **_clocks(s, others)}
    extra = s.compute_ms - float(np.median([o.compute_ms for o in others]))
    if extra >= EXPLAINS * late_ms:
        extra_kernels = s.kernels_per_step - float(np.median([o.kernels_per_step for o in others]))
        return "more-work", {"compute_excess_ms": round(extra, 4), "extra_kernels_per_step": round(extra_kernels, 2)}
    return "unexplained", {"idle_excess_ms": round(max(excess, 0.0), 4)}


def _clocks(s: RankSummary, others: list[RankSummary]) -> dict:
    out: dict = {}
    mine = s.env.get("sm_clock_mhz_mean")
    theirs = [o.env["sm_clock_mhz_mean"] for o in others if "sm_clock_mhz_mean" in o.env]
    if mine is not None and theirs:
        out["sm_clock_mhz"] = mine
        out["others_sm_clock_mhz"] = float(np.median(theirs))
    if s.env.get("throttle_reasons_seen"):
        out["throttle_reasons"] = ", ".join(s.env["throttle_reasons_seen"])
    return out


def check(al: Aligned) -> Finding | None:
    st = find_straggler(al)
    if st is None:
        return None
    why = _why(st)
    numbers = {"rank": st.rank, "wait_imposed_ms_per_step": round(st.imposed_ms, 4),
               "held_up_per_step": round(st.held_per_step, 2), "cause": st.cause, **st.numbers}
    return make_finding(
        ID, f"Rank {st.rank} is the straggler: the other ranks wait {st.imposed_ms:.2f} ms per step for it",
        al.step_ms, st.imposed_ms,
        f"Rank {st.rank} reaches {st.held_per_step:.3g} collective(s) per step last; every other rank waits "
        f"inside them for it, {st.imposed_ms:.2f} ms per step on average. {why}",
        Evidence(numbers=numbers), _fixes(st.cause),
        wrong_fix="Tuning NCCL or the interconnect: the time is spent waiting for one rank, not moving data",
    )


def _why(st: Straggler) -> str:
    n = st.numbers
    if st.cause == "slower-gpu":
        clock = (f" Its SM clock averaged {n['sm_clock_mhz']:.0f} MHz against {n['others_sm_clock_mhz']:.0f} MHz "
                 "on the others." if "sm_clock_mhz" in n else "")
        return (f"Why: the same kernels take {n['kernel_ms']:.2f} ms per step on it against {n['others_kernel_ms']:.2f}"
                f" ms on the others ({n['kernel_slowdown']:.2f}x): a slower GPU.{clock}")
    if st.cause == "more-work":
        return (f"Why: its GPU computes {n['compute_excess_ms']:.2f} ms more per step than the others' median "
                f"({n['extra_kernels_per_step']:+.0f} kernels): it is given more work.")
    if st.cause == "unexplained":
        return "Why: neither its idle, its kernel times nor its amount of work differ enough; look at its timeline."
    return f"Why: {st.cause} holds it up {n['idle_excess_ms']:.2f} ms per step more than the others' median."


def _fixes(cause: str) -> tuple[Fix, ...]:
    if cause == "slower-gpu":
        return _GPU_FIXES
    if cause == "more-work":
        return _WORK_FIXES
    if cause == "unexplained":
        return (Fix("Open this rank's timeline beside another's (gpudoctor analyze RANK_TRACE --html) and compare "
                    "what runs before its late collective"),)
    return _IDLE_FIXES.get(cause, (Fix(f"Remove the {cause} idle on this rank (see its own report)"),))


# A straggler held back by dispatch (the host's time per operator) is late by time the profiler
# stretches with every event it records: priced for the step as it runs without the profiler, its
# wait shrinks like the step (U / P), as the single-GPU host-side findings do (rules/calibrate.py).
# Host work outside operators (a sleep, a slow loader) takes as long with the profiler or without.
# A 2-GPU DDP run (H100 x2, 2026-11-25, rank 1 sleeping 20 ms a step): the others waited 54.1 ms a
# profiled step (61.0 ms, 35.8 ms unprofiled); the healthy twin's step was 19.1 ms unprofiled.


def priced_unprofiled(finding: Finding, unprofiled_step_ms: float | None, profiled_step_ms: float) -> Finding:
    """A dispatch-caused straggler finding re-priced for the unprofiled step; any other unchanged."""
    u, p = unprofiled_step_ms, profiled_step_ms
    if finding.id != ID or not u or not p or u >= p or finding.evidence.numbers.get("cause") != "dispatch":
        return finding
    saving = finding.saving_ms * u / p
    numbers = dict(finding.evidence.numbers, wait_imposed_in_profiled_trace_ms=round(finding.saving_ms, 4),
                   unprofiled_scale=round(u / p, 4))
    title = finding.title.replace(f"{finding.saving_ms:.2f} ms", f"{saving:.2f} ms")
    return dataclasses.replace(finding, title=title, saving_ms=saving, predicted_speedup=speedup(u, saving),
                               severity=severity_for(saving, u, finding.severity_floor),
                               evidence=dataclasses.replace(finding.evidence, numbers=numbers))
