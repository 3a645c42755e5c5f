"""``gpudoctor run --try-fixes``: rerun the program once per knob and measure what it saves.

After the diagnosis, each finding whose fix is a knob (tryfix/knobs.py), or each knob named by
``--fixes``, gets a **trial**: the program in a fresh process (tryfix/child.py) with that knob
applied, the generators seeded as in the baseline, run for at least as many steps as the baseline
skipped (``trial_skip``) and then on until its latest steps have settled (capture/timing.py
``settled``: a compile's background work can slow ten steps after it by 40x), timed from the step
after those judged settled on, 30 steps and more while their mean is uncertain, up to 5 s
(capture/timing.py ``timed_enough``), and stopped there, or after the baseline's profiled window
with ``--trial-trace`` (the default: each trial directory is then a run bundle, and ``gpudoctor diff
RUN RUN/trials/KNOB`` shows which kernels the knob changed; the window comes after the timed steps
and leaves them alone). A trial is bounded by those steps and by ``--trial-timeout`` seconds (the
whole process group is killed then); a trial that crashes, runs out of memory or times out is
reported as such and the next one runs. With ``--sandbox DIR`` each trial runs in ``DIR/<knob>/``
(the files the program writes land there), else in the current directory.

**Control**: before the knobs, the program runs once more in a trial process with no knob (the
``control`` record, verdict ``reference``); its samples, first losses and peak memory are the
baseline the knob trials are measured against (``reference: "control"``). The diagnosed run is
measured too, but it ran in gpudoctor's own process and earlier: a systematic difference
between it and any fresh process would pass for the knob's effect. Its samples are the reference
only when the control fails (``reference: "diagnosed run"``); the control's own record compares
the two, and a control far from x1.0 says the machine's speed moved between runs.

**Drift**: with a control, the control runs once more after the knob trials (``control-end``).
How far it moved from the first (the machine's load and clocks between two fresh processes,
which the step-to-step spread within one process cannot show) becomes the noise floor of every
verdict when it exceeds diff's 1% run-to-run floor (``floor_pct``). On a shared 2-core CPU a
no-op knob (tf32) measured x0.93 [0.88-0.98] with the 1% floor: that is the drift this guards
against.

**Measured speedup**: the reference's samples (the control's, moved to the geometric mean of the
control's and control-end's means once control-end ran: ``bracketed``; else the diagnosed run's
env.json ``capture.unprofiled_step_ms_samples``) against the trial's, through ``gpudoctor diff``'s
noise model (diff/samples.py ``compare_samples``: Welch's t on the log ratio of means, a run-to-run
floor: 1%, or the drift below; every step kept, ``DROP_OUTLIERS``): speedup = baseline mean / trial
mean, its 95% interval the inverse of the step-time change's. Against the control, both sides are
the steps both timed, by each sample's step index (``same_steps``; capture/marks.py
``interval_steps``): a compile trial starts timing later and stops sooner than the control, and a
program whose steps differ with their place (an epoch's end, a validation pass) compared over
different stretches of itself measures the stretch, not the knob (benchmarks/BENCHMARKS-replay.md
"Knob trials, set f"). Where either side's indices are unknown, or they share fewer than
``MIN_JUDGED_STEPS``, the whole windows are compared. With ``--trial-repeats N`` (N rounds
of the control and each knob, alternating, and the control once more at the end), each process's
mean is one observation instead, over the steps every process timed (``common_steps``), and the
interval is over processes (diff/samples.py ``compare_processes``; ``Trials._run_rounds``).

**Verdict** (``verdict``):

- ``made it worse``: the step-time change's whole interval is above +floor (diff's ``slower``);
- ``no effect``: the interval holds 0 or lies within the floor (diff's ``no difference``);
- ``within the program's drift``: the interval excludes 0 but lies within a floor raised by the
  controls' drift: the knob changed the step by less than two unchanged runs of the program moved;
- ``confirmed``: faster (the whole interval below -floor) and the interval reaches the prediction's
  ballpark: its best end saves at least half the predicted saving (predicted saving = 1 - 1 /
  predicted speedup, as a share of the step). A trial that beats its prediction is confirmed;
- ``smaller than predicted``: faster, but even the interval's best end saves less than half the
  predicted saving;
- ``faster``: faster, with no prediction to hold it to (a knob named by ``--fixes`` with no
  finding, and a combined trial one of whose knobs has no edit of the step's graph);
- ``too few samples``: fewer than 2 step times on a side;
- ``not enough steps to judge``: fewer than ``MIN_JUDGED_STEPS`` timed steps, or less than
  ``MIN_JUDGED_S`` seconds of them, on a side (summed over the processes with ``--trial-repeats``):
  a handful of steps, or a fraction of a second of them, is one spell of the host's speed, and a
  speedup read from it can point either way.

A trial whose knob found nothing to change (no DataLoader, no torch.optim optimizer, no module)
is ``not applied``, whatever its timing.

**Numerics**: for knobs that change precision or kernels (autocast, TF32, fused optimizers,
torch.compile), the losses of the first ``LOSS_STEPS`` backward calls of the baseline and the
trial (capture/numerics.py) are compared: ``diverged`` when one differs from the baseline's by
more than ``LOSS_RTOL`` (5%) of it, or is NaN/inf where the baseline's is finite. bf16 rounds each
value to 8 bits of mantissa (0.4%), TF32 to 10: the first steps' losses of a sound model stay
within a few tenths of a percent; 5% is a change in what the model computes.

**Combined**: the knobs whose verdict is ``confirmed`` or ``faster``, one per group (the faster of
two compile modes, of foreach and fused...), run together once when there are two or more. It is
predicted by one replay of their edits merged (pipeline.knobs_together_price_for), as "all fixes
together" is, where each knob has one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from gpudoctor.capture.numerics import LOSS_STEPS
from gpudoctor.capture.timing import TRIAL_JUDGED_MIN_S, TRIAL_JUDGED_MIN_STEPS
from gpudoctor.core.finding import MAX_SAVING_SHARE, speedup
from gpudoctor.core.loader import WORKERS_ENV
from gpudoctor.core.subprocesses import default_sigint_in_child
from gpudoctor.core.trial_record import (
    NotTried,
    Outliers,
    PeakMemory,
    TrialNumerics,
    TrialRecord,
    TrialRound,
)
from gpudoctor.diff.samples import (
    DEFAULT_FLOOR_PCT,
    FASTER,
    SAME,
    SLOWER,
    UNKNOWN,
    StepChange,
    compare_processes,
    compare_samples,
    process_mean,
    usable,
)
from gpudoctor.errors import InputError
from gpudoctor.tryfix.child_trial import ChildTrial, read_child_trial
from gpudoctor.tryfix.graph_breaks import graph_breaks, summary
from gpudoctor.tryfix.host_pace import comparable, launch_ns_of, pace_note
from gpudoctor.tryfix.knobs import (
    BY_ID,
    DROPOUT_MARK,
    KNOBS,
    LEFT_AS_IS,
    NEEDS_CODE,
    Knob,
    child_env,
    knobs_for,
    needs_fresh_dir,
)

LOSS_RTOL = 0.05
DEFAULT_TIMEOUT_S = 300.0
CONFIRMED, SMALLER, NO_EFFECT, WORSE, FASTER_UNPREDICTED, TOO_FEW, NOT_APPLIED, NOISY = (
    "confirmed", "smaller than predicted", "no effect", "made it worse", "faster",
    "too few samples", "not applied", "within the program's drift")
CONTROL, CONTROL_END, REFERENCE = "control", "control-end", "reference"
CONTROLS_BOTH = "controls before and after"  # the reference once control-end ran (``bracketed``)
# Two controls further apart than this suggest --trial-repeats: one process a knob cannot separate
# the knob from the program's own drift (controls 20% apart on a real program:
# benchmarks/BENCHMARKS-try-fixes.md "Evidence moved from the source: try-fixes")
REPEATS_HINT_DRIFT_PCT = 5.0
PRICED_STEP_MOVED_PCT = 20.0
"""The control's step this much off the diagnosed run's (the step the findings priced): the
control's line says so, since a step that moved may have changed what bounds it (a GPU-bound step
found host-bound in the control measures nothing of a fusion fix: benchmarks/BENCHMARKS-try-fixes.md "Evidence moved
from the source: try-fixes")."""
MAX_REPEATS = 20  # --trial-repeats: more would run for hours on a program with several knobs
# A trial's mean keeps every step it timed. diff's outlier rule drops the slow ones when they are at
# most one sample in ten and keeps them all above that: on steps that stall in a few percent of them
# it drops them in some processes and not in others (benchmarks/BENCHMARKS-try-fixes.md "Evidence
# moved from the source: try-fixes"). The trials need no rule to drop a warm-up step: they time
# steps judged settled (capture/timing.py), with compilation cut.
DROP_OUTLIERS = False
BALLPARK = 0.5  # the interval's best end must save at least this share of the predicted saving
NOT_ENOUGH = "not enough steps to judge"
# the evidence a verdict needs on each side: capture/timing.py says why, and times trials to it
MIN_JUDGED_STEPS, MIN_JUDGED_S = TRIAL_JUDGED_MIN_STEPS, TRIAL_JUDGED_MIN_S


@dataclass(frozen=True)
class Baseline:
    """The diagnosed run: its unprofiled step samples (ms), first losses and peak memory."""

    samples_ms: tuple[float, ...]
    losses: tuple[float | None, ...] = ()
    peak_memory_bytes: int | None = None
    skip: int = 10
    # the profiled window's steps, recorded after the timed ones when trials keep a trace
    steps: int = 5
    # the report header's unprofiled step, the one the findings were priced on: an estimate made of
    # the steps before and after the window (capture/timing.py), not the mean of ``samples_ms``
    priced_ms: float | None = None
    # the step of each of ``samples_ms`` (a control's; empty: not known, as for the diagnosed run)
    sample_steps: tuple[int, ...] = ()


# A trial times the second half of its ``skip`` steps. With ``--skip 5`` that is 3 steps, and 3
# against 3 samples left intervals too wide for any verdict. Trials therefore skip at least this
# many steps (then time 30 or more after the 12 judged settled: capture/timing.py timed_enough). A
# program that ends sooner is timed over the second half of the steps it ran (a trial's program may
# end before its window). 24, not 16: a once-an-epoch step every 16th fell in one control's samples
# and not in the next one's (benchmarks/BENCHMARKS-try-fixes.md "Evidence moved from the source:
# try-fixes").
TRIAL_MIN_SKIP = 24
TRACE_FILE = "trace.json.gz"  # the trial's window, where it recorded one (capture/session.py)
NO_TRACE = ("no trace kept: the program ended before the trial's profiled window, which comes "
            "after its timed steps (give the program more steps to compare the trial's kernels "
            "with gpudoctor diff)")


def trial_skip(baseline: Baseline, warmup: int) -> int:
    """The steps a trial runs before the steps it would profile: the baseline's ``skip`` (at least
    TRIAL_MIN_SKIP), then the knob's warm-up."""
    return max(baseline.skip, TRIAL_MIN_SKIP) + warmup


ALSO_SAVES_JOIN = " + "  # a planned finding and those its knob also saves, in one label


@dataclass(frozen=True)
class Planned:
    knob: Knob
    finding: str | None = None
    predicted_speedup: float | None = None
    saving_ms: float | None = None
    priced_by: str | None = None  # "replay" or "formula" (the finding's evidence, rules/whatif.py)
    own_edit: bool = False  # priced by the knob's own replayed edit (the findings it also fixes included)

    @property
    def finding_id(self) -> str | None:
        """The finding the knob was planned for: ``finding`` names it first, then those whose
        saving its price adds (``_with_also_saves``)."""
        return self.finding.split(ALSO_SAVES_JOIN)[0] if self.finding else None


@dataclass(frozen=True)
class Together:
    """The combined trial's prediction: its knobs' edits replayed at once."""

    predicted_speedup: float
    saving_ms: float
    priced_by: str = "replay (the knobs' edits together)"
    finding: str | None = None


@dataclass
class Plan:
    trials: list[Planned] = field(default_factory=list)
    not_tried: list[NotTried] = field(default_factory=list)


def parse_fixes(text: str | None) -> list[str] | None:
    """``--fixes a,b``: knob ids (None: every knob the findings call for)."""
    if text is None:
        return None
    ids = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [i for i in ids if i not in BY_ID]
    if unknown or not ids:
        what = f"unknown knob {', '.join(repr(u) for u in unknown)}" if unknown else "no knob named"
        raise InputError(f"--fixes: {what}; knobs: {', '.join(k.id for k in KNOBS)}")
    return list(dict.fromkeys(ids))


def _code_fix_first(finding: Any) -> str:
    """Why a finding that usually has a knob needs a code change this time ("" when it does not)."""
    numbers = getattr(getattr(finding, "evidence", None), "numbers", None) or {}
    if finding.id == "input-pipeline" and numbers.get("loader_time_is_pinning"):
        # the loader's time is pinning in-memory batches (rules/input_pipeline.py): worker processes
        # would make the step slower, not faster
        return ("the loader's time is pinning batches of an in-memory data set: pinning it once "
                "is a code change, and worker processes would still copy each batch")
    return ""


def plan(findings: Sequence[Any], fixes: list[str] | None,
         knob_prices: Mapping[str, Any] | None = None) -> Plan:
    """Which knobs to try, for which finding; the findings that need a code change, with why.
    ``knob_prices``: the report's own prices of knobs (rules/knob_prices.py, by knob id), which
    stand for a knob's prediction in place of its findings'."""
    out = Plan()
    chosen: dict[str, Planned] = {}
    for f in findings:
        knobs = knobs_for(f.id)
        code_only = _code_fix_first(f)
        if knobs and code_only and fixes is None:
            out.not_tried.append(NotTried(f.id, code_only))
            continue
        if not knobs:
            if f.id in NEEDS_CODE and fixes is None:
                out.not_tried.append(NotTried(f.id, NEEDS_CODE[f.id]))
            continue
        for knob in knobs:
            if (fixes is None or knob.id in fixes) and knob.id not in chosen:
                chosen[knob.id] = _knob_price(Planned(knob, f.id, f.predicted_speedup, f.saving_ms,
                                                      _priced_by(f)), f)
    for kid in fixes or []:
        chosen.setdefault(kid, Planned(BY_ID[kid]))
    priced = [_own_price(p, (knob_prices or {}).get(p.knob.id)) or _with_also_saves(p, findings)
              for p in chosen.values()]
    out.trials = [p for p in priced if fixes is not None or _worth_a_trial(p)]
    out.not_tried += [NotTried(p.finding or p.knob.id, _too_little_at_stake(p))
                      for p in priced if p not in out.trials]
    return out


MIN_TRIAL_SPEEDUP = 1.01
"""A knob priced under this (its findings put less than 1% of the step at stake) is listed, not
tried, unless named: no trial can tell 1% from the drift between two processes of an unchanged
program (1-9% on the lent H100s; benchmarks/BENCHMARKS-try-fixes.md "Evidence moved from the source: try-fixes")."""


def _too_little_at_stake(planned: Planned) -> str:
    """The not-tried line of a knob priced under MIN_TRIAL_SPEEDUP (or slower than the step:
    rules/whatif.py ``knob_prices_of``)."""
    if planned.saving_ms is not None and planned.saving_ms < 0 and planned.predicted_speedup:
        return (f"{planned.knob.id}: its replay predicts a slower step (x"
                f"{planned.predicted_speedup:.3g}, {-planned.saving_ms:.3g} ms more a step: "
                "what it adds to the host outweighs what it saves); name it with --fixes to try it")
    return (f"{planned.knob.id}: the finding puts {_stake(planned)} of the step at stake, less "
            "than a trial can tell from the drift between processes; name it with --fixes to try "
            "it")


def _stake(planned: Planned) -> str:
    """``0 ms`` or ``0.0029 ms (x1.0001)``: what a knob's findings put at stake, for its not-tried
    line."""
    if not planned.saving_ms or planned.saving_ms < 0:
        return "0 ms"
    if planned.predicted_speedup is None:
        return f"{planned.saving_ms:.3g} ms"
    return f"{planned.saving_ms:.3g} ms (x{planned.predicted_speedup:.5g})"


def _worth_a_trial(planned: Planned) -> bool:
    """Whether a knob's price earns it a trial (MIN_TRIAL_SPEEDUP); a knob with no price (named,
    its finding not diagnosed) is tried."""
    if planned.saving_ms is None:
        return True
    if planned.predicted_speedup is None:
        return planned.saving_ms > 0
    return planned.saving_ms > 0 and planned.predicted_speedup >= MIN_TRIAL_SPEEDUP


def _knob_price(planned: Planned, finding: Any) -> Planned:
    """The knob's own replayed price where its finding carries one (rules/whatif.py KNOB_SPEEDUP:
    ``tf32`` makes fp32 matmuls TF32, not bf16), over the same step as the finding's."""
    numbers = getattr(getattr(finding, "evidence", None), "numbers", None)
    own = numbers.get(f"predicted_speedup_with_{planned.knob.id}") if isinstance(numbers, dict) else None
    ps, saving = planned.predicted_speedup, planned.saving_ms
    if not own or not ps or ps <= 1 or not saving:
        return planned
    step = saving * ps / (ps - 1.0)
    return Planned(planned.knob, planned.finding, float(own), step * (1.0 - 1.0 / float(own)),
                   "replay", own_edit=True)


def _own_price(planned: Planned, price: Any) -> Planned | None:
    """The knob priced by its own replayed edit (report ``knob_prices``), None where there is
    none."""
    if not isinstance(price, Mapping):
        return None
    speedup_, step, after = price.get("predicted_speedup"), price.get("step_ms"), price.get(
        "step_after_ms")
    if not all(isinstance(v, (int, float)) and v > 0 for v in (speedup_, step, after)):
        return None
    return Planned(planned.knob, planned.finding, float(speedup_), float(step) - float(after),
                   "replay (the knob's own edit)", own_edit=True)


def _priced_by(finding: Any) -> str | None:
    """How a finding was priced (rules/whatif.py PRICED_BY), None where it does not say."""
    numbers = getattr(getattr(finding, "evidence", None), "numbers", None)
    return numbers.get("priced_by") if isinstance(numbers, dict) else None


def _with_also_saves(planned: Planned, findings: Sequence[Any]) -> Planned:
    """The knob's price with the savings of the findings it also removes (Knob.also_saves) added to
    its own finding's, over the same step (its own finding's saving and speedup give it, else the
    first other's: speedup = step / (step - saving))."""
    extra = [f for f in findings if f.id in planned.knob.also_saves and f.id != planned.finding
             and (f.saving_ms or 0) > 0 and (f.predicted_speedup or 0) > 1]
    if planned.finding is None or not extra or planned.saving_ms is None or planned.own_edit:
        return planned  # a knob priced by its own replay has the findings it also fixes in it
    own = planned.predicted_speedup is not None and planned.predicted_speedup > 1 and planned.saving_ms > 0
    ps, saving = (planned.predicted_speedup, planned.saving_ms) if own else (extra[
        0].predicted_speedup,
                                                                             extra[0].saving_ms)
    step = saving * ps / (ps - 1.0)  # the step the savings are shares of
    total = min(planned.saving_ms + sum(f.saving_ms for f in extra), MAX_SAVING_SHARE * step)
    label = ALSO_SAVES_JOIN.join([planned.finding, *(f.id for f in extra)])
    return Planned(planned.knob, label, speedup(step, total), total,
                   "formula" if planned.priced_by != "replay"
                   else "replay (summed with the findings it also removes)")


def timed(samples: Sequence[float]) -> tuple[int, float]:
    """A side's evidence: its timed steps and their total (ms)."""
    return len(samples), float(sum(samples))


def short_of_evidence(sides: Sequence[tuple[int, float]]) -> str:
    """Why the sides' timed steps (``timed``: reference first, then trial) cannot carry a verdict;
    "" when they can."""
    short = [(name, n, ms) for name, (n, ms) in zip(("the reference", "the trial"), sides,
                                                    strict=False)
             if n < MIN_JUDGED_STEPS or ms < 1000.0 * MIN_JUDGED_S]
    if not short:
        return ""
    said = " and ".join(f"{name} timed {n} steps over {ms / 1000.0:.2f} s" for name, n, ms in short)
    return f"{said}; a verdict needs {MIN_JUDGED_STEPS} steps and {MIN_JUDGED_S:g} s of them on each side"


def verdict(change: StepChange, predicted_speedup: float | None,
            sides: Sequence[tuple[int, float]] | None = None) -> str:
    """See the module docstring. ``sides``: each side's timed steps and their total ms (``timed``),
    when the change's counts are not steps (processes: ``compare_processes``)."""
    if change.verdict == UNKNOWN or change.ci_low_pct is None:
        return TOO_FEW
    if sides is None:
        sides = ((change.n_before, change.n_before * change.before_ms),
                 (change.n_after, change.n_after * change.after_ms))
    if short_of_evidence(sides):
        return NOT_ENOUGH
    if change.verdict == SLOWER:
        return WORSE
    if change.verdict == SAME:
        # the interval excludes 0 but not the drift of the controls (a floor above diff's 1%): the
        # knob did change the step, by less than unchanged runs of the program moved (a twin's real
        # fix was once called "no effect" there: benchmarks/BENCHMARKS-try-fixes.md "Evidence moved
        # from the source: try-fixes")
        drift = change.floor_pct > DEFAULT_FLOOR_PCT
        excludes_zero = change.ci_high_pct is not None and (change.ci_high_pct < 0
                                                            or change.ci_low_pct > 0)
        return NOISY if drift and excludes_zero else NO_EFFECT
    assert change.verdict == FASTER
    if predicted_speedup is None or not math.isfinite(predicted_speedup) or predicted_speedup <= 1.0:
        return FASTER_UNPREDICTED
    predicted_saving = 1.0 - 1.0 / predicted_speedup
    best_saving = -change.ci_low_pct / 100.0  # the interval's fastest end, as a share of the step
    return CONFIRMED if best_saving >= BALLPARK * predicted_saving else SMALLER


def numerics(baseline: Sequence[float | None], trial: Sequence[float | None], checked: bool,
             effects: Sequence[str] = ()) -> TrialNumerics:
    """The first losses side by side; ``diverged`` (None when not checked or nothing to compare).
    A divergence where a compiled module draws its own dropout masks (knobs.DROPOUT_MARK in an
    effect) says so in ``reason``: the losses differ by sampling noise, not only by precision."""
    pairs = list(zip(baseline, trial))
    worst: float | None = None
    diverged: bool | None = None
    if checked and pairs:
        diverged = False
        for b, t in pairs:
            if b is None:
                continue
            if t is None:
                diverged, worst = True, math.inf
                continue
            rel = abs(t - b) / max(abs(b), 1e-12)
            worst = rel if worst is None else max(worst, rel)
            diverged = diverged or rel > LOSS_RTOL
    random_masks = any(f" {DROPOUT_MARK} module" in e for e in effects)
    reason = "dropout: the compiled module draws other random masks than eager" if diverged and random_masks else None
    worst = None if worst is None or not math.isfinite(worst) else round(worst, 6)
    return TrialNumerics(tuple(baseline), tuple(trial), LOSS_RTOL, checked, worst, diverged, reason)


# gpudoctor's own folder: the children import it from its parent; breaks in its files are not the
# program's (tryfix/graph_breaks.py)
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _log_text(trial_dir: Path) -> str:
    """The trial's output.log ("" where it cannot be read)."""
    try:
        return (trial_dir / "output.log").read_text(errors="replace")
    except OSError:
        return ""


def _with_reason(rec: TrialRecord, *more: str) -> TrialRecord:
    """``rec`` with ``more`` added to its reason, "; " between the parts that are not empty; a part
    the reason holds already is not said twice (a trial judged again against the controls)."""
    said = rec.reason or ""
    parts = [said, *(m for m in more if m and m not in said)]
    return replace(rec, reason="; ".join(p for p in parts if p))


@dataclass
class Trials:
    """Runs the trials of one program; ``records`` grows as they end."""

    target: Any  # capture.runner.Target
    program: dict[str, Any]  # env.json's program facts of the baseline
    run_dir: Path
    baseline: Baseline
    timeout_s: float = DEFAULT_TIMEOUT_S
    sandbox: Path | None = None
    # record the window after the timed steps (gpudoctor diff compares the trials)
    trace: bool = True
    progress: Callable[[str], None] | None = None
    # run the program once with no knob first, and measure the trials against it
    control: bool = True
    records: list[TrialRecord] = field(default_factory=list)
    reference: str = "diagnosed run"  # what the trials' samples are compared with: "control" once it ran
    floor_pct: float = DEFAULT_FLOOR_PCT  # the verdicts' noise floor: raised to the controls' drift
    repeats: int = 1  # --trial-repeats: rounds of processes (the control and each knob once a round)
    # the workers the input-pipeline finding prescribed (its evidence), for the loader-workers knob
    loader_workers: int | None = None
    # the combined trial's prediction from its knob ids (None: measured without one)
    price_together: Callable[[list[str]], Together | None] | None = None
    # each trial's trial.json as its child process wrote it (tryfix/child.py), by trial name
    _children: dict[str, ChildTrial] = field(default_factory=dict)
    # a compile knob -> the cache its first trial left
    _caches: dict[str, str] = field(default_factory=dict)

    def run(self, planned: Sequence[Planned]) -> list[TrialRecord]:
        try:
            return self._run(planned)
        finally:  # the compile trials' caches, kept for the combined trial
            for folder in self._caches.values():
                shutil.rmtree(folder, ignore_errors=True)
            self._caches.clear()

    def _run(self, planned: Sequence[Planned]) -> list[TrialRecord]:
        if self.control and planned:
            self._run_control()
        if self.repeats > 1 and self.reference == "control":
            return self._run_rounds(planned)
        tried = [(self.one(p.knob.id, [p.knob.id], p), p) for p in planned]
        if self.reference == "control":
            end = self._run_drift_check()
            # measured again: against both controls, the floor raised to the drift
            self.records += [self._judged_again(rec, p) for rec, p in tried] + [end]
        else:
            self.records += [rec for rec, _ in tried]
        ids = self._combinable()
        if ids:
            self.records.append(self.one("combined", ids, self._together(ids)))
        return self.records

    def _together(self, ids: list[str]) -> Together | None:
        return self.price_together(ids) if self.price_together is not None else None

    def _child_env(self, knob_ids: list[str], fresh: str | None, reused: bool) -> dict[str, str]:
        """The child's environment (knobs.child_env), with the workers the input-pipeline finding
        prescribed handed to the loader-workers knob: the trial tries the fix the report prices."""
        env = child_env(knob_ids, dict(os.environ), fresh, reused)
        if self.loader_workers and "loader-workers" in knob_ids:
            env[WORKERS_ENV] = str(self.loader_workers)
        return env

    def _judged_again(self, rec: TrialRecord, planned: Planned) -> TrialRecord:
        if rec.status != "ok":
            return rec
        again = replace(rec, reference=self.reference)
        return self._judged(again, self._samples(rec.knob), planned)

    def _combinable(self) -> list[str]:
        """The knobs to run together: confirmed or faster ones, the fastest of each group."""
        best: dict[str, TrialRecord] = {}
        for rec in self.records:
            if rec.verdict in (CONFIRMED, FASTER_UNPREDICTED):
                group = BY_ID[rec.knob].group or rec.knob
                if group not in best or rec.measured_speedup > best[group].measured_speedup:
                    best[group] = rec
        return [r.knob for r in best.values()] if len(best) >= 2 else []

    def _run_rounds(self, planned: Sequence[Planned]) -> list[TrialRecord]:
        """``--trial-repeats N``: N rounds, each the control then every knob in a fresh process,
        and the control once more at the end; each knob's speedup and interval over its N
        processes against the N + 1 controls (diff/samples.py ``compare_processes``).

        Why: a host-bound program's speed moves from one process to the next, and one process a knob
        cannot tell that from the knob (three invocations, each interval narrow, disagreed:
        benchmarks/BENCHMARKS-try-fixes.md "Evidence moved from the source: try-fixes"). Alternating
        the knobs with the controls round by round spreads the machine's drift over both sides
        instead of into one knob's number."""
        # the control's record leaves the list, to come back listing its processes
        rounds: dict[str, list[TrialRecord]] = {CONTROL: [self.records.pop()]}
        for r in range(1, self.repeats + 1):
            if r > 1:
                rounds[CONTROL].append(self.one(_round_name(CONTROL, r), [], None))
            for p in planned:
                rounds.setdefault(p.knob.id,
                                  []).append(self.one(_round_name(p.knob.id, r), [p.knob.id], p))
        rounds[CONTROL].append(self.one(CONTROL_END, [], None))
        controls = self._round_steps(rounds[CONTROL])
        self.records += self._summarize_controls(rounds[CONTROL])
        for p in planned:
            self.records.append(self._aggregate(rounds[p.knob.id], controls, p))
        ids = self._combinable()
        if ids:
            together = self._together(ids)
            runs = [self.one(_round_name("combined", r), ids, together)
                    for r in range(1, self.repeats + 1)]
            self.records.append(self._aggregate(runs, controls, together))
        return self.records

    def _samples(self, name: str) -> tuple[float, ...]:
        """The step samples a trial's child recorded (none when it recorded nothing)."""
        child = self._children.get(name)
        return usable(child.samples_ms) if child is not None else ()

    def _sample_steps(self, name: str) -> tuple[int, ...]:
        """The step of each of ``_samples(name)``; empty where the child did not count them or a
        sample was dropped as unusable (the two would no longer pair)."""
        child = self._children.get(name)
        if child is None or len(child.sample_steps) != len(child.samples_ms):
            return ()
        if len(usable(child.samples_ms)) != len(child.samples_ms):
            return ()
        return child.sample_steps

    def _round_steps(self, recs: Sequence[TrialRecord]) -> list[Timed]:
        """The step samples of each round that ran to its steps, with their steps."""
        timed = [(self._samples(rec.knob), self._sample_steps(rec.knob)) for rec in recs
                 if rec.status == "ok"]
        return [(samples, steps) for samples, steps in timed if samples]

    def _round_record(self, rec: TrialRecord) -> TrialRound:
        """One process of a repeated trial: where it ran, how it ended and its mean step."""
        samples = self._samples(rec.knob)
        ok = rec.status == "ok" and samples
        mean = _round(process_mean(samples, drop_outliers=DROP_OUTLIERS)) if ok else None
        return TrialRound(rec.dir, rec.status, rec.reason, rec.wall_s, len(samples), mean)

    def _summarize_controls(self, recs: list[TrialRecord]) -> tuple[TrialRecord, TrialRecord]:
        """The control's record listing its processes, and control-end's saying how far they
        moved."""
        control = replace(recs[0], rounds=tuple(self._round_record(rec) for rec in recs))
        end = recs[-1]
        means = [r.mean_ms for r in control.rounds or () if r.mean_ms is not None]
        if means:
            end = replace(end, reason=(
                f"the control ran {len(recs)} times, {len(means)} to their steps: means "
                f"{min(means):.2f}-{max(means):.2f} ms ({100 * (max(means) / min(means) - 1):.1f}% "
                "apart); each knob is measured over its processes against them all"))
        return control, end

    def _aggregate(self, recs: list[TrialRecord], controls_timed: list[Timed],
                   planned: Planned | Together | None) -> TrialRecord:
        """One knob's record over its rounds: the first round's record (its numerics, memory and
        files), measured again over every round's process."""
        # every process cut to the steps all of them timed (``common_steps``)
        cut = common_steps([*controls_timed, *self._round_steps(recs)])
        controls, runs = cut[:len(controls_timed)], cut[len(controls_timed):]
        ok = [rec for rec in recs if rec.status == "ok"]
        agg = replace(ok[0] if ok else recs[0], knob=recs[0].knob,
                      rounds=tuple(self._round_record(rec) for rec in recs))
        failed = [f"round {i}: {rec.status}" for i, rec in enumerate(recs, 1)
                  if rec.status not in ("ok", NOT_APPLIED)]
        if failed and ok:
            agg = _with_reason(agg, *failed)
        if not ok or agg.status != "ok":
            return agg
        if not (runs and controls):
            return replace(agg, status=TOO_FEW, verdict=TOO_FEW)
        change = compare_processes(controls, runs, floor_pct=DEFAULT_FLOOR_PCT,
                                   drop_outliers=DROP_OUTLIERS)
        sides = (timed([v for c in controls for v in c]), timed([v for r in runs for v in r]))
        return _verdict_of(_measured(agg, change), change, DEFAULT_FLOOR_PCT, planned, sides)

    def _run_control(self) -> None:
        """The program with no knob, in a trial process like the others: the reference. The
        diagnosed run is not one: it ran in gpudoctor's own process, which had just imported
        the analysis, and minutes earlier (another load on the machine); on a shared 2-core CPU
        a no-op knob (tf32) measured x1.29 against it and x1.0 against a control."""
        rec = self.one(CONTROL, [], None)
        child = self._children.get(CONTROL, ChildTrial())
        samples = self._samples(CONTROL)
        priced = self.baseline.priced_ms or rec.baseline_ms
        if rec.status == "ok" and rec.trial_ms and priced:
            moved = 100.0 * (rec.trial_ms / priced - 1.0)
            if abs(moved) > PRICED_STEP_MOVED_PCT:
                what = (f"unprofiled step, {priced:.3f} ms (the report's \"step\" line)"
                        if self.baseline.priced_ms
                        else f"steps before its window, {priced:.2f} ms a step")
                rec = _with_reason(rec, (
                    f"the prices assume the diagnosed run's {what}; this process stepped at "
                    f"{rec.trial_ms:.2f} ms ({moved:+.0f}%): the program's speed moved between the "
                    "two, and a price made at one speed may not hold at the other"))
            self.baseline = Baseline(samples, child.losses, child.peak_memory_bytes,
                                     self.baseline.skip,
                                     self.baseline.steps, self.baseline.priced_ms,
                                     self._sample_steps(CONTROL))
            self.reference = "control"
        else:
            rec = _with_reason(rec, "the trials are measured against the diagnosed run's samples "
                                    "instead")
        self.records.append(rec)

    def _run_drift_check(self) -> TrialRecord:
        """The control again, after the knobs: how far the same program moved between two fresh
        processes minutes apart (the machine's load, its clocks). The noise floor of every verdict
        is raised to that drift, when it exceeds diff's 1% floor: within one process the step-to-
        step spread is tight, and a knob must beat the drift between processes to count."""
        rec = self.one(CONTROL_END, [], None)
        samples = self._samples(CONTROL_END)
        if not (rec.status == "ok" and len(samples) >= 2 and self.baseline.samples_ms):
            return rec
        drift = abs(_compare(self.baseline.samples_ms, samples).change_pct)
        self.floor_pct = max(DEFAULT_FLOOR_PCT, round(drift, 2))
        moved = bracketed(self.baseline.samples_ms, samples)
        self.baseline = replace(self.baseline, samples_ms=moved)
        self.reference = CONTROLS_BOTH
        reason = (f"the control again, after the trials: {drift:.1f}% apart; the verdicts' noise "
                  f"floor is {self.floor_pct:g}%")
        if drift > REPEATS_HINT_DRIFT_PCT:
            reason += ("; this program's speed moves between processes: --trial-repeats 3 measures "
                       "each knob over three")
        return replace(rec, reason=reason)

    def one(self, name: str, knob_ids: list[str],
            planned: Planned | Together | None) -> TrialRecord:
        if self.progress is not None:
            self.progress(name)
        trial_dir = self.run_dir / "trials" / name
        trial_dir.mkdir(parents=True, exist_ok=True)
        cwd = Path.cwd()
        if self.sandbox is not None:
            cwd = self.sandbox / name
            cwd.mkdir(parents=True, exist_ok=True)
        status, reason, written, wall = self._spawn(trial_dir, knob_ids, cwd)
        # none written (it died first, or timed out): nothing measured, nothing changed
        child = written or ChildTrial(tuple(knob_ids))
        self._children[name] = child
        knobs = [BY_ID[k] for k in knob_ids]
        title = knobs[0].title if len(knobs) == 1 else " + ".join(k.id for k in knobs)
        effects = child.effects
        samples = usable(child.samples_ms)
        checked = any(k.numerics for k in knobs)
        rec = TrialRecord(
            knob=name, knobs=tuple(knob_ids), reference=self.reference,
            title=title if knobs else "no knob: the program as it is, the reference for the trials",
            finding=planned.finding if planned else None,
            predicted_speedup=_round(planned.predicted_speedup if planned else None),
            predicted_saving_ms=_round(planned.saving_ms if planned else None),
            predicted_by=planned.priced_by if planned else None,
            status=status, reason=reason, verdict=None,
            measured_speedup=None, speedup_ci95=None, baseline_ms=None, trial_ms=None,
            change_pct=None, change_ci95_pct=None, n_baseline=len(self.baseline.samples_ms),
            n_trial=len(samples), method=None,
            peak_memory_bytes=PeakMemory(self.baseline.peak_memory_bytes, child.peak_memory_bytes),
            numerics=numerics(self.baseline.losses, child.losses, checked, effects),
            effects=effects, exit_code=child.exit_code, wall_s=round(wall, 2), cwd=str(cwd),
            dir=str(trial_dir),
            files_written=tuple(_files_under(cwd)) if self.sandbox is not None else None,
        )
        if not knob_ids:  # a control: measured against the reference so far, for the record
            if status == "ok" and samples and self.baseline.samples_ms:
                measured = _measured(rec, _compare(self.baseline.samples_ms, samples))
                rec = replace(measured, verdict=REFERENCE)
        elif status == "ok" and all(e.startswith(LEFT_AS_IS) for e in effects):
            left = "; ".join(e[len(LEFT_AS_IS):] for e in effects)
            rec = replace(rec, status=NOT_APPLIED, verdict=NOT_APPLIED,
                          reason="the knob found nothing to change in this program"
                          + (f": {left}" if left else ""))
        elif status == "ok":
            rec = self._judged(rec, samples, planned)
        # the timing mixes a transient: say so beside the verdict
        if status == "ok" and child.unsettled:
            rec = _with_reason(rec, child.unsettled)
        # a trace was asked for and the program ended while the trial still timed its steps
        if status == "ok" and self.trace and not (trial_dir / TRACE_FILE).is_file():
            rec = _with_reason(rec, NO_TRACE)
        # a compile knob cut short by graph breaks: where Dynamo broke it
        if rec.status == "ok" and any(k.group == "compile" for k in knobs):
            breaks = graph_breaks(_log_text(trial_dir), own=str(PACKAGE_DIR))
            rec = _with_reason(rec, summary(breaks))
        return self._paced(rec, knobs, trial_dir)

    @cached_property
    def _capture_launch_ns(self) -> float | None:
        """The capture's median launch call (tryfix/host_pace.py), read once."""
        return launch_ns_of(self.run_dir)

    def _paced(self, rec: TrialRecord, knobs: Sequence[Any], trial_dir: Path) -> TrialRecord:
        """``rec`` with its host's pace beside the capture's, where both traces tell it."""
        if (rec.status != "ok" or not self.trace or not comparable(knobs)
                or not (trial_dir / TRACE_FILE).is_file()):
            return rec
        ratio, note = pace_note(launch_ns_of(trial_dir), self._capture_launch_ns)
        return _with_reason(replace(rec, host_pace=ratio), note)

    def _judged(self, rec: TrialRecord, samples: tuple[float, ...],
                planned: Planned | Together | None) -> TrialRecord:
        if not (samples and self.baseline.samples_ms):
            return replace(rec, status=TOO_FEW, verdict=TOO_FEW,
                           reason=f"the trial timed {len(samples)} steps")
        before, after = same_steps(self.baseline.samples_ms, self.baseline.sample_steps, samples,
                                   self._sample_steps(rec.knob))
        change = _compare(before, after, self.floor_pct)
        sides = (timed(before), timed(after))
        return _verdict_of(_measured(rec, change), change, self.floor_pct, planned, sides)

    def _spawn(self, trial_dir: Path, knob_ids: list[str],
               cwd: Path) -> tuple[str, str, ChildTrial | None, float]:
        target = self.target
        script = target.path_or_module if target.is_module else str(
            Path(target.path_or_module).resolve())
        # knobs that compile run their compilation outside the timed steps (knobs.WARMUP_COMPILE)
        warmup = max((BY_ID[k].warmup_steps for k in knob_ids), default=0)
        spec = child_spec(script, target.args, target.is_module, knob_ids,
                          trial_skip(self.baseline, warmup), self.baseline.steps, trial_dir,
                          trace=self.trace, program=self.program)
        spec_path = trial_dir / "spec.json"
        spec_path.write_text(json.dumps(spec, indent=2) + "\n")
        # a compile trial's own empty Inductor cache (knobs.FRESH_CACHE); the first trial of a lone
        # compile knob keeps it for the combined trial (knobs.REUSED_CACHE), any other removes it
        fresh, reused = None, False
        if needs_fresh_dir(knob_ids):
            left = [self._caches[k] for k in knob_ids if k in self._caches]
            if len(knob_ids) > 1 and left:
                fresh, reused = left[0], True
            else:
                # no room for one: the trial compiles with the user's cache
                with contextlib.suppress(OSError):
                    fresh = tempfile.mkdtemp(prefix="gpudoctor-trial-cache-")
        keep = fresh is not None and not reused and len(knob_ids) == 1 and knob_ids[0] not in self._caches
        try:
            return self._run_child(trial_dir, spec_path,
                                   self._child_env(knob_ids, fresh, reused), cwd,
                                   target)
        finally:
            if keep:
                self._caches[knob_ids[0]] = fresh
            elif fresh is not None and not reused:
                shutil.rmtree(fresh, ignore_errors=True)

    def _run_child(self, trial_dir: Path, spec_path: Path, env: dict[str, str], cwd: Path,
                   target: Any) -> tuple[str, str, ChildTrial | None, float]:
        package_root = str(PACKAGE_DIR.parent)  # the folder holding gpudoctor/
        paths = [package_root] + ([str(Path.cwd())] if target.is_module else [])
        env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH", "")] if p])
        log = trial_dir / "output.log"
        start = time.perf_counter()
        with log.open("wb") as out:
            # its own session: the terminal's Ctrl-C reaches gpudoctor alone, which kills the group
            # (finally below); default SIGINT all the same, so that one sent to the group stops it
            # as it would stop python
            proc = subprocess.Popen([sys.executable, "-m", "gpudoctor.tryfix.child",
                                     str(spec_path.resolve())],
                                    cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=default_sigint_in_child())
            try:
                code = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return "timed out", f"stopped after --trial-timeout {self.timeout_s:g} s", None, \
                    time.perf_counter() - start
            finally:
                _kill_group(proc)  # DataLoader workers or threads the program left behind
        wall = time.perf_counter() - start
        # a trial.json that is not one the child writes fails the trial, with what is wrong in it
        child, unreadable = read_child_trial(trial_dir / "trial.json")
        tail = _tail(log)
        if "OutOfMemoryError" in tail or "out of memory" in tail.lower():
            return "out of memory", _last_line(tail), child, wall
        # it ended before its steps
        if child is None or (code != 0 and not child.stopped_by_gpudoctor):
            why = (child.error if child is not None else unreadable) or _last_line(tail)
            return "crashed", f"exit code {code}: {why}", child, wall
        return "ok", "" if code == 0 else f"the program ended with exit code {code} after the timed steps", child, wall


def _measured(rec: TrialRecord, change: StepChange) -> TrialRecord:
    """``rec`` with what ``change`` measured: the speedup (baseline mean / trial mean) and its 95%
    interval, the inverse of the step-time change's."""
    lo, hi = change.ci_low_pct, change.ci_high_pct
    interval = lo is not None and hi is not None
    return replace(
        rec, measured_speedup=_round(change.speedup),
        speedup_ci95=(_round(1 / (1 + hi / 100)), _round(1 / (1 + lo / 100))) if interval else None,
        baseline_ms=_round(change.before_ms), trial_ms=_round(change.after_ms),
        change_pct=_round(change.change_pct),
        change_ci95_pct=(_round(lo), _round(hi)) if interval else None,
        n_baseline=change.n_before, n_trial=change.n_after, method=change.method,
        # the samples left out as outliers (diff/samples.py), beside the counts kept
        outliers_ms=Outliers(tuple(_round(v) for v in change.dropped_before),
                             tuple(_round(v) for v in change.dropped_after)),
    )


def _verdict_of(rec: TrialRecord, change: StepChange, floor_pct: float,
                planned: Planned | Together | None,
                sides: Sequence[tuple[int, float]]) -> TrialRecord:
    """A measured ``rec``'s noise floor and verdict (``verdict``), and why there is none where a
    side timed too little (``short_of_evidence``)."""
    said = verdict(change, planned.predicted_speedup if planned else None, sides)
    rec = replace(rec, floor_pct=floor_pct, verdict=said)
    return _with_reason(rec, short_of_evidence(sides)) if said == NOT_ENOUGH else rec


def child_spec(script: str, args: Sequence[str], is_module: bool, knob_ids: Sequence[str],
               skip: int, steps: int, trial_dir: Path, trace: bool = False,
               program: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``python -m gpudoctor.tryfix.child SPEC`` reads (tryfix/child.py): the program, the
    knobs, the steps to skip and record, where the trial's files go."""
    return {"target": script, "args": list(args), "is_module": is_module, "knobs": list(knob_ids),
            "skip": skip, "steps": steps, "trace": trace, "loss_steps": LOSS_STEPS,
            "out_dir": str(trial_dir.resolve()), "program": program or {}}


Timed = tuple[tuple[float, ...], tuple[int, ...]]  # a process's samples and each one's step


def common_steps(processes: Sequence[Timed]) -> list[tuple[float, ...]]:
    """Each process's samples cut to the steps every one of them timed, in step order (the rounds
    of ``--trial-repeats``, as ``same_steps`` does for two); as they are where a process's steps are
    unknown or fewer than ``MIN_JUDGED_STEPS`` are shared."""
    whole = [tuple(samples) for samples, _ in processes]
    if not processes or any(len(steps) != len(samples) for samples, steps in processes):
        return whole
    maps = [dict(zip(steps, samples, strict=True)) for samples, steps in processes]
    shared = sorted(set.intersection(*(set(m) for m in maps)))
    if len(shared) < MIN_JUDGED_STEPS:
        return whole
    return [tuple(m[k] for k in shared) for m in maps]


def same_steps(before: Sequence[float], before_steps: Sequence[int], after: Sequence[float],
               after_steps: Sequence[int]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Both sides cut to the steps both timed, in step order (module docstring, "Measured
    speedup"); as they are where either side's steps are unknown (not one per sample) or they share
    fewer than ``MIN_JUDGED_STEPS`` (``common_steps`` of the two)."""
    cut_before, cut_after = common_steps([(tuple(before), tuple(before_steps)),
                                          (tuple(after), tuple(after_steps))])
    return cut_before, cut_after


def bracketed(first: Sequence[float], last: Sequence[float]) -> tuple[float, ...]:
    """The first control's samples, moved to the geometric mean of the two controls' process means.

    The knob trials run between the control and control-end; the program's speed moves from one
    process to the next (benchmarks/BENCHMARKS-try-fixes.md "Evidence moved from the source:
    try-fixes"), so the two controls' mean is a better estimate of the speed the trials ran at than
    either alone. The spread within one process stays the first control's (the interval's
    within-process part); the drift between the two already raised the verdicts' floor."""
    if not first or not last:
        return tuple(first)
    a, b = process_mean(first,
                        drop_outliers=DROP_OUTLIERS), process_mean(last,
                                                                   drop_outliers=DROP_OUTLIERS)
    if a <= 0 or b <= 0:
        return tuple(first)
    scale = math.sqrt(a * b) / a
    return tuple(v * scale for v in first)


def _compare(before: Sequence[float], after: Sequence[float],
             floor_pct: float = DEFAULT_FLOOR_PCT) -> StepChange:
    """Two trial processes' steps compared as a trial compares them: every step kept
    (DROP_OUTLIERS)."""
    return compare_samples(before, after, floor_pct=floor_pct, drop_outliers=DROP_OUTLIERS)


def _round_name(name: str, r: int) -> str:
    """The trial directory (and record name) of round ``r``: the first round's keeps the plain
    name."""
    return name if r == 1 else f"{name}.r{r}"


def _round(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def _files_under(folder: Path, limit: int = 50) -> list[str]:
    """The files a sandboxed trial left in its working directory (relative paths, sorted, at most
    ``limit``): the program's side effects (checkpoints, logs) seen from outside."""
    found: list[str] = []
    with contextlib.suppress(OSError):
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                found.append(str(path.relative_to(folder)))
                if len(found) >= limit:
                    break
    return found


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _tail(log: Path, size: int = 4000) -> str:
    try:
        data = log.read_bytes()[-size:]
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"
