"""``straggler``: one rank reaches the collectives last and every other rank waits for it.

On aligned clocks each matched collective's latest starter holds up the rest; a rank is the
straggler when the wait it imposes (the other ranks' mean time waiting inside the collectives it
arrived last at) is above noise: 50 us and 1% of the step per step. Unlike a top-k pick, a run
whose ranks arrive together has no straggler.

Why it is late, from its host's own step (analysis/host_time.py) against the other ranks' outside
their waits for the collectives: the cause its host spends the most extra time in (host work such
as a sleep, file I/O or Python outside any operator; input wait; its own syncs; op dispatch). A
cause the profiler inflates (dispatch: ~3 us per recorded event, analysis/observer.py) is
de-inflated first, and between ranks that issue the same ops a dispatch difference counts only
above the profiler's own noise. A rank whose extra dispatch follows syncs the others do not make,
its GPU idle after them, is late for its syncs (the drained queue refilled: analysis/idle.py).
Then the GPU: its kernels slower than the same kernels elsewhere on the same work (a slower or
throttled GPU: its NVML clocks and throttle reasons), or more GPU work than the others (uneven
batches, MoE load): its FLOPs or bytes per step, by the cost model from the ops' shapes, at least
MORE_WORK times the others', or its compute longer where the shapes are unknown; either priced at
its GPU's extra time at most. Ranks without host steps (hand-built summaries, CPU ranks) are
judged on their idle by cause instead, and priced at that cause's excess over the others', capped
at the wait they impose; a CPU rank's operators stand for its kernels (ranks/host_ops.py: the same
operators slower on the same work is "slower-cpu", its cores slower or shared).

Priced as what the rank's extra host time costs the job per step, capped at the wait it imposes
in the profiled trace: that wait sums the rank's lateness once per collective it holds up, and
counts the profiler's own time; a rank late only within the profiler's noise is reported at no
cost (severity info), the ranks of a healthy job being equal without the profiler; so is a rank
late on average but not step after step (ranks/step_noise.py: ranks on shared CPU cores taking
turns), whatever cause its summed lateness was given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import numpy as np

from gpudoctor.analysis.host_time import WAITS
from gpudoctor.analysis.observer import PROFILER_OVERHEAD_NS_PER_EVENT
from gpudoctor.core.arrays import median
from gpudoctor.core.finding import (
    MAX_SAVING_SHARE,
    Evidence,
    Finding,
    Fix,
    make_finding,
    severity_for,
    speedup,
)
from gpudoctor.ranks.aligned import Aligned
from gpudoctor.ranks.step_noise import lateness
from gpudoctor.ranks.summary import RankSummary

ID = "straggler"
TITLE = "One rank reaches the collectives last; the others wait for it"  # the rule's line in `gpudoctor rules`
NOISE_MS = 0.05  # per step: launch jitter and clock-alignment error stay well below (tests/test_ranks.py)
NOISE_SHARE = 0.01  # of the step
LATE_NS = 10_000  # an instance the others waited >10 us for on average counts as held up
EXPLAINS = 0.5  # a cause must account for this share of the lateness to be named
SLOWER_KERNELS = 1.03  # the same kernels >= 3% slower: the GPU, not the work
# FLOPs or bytes per step >= 5% above the others': more work, whatever its kernels' speed. The cost
# model gives ranks running the same shapes the same figures exactly (the 2x H100 DDP ranks:
# 1.334e12 FLOPs and 1.126e10 bytes a step each, tests/data/ddp2_h100); the margin is for steps
# whose shapes vary (sequence lengths)
MORE_WORK = 1.05
PROFILER_NOISE_CAUSE = "profiler-noise"
# a rank's own syncs: at least this many sync events a step more than the others' median, and this
# many times theirs (DDP and FSDP make a few of their own on every rank)
OWN_SYNCS = 2.0
OWN_SYNC_RATIO = 3.0
STEP_NOISE_CAUSE = "step-noise"  # late on average but not step after step (ranks/step_noise.py)
NOISE_CAUSES = frozenset({PROFILER_NOISE_CAUSE, STEP_NOISE_CAUSE})
# Ranks whose recorded events per step differ by at most this share issue the same ops.
SAME_EVENTS = 0.01
# Between ranks that issue the same ops, a host-time difference in a cause counts only above this
# share of the profiler's estimated time for that cause's events (events x 3 us): ranks doing the
# same work differ in profiled dispatch by up to about a quarter of that estimate, while unprofiled
# neither issues its ops more slowly, so half the estimate is about twice the largest difference
# seen
# (tests/test_ranks_causes.py::test_dispatch_of_the_same_ops_counts_only_above_the_profilers_noise;
# the runs: benchmarks/BENCHMARKS-multi-gpu.md "Evidence moved from the source: ranks").
PROFILER_NOISE = 0.5

_IDLE_FIXES = {
    "input-pipeline": (
        Fix("Give this rank's DataLoader more workers, pinned memory and prefetching",
            "DataLoader(ds, num_workers=2 * W, pin_memory=True, persistent_workers=True)"
            "   # W: the workers now"),
        Fix("Check the node's CPU and disk: one host serving its GPUs more slowly than the others"),
    ),
    "host-sync": (Fix("Remove the host syncs (.item(), .cpu(), printing a tensor) this rank "
                      "alone makes, e.g. logging only on rank 0"),),
    "host-work": (Fix("Move the host work this rank alone does (logging, checkpointing, evaluation "
                      "on rank 0) off the step, or to a background thread"),),
}
_GPU_FIXES = (
    Fix("Check this GPU's clocks, power and temperature (nvidia-smi -q -d "
        "CLOCK,PERFORMANCE,TEMPERATURE)"),
    Fix("Move the job off the node or replace the card if it stays slower"),
)
_CPU_FIXES = (
    Fix("Give each rank its own cores and no more threads than it has (a rank sharing its cores "
        "with another process runs every operator slower)",
        "OMP_NUM_THREADS=$C taskset -c $((R*C))-$((R*C+C-1)) python train.py  # rank R, C cores "
        "each"),
    Fix("Look for other processes on the node (top, htop) and move the job or them"),
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
    cause: str  # a host-time or idle cause, "slower-gpu" / "slower-cpu", "more-work", "unexplained", or a noise cause
    numbers: dict[str, float | int | str] = field(default_factory=dict)
    priced_ms: float | None = None  # per step, what it costs the job; None: the imposed wait

    @property
    def price_ms(self) -> float:
        return self.imposed_ms if self.priced_ms is None else self.priced_ms

    @property
    def real(self) -> bool:
        """False when its lateness is within the profiler's or the steps' noise: no rank
        straggles."""
        return self.cause not in NOISE_CAUSES


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
    mine = al.summaries[i]
    if mine.host_ms and all(o.host_ms for o in others):
        cause, numbers, price = _host_cause(mine, others, float(imposed[i]),
                                            max(NOISE_MS, NOISE_SHARE * al.step_ms))
    else:
        cause, numbers = _cause(mine, others, float(imposed[i]))
        # an idle cause explains its excess, no more: the rest of the wait (a CPU rank's scheduling
        # on shared cores, say) is not what its fix removes; as on the host path, capped at the wait
        # (a GPU cause: the GPU's extra time)
        excess = numbers.get("idle_excess_ms") if "idle_cause" in numbers else numbers.get(
            "gpu_excess_ms")
        price = None if excess is None else min(float(imposed[i]), float(excess))
    late = lateness(al, i)
    if cause not in NOISE_CAUSES and late.within_noise:
        # late on average over the window, not step after step: the ranks' own variation
        numbers = {**numbers, "found_cause": cause, "lateness_ms_per_step": list(late.per_step_ms),
                   "lateness_mean_ms": round(late.mean_ms, 4),
                   "lateness_lower_bound_ms": round(late.lower_ms, 4)}
        return Straggler(mine.rank, i, float(imposed[i]), float(last[i]), STEP_NOISE_CAUSE,
                         numbers, 0.0)
    return Straggler(mine.rank, i, float(imposed[i]), float(last[i]), cause, numbers, price)


def _deinflated(ms: float, events: float, ns_per_event: float) -> float:
    """Host ms less the profiler's estimated time for the events recorded in it."""
    return max(ms - events * ns_per_event / 1e6, 0.0)


# The profiler's time per event is measured on each rank where its unprofiled step is known
# (RankSummary.profiler_ns_per_event): on several GPUs it runs above the 3 us of one GPU, and at
# 3 us healthy ranks got "dispatch" stragglers (tests/test_ranks_causes.py::
# test_two_h200s_profiler_time_per_event_is_measured_on_the_ranks). The noise bar uses the larger
# of the two.
def per_event_ns(summaries: list[RankSummary]) -> float:
    measured = [s.profiler_ns_per_event for s in summaries if s.profiler_ns_per_event]
    return max(PROFILER_OVERHEAD_NS_PER_EVENT, float(median(measured)) if measured else 0.0)


def host_excess(s: RankSummary, others: list[RankSummary], floor_ms: float
                ) -> dict[str, tuple[float, float, bool]]:
    """Per host-time cause (waits left out): the rank's de-inflated ms per step above the others'
    median, the noise it must exceed (``floor_ms``, or PROFILER_NOISE of the profiler's time for
    its events between ranks that issue the same ones), and whether it does."""
    causes = sorted((set(s.host_ms) | {c for o in others for c in o.host_ms}) - WAITS)
    per_event = per_event_ns([s, *others])
    out = {}
    for c in causes:
        ev_mine = s.host_events.get(c, 0.0)
        ev_theirs = float(median([o.host_events.get(c, 0.0) for o in others]))
        theirs = float(median([_deinflated(o.host_ms.get(c, 0.0),
                                              o.host_events.get(c, 0.0), per_event)
                                  for o in others]))
        excess = _deinflated(s.host_ms.get(c, 0.0), ev_mine, per_event) - theirs
        most = max(ev_mine, ev_theirs)
        same = abs(ev_mine - ev_theirs) <= SAME_EVENTS * most
        noise = max(floor_ms, PROFILER_NOISE * most * per_event / 1e6) if same else floor_ms
        out[c] = (excess, noise, excess > noise)
    return out


def _host_cause(s: RankSummary, others: list[RankSummary], late_ms: float, floor_ms: float
                ) -> tuple[str, dict, float]:
    """The cause from the host's own step, its evidence and its price (see the module docstring).
    Waiting for its own GPU (host-sync) comes after the GPU checks: a slower GPU or more work
    keeps its host waiting too."""
    excess = host_excess(s, others, floor_ms)
    real = {c: e for c, (e, _, counts) in excess.items() if counts}
    d_excess, d_noise, _ = excess.get("dispatch", (0.0, floor_ms, False))
    numbers: dict = {"wait_imposed_in_profiled_trace_ms": round(late_ms, 4),
                     "dispatch_excess_ms": round(d_excess, 4),
                     "dispatch_noise_ms": round(d_noise, 4),
                     "host_events_per_step": round(sum(s.host_events.values()), 1)}
    own = {c: e for c, e in real.items() if c != "host-sync"}
    sync_idle = _idle_excess(s, others, "host-sync")
    if own and max(own, key=lambda c: own[c]) == "dispatch" and excess.get("host-sync", (0.0,))[0] > 0 < sync_idle:
        # a rank that syncs more than the others, its GPU idle after the syncs: its extra dispatch
        # is the refill of the drained queue, the syncs' cost as analysis/idle.py counts it
        price = min(late_ms, sync_idle)
        return "host-sync", {**numbers, "host_excess_ms": round(excess["host-sync"][0], 4),
                             "gpu_idle_excess_ms": round(sync_idle, 4),
                             "priced_host_excess_ms": round(price, 4)}, price
    if own and max(own, key=lambda c: own[c]) == "dispatch":
        # a rank whose GPU has more to do fills its launch queue, and then every launch blocks until
        # a slot frees: its dispatch looks slow because its GPU is (tests/test_ranks_causes.py::
        # test_four_h200s_more_work_explains_the_slow_dispatch_of_a_full_queue). More GPU work at
        # least as large as the dispatch excess explains both.
        gpu, gpu_numbers = _gpu_cause(s, others, late_ms, need_ms=max(floor_ms, own["dispatch"]))
        if gpu:
            return gpu, {**numbers, **gpu_numbers}, min(late_ms,
                                                        float(gpu_numbers["gpu_excess_ms"]))
    if own:
        cause = max(own, key=lambda c: own[c])
        price = min(late_ms, sum(real.values()))
        return cause, {**numbers, "host_excess_ms": round(own[cause], 4),
                       "priced_host_excess_ms": round(price, 4)}, price
    # No cause of its host's own explains the lateness, so a GPU that computes more (or the same
    # more slowly) above the noise does, and costs the others what it computes beyond theirs: the
    # wait in the profiled window holds the profiler's time too, and half of it left the cause
    # unnamed (tests/test_ranks_planted.py::test_a_larger_batch_is_more_work_not_a_slower_gpu).
    gpu, gpu_numbers = _gpu_cause(s, others, late_ms, need_ms=floor_ms)
    if gpu:
        return gpu, {**numbers, **gpu_numbers}, min(late_ms, float(gpu_numbers["gpu_excess_ms"]))
    if "host-sync" in real:
        # its host waits for its own GPU: what the job loses is the GPU's idle after each sync (the
        # queue drained, then refilled), analysis/idle.py's host-sync idle, where the GPU shows it
        price = min(late_ms, real["host-sync"], sync_idle if sync_idle > 0 else real["host-sync"])
        return "host-sync", {**numbers, "host_excess_ms": round(real["host-sync"], 4),
                             "gpu_idle_excess_ms": round(sync_idle, 4),
                             "priced_host_excess_ms": round(price, 4)}, price
    own_syncs = own_sync_excess(s, others)
    if own_syncs is not None:
        # syncs only this rank makes: the profiler's dispatch noise hides their cost in the window,
        # its own report prices them (tests/test_ranks_planted.py::
        # test_a_host_sync_on_one_rank_is_host_sync)
        syncs, saving = own_syncs
        price = min(late_ms, saving)
        return "host-sync", {**numbers, "own_syncs_per_step_excess": round(syncs, 2),
                             "own_sync_saving_ms": round(saving, 4),
                             "priced_host_excess_ms": round(price, 4)}, price
    events = [o.host_events.get("dispatch", 0.0) for o in others]
    if abs(s.host_events.get("dispatch", 0.0) - float(median(events))) <= SAME_EVENTS * max(
        events, default=0.0):
        # the same ops, issued no slower beyond the profiler's noise: nothing of it is the job's
        return PROFILER_NOISE_CAUSE, numbers, 0.0
    work = _work_ratio(s, others)
    return "unexplained", {**numbers, "idle_excess_ms": 0.0, **_work_numbers(work)}, late_ms


def own_sync_excess(s: RankSummary, others: list[RankSummary]) -> tuple[float, float] | None:
    """(sync events per step beyond the others' median, the rank's own host-sync saving beyond
    theirs) when the rank syncs where the others do not: at least OWN_SYNCS more sync events a step,
    OWN_SYNC_RATIO times theirs, and a host-sync saving of its own; None otherwise."""
    mine = s.host_events.get("host-sync", 0.0)
    theirs = float(median([o.host_events.get("host-sync", 0.0) for o in others]))
    saving = s.sync_saving_ms - float(median([o.sync_saving_ms for o in others]))
    if mine - theirs >= OWN_SYNCS and mine >= OWN_SYNC_RATIO * theirs and saving > 0:
        return mine - theirs, saving
    return None


def _cause(s: RankSummary, others: list[RankSummary], late_ms: float) -> tuple[str, dict]:
    idle = {c: _idle_excess(s, others, c) for c in s.idle_by_cause}
    cause, excess = max(idle.items(), key=lambda kv: kv[1], default=("", 0.0))
    if excess >= EXPLAINS * late_ms:
        return cause, {"idle_cause": cause, "idle_excess_ms": round(excess, 4)}
    gpu, numbers = _gpu_cause(s, others, late_ms)
    if gpu:
        return gpu, numbers
    work = _work_ratio(s, others)
    return "unexplained", {"idle_excess_ms": round(max(excess, 0.0), 4),
                           **_work_numbers(work)}


def _gpu_cause(s: RankSummary, others: list[RankSummary], late_ms: float,
               need_ms: float | None = None
               ) -> tuple[str, dict]:
    """A slower GPU (the same kernels slower, on the same work) or more GPU work than the others
    (more FLOPs or bytes by the cost model, or more compute time when the work is unknown); "" when
    neither exceeds ``need_ms`` (default: EXPLAINS of the lateness). ``gpu_excess_ms``: its GPU's
    extra time per step, what the job loses to it at most."""
    need = EXPLAINS * late_ms if need_ms is None else need_ms
    common = [k for k in s.kernel_ms if all(k in o.kernel_ms for o in others)]
    mine = sum(s.kernel_ms[k] for k in common)
    theirs = sum(float(median([o.kernel_ms[k] for o in others])) for k in common)
    work = _work_ratio(s, others)
    if (common and mine - theirs >= need and mine >= SLOWER_KERNELS * theirs
            and (work is None or work < MORE_WORK)):
        numbers = {"kernel_ms": round(mine, 4), "others_kernel_ms": round(theirs, 4),
                   "kernel_slowdown": round(mine / theirs, 4),
                   "gpu_excess_ms": round(mine - theirs, 4),
                   **_work_numbers(work), **_clocks(s, others)}
        # a CPU rank's "kernels" are its operators (ranks/host_ops.py): the same ones slower on its
        # cores
        return ("slower-gpu" if s.gpu else "slower-cpu"), numbers
    theirs_compute = float(median([o.compute_ms for o in others]))
    extra = s.compute_ms - theirs_compute
    if extra >= need and s.compute_ms >= SLOWER_KERNELS * theirs_compute:
        extra_kernels = s.kernels_per_step - float(median([o.kernels_per_step for o in others]))
        return "more-work", {"compute_excess_ms": round(extra, 4),
                             "extra_kernels_per_step": round(extra_kernels, 2),
                             "gpu_excess_ms": round(extra, 4),
                             **_work_numbers(work)}
    return "", {}


def _work_ratio(s: RankSummary, others: list[RankSummary]) -> float | None:
    """The rank's FLOPs or bytes per step over the others' median, the larger; None when unknown."""
    ratios = []
    for field_ in ("work_flops", "work_bytes"):
        theirs = float(median([getattr(o, field_) for o in others]))
        if getattr(s, field_) > 0 and theirs > 0:
            ratios.append(getattr(s, field_) / theirs)
    return max(ratios) if ratios else None


def _work_numbers(work: float | None) -> dict[str, float]:
    return {} if work is None else {"work_ratio": round(work, 4)}


def _idle_excess(s: RankSummary, others: list[RankSummary], cause: str) -> float:
    return s.idle_by_cause.get(cause, 0.0) - float(median([o.idle_by_cause.get(cause, 0.0)
                                                              for o in others]))


def _clocks(s: RankSummary, others: list[RankSummary]) -> dict:
    out: dict = {}
    mine = s.env.get("sm_clock_mhz_mean")
    theirs = [o.env["sm_clock_mhz_mean"] for o in others if "sm_clock_mhz_mean" in o.env]
    if mine is not None and theirs:
        out["sm_clock_mhz"] = mine
        out["others_sm_clock_mhz"] = float(median(theirs))
    if s.env.get("throttle_reasons_seen"):
        out["throttle_reasons"] = ", ".join(s.env["throttle_reasons_seen"])
    return out


def check(al: Aligned) -> Finding | None:
    st = find_straggler(al)
    if st is None:
        return None
    numbers = {"rank": st.rank, "wait_imposed_ms_per_step": round(st.imposed_ms, 4),
               "held_up_per_step": round(st.held_per_step, 2), "cause": st.cause, **st.numbers}
    if st.cause == STEP_NOISE_CAUSE:
        n = st.numbers
        steps = ", ".join(f"{x:.2f}" for x in n["lateness_ms_per_step"])
        return make_finding(
            ID,
            f"No straggler: rank {st.rank} reaches the collectives last only within the ranks' "
            "step-to-step noise",
            al.step_ms, 0.0,
            f"In the profiled window the other ranks waited {st.imposed_ms:.2f} ms per step for "
            f"rank {st.rank} on average, but it was not late step after step: its lateness per "
            f"step was {steps} ms (mean {n['lateness_mean_ms']:.2f} ms, 95% lower bound "
            f"{n['lateness_lower_bound_ms']:.2f} ms): the ranks take turns arriving last, as ranks "
            "sharing busy CPU cores or stalled by the profiler do.",
            Evidence(numbers=numbers),
            (Fix("Nothing to fix for this: profile more steps, or compare the ranks' unprofiled "
                 "step times (env.json), if in doubt"),
             Fix("If one rank does work every few steps (a checkpoint, an evaluation on rank 0), "
                 "profile a window holding several of them: late in one step only is within "
                 "this noise")),
        )
    if not st.real:
        n = st.numbers
        return make_finding(
            ID,
            f"No straggler: rank {st.rank} reaches the collectives last only within the "
            "profiler's noise",
            al.step_ms, 0.0,
            f"In the profiled window the other ranks waited {st.imposed_ms:.2f} ms per step for "
            f"rank {st.rank}, but its host issued the same ops ({n['host_events_per_step']:.0f} "
            f"recorded events per step) only {n['dispatch_excess_ms']:.2f} ms slower than the "
            f"others', under the {n['dispatch_noise_ms']:.2f} ms the profiler's own per-event time "
            "varies by, and nothing else on its host or GPU differs: without the profiler the "
            "ranks arrive together.",
            Evidence(numbers=numbers),
            (Fix(
                "Nothing to fix for this: compare the ranks' unprofiled step times (env.json) if "
                "in doubt"),),
        )
    if st.priced_ms is None:
        title = f"Rank {st.rank} is the straggler: the other ranks wait {st.imposed_ms:.2f} ms per step for it"
    else:
        title = f"Rank {st.rank} is the straggler ({st.cause}): it costs the job {st.price_ms:.2f} ms per step"
    return make_finding(
        ID, title, al.step_ms, st.price_ms,
        f"Rank {st.rank} reaches {st.held_per_step:.3g} collective(s) per step last; every other "
        f"rank waits inside them for it, {st.imposed_ms:.2f} ms per step on average. {_why(st)}",
        Evidence(numbers=numbers), _fixes(st.cause),
        wrong_fix="Tuning NCCL or the interconnect: the time is spent waiting for one rank, not "
                  "moving data",
    )


def _why(st: Straggler) -> str:
    n = st.numbers
    if st.cause == "slower-gpu":
        clock = (f" Its SM clock averaged {n['sm_clock_mhz']:.0f} MHz against "
                 f"{n['others_sm_clock_mhz']:.0f} MHz on the others."
                 if "sm_clock_mhz" in n else "")
        return (f"Why: the same kernels take {n['kernel_ms']:.2f} ms per step on it against "
                f"{n['others_kernel_ms']:.2f} ms on the others ({n['kernel_slowdown']:.2f}x): a "
                f"slower GPU.{clock}")
    if st.cause == "slower-cpu":
        return (f"Why: the same operators take {n['kernel_ms']:.2f} ms per step on its CPU against "
                f"{n['others_kernel_ms']:.2f} ms on the others' ({n['kernel_slowdown']:.2f}x), on "
                "the same work: its cores are slower, or shared with other processes.")
    if st.cause == "more-work":
        work = (f", {n['work_ratio']:.2f}x their FLOPs or bytes by the ops' shapes"
                if "work_ratio" in n else "")
        return (f"Why: it computes {n['compute_excess_ms']:.2f} ms more per step than the "
                f"others' median ({n['extra_kernels_per_step']:+.0f} kernels{work}): it is given "
                "more work.")
    if st.cause == "unexplained":
        more = (f" It is given {n['work_ratio']:.2f}x the others' FLOPs or bytes by its ops' "
                "shapes, yet computes no longer than they do."
                if n.get("work_ratio", 0) >= MORE_WORK else "")
        return ("Why: neither its idle, its kernel times nor its compute time differ enough; look "
                "at its timeline."
                + more)
    if "own_syncs_per_step_excess" in n:
        return (f"Why: it makes {n['own_syncs_per_step_excess']:.1f} host-device syncs a step that "
                "the others do not (.item(), .cpu(), a printed tensor); each drains its GPU's "
                f"queue, and its own report prices them at {n['own_sync_saving_ms']:.2f} ms a "
                "step. Under the profiler its dispatch differs from theirs by "
                f"{n['dispatch_excess_ms']:.2f} ms, within the profiler's noise "
                f"({n['dispatch_noise_ms']:.2f} ms), so the syncs are the difference that is not "
                "the profiler's.")
    if "priced_host_excess_ms" in n:
        noise = (f" Its dispatch differs from theirs by {n['dispatch_excess_ms']:.2f} ms, within "
                 f"the profiler's noise ({n['dispatch_noise_ms']:.2f} ms)."
                 if abs(n["dispatch_excess_ms"]) <= n["dispatch_noise_ms"]
                 else "")
        idle = (f" Its GPU sat idle {n['gpu_idle_excess_ms']:.2f} ms more per step after those "
                "syncs (its queue drained, then refilled)."
                if n.get("gpu_idle_excess_ms", 0) > 0 else "")
        return (f"Why: {st.cause} takes {n['host_excess_ms']:.2f} ms more of its host's step than "
                "of the others' (their waits for the collectives left out, the profiler's time per "
                f"recorded event taken out).{noise}{idle} Priced at the {st.price_ms:.2f} ms a "
                "step its host adds: the others' summed wait counts its lateness once per "
                "collective it holds up, and the profiler's time.")
    return f"Why: {st.cause} holds it up {n['idle_excess_ms']:.2f} ms per step more than the others' median."


def _fixes(cause: str) -> tuple[Fix, ...]:
    if cause == "slower-gpu":
        return _GPU_FIXES
    if cause == "more-work":
        return _WORK_FIXES
    if cause == "slower-cpu":
        return _CPU_FIXES
    if cause == "unexplained":
        return (Fix("Open this rank's timeline beside another's (gpudoctor analyze RANK_TRACE "
                    "--html) and compare what runs before its late collective"),)
    return _IDLE_FIXES.get(cause,
                           (Fix(f"Remove the {cause} idle on this rank (see its own report)"),))


# A straggler held back by dispatch (the host's time per operator) is late by time the profiler
# stretches with every event it records: priced for the step as it runs without the profiler, its
# wait shrinks like the step (U / P), as the single-GPU host-side findings do (rules/calibrate.py).
# That is for a cause read from GPU idle, and for a lateness the host's own step does not explain;
# a cause read from the host's step is de-inflated already, and only its severity and speedup move
# to the unprofiled step.


def priced_unprofiled(finding: Finding, unprofiled_step_ms: float | None,
                      profiled_step_ms: float) -> Finding:
    """A straggler finding re-priced for the unprofiled step; any other finding unchanged."""
    u, p = unprofiled_step_ms, profiled_step_ms
    if finding.id != ID or not u or not p or u >= p:
        return finding
    numbers = finding.evidence.numbers
    # judged on the host's step: the saving is the unprofiled one already, unless no cause was found
    # (then it is the profiled wait, stretched like the step) or the GPU is the cause (kernel time)
    if "dispatch_noise_ms" in numbers and numbers.get("cause") != "unexplained":
        # except dispatch: issuing the same ops more slowly is host time the profiler stretches with
        # the rest of the step (its per-event cost is most of a dispatch-bound step's host time)
        saving = finding.saving_ms * (u / p if numbers.get("cause") == "dispatch" else 1.0)
        return _repriced(finding, min(saving, MAX_SAVING_SHARE * u), u)
    if numbers.get("cause") not in ("dispatch", "unexplained") or (
            numbers.get("cause") == "unexplained" and "dispatch_noise_ms" not in numbers):
        return finding
    return _repriced(finding, finding.saving_ms * u / p, u,
                     dict(numbers, wait_imposed_in_profiled_trace_ms=round(finding.saving_ms, 4),
                          unprofiled_scale=round(u / p, 4)))


def _repriced(finding: Finding, saving: float, step_ms: float,
              numbers: dict | None = None) -> Finding:
    """``finding`` with ``saving`` against a step of ``step_ms`` (its title's figure, speedup and
    severity with it; ``numbers`` replacing its evidence's when given)."""
    evidence = finding.evidence if numbers is None else msgspec.structs.replace(finding.evidence,
                                                                                numbers=numbers)
    return msgspec.structs.replace(
        finding, title=finding.title.replace(f"{finding.saving_ms:.2f} ms", f"{saving:.2f} ms"),
        saving_ms=saving, predicted_speedup=speedup(step_ms, saving),
        severity=severity_for(saving, step_ms, finding.severity_floor, finding.major_share),
        evidence=evidence)
