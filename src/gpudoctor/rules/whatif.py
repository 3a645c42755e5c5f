"""Every fix priced by replaying the step's graph with the fix applied (replay/).

The step's graph is built once per trace; the profiler's own time is taken out of it (fitted to
the unprofiled step when ``gpudoctor run`` timed it, else at the default per-event costs). Each
finding's fix is an edit of the graph: its rule's own (``Rule.edit``), or one derived here from
the finding: the host time of its idle cause that the fix removes (the share its rule priced),
and its kernels shortened by the kernel time its rule priced. The saving is the replayed step
before minus after; the same edits all at once give "all fixes together". A finding whose fix
cannot be stated as an edit (or a trace whose graph cannot be built) keeps its formula's price,
and its evidence says so (``PRICED_BY``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import msgspec
import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import dataloader_calls
from gpudoctor.analysis.idle import BLOCKING
from gpudoctor.analysis.intervals import overlap_per_window, union
from gpudoctor.analysis.observer import view_operator_ns
from gpudoctor.core.finding import (
    KNOB_SPEEDUP,
    MAX_REPLAYED_SAVING_SHARE,
    Finding,
    severity_for,
    speedup,
)
from gpudoctor.replay.edits import Edit, changes, merge
from gpudoctor.replay.graph import StepGraph, build
from gpudoctor.replay.observer import (
    PRIOR_SCALE,
    Unprofiled,
    gpu_sets,
    prior_scale,
    unprofiled,
)
from gpudoctor.replay.pace import paced
from gpudoctor.replay.simulate import Changes, host_times, replay
from gpudoctor.rules.knob_prices import KnobPrice, compile_knob_edit, knob_edits
from gpudoctor.rules.shared import UNSEEN_MIN_SHARE, UNSEEN_TAKEN_BY

PRICED_BY = "priced_by"  # evidence key: "replay" or "formula"
FORMULA_BECAUSE = "priced_by_formula_because"
STEP_AFTER_REPLAYED = "step_after_fix_replayed_ms"
# evidence key: what told the replay how fast the host runs without the profiler (observer.FROM_*)
HOST_PACE_FROM = "host_pace_from"
FORMULA_SAVING = "saving_by_formula_ms"
# evidence key: the fix that priced the finding, where it is not the one the rule lists first
PRICED_BY_FIX = "priced_by_fix"
# the fixes that move the DataLoader's fetch off the program's thread
LOADER_TAKEN_BY = frozenset({"input-pipeline"})


class StepModel(msgspec.Struct, frozen=True, eq=False):
    """The graph of a trace's steps and its profiler-free baseline."""

    graph: StepGraph
    base: Unprofiled
    step_ms: float  # the step the speedups are taken against: unprofiled when timed, else profiled
    unprofiled_known: bool
    # the steps fetch from a DataLoader: an unprofiled step longer than the replayed one holds its
    # stalls, which the window did not see
    fed_by_loader: bool = False
    # the DataLoader's fetch timed unprofiled less its recorded time in the window, per step: the
    # loader's own run-to-run spread, which the profiler's fit leaves out (``step_model``); 0 where
    # the capture did not time the fetch
    fetch_unseen_ms: float = 0.0

    def after_ms(self, edit: Edit, takes_unseen: bool = False, takes_loader: bool = False) -> float:
        """The step once ``edit`` is applied, in the terms of ``step_ms``; ``takes_loader``: the
        edit moves the DataLoader's fetch off the program's thread, and its unseen time with it."""
        rest = self._after_ms(edit, takes_unseen, self.step_ms - self.fetch_unseen_ms)
        after = rest + (0.0 if takes_loader else self.fetch_unseen_ms)
        return max(after, edit.min_step_share * self.step_ms)

    def _after_ms(self, edit: Edit, takes_unseen: bool, step_ms: float) -> float:
        """The step once ``edit`` is applied, in the terms of ``step_ms`` (the measured step less
        the loader's unseen time)."""
        edited = changes(self.graph, edit, base=self.base.changes)
        fixed = replay(self.graph, edited)
        # what is left of the host's work runs faster where the fix took most of it (replay/pace.py)
        quicker = paced(self.graph, edited, self.base.replayed.host_work_ns,
                        fixed.host_work_ns) if edit.runs_paced else None
        if quicker is not None:
            fixed = replay(self.graph, quicker)
        after_ns = max(fixed.step_ns, edit.min_step_ns)
        base_ns = self.base.replayed.step_ns
        if base_ns <= 0:
            return step_ms
        if not self.unprofiled_known:  # offline: the share the replay removes, of the profiled step
            return step_ms * after_ns / base_ns
        # a measured step longer than the replayed one: within the spread of timing one step two
        # ways, or waits the window did not see (rules/calibrate.py's rule, the same threshold)
        residual_ms = self.base.residual_ns / 1e6
        # the host ran slower while the step was timed than the replay has it: the host's work
        # left after the fix is that much slower, and where the GPU's work sets the fixed step the
        # host's slowness hides behind it (benchmarks/BENCHMARKS-replay.md "A slower host behind
        # the fixed step's GPU")
        slower_host_ns = fixed.host_work_ns / max(self.graph.steps - 1, 1) * step_ms * 1e6 / base_ns
        # the spread of timing one step two ways
        if 0 <= residual_ms < UNSEEN_MIN_SHARE * step_ms:
            return max(after_ns, slower_host_ns) / 1e6
        # time the window did not see stays, unless the fix is the one that takes it. Without a
        # loader to stall, nothing in the step waits unseen: the program ran slower while it was
        # timed, and the fix keeps its share of the host's work (tests/test_variant_prices.py)
        if residual_ms >= 0:
            if not self.fed_by_loader and not takes_unseen:
                return max(after_ns, slower_host_ns) / 1e6
            return after_ns / 1e6 + (0.0 if takes_unseen else residual_ms)
        # the replay stays above the measured step with the most profiler cost taken out. On a
        # step the host holds, the host ran slower still: the fix keeps its share of the step. On a
        # step the GPU holds, the trace's device work itself ran slower (a pageable copy staged
        # under the profiler): the step after the fix is what the edited graph leaves, and an edit
        # that adds time (a compiled call's entries) adds it to the measured step
        if not gpu_sets(self.graph, self.base.replayed):
            return step_ms * after_ns / base_ns
        if after_ns > base_ns:
            return step_ms + (after_ns - base_ns) / 1e6
        return min(after_ns / 1e6, step_ms)


class AllFixes(msgspec.Struct, frozen=True):
    """Every replay-priced fix applied at once: the step it leaves and the speedup."""

    ids: tuple[str, ...]
    step_ms: float
    step_after_ms: float

    @property
    def predicted_speedup(self) -> float:
        return self.step_ms / self.step_after_ms if self.step_after_ms > 0 else 1.0

    def to_dict(self) -> dict:
        return {"ids": list(self.ids), "step_ms": round(self.step_ms, 4),
                "step_after_ms": round(self.step_after_ms, 4),
                "predicted_speedup": round(self.predicted_speedup, 4)}


def measured_costs(a: Analysis) -> dict[str, float] | None:
    """The profiler's per-event cost ``gpudoctor bench`` measured on this card (its machine
    profile), for the operator, runtime and annotation events it costs alike; None: the default."""
    per_event_s = (a.ceilings.extra or {}).get("profiler_event_s")
    if not isinstance(per_event_s, (int, float)) or not per_event_s > 0:
        return None
    ns = float(per_event_s) * 1e9
    return {"op": ns, "runtime": ns, "annotation": ns}


# The profiled step replayed unchanged, within this share of the trace's: every GPU trace under
# tests/data replays within 5% (benchmarks/BENCHMARKS-replay.md "Replay"); beyond it the graph
# misses what set the step (waits on a stream it cannot see), and the edits would price that miss.
REPLAY_FIDELITY_SHARE = 0.10


def step_model(a: Analysis) -> StepModel | str:
    """The model of ``a``'s steps, or why there is none."""
    if len(a.trace.device) == 0:
        return "the step's graph could not be built: no GPU work"
    graph = build(a.trace, a.steps)
    if graph.coverage != "full":
        return f"the step's graph could not be built: {graph.coverage}"
    as_recorded = replay(graph).step_ns
    if graph.profiled_ns > 0 and abs(as_recorded / graph.profiled_ns - 1) > REPLAY_FIDELITY_SHARE:
        return (f"replayed as recorded, its step is {as_recorded / 1e6:.3f} ms where the trace "
                f"shows {graph.profiled_ns / 1e6:.3f} ms: the graph misses what sets this step")
    measured = a.unprofiled_step_ms * 1e6 if a.unprofiled_step_ms else None
    fetch = _fetch_timing(a, measured)
    unseen_ns = 0.0 if fetch is None else fetch.unseen_ns(fetch.recorded_ns)
    lead = None if a.unprofiled_lead_ms is None else a.unprofiled_lead_ms * 1e6
    costs = measured_costs(a)
    # the prior from the host's pace: a scale on the default costs, calibrated on runs this tool
    # captured (its profiler's settings), so for a trace that comes with its run's timing; a
    # machine profile's measured costs, or a bare trace of unknown settings, take the fixed prior
    prior = PRIOR_SCALE if costs is not None or measured is None else prior_scale(
        view_operator_ns(a.trace, *graph.window))
    base = unprofiled(graph, None if measured is None else measured - unseen_ns, costs, lead,
                      prior)
    if fetch is not None:
        base, unseen_ns = _fit_with_fetch(graph, fetch, base, unseen_ns,
                                          lambda target: unprofiled(graph, target, costs, lead, prior))
    if base.replayed.step_ns <= 0:
        return "the step's graph could not be built: the replayed step is empty"
    lo, hi = graph.window
    host = a.trace.host
    loader = bool((dataloader_calls(a.trace) & (host.ts >= lo) & (host.ts < hi)).any())
    return StepModel(graph, base, a.unprofiled_step_ms or a.step_ms, measured is not None, loader,
                     unseen_ns / 1e6)


FETCH_REFITS = 5  # fits after the first that match the timed fetch to the loader's replayed time
FETCH_AGREE_NS = 1_000.0


class TimedFetch(msgspec.Struct, frozen=True, eq=False):
    """The DataLoader's fetch as the capture timed it without the profiler, and as the window
    recorded it, per step (ns); ``starts`` / ``ends``: the window's fetch calls (merged)."""

    timed_ns: float
    recorded_ns: float
    measured_ns: float
    starts: np.ndarray
    ends: np.ndarray

    def unseen_ns(self, in_replay_ns: float) -> float:
        """What the timed fetch adds to a step whose loader replays in ``in_replay_ns``; the rest
        of the step stays positive: a fetch timed at the whole step leaves the fit nothing."""
        return min(self.timed_ns - in_replay_ns, 0.9 * self.measured_ns)


def _host_ns(graph: StepGraph, ch: Changes | None) -> float:
    """The chain's host time (gaps and calls) as ``ch`` leaves it; the recorded one for None."""
    gap, own = host_times(graph, ch)
    return float(np.sum(gap) + np.sum(own))


def _fit_with_fetch(graph: StepGraph, fetch: TimedFetch, base: Unprofiled, unseen_ns: float,
                    fit: Callable[[float], Unprofiled]) -> tuple[Unprofiled, float]:
    """The fit that gives the loader its timed fetch: the profiler's cost taken out of the loader's
    own events too leaves it shorter in the replay than it recorded, and what the timed fetch adds
    is measured against that. Solved for the fit's target T = measured - (fetch - loader in the
    replay at T) by secant steps, within the targets where the loader keeps all or none of its
    recorded time (benchmarks/BENCHMARKS-replay.md "The timed fetch against the loader's
    replayed time")."""
    measured = fetch.measured_ns
    low, high = measured - fetch.unseen_ns(0.0), measured - unseen_ns
    only = Edit(host_removed_s=fetch.starts, host_removed_e=fetch.ends, paced=False)

    def removed_ns(ch: Changes | None) -> float:  # the fetch's host time in the chain ``ch`` leaves
        return _host_ns(graph, ch) - _host_ns(graph, changes(graph, only, base=ch))

    recorded = removed_ns(None)

    def off(target: float, fitted: Unprofiled) -> float:
        kept = min(max(removed_ns(fitted.changes) / recorded, 0.0), 1.0) if recorded > 0 else 1.0
        return target - (measured - fetch.unseen_ns(fetch.recorded_ns * kept))

    t0, f0 = high, off(high, base)
    t1 = t0 - f0  # where the timed fetch meets the loader as the first fit replays it
    for _ in range(FETCH_REFITS):
        if abs(t1 - t0) < FETCH_AGREE_NS:
            break
        fitted = fit(t1)
        if fitted.replayed.step_ns > t1 + FETCH_AGREE_NS:
            # below what the GPU's work replays in with the most profiler cost out: the fetch ran
            # beside the GPU's work, not before it; the lowest target the fit reaches
            return fitted, measured - fitted.replayed.step_ns
        f1 = off(t1, fitted)
        base, unseen_ns = fitted, measured - t1
        if abs(f1) < FETCH_AGREE_NS or f1 == f0:
            break
        t0, f0, t1 = t1, f1, min(max(t1 - f1 * (t1 - t0) / (f1 - f0), low), high)
    return base, unseen_ns


def _fetch_timing(a: Analysis, measured_ns: float | None) -> TimedFetch | None:
    """The DataLoader's fetch timed unprofiled and recorded in the window, per step; None where the
    capture did not time it, or the window holds no fetch.

    A loader that decodes on the program's thread runs as fast as the host lets it, and its spread
    between the window and the timed steps is as large as the profiler's whole cost, which the fit
    would read it as (benchmarks/BENCHMARKS-replay.md "The loader's own spread"). Where the capture
    timed the fetch, the fit matches the rest of the step and the loader keeps its measured time."""
    fetch_ms = a.unprofiled_fetch_ms
    if measured_ns is None or fetch_ms is None or fetch_ms <= 0 or len(a.steps) == 0:
        return None
    host = a.trace.host
    calls = np.flatnonzero(dataloader_calls(a.trace))
    if calls.size == 0:
        return None
    # the steps the replay's step counts: after the first (replay/simulate.py Replayed.step_ns); a
    # fetch starts just before the step it feeds, so by its time inside them
    first = 1 if len(a.steps) >= 2 else 0
    lo, hi = a.steps.start[first:first + 1], a.steps.end[-1:]
    s, e = union(host.ts[calls], host.end[calls])
    recorded_ns = float(overlap_per_window(s, e, lo, hi)[0]) / (len(a.steps) - first)
    return TimedFetch(fetch_ms * 1e6, recorded_ns, measured_ns, s, e)


class Repriced(msgspec.Struct, frozen=True):
    """The findings re-priced by replay (unranked), and every replayed fix at once."""

    findings: list[Finding]
    together: AllFixes | None = None


def reprice(raw: list[Finding], priced: list[Finding], a: Analysis) -> Repriced:
    """``priced`` (the formulas' prices, rules/calibrate.py) re-priced by replay where each fix is
    an edit; ``raw``: the same findings as the rules made them, on the profiled step (their idle
    and kernel parts say what the derived edits remove)."""
    model = step_model(a)
    if isinstance(model, str):
        return Repriced([_formula(f, model) for f in priced])
    return Repriced(*_repriced_findings(raw, priced, a, model))


def knob_prices_of(a: Analysis, model: StepModel) -> dict[str, KnobPrice]:
    """Each compile knob's edit (rules/knob_prices.py) replayed on ``model``: what ``run
    --try-fixes`` predicts for it (pipeline.knob_prices_for; not part of every analysis: its two
    replays would add a fifth to ``analyze`` on a large trace). A knob may replay slower than the
    step, as a fix may not: autocast's casts on a host-bound step (benchmarks/BENCHMARKS-replay.md
    "A knob priced slower")."""
    out = {}
    for knob, edit in knob_edits(a).items():
        after = model.after_ms(edit)
        out[knob] = KnobPrice(knob, model.step_ms, after if after > 0 else model.step_ms,
                              edit.note)
    return out


def knobs_together_price(a: Analysis, model: StepModel, knobs: list[str],
                         fixed_findings: dict[str, str], raw: list[Finding]) -> KnobPrice | None:
    """Several knobs turned in one process (``run --try-fixes``' combined trial) priced as one
    replay of their edits merged, as "all fixes together" merges the findings' fixes: a compile
    knob, autocast or TF32 by its own edit (rules/knob_prices.py), any other knob by the edit of
    the finding it fixes (``fixed_findings``: knob id -> finding id; ``raw``: the rules' findings).
    A knob of its own with nothing to change (autocast where no matmul is fp32) adds nothing, as it
    is priced x1.0 alone. None where a knob of a finding has no edit (its price is a formula's):
    the trial is then measured without a prediction."""
    own = knob_edits(a)
    by_id = {f.id: f for f in raw}
    edits, ids = [], []
    for knob in knobs:
        edit = own.get(knob)
        if edit is None:
            finding = by_id.get(fixed_findings.get(knob, ""))
            if finding is None:
                return None
            edit, _ = edit_for(a, finding)
            if edit is None or edit.is_empty():
                return None
            ids.append(finding.id)
        edits.append(edit)
    if not edits:
        return None
    after = model.after_ms(merge(edits), takes_unseen=bool(UNSEEN_TAKEN_BY & set(ids)),
                           takes_loader=bool(LOADER_TAKEN_BY & set(ids)))
    return KnobPrice(" + ".join(knobs), model.step_ms, after if after > 0 else model.step_ms,
                     "; ".join(e.note for e in edits if e.note))


def _repriced_findings(raw: list[Finding], priced: list[Finding], a: Analysis,
                       model: StepModel) -> tuple[list[Finding], AllFixes | None]:
    by_id = {f.id: f for f in raw}
    out, edits, ids = [], [], []
    for finding in priced:
        edit, why = edit_for(a, by_id.get(finding.id, finding))
        if edit is None or edit.is_empty():
            out.append(_formula(finding, why or "its fix is not an edit of the step's graph"))
            continue
        after = model.after_ms(edit, takes_unseen=finding.id in UNSEEN_TAKEN_BY,
                               takes_loader=finding.id in LOADER_TAKEN_BY)
        finding, edit, after = _best_fix(a, model, by_id.get(finding.id, finding), finding, edit,
                                         after)
        priced_finding = _replayed(finding, model.step_ms, after, edit.note, model.base.source)
        out.append(_with_knob_prices(priced_finding, a, by_id.get(finding.id, finding), model))
        edits.append(edit)
        ids.append(finding.id)
    if not edits:
        return out, None
    together = merge(edits)
    after_all = model.after_ms(together, takes_unseen=bool(UNSEEN_TAKEN_BY & set(ids)),
                               takes_loader=bool(LOADER_TAKEN_BY & set(ids)))
    # at most the share one fix may save (core/finding.py): a step that is nearly all one-off
    # host work (a compile inside the window) would read x100000
    floor_ms = (1 - MAX_REPLAYED_SAVING_SHARE) * model.step_ms
    return out, AllFixes(tuple(ids), model.step_ms, min(max(after_all, floor_ms), model.step_ms))


# An alternative fix prices the finding where the first fix saves under this share of the step
# (bf16 autocast's casts on a step the host holds) and the alternative saves more. Where the first
# one saves more than that, the rule's order stands even if the alternative replays faster: the
# program is told to make the first fix first (benchmarks/BENCHMARKS-replay.md "A finding priced by
# its better fix").
ALTERNATIVE_WHEN_FIRST_SAVES_UNDER = 0.02


def _best_fix(a: Analysis, model: StepModel, raw: Finding, finding: Finding, edit: Edit,
              after: float) -> tuple[Finding, Edit, float]:
    """Where the finding's first fix (``edit``, replayed to ``after``) saves almost nothing, the
    finding priced by another of its fixes that saves more (its rule's ``alternative_fixes``), that
    fix listed first and named in the evidence."""
    from gpudoctor.rules.registry import RULES

    rule = RULES.get(finding.id)
    if rule is None or after < model.step_ms * (1 - ALTERNATIVE_WHEN_FIRST_SAVES_UNDER):
        return finding, edit, after
    for title, alternative in rule.alternative_fixes:
        at = next((k for k, f in enumerate(finding.fixes) if f.title == title), None)
        other = None if at is None else alternative(a, raw)
        if other is None or other.is_empty():
            continue
        other_after = model.after_ms(other)
        if other_after < min(after, model.step_ms) * (1 - ALTERNATIVE_WHEN_FIRST_SAVES_UNDER):
            fixes = (finding.fixes[at], *finding.fixes[:at], *finding.fixes[at + 1:])
            numbers = dict(finding.evidence.numbers, **{PRICED_BY_FIX: title})
            finding = msgspec.structs.replace(
                finding, fixes=fixes,
                evidence=msgspec.structs.replace(finding.evidence, numbers=numbers))
            edit, after = other, other_after
    return finding, edit, after


def edit_for(a: Analysis, finding: Finding) -> tuple[Edit | None, str]:
    """The fix of ``finding`` as an edit: its rule's, else one derived from its idle cause and
    kernels."""
    from gpudoctor.rules.registry import RULES

    rule = RULES.get(finding.id)
    if rule is None:
        return None, "no rule of that id"
    if rule.edit is not None:
        edit = rule.edit(a, finding)
        return (edit, "") if edit is not None else (None, "its rule states no edit for this trace")
    return derived_edit(a, finding, rule.idle_cause)


def derived_edit(a: Analysis, finding: Finding, cause: str) -> tuple[Edit | None, str]:
    """The host time of ``cause`` the finding's idle part stands for, removed; its kernels (those it
    names) shortened by its kernel part. None where a part has nothing in the trace to edit."""
    n = max(len(a.steps), 1)
    idle_ms = finding.saving_ms if math.isinf(finding.idle_ms) else min(finding.idle_ms,
                                                                        finding.saving_ms)
    kernel_ms = max(finding.saving_ms - idle_ms, 0.0)
    parts: list[Edit] = []
    if idle_ms > 0:
        if cause not in BLOCKING or cause not in a.idle.labels:
            return None, f"its idle part ({cause or 'no cause'}) is not host time the trace labels"
        s, e = a.idle.labels[cause]
        labelled_ms = float((e - s).sum()) / 1e6 / n
        if labelled_ms <= 0:
            return None, f"no host time labelled {cause}"
        parts.append(Edit(host_removed_s=s, host_removed_e=e,
                          host_share=min(idle_ms / labelled_ms, 1.0),
                          note=f"{cause} host time removed"))
    if kernel_ms > 0:
        edit = shortened_kernels(a, finding.evidence.kernels, kernel_ms * n * 1e6)
        if edit is None:
            return None, "its kernel time is not tied to kernels in the trace"
        parts.append(edit)
    if not parts:
        return None, "nothing to remove"
    return merge(parts), ""


def shortened_kernels(a: Analysis, names: tuple[str, ...], saved_ns: float) -> Edit | None:
    """The kernels named ``names`` in the steps, each shortened by the same share, ``saved_ns`` in
    all. Their launches stay: a fusion that removes some is its rule's own edit (naive-attention);
    removing the launches a generic fusion might (KERNELS_REMOVED) turned the healthy eager GPT's
    minor fusion finding major (tests/test_fixtures.py healthy_train; compiling it measured
    x1.08)."""
    if not names:
        return None
    trace, dev = a.trace, a.trace.device
    wanted = trace.names_matching(lambda s: s in set(names))
    idx = np.flatnonzero(wanted[dev.name] & (a.roofline.event_in_steps_ns > 0))
    total = float(dev.dur[idx].sum())
    if idx.size == 0 or total <= 0:
        return None
    keep = max(1.0 - saved_ns / total, 0.0)
    return Edit(device=idx.astype(np.int64), device_ns=dev.dur[idx] * keep,
                note="kernels shortened")


def _with_knob_prices(finding: Finding, a: Analysis, raw: Finding, model: StepModel) -> Finding:
    """The finding with each of its rule's knob edits replayed: their speedups in its evidence."""
    from gpudoctor.rules.registry import RULES

    rule = RULES.get(finding.id)
    numbers = dict(finding.evidence.numbers)
    edits = [] if rule is None else [
        *((k, knob_edit(a, raw)) for k, knob_edit in rule.knob_edits),
        *((k, compile_knob_edit(a, k)) for k in rule.module_knobs)]
    for knob_id, edit in edits:
        if edit is None or edit.is_empty():
            continue
        after = model.after_ms(edit)
        numbers[KNOB_SPEEDUP + knob_id] = round(model.step_ms / after, 4) if after > 0 else 1.0
    if numbers == finding.evidence.numbers:
        return finding
    return finding.with_numbers(numbers)


def _formula(finding: Finding, why: str) -> Finding:
    numbers = dict(finding.evidence.numbers, **{PRICED_BY: "formula", FORMULA_BECAUSE: why})
    return finding.with_numbers(numbers)


def _replayed(finding: Finding, step_ms: float, after_ms: float, note: str,
              host_pace_from: str) -> Finding:
    saving = min(max(step_ms - after_ms, 0.0), MAX_REPLAYED_SAVING_SHARE * step_ms)
    idle = finding.idle_ms if math.isinf(finding.idle_ms) else min(finding.idle_ms, saving)
    numbers = dict(finding.evidence.numbers,
                   **{PRICED_BY: "replay", STEP_AFTER_REPLAYED: round(step_ms - saving, 4),
                      FORMULA_SAVING: round(finding.saving_ms, 4), HOST_PACE_FROM: host_pace_from})
    return msgspec.structs.replace(
        finding, saving_ms=saving, idle_ms=min(idle, saving),
        predicted_speedup=speedup(step_ms, saving),
        severity=severity_for(saving, step_ms, finding.severity_floor, finding.major_share),
        evidence=msgspec.structs.replace(finding.evidence, numbers=numbers),
    )
