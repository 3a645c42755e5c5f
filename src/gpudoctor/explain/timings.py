"""Timing tables -> ranked hypotheses (seed 004, scenarios 2, 6 and 8).

- ``rank_hypotheses``: per-rank step times (``rank,step,step_ms``): stragglers by a robust z-score
  of each rank's median step time, a change point in the step time (MFU collapse), periodic spikes.
- ``collective_hypotheses``: all-reduce time vs GPU count (``gpus,allreduce_ms[,bytes][,algo]``):
  the ring model fitted on the smaller counts, and the count where the measurement leaves it.
- ``pipeline_hypotheses``: a pipeline's measured bubble against its schedule's formula.

Pure functions: text (or numbers) in, findings out; bad input raises InputError with one line.
"""

from __future__ import annotations

import csv
import math
from dataclasses import replace
from itertools import combinations
from typing import Any

import numpy as np

from gpudoctor.errors import InputError
from gpudoctor.rules.finding import Finding, Fix, make_hypothesis

Z_FLAG = 3.5  # modified z-score threshold (Iglewicz & Hoaglin, 1993)
JITTER = 0.005  # timer jitter floor on the spread: 0.5% of the median step
CLIFF = 1.5  # measured / ring-model time from which a GPU count is a cliff
GPUS_PER_NODE = 8
MS_RANGE = (1e-6, 1e9)  # 1 ns to 11 days: times outside are not timings
MAX_BYTES, MAX_COUNT = 1e15, 1e7  # per-rank message size; GPUs, stages, micro-batches
RANKS_EXPECTED = ("a CSV whose header names rank, step and step_ms (any order; extra columns and an optional "
                  "time column are ignored), one row per rank and step")
COLL_EXPECTED = ("a CSV whose header names gpus and the all-reduce time in ms (allreduce_ms), optional bytes "
                 "(per-rank message size) and algo, one row per GPU count")
SMI_CHECK = "nvidia-smi -q -d PERFORMANCE,CLOCK,ECC,PCIE"
NODE_FIRST_WRONG = ("Code-level changes (different sharding, recompute policy, bucket sizes) before checking the "
                    "hardware: nothing in the code changed.")


# -- reading a table ------------------------------------------------------------------------------------


def _table(text: Any, what: str, expected: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """(lower-case header, [(line number, cells)]) from CSV, TSV or whitespace-separated text."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"empty {what} table; expected {expected}")
    lines = [(n, line) for n, line in enumerate(text.lstrip("\ufeff").splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise InputError(f"{what}: only comment lines; expected {expected}")
    head = lines[0][1]
    delim = "," if "," in head else "\t" if "\t" in head else None
    try:
        split = csv.reader([line for _, line in lines], delimiter=delim) if delim else (line.split() for _, line in lines)
        rows = [(n, [c.strip() for c in cells]) for (n, _), cells in zip(lines, split)]
    except csv.Error as exc:
        raise InputError(f"unreadable {what} table ({exc}); expected {expected}") from None
    header = [h.lower().strip().strip('"') for h in rows[0][1]]
    return header, rows[1:]


def _column(header: list[str], names: tuple[str, ...], what: str, expected: str, required: bool = True) -> int | None:
    for name in names:
        if name in header:
            return header.index(name)
    if required:
        raise InputError(f"{what}: no {names[0]!r} column in the header ({', '.join(header[:8]) or 'empty'}); "
                         f"expected {expected}")
    return None


def _cell(cells: list[str], index: int | None) -> str:
    return cells[index] if index is not None and index < len(cells) else ""


def _number(cell: str, name: str, line: int, expected: str) -> float | None:
    """A finite float; None for an empty cell or nan/inf (missing); InputError for text."""
    if cell == "" or cell.lower() in ("nan", "n/a", "na", "-"):
        return None
    try:
        value = float(cell)
    except ValueError:
        raise InputError(f"line {line}: {name} {cell[:30]!r} is not a number; expected {expected}") from None
    return value if math.isfinite(value) else None


# -- per-rank step times --------------------------------------------------------------------------------


def rank_hypotheses(text: str) -> list[Finding]:
    """Stragglers, a lasting change in step time (with its causes, node health first), periodic spikes."""
    steps, ranks, ms, times, dropped = _read_ranks(text)
    with np.errstate(all="ignore"):
        return _rank_findings(_Ranks(steps, ranks, ms, times, dropped))


def _rank_findings(table: _Ranks) -> list[Finding]:
    if not table.steps.size:
        raise InputError(f"rank timings: no step is reported by two ranks or more; expected {RANKS_EXPECTED}")
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


def _read_ranks(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, str], int]:
    what = "rank timings"
    header, rows = _table(text, what, RANKS_EXPECTED)
    ci = [_column(header, ("rank", "global_rank"), what, RANKS_EXPECTED),
          _column(header, ("step", "iteration", "iter"), what, RANKS_EXPECTED),
          _column(header, ("step_ms", "step_time_ms", "ms"), what, RANKS_EXPECTED)]
    ti = _column(header, ("time", "timestamp"), what, RANKS_EXPECTED, required=False)
    data, dropped = _fast_rows(rows, ci), 0
    if data is None:  # a bad or missing cell somewhere: row by row, to name the line
        data, dropped = _slow_rows(header, rows, ci)
    times: dict[int, str] = {}
    if ti is not None:
        for _, cells in rows:
            step_cell = _cell(cells, ci[1])
            if _is_whole(step_cell):
                times.setdefault(int(float(step_cell)), _cell(cells, ti))
    rank_ids = np.unique(data[:, 0])
    if rank_ids.size < 2:
        raise InputError(f"{what}: only rank {int(rank_ids[0])} in the table; stragglers show against other "
                         f"ranks: give every rank's step times ({RANKS_EXPECTED})")
    step_ids = np.unique(data[:, 1])
    if len(data) < 0.5 * rank_ids.size * step_ids.size:
        raise InputError(f"{what}: {len(data)} rows for {rank_ids.size} ranks x {step_ids.size} steps; expected "
                         f"every rank to report the same steps ({RANKS_EXPECTED})")
    matrix = np.full((step_ids.size, rank_ids.size), np.nan)  # [step, rank]
    matrix[np.searchsorted(step_ids, data[:, 1]), np.searchsorted(rank_ids, data[:, 0])] = data[:, 2]
    return step_ids, rank_ids, matrix, times, dropped


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


def _slow_rows(header: list[str], rows: list[tuple[int, list[str]]], ci: list[int | None]) -> tuple[np.ndarray, int]:
    out: list[tuple[float, float, float]] = []
    dropped = 0
    for n, cells in rows:
        rank, step, value = (_number(_cell(cells, i), header[i or 0], n, RANKS_EXPECTED) for i in ci)
        if rank is None or step is None or value is None:
            dropped += 1
            continue
        if rank < 0 or step < 0 or rank != int(rank) or step != int(step):
            raise InputError(f"line {n}: rank and step must be whole numbers >= 0; expected {RANKS_EXPECTED}")
        if not MS_RANGE[0] <= value <= MS_RANGE[1]:
            raise InputError(f"line {n}: step_ms must be between {MS_RANGE[0]:g} and {MS_RANGE[1]:g} "
                             f"(got {value:g}); expected {RANKS_EXPECTED}")
        out.append((rank, step, value))
    if not out:
        raise InputError(f"rank timings: no data rows under the header; expected {RANKS_EXPECTED}")
    return np.array(out), dropped


def _robust_z(values: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Modified z = (x - median) / (1.4826 MAD), the spread floored at the timer jitter (0.5% of the median).

    The floor is also the spread when MAD is 0 (over half the ranks share one median): the MeanAD
    fallback would let a whole slow node (8 of 32 ranks) widen the spread enough to hide itself.
    """
    center = float(np.median(values))
    sigma = max(1.4826 * float(np.median(np.abs(values - center))), JITTER * center, 1e-12)
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
    scale = float(np.median(y))
    f = _median_filter(y / scale, 9 if n >= 45 else 3)
    cs, cs2 = np.cumsum(f), np.cumsum(f * f)
    k = np.arange(seg, n - seg + 1)
    left = cs2[k - 1] - cs[k - 1] ** 2 / k
    right = (cs2[-1] - cs2[k - 1]) - (cs[-1] - cs[k - 1]) ** 2 / (n - k)
    best = int(k[int(np.argmin(left + right))])
    before, after = float(np.median(y[:best])), float(np.median(y[best:]))
    resid = np.concatenate([f[:best] - before / scale, f[best:] - after / scale])
    sigma = max(1.4826 * float(np.median(np.abs(resid))) * scale, JITTER * min(before, after))
    if abs(after - before) < max(6 * sigma, 0.1 * min(before, after)):
        return None
    return best, before, after


class _Ranks:
    """One rank-timing table: matrix [step, rank] of step_ms (NaN where a rank did not report)."""

    def __init__(self, steps: np.ndarray, ranks: np.ndarray, ms: np.ndarray, times: dict[int, str], dropped: int):
        self.ranks = ranks.astype(np.int64)
        reported = np.sum(np.isfinite(ms), axis=1)
        keep = reported >= 2
        self.steps, self.ms, self.times = steps[keep].astype(np.int64), ms[keep], times
        missing = int(np.sum(~np.isfinite(self.ms)))
        notes = []
        if dropped:
            notes.append(f"{dropped} row(s) with empty cells dropped")
        if missing:
            notes.append(f"{missing} of {self.ms.size} (rank, step) values missing")
        self.partial = ", ".join(notes)
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
            med = np.nanmedian(np.where(have[None, :], block, 0.0), axis=0)  # no all-NaN column: no warning
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
            "rank": rank, "rank_median_step_ms": round(slow, 3), "ranks_median_step_ms": round(center, 3),
            "robust_z": round(zw, 1), "cost_ms_per_step": round(cost, 3),
            "cost_pct_of_step": round(100 * cost / slow, 1), "ranks": int(self.ranks.size),
            "slow_ranks": [int(self.ranks[i]) for i in group]}
        story = ""
        if before is not None and self.cp is not None and np.isfinite(before[worst]):
            others = [i for i in range(med.size) if i not in flagged and np.isfinite(before[i])]
            rise = slow - float(before[worst])
            others_rise = float(np.median(med[others] - before[others])) if others else 0.0
            numbers.update(change_step=int(self.steps[self.cp[0]]), rank_before_ms=round(float(before[worst]), 3),
                           rank_rise_ms=round(rise, 3), others_rise_ms=round(others_rise, 3))
            if rise > 0.1 * float(before[worst]) and rise > 3 * max(others_rise, 0.0):
                story = (f" It became slow at step {int(self.steps[self.cp[0]])}: its own step time rose by "
                         f"{rise:.1f} ms while the other ranks' rose {others_rise:.1f} ms, so it started the drop.")
        conf = 0.5 + 0.4 * (min(zw, 20.0) - Z_FLAG) / (20.0 - Z_FLAG) - (0.1 if self.partial else 0.0)
        if story:
            self._flagged.append({"rank": rank, "rise": rise, "others_rise": others_rise, "conf": conf})
        return make_hypothesis(
            "straggler", f"Straggler: {names} slows every step", conf,
            self._note(
                f"{names.capitalize()} takes {slow:.1f} ms per step (median) against {center:.1f} ms for the median "
                f"rank (robust z = {zw:.1f} over {self.ranks.size} ranks). In synchronous training every rank waits "
                f"for it: it costs {cost:.1f} ms every step ({100 * cost / slow:.0f}% of the step).{story} The boring "
                f"answer is usually right: one degraded GPU or node (throttling, ECC, PCIe)."),
            numbers,
            (Fix("Drain the node and reschedule the job on healthy nodes",
                 f"scontrol update NodeName=<node of rank {rank}> State=DRAIN Reason=\"straggler\""),
             Fix("Restart from the last checkpoint without it", "sbatch --exclude=<node> ..."),
             Fix("Repair it before it returns: cooling, reseat, replace; DCGM diagnostics must pass", "dcgmi diag -r 3")),
            subject=names, partial=bool(self.partial), wrong_fix=NODE_FIRST_WRONG,
            check_next=((f"`{SMI_CHECK}` on the node of {names} (node {node} if {GPUS_PER_NODE} GPUs per node): "
                        "throttle reasons, ECC, PCIe gen/width"),
                        (f"A histogram of compute time per rank (before the all-reduce): {names} slow in its own work, "
                        "or waiting for its input?"),
                        "`dcgmi diag -r 3` on that node",
                        "Host side of that node: other processes, CPU contention, a slow local disk"))

    def change(self) -> list[Finding] | None:
        if self.cp is None:
            return None
        k, before, after = self.cp
        step = int(self.steps[k])
        when = f"step {step}" + (f" ({self.times[step]})" if step in self.times else "")
        ratio = after / before
        med_before, med_after = float(np.median(self.step_med[:k])), float(np.median(self.step_med[k:]))
        numbers = {"change_step": step, "before_ms": round(before, 3), "after_ms": round(after, 3),
                   "ratio": round(ratio, 3), "median_rank_before_ms": round(med_before, 3),
                   "median_rank_after_ms": round(med_after, 3)}
        if ratio < 1:
            f = make_hypothesis(
                "step-time-change", f"Step time fell at {when}", 0.3 - (0.05 if self.partial else 0),
                self._note(f"The slowest rank's step time fell from {before:.1f} to {after:.1f} ms ({ratio:.2f}x) at "
                           f"{when}: warm-up (compilation, autotuning, allocator) ending, or a fix taking effect."),
                numbers, (), subject=when, partial=bool(self.partial))
            return [replace(f, severity="info")]
        everyone = med_after - med_before > 0.5 * (after - before)
        starter = self._flagged[0] if self._flagged else None
        if starter:
            who = (f"Rank {starter['rank']} started it: its own step time rose {starter['rise']:.1f} ms while the "
                   f"others' rose {starter['others_rise']:.1f} ms (they wait for it at every collective).")
        elif everyone:
            who = (f"The median rank slowed too ({med_before:.1f} -> {med_after:.1f} ms): no single rank stands out. If "
                   "step_ms includes the wait in collectives, a straggler hides behind it: compare compute-only time "
                   "per rank; else a shared cause (input, storage, fabric).")
        else:
            who = (f"The median rank did not ({med_before:.1f} -> {med_after:.1f} ms): a few ranks slowed, each not "
                   "enough to stand out alone: look at the slowest ranks per step.")
        conf = 0.5 + 0.3 * min(1.0, (ratio - 1.1) / 0.9) - (0.1 if self.partial else 0.0)
        if starter:  # the same story as the straggler's, which names the cause: rank it just below
            conf = starter["conf"] - 0.05
        numbers["slow_rank"] = starter["rank"] if starter else None
        main = make_hypothesis(
            "step-time-change", f"Step time rose {ratio:.2f}x at {when}", conf,
            self._note(f"The step time (slowest rank per step) rose from {before:.1f} to {after:.1f} ms ({ratio:.2f}x) "
                       f"at {when} and stayed there. {who} For a sudden drop with no code change, check in this order: "
                       "(1) straggler / node health, (2) data loader stall, (3) checkpoint activity, (4) network fabric."),
            numbers,
            (Fix("Find the degraded node from per-rank timing histograms; drain it and reschedule",
                 "scontrol update NodeName=<node> State=DRAIN Reason=\"slow node\""),
             Fix("Data loader: more workers and a deeper prefetch queue; check read latency if streaming",
                 "DataLoader(ds, num_workers=8, prefetch_factor=4, persistent_workers=True, pin_memory=True)"),
             Fix("Checkpoints: write asynchronously to fast local storage, then copy out", ""),
             Fix("Fabric: fix the flapping link or the rail that is down; NCCL should use every HCA",
                 "ibstat; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET")),
            subject=when, partial=bool(self.partial), wrong_fix=NODE_FIRST_WRONG,
            check_next=((f"Straggler / node health: per-rank step times after {when}; `{SMI_CHECK}` on the slowest "
                        "node (throttling, ECC, PCIe downgrade)"),
                        ("Data loader: did GPU busy time per step rise too? If step time rose but busy time did not, "
                        "it is host-side (workers, prefetch depth, read latency)"),
                        "Checkpoint activity at that time: an async checkpoint hanging on slow storage serializes ranks",
                        "Network fabric: InfiniBand link flaps or a rail down (`ibstat`, switch logs, NCCL_DEBUG=INFO)"))
        out = [main]
        if not starter:
            out += self._other_causes(everyone, when)
        return out

    def _other_causes(self, everyone: bool, when: str) -> list[Finding]:
        lead = "every rank slowed together" if everyone else "a few ranks slowed"
        return [
            make_hypothesis("dataloader-stall", "Data loader stall", 0.45 if everyone else 0.3,
                            f"After {when} {lead}. If GPU busy time per step did not rise with the step time, the "
                            "GPUs wait for input: host side.", {"every_rank_slowed": everyone},
                            (Fix("More workers, deeper prefetch, persistent workers",
                                 "DataLoader(ds, num_workers=8, prefetch_factor=4, persistent_workers=True)"),),
                            check_next=("GPU busy time per step before and after (profiler or DCGM SM activity)",
                                        "Read latency of the dataset store, if streaming"), subject=when),
            make_hypothesis("checkpoint-stall", "Checkpoint activity", 0.3,
                            f"An async checkpoint hanging on slow storage can hold every rank at the next collective; "
                            f"check what was written around {when}.", {}, (
                                Fix("Write checkpoints asynchronously to local NVMe, then copy out", ""),),
                            check_next=("Checkpoint writer logs and storage latency around the change",), subject=when),
            make_hypothesis("network-fabric", "Network fabric degraded", 0.35 if everyone else 0.2,
                            "An InfiniBand link flap, congestion, or one rail down forcing fallback slows every "
                            "collective.", {"every_rank_slowed": everyone},
                            (Fix("Fix the link or rail; make NCCL use every HCA", "ibstat; NCCL_IB_HCA=..."),),
                            check_next=("`ibstat` / switch port counters for flaps", ("NCCL_DEBUG=INFO: which NICs and "
                                        "transports each rank uses")), subject=when)]

    def spikes(self) -> Finding | None:
        y = self.step_max
        if y.size < 30:
            return None
        base = _median_filter(y, 9)
        resid = y - base
        sigma = max(1.4826 * float(np.median(np.abs(resid))), JITTER * float(np.median(base)))
        hit = np.flatnonzero(resid > max(6 * sigma, 0.3 * float(np.median(base))))
        if hit.size < 3:
            return None
        gaps = np.diff(self.steps[hit])
        period = float(np.median(gaps))
        regular = float(np.mean(np.abs(gaps - period) <= max(1.0, 0.05 * period)))
        if regular < 0.6:
            return None
        cost = float(resid[hit].sum()) / y.size
        f = make_hypothesis(
            "checkpoint-stall", f"Every ~{period:.0f} steps, a step is slow", 0.5 - (0.1 if self.partial else 0),
            self._note(f"{hit.size} steps spike {float(np.median(resid[hit])):.1f} ms above their neighbours, every "
                       f"{period:.0f} steps: checkpointing, evaluation or logging on a schedule. Averaged, "
                       f"{cost:.2f} ms per step."),
            {"spikes": int(hit.size), "period_steps": round(period, 1),
             "median_spike_ms": round(float(np.median(resid[hit])), 3), "cost_ms_per_step": round(cost, 3),
             "first_spike_step": int(self.steps[hit[0]])},
            (Fix("Make the periodic work asynchronous (async checkpoint to local NVMe, then copy out)",
                 "torch.distributed.checkpoint.async_save(state_dict, checkpoint_id=path)"),
             Fix("Do it less often, or on fewer ranks", "")),
            subject=f"every {period:.0f} steps", partial=bool(self.partial),
            check_next=("What runs every that many steps: checkpoint, eval, logging, garbage collection",),
            wrong_fix="Tuning the per-step code: the ordinary steps are fine.")
        return f

    def steady(self) -> Finding:
        med = float(np.median(self.step_max)) if self.step_max.size else 0.0
        f = make_hypothesis(
            "step-time-steady", "No straggler, no change in step time", 0.6 - (0.1 if self.partial else 0),
            self._note(f"{self.ranks.size} ranks over {self.steps.size} steps: no rank beyond z = {Z_FLAG} and no "
                       f"lasting change in step time (median of the slowest rank per step {med:.1f} ms)."),
            {"ranks": int(self.ranks.size), "steps": int(self.steps.size), "median_step_ms": round(med, 3)},
            (), partial=bool(self.partial))
        return replace(f, severity="info")


# -- collective time vs GPU count ------------------------------------------------------------------------


def collective_hypotheses(text: str) -> list[Finding]:
    what = "collective timings"
    header, rows = _table(text, what, COLL_EXPECTED)
    gi = _column(header, ("gpus", "n_gpus", "world_size", "nranks", "ranks"), what, COLL_EXPECTED)
    ti = next((i for i, h in enumerate(header) if "allreduce" in h or "all_reduce" in h or "all-reduce" in h), None)
    if ti is None:
        ti = next((i for i, h in enumerate(header) if h in ("time_ms", "ms") or h.endswith("_ms")), None)
    if ti is None:
        raise InputError(f"{what}: no all-reduce time column (allreduce_ms) in the header; expected {COLL_EXPECTED}")
    bi = _column(header, ("bytes", "size_bytes", "message_bytes", "size"), what, COLL_EXPECTED, required=False)
    ai = _column(header, ("algo", "algorithm"), what, COLL_EXPECTED, required=False)
    groups: dict[str, dict[int, list[tuple[float, float | None]]]] = {}
    dropped = 0
    for n, cells in rows:
        gpus = _number(_cell(cells, gi), "gpus", n, COLL_EXPECTED)
        ms = _number(_cell(cells, ti), header[ti], n, COLL_EXPECTED)
        size = _number(_cell(cells, bi), "bytes", n, COLL_EXPECTED) if bi is not None else None
        if gpus is None or ms is None:
            dropped += 1
            continue
        if (not 2 <= gpus <= MAX_COUNT or gpus != int(gpus) or not MS_RANGE[0] <= ms <= MS_RANGE[1]
                or (size is not None and not 1 <= size <= MAX_BYTES)):
            raise InputError(f"line {n}: gpus must be a whole number >= 2, times in ms between {MS_RANGE[0]:g} and "
                             f"{MS_RANGE[1]:g}, bytes between 1 and {MAX_BYTES:g}; expected {COLL_EXPECTED}")
        groups.setdefault(_cell(cells, ai).lower(), {}).setdefault(int(gpus), []).append((ms, size))
    usable = {a: g for a, g in groups.items() if len(g) >= 3}
    if not usable:
        counts = sorted({n for g in groups.values() for n in g})
        raise InputError(f"{what}: {len(counts)} GPU count(s) {counts[:6]}; the ring model needs at least 3 "
                         f"(e.g. 64,128,256,512); expected {COLL_EXPECTED}")
    notes = [f"{dropped} row(s) with empty cells dropped"] if dropped else []
    notes += [f"algo {a or '?'} has fewer than 3 GPU counts" for a in groups if a not in usable]
    with np.errstate(all="ignore"):
        out = [_scaling(algo, g, "; ".join(notes)) for algo, g in usable.items()]
    return sorted(out, key=lambda f: -(f.confidence or 0))


def _nnls(features: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with coefficients >= 0, by trying every subset of the (at most 3) columns."""
    best, best_err = np.zeros(features.shape[1]), float("inf")
    for size in range(1, features.shape[1] + 1):
        for cols in combinations(range(features.shape[1]), size):
            try:
                coef = np.linalg.lstsq(features[:, cols], y, rcond=None)[0]
            except np.linalg.LinAlgError:
                continue
            if np.all(coef >= 0):
                err = float(np.sum((features[:, cols] @ coef - y) ** 2))
                if err < best_err:
                    best_err, best = err, np.zeros(features.shape[1])
                    best[list(cols)] = coef
    return best


def _scaling(algo: str, points: dict[int, list[tuple[float, float | None]]], partial: str) -> Finding:
    ns = np.array(sorted(points), dtype=float)
    t = np.array([float(np.median([ms for ms, _ in points[int(n)]])) for n in ns])
    sizes = [[s for _, s in points[int(n)] if s is not None] for n in ns]
    size = np.array([float(np.median(s)) for s in sizes]) if all(sizes) else None
    ring = 2 * (ns - 1) / ns * (size if size is not None else 1.0)  # ring: 2(N-1)/N x S bytes per rank
    hops = 2 * (ns - 1)  # a ring all-reduce takes 2(N-1) latency-bound steps
    a_feat = np.column_stack([np.ones_like(ns), ring])
    b_feat = np.column_stack([np.ones_like(ns), ring, hops])
    cliff = None
    for j in range(2, ns.size):
        coef = _nnls(a_feat[:j], t[:j])
        expected = float(a_feat[j] @ coef)
        if expected > 0 and t[j] / expected >= CLIFF:
            cliff = (j, coef, expected)
            break
    label = f" ({algo})" if algo else ""
    numbers: dict[str, Any] = {"gpus": [int(n) for n in ns], "allreduce_ms": [round(float(x), 3) for x in t]}
    if size is not None:
        busbw = size * 2 * (ns - 1) / ns / (t / 1e3) / 1e9  # nccl-tests' busbw: algbw x 2(N-1)/N
        numbers["bus_bandwidth_gbps"] = [round(float(b), 2) for b in busbw]
    if cliff is None:
        coef = _nnls(a_feat, t)
        worst = float(np.max(t / np.maximum(a_feat @ coef, 1e-12)))
        f = make_hypothesis(
            "collective-scaling-ok", f"All-reduce{label} scales as the ring model predicts", 0.6,
            f"All-reduce time{label} stays within {worst:.2f}x of the ring model t(N) = a + b x 2(N-1)/N fitted on all "
            f"{ns.size} GPU counts ({int(ns[0])}-{int(ns[-1])}).", dict(numbers, worst_ratio=round(worst, 3)), (),
            subject=f"all-reduce{label}", partial=bool(partial))
        return replace(f, severity="info")
    j, coef, expected = cliff
    n_cliff, ratio = int(ns[j]), float(t[j] / expected)
    hop_note, ratio_b = "", None
    if j >= 3:
        coef_b = _nnls(b_feat[:j], t[:j])
        expected_b = float(b_feat[j] @ coef_b)
        ratio_b = float(t[j] / expected_b) if expected_b > 0 else None
        if ratio_b is not None:
            numbers.update(expected_with_hop_latency_ms=round(expected_b, 3), ratio_with_hop_latency=round(ratio_b, 2))
            hop_note = (f" Even letting the latency grow with every ring hop (+c x 2(N-1)), {expected_b:.1f} ms is "
                        f"expected ({ratio_b:.1f}x)"
                        + (": latency x hops does not explain it." if ratio_b >= 2 else
                           ": latency x hops explains much of it; a tree's log2(N) latency is the cure."))
    numbers.update(cliff_gpus=n_cliff, measured_ms=round(float(t[j]), 3), expected_ms=round(expected, 3),
                   ratio=round(ratio, 2), fitted_on_gpus=[int(n) for n in ns[:j]],
                   latency_term_ms=round(float(coef[0]), 3), bandwidth_term_ms=round(float(coef[1] * ring[j]), 3))
    bw = ""
    if size is not None:
        bw = (f" Bus bandwidth falls from {numbers['bus_bandwidth_gbps'][j - 1]:.1f} GB/s at {int(ns[j - 1])} GPUs to "
              f"{numbers['bus_bandwidth_gbps'][j]:.1f} GB/s at {n_cliff}.")
    conf = 0.3 + 0.55 * min(1.0, (ratio - CLIFF) / 2.5) - (0.1 if partial else 0.0)
    hops_explain = ratio_b is not None and ratio_b < CLIFF
    if hops_explain:  # a steady climb with the hop count, not a boundary
        fid, title, conf = "ring-latency-growth", f"All-reduce{label} time grows with the ring's length", min(conf, 0.6)
        why = ("The bandwidth term 2(N-1)/N x S/B is almost flat in N; what grows is the latency of the 2(N-1) "
               "steps of a ring.")
    else:
        fid, title = "topology-cliff", f"All-reduce{label} falls off a cliff at {n_cliff} GPUs"
        why = ("Ring time 2(N-1)/N x S/B is almost flat in N with the same message per rank, so a cliff means the "
               "ring crossed a topology boundary: most likely a pod / rack / spine boundary with less bandwidth "
               "between pods, or NCCL falling back from NVLink/NVSwitch to InfiniBand for part of the ring (the "
               "slowest segment sets the pace).")
    return make_hypothesis(
        fid, title, conf,
        f"All-reduce takes {t[j]:.1f} ms at {n_cliff} GPUs where the ring model fitted on "
        f"{', '.join(str(int(n)) for n in ns[:j])} GPUs expects {expected:.1f} ms ({ratio:.1f}x). {why}"
        f"{hop_note}{bw}" + (f" Partial data: {partial}." if partial else ""),
        numbers,
        (Fix("Tree or hierarchical all-reduce: reduce inside the node over NVLink, all-reduce across nodes over IB, "
             "broadcast inside the node", "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING  # the rings/trees NCCL "
             "built, and the links they use"),
         Fix("NCCL's double binary tree at large scale (latency grows as log2 N, not N)",
             "NCCL_ALGO=Tree  # or unset NCCL_ALGO=Ring and let NCCL's tuner choose"),
         Fix("Overlap the all-reduce with the backward pass; check the bucket size",
             "DDP(model, bucket_cap_mb=100)  # buckets launch as gradients become ready"),
         Fix("All-reduce less often: gradient accumulation",
             "with model.no_sync():  # k-1 micro-steps without all-reduce\n    loss.backward()")),
        subject=f"all-reduce{label} at {n_cliff} GPUs", partial=bool(partial),
        check_next=(f"nccl-tests `all_reduce_perf -b 8 -e 4G -f 2` at {int(ns[j - 1])} and {n_cliff} GPUs: busbw per size",
                    "NCCL_DEBUG=INFO: which transports (NVLink P2P, NVLS, NET/IB) and which ring/tree NCCL chose",
                    f"Which pods, racks and spine switches the {n_cliff} ranks span; the oversubscription between them",
                    "`ibstat` and switch port counters on the inter-pod links"),
        wrong_fix="ZeRO / FSDP: they shard memory, a different problem class; this is the collective algorithm at scale.")


# -- pipeline bubble ----------------------------------------------------------------------------------------


def pipeline_hypotheses(pp: int, microbatches: int, measured_bubble: float, virtual_stages: int = 1,
                        stage_ms: list[float | None] | None = None, p2p_ms: float | None = None,
                        recompute: Any = None) -> list[Finding]:
    """The measured bubble against (pp-1)/m (1F1B) and (pp-1)/(m v) (interleaved), and where it breaks.

    ``measured_bubble``: idle time over compute time, as a fraction (0.41) or a percent (41).
    ``stage_ms``: per-stage compute time per micro-batch (forward + backward), pp or pp x v entries.
    ``p2p_ms``: one send/recv between stages. ``recompute``: None (unknown), bool, or "full"/"selective"/"none".
    """
    p, m, v = _whole(pp, "pp", 2), _whole(microbatches, "microbatches", 1), _whole(virtual_stages, "virtual_stages", 1)
    bubble = _real(measured_bubble, "measured_bubble")
    bubble = bubble / 100 if 1 < bubble <= 100 else bubble
    if not 0 <= bubble < 1:
        raise InputError(f"measured_bubble {measured_bubble!r}: expected a fraction in [0, 1) or a percent")
    c = None if p2p_ms is None else _real(p2p_ms, "p2p_ms")
    stages, partial = _stages(stage_ms, p, v)
    f1, fv = (p - 1) / m, (p - 1) / (m * v)
    expected = fv if v > 1 else f1
    excess = bubble - expected
    base: dict[str, Any] = {"pp": p, "microbatches": m, "virtual_stages": v, "measured_bubble": round(bubble, 4),
                            "expected_1f1b": round(f1, 4), "expected_interleaved": round(fv, 4),
                            "expected": round(expected, 4), "excess_points": round(100 * excess, 1)}
    which = (f"interleaved 1F1B with v={v}: (pp-1)/(m v) = {p - 1}/{m * v} = {100 * fv:.1f}% (the often-quoted "
             f"(pp-1)/m = {p - 1}/{m} = {100 * f1:.1f}% is plain 1F1B's: the gap is larger than it looks)" if v > 1
             else f"1F1B: (pp-1)/m = {p - 1}/{m} = {100 * f1:.1f}%")
    head = (f"Measured bubble {100 * bubble:.0f}% against the formula for {which}: {100 * excess:.1f} points the "
            "formula does not explain. It assumes balanced stages and free p2p.")
    note = f" Partial data: {partial}." if partial else ""
    short = f"Measured bubble {100 * bubble:.0f}% against {100 * expected:.1f}% expected (+{100 * excess:.1f} points)."
    if excess <= 0.03:
        f = make_hypothesis("pipeline-bubble-ok", "The bubble is what the schedule predicts", 0.6,
                            f"Measured bubble {100 * bubble:.0f}% against the formula for {which}.{note}", base,
                            _pipeline_fixes(p, m, v)[2:], partial=bool(partial))
        return [replace(f, severity="info")]
    return sorted(_pipeline_causes(p, m, v, expected, excess, stages, c, recompute, base, (head, short), note,
                                   bool(partial)), key=lambda f: -(f.confidence or 0))


def _pipeline_causes(p: int, m: int, v: int, expected: float, excess: float, stages: np.ndarray | None,
                     c: float | None, recompute: Any, base: dict[str, Any], heads: tuple[str, str], note: str,
                     partial: bool) -> list[Finding]:
    head, short = heads
    fixes = _pipeline_fixes(p, m, v)
    wrong = ("Taking the formula at face value (only adding micro-batches until (pp-1)/m looks small): it assumes "
             "balanced stages and zero communication; find where the model breaks first.")
    def predicted(t_pace: float, t_mean: float, comm: float, vv: int) -> float:
        # idle / compute when every stage runs at the pace t_pace (the slowest stage) plus 2 v exposed
        # transfers per micro-batch; the schedule lasts m + (pp-1)/v micro-batch slots. Balanced and free
        # p2p: (pp-1)/(m v), the formula.
        return (m + (p - 1) / vv) * (t_pace + 2 * vv * comm) / (m * t_mean) - 1

    imb = dict(base)
    if stages is not None:
        t_max, t_mean = float(stages.max()), float(stages.mean())
        slowest = int(stages.argmax())
        pred = predicted(t_max, t_mean, 0.0, v)
        explained = min(max((pred - expected) / excess, 0.0), 1.0)
        conf_imb = 0.1 if t_max < 1.03 * t_mean else 0.2 + 0.7 * explained
        imb.update(slowest_stage=slowest, slowest_stage_ms=round(t_max, 3), mean_stage_ms=round(t_mean, 3),
                   imbalance=round(t_max / t_mean, 3), predicted_bubble_with_imbalance=round(pred, 4),
                   share_of_excess_explained=round(explained, 3))
        why = (f" With the measured stage times the slowest stage (stage {slowest}, {t_max:.1f} ms per micro-batch "
               f"against a mean of {t_mean:.1f}) sets the pace: bubble ~ (m + (pp-1)/v) x t_max / (m x t_mean) - 1 "
               f"= {100 * pred:.1f}%, {100 * explained:.0f}% of the excess.")
    else:
        conf_imb, why = 0.7, (" Embedding (vocab-size GEMM) and output/loss (cross-entropy over the vocabulary) stages "
                              "are the usual suspects; give stage_ms to quantify it.")
    out = [make_hypothesis(
        "pipeline-imbalance", "Unbalanced pipeline stages inflate the bubble", conf_imb,
        head + " Imbalanced stages: the faster stages wait for the slowest one every micro-batch." + why + note,
        imb, fixes, wrong_fix=wrong, partial=partial,
        check_next=("Per-stage forward and backward time per micro-batch (first and last stage against the middle)",
                    "Layers per stage, and where embedding and loss sit",
                    "A timeline of one iteration (nsys / torch profiler) on the first, a middle and the last stage"))]
    rc = str(recompute).strip().lower() if recompute is not None else ""
    off = recompute is False or rc in ("none", "off", "false", "no", "0")
    conf_rc = 0.05 if off else 0.35 if recompute is None else 0.45 if stages is None else 0.3
    out.append(make_hypothesis(
        "recompute-imbalance", "Recomputation costs differ between stages", conf_rc,
        short + (" Activation recompute is off, so this is ruled out." if off else
                " Uniform activation checkpointing on stages with different activation weight (attention-heavy vs "
                "MLP-heavy) makes the backward cost differ per stage.") + note,
        dict(base, recompute=recompute),
        (Fix("Per-stage recompute: selective (attention only) where activations are heavy, none on light stages",
             "--recompute-granularity selective   # Megatron; or recompute fewer layers on the heaviest stage"),
         *fixes), wrong_fix=wrong, partial=partial,
        check_next=("Backward time per stage with and without recompute",)))
    p2p = dict(base, p2p_ms=c)
    if c is not None and stages is not None:
        t_mean = float(stages.mean())
        pred_c = predicted(t_mean, t_mean, c, v)
        explained_c = min(max((pred_c - expected) / excess, 0.0), 1.0)
        conf_p2p = 0.15 + 0.7 * explained_c
        p2p.update(p2p_share_of_stage=round(2 * v * c / t_mean, 3), predicted_bubble_with_p2p=round(pred_c, 4),
                   share_of_excess_explained=round(explained_c, 3))
        why_c = (f" {2 * v} sends/receives of {c:.2f} ms per micro-batch per stage are {100 * 2 * v * c / t_mean:.0f}% "
                 f"of a {t_mean:.1f} ms stage: bubble ~ {100 * pred_c:.1f}% if not overlapped, "
                 f"{100 * explained_c:.0f}% of the excess.")
    else:
        conf_p2p = 0.35 if c is not None else 0.3
        why_c = " Give p2p_ms and stage_ms to quantify it."
    out.append(make_hypothesis(
        "pipeline-p2p-overhead", "Send/recv between stages is not amortized", conf_p2p,
        short + " P2P transfers between stages have a fixed latency; with small micro-batches (short sequences) each "
        "carries less compute to hide it." + why_c + note, p2p,
        (Fix("Overlap p2p with compute", "--overlap-p2p-communication --overlap-p2p-communication-warmup-flush"),
         Fix("Larger micro-batches (fewer of them) if memory allows", ""), *fixes[:1]),
        wrong_fix=wrong, partial=partial,
        check_next=("Send/recv time per micro-batch on a timeline, against the stage's compute",)))
    vs = dict(base)
    if v > 1 and c is not None and stages is not None:
        t_max, t_mean = float(stages.max()), float(stages.mean())
        pred_v, pred_1 = predicted(t_max, t_mean, c, v), predicted(t_max, t_mean, c, 1)
        conf_v = 0.6 if pred_v > pred_1 else 0.2
        vs.update(predicted_bubble_v=round(pred_v, 4), predicted_bubble_v1=round(pred_1, 4))
        why_v = (f" With the p2p cost, v={v} predicts {100 * pred_v:.1f}% against {100 * pred_1:.1f}% for plain 1F1B"
                 + (": interleaving costs more than it saves." if pred_v > pred_1 else "."))
    else:
        conf_v = 0.25
        why_v = (f" Interleaving divides the formula bubble by v but multiplies the p2p transfers by v; with v={v}"
                 + (" it can cost more than it saves." if v > 1 else f", interleaving (v=2) would halve the formula to "
                    f"{100 * (p - 1) / (2 * m):.1f}% (Megatron wants m divisible by pp)."))
    out.append(make_hypothesis(
        "virtual-stages", "The virtual-stage setting does not suit this configuration", conf_v,
        short + why_v + note, vs, (fixes[1], fixes[0], *fixes[2:]), wrong_fix=wrong, partial=partial,
        check_next=("Measure the bubble at v=1, 2 and 4 for a few iterations",)))
    return out


def _pipeline_fixes(p: int, m: int, v: int) -> tuple[Fix, ...]:
    return (
        Fix("Rebalance the partition: fewer layers on the first (embedding) and last (output + loss) stages, more in "
            "the middle", "--decoder-first-pipeline-num-layers <n> --decoder-last-pipeline-num-layers <n>  # Megatron\n"
            "# or --pipeline-model-parallel-layout \"Et*k|t*k|...|t*k,L\""),
        Fix("Tune the virtual stages (interleaving): v divides the formula bubble but multiplies p2p",
            "--num-layers-per-virtual-pipeline-stage <k>  # Megatron; torch: ScheduleInterleaved1F1B"),
        Fix(f"More micro-batches: m={2 * m} gives (pp-1)/(m v) = {100 * (p - 1) / (2 * m * v):.1f}% (more activation "
            "memory in flight)", "--global-batch-size <2x> (same --micro-batch-size)"),
        Fix("A zero-bubble schedule (ZB-H1/H2, ZB-V): split the backward into input and weight gradients to fill the "
            "bubble", "torch.distributed.pipelining.ScheduleInterleavedZeroBubble  # or ScheduleZBVZeroBubble"),
    )


def _whole(value: Any, name: str, least: int) -> int:
    number = _real(value, name)
    if number != int(number) or not least <= number <= MAX_COUNT:
        raise InputError(f"{name} {value!r}: expected a whole number from {least} to {MAX_COUNT:g}")
    return int(number)


def _real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"{name} {value!r}: expected a number")
    try:
        number = float(value)
    except ValueError:
        raise InputError(f"{name} {value!r}: expected a number") from None
    if not math.isfinite(number) or not 0 <= number <= MS_RANGE[1]:
        raise InputError(f"{name} {value!r}: expected a number from 0 to {MS_RANGE[1]:g}")
    return number


def _stages(stage_ms: Any, p: int, v: int) -> tuple[np.ndarray | None, str]:
    """Per physical stage time (chunk j of pp x v lives on stage j mod pp); None entries are missing."""
    if stage_ms is None:
        return None, ""
    if not isinstance(stage_ms, (list, tuple)) or len(stage_ms) not in (p, p * v):
        raise InputError(f"stage_ms: expected a list of {p} per-stage times (or {p * v} per chunk), got {stage_ms!r}"[:200])
    vals = [None if x is None else _real(x, "stage_ms") for x in stage_ms]
    missing = sum(x is None for x in vals)
    per_stage = np.zeros(p)
    seen = np.zeros(p, dtype=bool)
    for j, x in enumerate(vals):
        if x is not None:
            per_stage[j % p] += x
            seen[j % p] = True
    if not seen.any() or per_stage[seen].sum() <= 0:
        return None, "no stage time given" if missing else ""
    partial = f"{missing} of {len(vals)} stage times missing" if missing else ""
    return per_stage[seen], partial
