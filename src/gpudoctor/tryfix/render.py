"""The "Fixes tried" section of a ``TrialsOutcome``: console text and an HTML section (every text
through ``esc``); tryfix/attach.py writes them into the run directory. Field meanings:
docs/report-schema.md, "trials"."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from gpudoctor.core.trial_record import TrialNumerics, TrialRecord, TrialRound
from gpudoctor.report.escape import esc
from gpudoctor.tryfix.session import TrialsOutcome


def _x(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"x{value:.{digits}f}"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.0f} MiB"


def measured_text(rec: TrialRecord) -> str:
    if rec.measured_speedup is None:
        return "-"
    ci = rec.speedup_ci95
    interval = f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else ""
    return f"{_x(rec.measured_speedup)}{interval}"


def outcome_text(rec: TrialRecord) -> str:
    if rec.status != "ok":
        return f"{rec.status}: {rec.reason}" if rec.reason else rec.status
    if rec.knob == "control":
        text = "reference for the trials (measured: the diagnosed run -> this run with no knob)"
        return f"{text}; {rec.reason}" if rec.reason else text
    if rec.knob == "control-end":
        return rec.reason or "the control again"
    text = str(rec.verdict)
    if rec.reason:
        text += f" ({rec.reason})"
    return text


# what a record's ``baseline_ms`` is the mean of (its ``reference``): the diagnosed run's number
# here is the mean of its steps before the window, not the header's unprofiled step (an estimate
# over the steps before and after it, capture/timing.py), so it is named as such
_REFERENCE_LABELS = {"diagnosed run": "the diagnosed run's steps before its window",
                     "control": "the control",
                     "controls before and after": "the controls before and after"}


def means_text(rec: TrialRecord) -> str:
    """``the control 10.00 -> this run 5.88 ms a step (means of 30 and 31 steps)``."""
    ref = _REFERENCE_LABELS.get(str(rec.reference), rec.reference or "the reference")
    return (f"{ref} {rec.baseline_ms:.2f} -> this run {rec.trial_ms:.2f} ms a step (means of "
            f"{rec.n_baseline} and {rec.n_trial} steps)")


def rounds_text(rounds: Sequence[TrialRound]) -> str:
    """A repeated trial's processes: "3 processes: 14.02, crashed, 14.51 ms"."""
    means = [f"{r.mean_ms:.2f}" if r.mean_ms is not None else r.status for r in rounds]
    return f"{len(rounds)} processes: {', '.join(means)} ms"


def numerics_text(n: TrialNumerics) -> str:
    if not n.checked:
        return ""
    if n.diverged is None:
        return "loss not recorded (no scalar passed to backward)"
    pairs = ", ".join(f"{_num(b)}->{_num(t)}" for b, t in zip(n.baseline, n.trial))
    state = "DIVERGED" if n.diverged else "within"
    why = f" ({n.reason})" if n.reason else ""
    return f"first losses {pairs}: {state} {n.tolerance_rel * 100:g}% tolerance{why}"


def _num(v: float | None) -> str:
    return "nan" if v is None else f"{v:.4g}"


def render_console(outcome: TrialsOutcome, console: Console) -> None:
    console.print()
    console.print("Fixes tried", style="bold", markup=False, highlight=False)
    if outcome.note:
        console.print(f"  {outcome.note}", markup=False, highlight=False)
    for rec in outcome.trials:
        pred = _x(rec.predicted_speedup)
        by = rec.predicted_by
        pred += f" ({by.split(' ')[0]})" if by else ""
        head = (f"  {rec.knob:<24} predicted {pred:>6}  measured {measured_text(rec):<22} "
                f"{outcome_text(rec)}")
        console.print(head, markup=False, highlight=False, soft_wrap=True)
        details = []
        if rec.finding:
            details.append(f"for {rec.finding}")
        if rec.baseline_ms is not None:
            details.append(means_text(rec))
        if rec.rounds:
            details.append(rounds_text(rec.rounds))
        mem = rec.peak_memory_bytes
        if mem.baseline is not None or mem.trial is not None:
            details.append(f"peak memory {_mib(mem.baseline)} -> {_mib(mem.trial)}")
        if details:
            console.print("      " + "; ".join(details), markup=False, highlight=False,
                          soft_wrap=True)
        if rec.effects:
            console.print("      applied: " + "; ".join(rec.effects[:4]), markup=False,
                          highlight=False, soft_wrap=True)
        written = rec.files_written
        if written:
            more = f" and {len(written) - 5} more" if len(written) > 5 else ""
            console.print(f"      wrote in {rec.cwd}: {', '.join(written[:5])}{more}", markup=False,
                          highlight=False, soft_wrap=True)
        num = numerics_text(rec.numerics)
        if num:
            console.print(f"      {num}", markup=False, highlight=False, soft_wrap=True)
    for item in outcome.not_tried:
        console.print(f"  not tried: {item.finding}: {item.reason}", markup=False, highlight=False,
                      soft_wrap=True)


def section_html(outcome: TrialsOutcome) -> str:
    """The section report/html.py ``with_section`` adds to the run's report page."""
    rows = []
    for rec in outcome.trials:
        mem = rec.peak_memory_bytes
        rows.append(
            "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in (
                rec.knob, rec.finding or "-", _x(rec.predicted_speedup), measured_text(rec),
                outcome_text(rec) + (f"; {rounds_text(rec.rounds)}" if rec.rounds else ""),
                f"{_mib(mem.baseline)} -> {_mib(mem.trial)}",
                numerics_text(rec.numerics) or "-", "; ".join(rec.effects) or "-")) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("knob", "finding", "predicted",
                                             "measured (95% interval)", "verdict",
                                              "peak memory", "numerics", "applied"))
    parts = ['<section id="fixes-tried"><h2>Fixes tried</h2>']
    if outcome.note:
        parts.append(f"<p>{esc(outcome.note)}</p>")
    if rows:
        parts.append(f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
                     "</table></div>")
    if outcome.not_tried:
        parts.append("<ul>" + "".join(f"<li>not tried: {esc(i.finding)}: {esc(i.reason)}</li>"
                                      for i in outcome.not_tried) + "</ul>")
    parts.append("</section>")
    return "\n".join(parts)

