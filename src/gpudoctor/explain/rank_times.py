"""Per-rank step times (``rank,step,step_ms``) -> stragglers, a change point, periodic stalls
(hardware first: one slow rank is most often one degraded card)."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np

from gpudoctor.core.arrays import distinct, median
from gpudoctor.core.finding import Finding, Fix, make_hypothesis
from gpudoctor.errors import InputError
from gpudoctor.explain.tables import (
    GPUS_PER_NODE,
    JITTER,
    MS_RANGE,
    NODE_FIRST_WRONG,
    RANKS_EXPECTED,
    SMI_CHECK,
    Z_FLAG,
    cell_at,
    find_column,
    parse_number,
    read_table,
)


def rank_hypotheses(text: str, *, notes: tuple[str, ...] = ()) -> list[Finding]:
    """Stragglers, a lasting change in step time (with its causes, node health first), periodic
    spikes.

    ``notes``: what the caller already knows is missing (e.g. a cut last line), said with the
    rest."""
    return rank_findings(rank_table(text, notes=notes))


def rank_table(text: str, *, notes: tuple[str, ...] = ()) -> _Ranks:
    """The table, checked: rows with an empty or NaN cell dropped and counted, ranks left with none
    named."""
    steps, ranks, ms, times, dropped, lost = _read_ranks(text)
    with np.errstate(all="ignore"):
        return _Ranks(steps, ranks, ms, times, dropped, lost, notes)


def rank_findings(table: _Ranks) -> list[Finding]:
    with np.errstate(all="ignore"):
        return _rank_findings(table)


def _rank_findings(table: _Ranks) -> list[Finding]:
    if not table.steps.size:
        raise InputError(
            f"rank timings: no step is reported by two ranks or more; expected {RANKS_EXPECTED}")
    out = table.stragglers()
    change = table.change()
    if change is not None:
        out.extend(change)
    spikes = table.spikes()
    if spikes is not None:
        out.append(spikes)
    if not out:
        out.append(table.steady())
    return sorted(out, key=lambda f: -(f.confidence or 0))


def _read_ranks(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, str],
                                    int, list[int]]:
    what = "rank timings"
    header, rows = read_table(text, what, RANKS_EXPECTED)
    ci = [find_column(header, ("rank", "global_rank"), what, RANKS_EXPECTED),
          find_column(header, ("step", "iteration", "iter"), what, RANKS_EXPECTED),
          find_column(header, ("step_ms", "step_time_ms", "ms"), what, RANKS_EXPECTED)]
    ti = find_column(header, ("time", "timestamp"), what, RANKS_EXPECTED, required=False)
    data, dropped, dropped_ranks = _fast_rows(rows, ci), 0, set()
    if data is None:  # a bad or missing cell somewhere: row by row, to name the line
        data, dropped, dropped_ranks = _slow_rows(header, rows, ci)
    times: dict[int, str] = {}
    if ti is not None:
        for _, cells in rows:
            step_cell = cell_at(cells, ci[1])
            if _is_whole(step_cell):
                times.setdefault(int(float(step_cell)), cell_at(cells, ti))
    rank_ids = distinct(data[:, 0])
    # ranks whose every row had an empty or NaN cell
    lost = sorted(dropped_ranks - {int(r) for r in rank_ids})
    if rank_ids.size < 2:
        where = (f"only rank {int(rank_ids[0])} has step times: every row of {_rank_names(lost)} "
                 f"has an empty or NaN cell" if lost
                 else f"only rank {int(rank_ids[0])} in the table")
        raise InputError(f"{what}: {where}; stragglers show against other ranks: give every rank's "
                         f"step times ({RANKS_EXPECTED})")
    step_ids = distinct(data[:, 1])
    if len(data) < 0.5 * rank_ids.size * step_ids.size:
        raise InputError(f"{what}: {len(data)} rows for {rank_ids.size} ranks x {step_ids.size} "
                         f"steps; expected every rank to report the same steps ({RANKS_EXPECTED})")
    matrix = np.full((step_ids.size, rank_ids.size), np.nan)  # [step, rank]
    matrix[np.searchsorted(step_ids, data[:, 1]), np.searchsorted(rank_ids, data[:, 0])] = data[:, 2]
    return step_ids, rank_ids, matrix, times, dropped, lost


def _rank_names(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8]) + (f" and {len(ranks) - 8} more"
                                                    if len(ranks) > 8 else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"


def _is_whole(cell: str) -> bool:
    try:
        value = float(cell)
    except ValueError:
        return False
    return math.isfinite(value) and value == int(value)


def _fast_rows(rows: list[tuple[int, list[str]]], ci: list[int | None]) -> np.ndarray | None:
    """[rank, step, ms] rows when every cell is a valid number (one numpy conversion), else None."""
    try:
        data = np.array([[cells[i] for i in ci] for _, cells in rows], dtype=float)  # type: ignore[index]
    except (ValueError, IndexError, TypeError):
        return None
    if data.ndim != 2 or not data.size or not np.all(np.isfinite(data)):
        return None
    ok = ((data[:, :2] >= 0).all() and (data[:, :2] == np.floor(data[:, :2])).all()
          and (data[:, 2] >= MS_RANGE[0]).all() and (data[:, 2] <= MS_RANGE[1]).all())
    return data if ok else None


def _slow_rows(header: list[str], rows: list[tuple[int, list[str]]],
               ci: list[int | None]) -> tuple[np.ndarray, int, set[int]]:
    """(rows with every cell a number, rows dropped for an empty or NaN cell, the ranks those rows
    name)."""
    out: list[tuple[float, float, float]] = []
    dropped = 0
    dropped_ranks: set[int] = set()
    for n, cells in rows:
        rank, step, value = (parse_number(cell_at(cells, i), header[i or 0], n, RANKS_EXPECTED)
                             for i in ci)
        if rank is None or step is None or value is None:
            dropped += 1
            if rank is not None and rank >= 0 and rank == int(rank):
                dropped_ranks.add(int(rank))
            continue
        if rank < 0 or step < 0 or rank != int(rank) or step != int(step):
            raise InputError(
                f"line {n}: rank and step must be whole numbers >= 0; expected {RANKS_EXPECTED}")
        if not MS_RANGE[0] <= value <= MS_RANGE[1]:
            raise InputError(f"line {n}: step_ms must be between {MS_RANGE[0]:g} and "
                             f"{MS_RANGE[1]:g} (got {value:g}); expected {RANKS_EXPECTED}")
        out.append((rank, step, value))
    if not out:
        why = f" ({dropped} row(s), each with an empty or NaN cell)" if dropped else ""
        raise InputError(
            f"rank timings: no data rows under the header{why}; expected {RANKS_EXPECTED}")
    return np.array(out), dropped, dropped_ranks


def _robust_z(values: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Modified z = (x - median) / (1.4826 MAD), the spread floored at the timer jitter (0.5% of the
    median).

    The floor is also the spread when MAD is 0 (over half the ranks share one median): the MeanAD
    fallback would let a whole slow node (8 of 32 ranks) widen the spread enough to hide itself.
    """
    center = float(median(values))
    sigma = max(1.4826 * float(median(np.abs(values - center))), JITTER * center, 1e-12)
    return (values - center) / sigma, center, sigma


def _median_filter(y: np.ndarray, width: int) -> np.ndarray:
    pad = width // 2
    padded = np.pad(y, pad, mode="edge")
    return np.median(np.lib.stride_tricks.sliding_window_view(padded, width), axis=1)


def _change_point(y: np.ndarray) -> tuple[int, float, float] | None:
    """The single split minimizing the two segments' squared error, on a median-filtered series.

    Kept when the two medians differ by >= 10% and by >= 6 noise sigmas.
    """
    n = y.size
    seg = max(5, n // 50)
    if n < 2 * seg:
        return None
    scale = float(median(y))
    f = _median_filter(y / scale, 9 if n >= 45 else 3)
    cs, cs2 = np.cumsum(f), np.cumsum(f * f)
    k = np.arange(seg, n - seg + 1)
    left = cs2[k - 1] - cs[k - 1] ** 2 / k
    right = (cs2[-1] - cs2[k - 1]) - (cs[-1] - cs[k - 1]) ** 2 / (n - k)
    best = int(k[int(np.argmin(left + right))])
    before, after = float(median(y[:best])), float(median(y[best:]))
    resid = np.concatenate([f[:best] - before / scale, f[best:] - after / scale])
    sigma = max(1.4826 * float(median(np.abs(resid))) * scale, JITTER * min(before, after))
    if abs(after - before) < max(6 * sigma, 0.1 * min(before, after)):
        return None
    return best, before, after


class _Ranks:
    """One rank-timing table: matrix [step, rank] of step_ms (NaN where a rank did not report)."""

    def __init__(self, steps: np.ndarray, ranks: np.ndarray, ms: np.ndarray, times: dict[int, str],
                 dropped: int, lost: list[int] | None = None, notes: tuple[str, ...] = ()):
        self.ranks = ranks.astype(np.int64)
        reported = np.sum(np.isfinite(ms), axis=1)
        keep = reported >= 2
        self.steps, self.ms, self.times = steps[keep].astype(np.int64), ms[keep], times
        missing = int(np.sum(~np.isfinite(self.ms)))
        said = list(notes)
        if dropped:
            said.append(f"{dropped} row(s) with empty or NaN cells dropped")
        if lost:
            said.append(f"{_rank_names(lost)} left out: no row with a step time")
        if int(np.sum(~keep)):
            said.append(f"{int(np.sum(~keep))} step(s) reported by fewer than 2 ranks left out")
        if missing:
            said.append(f"{missing} of {self.ms.size} (rank, step) values missing")
        self.lost = list(lost or ())
        self.partial = ", ".join(said)
        with np.errstate(all="ignore"):
            self.step_max = np.nanmax(self.ms, axis=1) if self.ms.size else np.empty(0)
            self.step_med = np.nanmedian(self.ms, axis=1) if self.ms.size else np.empty(0)
        self.cp = _change_point(self.step_max) if self.step_max.size else None
        self._flagged: list[dict[str, Any]] = []

    def _note(self, summary: str) -> str:
        return summary + (f" Partial data: {self.partial}." if self.partial else "")

    def _rank_medians(self, rows: slice) -> tuple[np.ndarray, np.ndarray]:
        block = self.ms[rows]
        have = np.sum(np.isfinite(block), axis=0) > 0
        with np.errstate(all="ignore"):
            # no all-NaN column: no warning
            med = np.nanmedian(np.where(have[None, :], block, 0.0), axis=0)
        med[~have] = np.nan
        return med, have

    def stragglers(self) -> list[Finding]:
        if self.ranks.size < 3 or not self.step_max.size:
            return []
        rising = self.cp is not None and self.cp[2] > self.cp[1]
        regime = slice(self.cp[0], None) if rising and self.cp else slice(None)
        med, have = self._rank_medians(regime)
        if have.sum() < 3:
            return []
        z = np.full(med.shape, np.nan)
        z[have], center, _ = _robust_z(med[have])
        flagged = [i for i in range(med.size) if have[i] and z[i] > Z_FLAG]
        before = self._rank_medians(slice(None, self.cp[0]))[0] if rising and self.cp else None
        groups: list[list[int]] = []
        for i in flagged:
            if groups and self.ranks[i] == self.ranks[groups[-1][-1]] + 1:
                groups[-1].append(i)
            else:
                groups.append([i])
        out = [self._straggler(g, med, z, center, before, flagged) for g in groups]
        return out

    def _straggler(self, group: list[int], med: np.ndarray, z: np.ndarray, center: float,
                   before: np.ndarray | None, flagged: list[int]) -> Finding:
        worst = max(group, key=lambda i: med[i])
        rank, slow, zw = int(self.ranks[worst]), float(med[worst]), float(z[worst])
        cost = slow - center
        names = f"rank {rank}" if len(group) == 1 else f"ranks {self.ranks[group[0]]}-{self.ranks[group[-1]]}"
        node = rank // GPUS_PER_NODE
        numbers: dict[str, Any] = {
            "rank": rank, "rank_median_step_ms": round(slow, 3),
            "ranks_median_step_ms": round(center, 3),
            "robust_z": round(zw, 1), "cost_ms_per_step": round(cost, 3),
            "cost_pct_of_step": round(100 * cost / slow, 1), "ranks": int(self.ranks.size),
            "slow_ranks": [int(self.ranks[i]) for i in group]}
        story = ""
        if before is not None and self.cp is not None and np.isfinite(before[worst]):
            others = [i for i in range(med.size) if i not in flagged and np.isfinite(before[i])]
            rise = slow - float(before[worst])
            others_rise = float(median(med[others] - before[others])) if others else 0.0
            numbers.update(change_step=int(self.steps[self.cp[0]]),
                           rank_before_ms=round(float(before[worst]), 3),
                           rank_rise_ms=round(rise, 3), others_rise_ms=round(others_rise, 3))
            if rise > 0.1 * float(before[worst]) and rise > 3 * max(others_rise, 0.0):
                story = (f" It became slow at step {int(self.steps[self.cp[0]])}: its own step "
                         f"time rose by {rise:.1f} ms while the other ranks' rose "
                         f"{others_rise:.1f} ms, so it started the drop.")
        conf = 0.5 + 0.4 * (min(zw, 20.0) - Z_FLAG) / (20.0 - Z_FLAG) - (0.1
                                                                         if self.partial else 0.0)
        if story:
            self._flagged.append({"rank": rank, "rise": rise, "others_rise": others_rise,
                                  "conf": conf})
        return make_hypothesis(
            "straggler", f"Straggler: {names} slows every step", conf,
            self._note(
                f"{names.capitalize()} takes {slow:.1f} ms per step (median) against {center:.1f} "
                f"ms for the median rank (robust z = {zw:.1f} over {self.ranks.size} ranks). In "
                f"synchronous training every rank waits for it: it costs {cost:.1f} ms every step "
                f"({100 * cost / slow:.0f}% of the step).{story} The boring answer is usually "
                "right: one degraded GPU or node (throttling, ECC, PCIe)."),
            numbers,
            (Fix("Drain the node and reschedule the job on healthy nodes",
                 f"scontrol update NodeName=<node of rank {rank}> State=DRAIN Reason=\"straggler\""),
             Fix("Restart from the last checkpoint without it", "sbatch --exclude=<node> ..."),
             Fix("Repair it before it returns: cooling, reseat, replace; DCGM diagnostics must pass", "dcgmi diag -r 3")),
            subject=names, partial=bool(self.partial), wrong_fix=NODE_FIRST_WRONG,
            check_next=((f"`{SMI_CHECK}` on the node of {names} (node {node} if {GPUS_PER_NODE} "
                        "GPUs per node): throttle reasons, ECC, PCIe gen/width"),
                        (f"A histogram of compute time per rank (before the all-reduce): {names} "
                        "slow in its own work, or waiting for its input?"),
                        "`dcgmi diag -r 3` on that node",
                        "Host side of that node: other processes, CPU contention, a slow local disk"))

    def change(self) -> list[Finding] | None:
        if self.cp is None:
            return None
        k, before, after = self.cp
        step = int(self.steps[k])
        when = f"step {step}" + (f" ({self.times[step]})" if step in self.times else "")
        ratio = after / before
        med_before, med_after = float(median(self.step_med[:k])), float(
            median(self.step_med[k:]))
        numbers = {"change_step": step, "before_ms": round(before, 3), "after_ms": round(after, 3),
                   "ratio": round(ratio, 3), "median_rank_before_ms": round(med_before, 3),
                   "median_rank_after_ms": round(med_after, 3)}
        if ratio < 1:
            f = make_hypothesis(
                "step-time-change", f"Step time fell at {when}",
                0.3 - (0.05 if self.partial else 0),
                self._note(f"The slowest rank's step time fell from {before:.1f} to {after:.1f} ms "
                           f"({ratio:.2f}x) at {when}: warm-up (compilation, autotuning, "
                           "allocator) ending, or a fix taking effect."),
                numbers, (), subject=when, partial=bool(self.partial))
            return [msgspec.structs.replace(f, severity="info")]
        everyone = med_after - med_before > 0.5 * (after - before)
        starter = self._flagged[0] if self._flagged else None
        if starter:
            who = (f"Rank {starter['rank']} started it: its own step time rose "
                   f"{starter['rise']:.1f} ms while the others' rose {starter['others_rise']:.1f} "
                   "ms (they wait for it at every collective).")
        elif everyone:
            who = (f"The median rank slowed too ({med_before:.1f} -> {med_after:.1f} ms): no "
                   "single rank stands out. If step_ms includes the wait in collectives, a "
                   "straggler hides behind it: compare compute-only time per rank; else a shared "
                   "cause (input, storage, fabric).")
        else:
            who = (f"The median rank did not ({med_before:.1f} -> {med_after:.1f} ms): a few ranks "
                   "slowed, each not enough to stand out alone: look at the slowest ranks per step.")
        conf = 0.5 + 0.3 * min(1.0, (ratio - 1.1) / 0.9) - (0.1 if self.partial else 0.0)
        if starter:  # the same story as the straggler's, which names the cause: rank it just below
            conf = starter["conf"] - 0.05
        numbers["slow_rank"] = starter["rank"] if starter else None
        main = make_hypothesis(
            "step-time-change", f"Step time rose {ratio:.2f}x at {when}", conf,
            self._note(f"The step time (slowest rank per step) rose from {before:.1f} to "
                       f"{after:.1f} ms ({ratio:.2f}x) at {when} and stayed there. {who} For a "
                       "sudden drop with no code change, check in this order: (1) straggler / node "
                       "health, (2) data loader stall, (3) checkpoint activity, (4) network fabric."),
            numbers,
            (Fix("Find the degraded node from per-rank timing histograms; drain it and reschedule",
                 "scontrol update NodeName=<node> State=DRAIN Reason=\"slow node\""),
             Fix("Data loader: more workers and a deeper prefetch queue; check read latency if "
                 "streaming",
                 "DataLoader(ds, num_workers=2 * W, prefetch_factor=2 * P, "
                 "persistent_workers=True,\n           pin_memory=True)   # W, P: as they are now "
                 "(P: 2 by default)"),
             Fix("Checkpoints: write asynchronously to fast local storage, then copy out", ""),
             Fix("Fabric: fix the flapping link or the rail that is down; NCCL should use every HCA",
                 "ibstat; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET")),
            subject=when, partial=bool(self.partial), wrong_fix=NODE_FIRST_WRONG,
            check_next=((f"Straggler / node health: per-rank step times after {when}; "
                        f"`{SMI_CHECK}` on the slowest node (throttling, ECC, PCIe downgrade)"),
                        ("Data loader: did GPU busy time per step rise too? If step time rose but "
                        "busy time did not, it is host-side (workers, prefetch depth, read latency)"),
                        ("Checkpoint activity at that time: an async checkpoint hanging on slow "
                         "storage serializes ranks"),
                        ("Network fabric: InfiniBand link flaps or a rail down (`ibstat`, switch "
                         "logs, NCCL_DEBUG=INFO)")))
        out = [main]
        if not starter:
            out += self._other_causes(everyone, when)
        return out

    def _other_causes(self, everyone: bool, when: str) -> list[Finding]:
        lead = "every rank slowed together" if everyone else "a few ranks slowed"
        return [
            make_hypothesis("dataloader-stall", "Data loader stall", 0.45 if everyone else 0.3,
                            f"After {when} {lead}. If GPU busy time per step did not rise with the "
                            "step time, the GPUs wait for input: host side.",
                            {"every_rank_slowed": everyone},
                            (Fix("More workers, deeper prefetch, persistent workers",
                                 "DataLoader(ds, num_workers=2 * W, prefetch_factor=2 * P, "
                                 "persistent_workers=True)   # W, P: as they are now "
                                 "(P: 2 by default)"),),
                            check_next=(("GPU busy time per step before and after (profiler or DCGM "
                                         "SM activity)"),
                                        "Read latency of the dataset store, if streaming"),
                            subject=when),
            make_hypothesis("checkpoint-stall", "Checkpoint activity", 0.3,
                            "An async checkpoint hanging on slow storage can hold every rank at "
                            f"the next collective; check what was written around {when}.", {}, (
                                Fix("Write checkpoints asynchronously to local NVMe, then copy out", ""),),
                            check_next=(("Checkpoint writer logs and storage latency around "
                                         "the change"),), subject=when),
            make_hypothesis("network-fabric", "Network fabric degraded", 0.35 if everyone else 0.2,
                            "An InfiniBand link flap, congestion, or one rail down forcing "
                            "fallback slows every collective.", {"every_rank_slowed": everyone},
                            (Fix("Fix the link or rail; make NCCL use every HCA",
                                 "ibstat; NCCL_IB_HCA=..."),),
                            check_next=("`ibstat` / switch port counters for flaps",
                                        ("NCCL_DEBUG=INFO: which NICs and "
                                        "transports each rank uses")), subject=when)]

    def spikes(self) -> Finding | None:
        y = self.step_max
        if y.size < 30:
            return None
        base = _median_filter(y, 9)
        resid = y - base
        sigma = max(1.4826 * float(median(np.abs(resid))), JITTER * float(median(base)))
        hit = np.flatnonzero(resid > max(6 * sigma, 0.3 * float(median(base))))
        if hit.size < 3:
            return None
        gaps = np.diff(self.steps[hit])
        period = float(median(gaps))
        regular = float(np.mean(np.abs(gaps - period) <= max(1.0, 0.05 * period)))
        if regular < 0.6:
            return None
        cost = float(resid[hit].sum()) / y.size
        f = make_hypothesis(
            "checkpoint-stall", f"Every ~{period:.0f} steps, a step is slow",
            0.5 - (0.1 if self.partial else 0),
            self._note(f"{hit.size} steps spike {float(median(resid[hit])):.1f} ms above their "
                       f"neighbours, every {period:.0f} steps: checkpointing, evaluation or "
                       f"logging on a schedule. Averaged, {cost:.2f} ms per step."),
            {"spikes": int(hit.size), "period_steps": round(period, 1),
             "median_spike_ms": round(float(median(resid[hit])), 3),
             "cost_ms_per_step": round(cost, 3), "first_spike_step": int(self.steps[hit[0]])},
            (Fix("Make the periodic work asynchronous (async checkpoint to local NVMe, then "
                 "copy out)",
                 "torch.distributed.checkpoint.async_save(state_dict, checkpoint_id=path)"),
             Fix("Do it less often, or on fewer ranks", "")),
            subject=f"every {period:.0f} steps", partial=bool(self.partial),
            check_next=(
                "What runs every that many steps: checkpoint, eval, logging, garbage collection",),
            wrong_fix="Tuning the per-step code: the ordinary steps are fine.")
        return f

    def steady(self) -> Finding:
        med = float(median(self.step_max)) if self.step_max.size else 0.0
        f = make_hypothesis(
            "step-time-steady", "No straggler, no change in step time",
            0.6 - (0.1 if self.partial else 0),
            self._note(f"{self.ranks.size} ranks over {self.steps.size} steps: no rank beyond z = "
                       f"{Z_FLAG} and no lasting change in step time (median of the slowest rank "
                       f"per step {med:.1f} ms)."),
            {"ranks": int(self.ranks.size), "steps": int(self.steps.size),
             "median_step_ms": round(med, 3)},
            (), partial=bool(self.partial))
        return msgspec.structs.replace(f, severity="info")


