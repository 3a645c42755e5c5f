"""``run --try-fixes`` after the diagnosis: which knobs to try, whether they can be tried, and the
trials themselves. The command line only hands over what the run produced and prints the outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudoctor.capture.bundle import global_rank, program_facts
from gpudoctor.capture.detect import PROGRAM_PROFILER
from gpudoctor.core.loader import WORKERS_PRESCRIBED
from gpudoctor.core.trial_record import NotTried, TrialRecord
from gpudoctor.tryfix.knobs import KNOBS
from gpudoctor.tryfix.trial import Baseline, Planned, Together, Trials, plan


@dataclass
class TrialsOutcome:
    """The trials run (none where they could not be), the knobs not tried and why, a note for the
    user, and the knobs' own prices (rules/knob_prices.py) kept beside them."""

    trials: list[TrialRecord] = field(default_factory=list)
    not_tried: list[NotTried] = field(default_factory=list)
    note: str = ""
    knob_prices: dict[str, Any] = field(default_factory=dict)


def _more_steps_advice(step_source: str) -> str:
    """What gives the trials unprofiled steps to compare with: more steps before the window, or,
    where the program's own profiler opened it, a later start of that profiler."""
    if step_source == PROGRAM_PROFILER:
        return ("the program's own torch.profiler opened the window, so --skip does not move it: "
                "start its schedule later (a larger wait=) or leave it out to try knobs")
    return "raise --skip"


def try_fixes(target: Any, config: Any, samples: Sequence[float], run_dir: Path, report: Any,
              numerics: dict[str, Any], fix_ids: list[str] | None, *, sandbox: Any,
              timeout_s: float, trace: bool, repeats: int = 1,
              progress: Callable[[str], None] | None = None,
              step_source: str = "") -> TrialsOutcome:
    """Plan the trials for ``report``'s findings (or the knobs ``fix_ids`` names) and run them
    against the unprofiled ``samples`` timed before the window."""
    from gpudoctor.pipeline import knob_prices_for

    findings = report.findings if report is not None else ()
    diagnosed = report is not None and not report.host_only
    # the compile knobs priced by their own edits, on the diagnosed trace (a second reading of it:
    # seconds, against the minutes the trials take)
    prices = knob_prices_for(run_dir) if diagnosed else {}
    chosen = plan(findings, fix_ids, prices)
    out = TrialsOutcome(not_tried=list(chosen.not_tried), knob_prices=prices)
    if global_rank() is not None:
        out.note = ("--try-fixes reruns one process per knob and does not run inside a distributed "
                    "job (each rank would start its own trials): try the knobs on a single-process "
                    "run of the program")
    elif not chosen.trials:
        out.note = ("no finding has a fix that gpudoctor can apply from outside the program "
                    f"(knobs: {', '.join(k.id for k in KNOBS)}); name some with --fixes")
        if not diagnosed:
            out.note = ("no GPU work was diagnosed, so no finding calls for a knob: name the knobs "
                        "to try with --fixes (e.g. --fixes loader-workers,optimizer-foreach)")
    elif len(samples) < 2:
        out.note = (f"only {len(samples)} unprofiled steps were timed before the window: nothing "
                    "to compare trials with; " + _more_steps_advice(step_source))
    else:
        baseline = Baseline(tuple(samples), tuple(numerics["losses"]), numerics["peak"],
                            config.skip, config.steps,
                            report.unprofiled_step_ms if report is not None else None)
        runner = Trials(target,
                        program_facts(target.path_or_module, target.args, target.is_module),
                        run_dir, baseline, timeout_s=timeout_s, sandbox=sandbox, trace=trace,
                        repeats=repeats, progress=progress,
                        loader_workers=prescribed_loader_workers(report),
                        price_together=(lambda ids: together_price(run_dir, ids, chosen.trials))
                        if diagnosed else None)
        out.trials = runner.run(chosen.trials)
    return out


def together_price(run_dir: Path, knob_ids: list[str],
                   planned: Sequence[Planned]) -> Together | None:
    """The combined trial's prediction: the knobs' edits replayed at once on the diagnosed run (a
    third reading of its trace: seconds); each knob that is not priced by its own edit brings the
    edit of the finding it was planned for. None where one of them has none."""
    from gpudoctor.pipeline import knobs_together_price_for

    fixed = {p.knob.id: p.finding_id for p in planned if p.finding_id}
    price = knobs_together_price_for(run_dir, knob_ids, fixed)
    if price is None:
        return None
    return Together(float(price["predicted_speedup"]),
                    float(price["step_ms"]) - float(price["step_after_ms"]))


def prescribed_loader_workers(report: Any) -> int | None:
    """The workers the report's input-pipeline finding prescribes (its evidence), None without."""
    finding = report.finding("input-pipeline") if report is not None else None
    value = finding.evidence.numbers.get(WORKERS_PRESCRIBED) if finding is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
