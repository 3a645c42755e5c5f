"""The trials written into the run directory: ``trials.json``, ``trials`` / ``trials_not_tried``
added to ``report.json`` and the "Fixes tried" section (tryfix/render.py) to ``report.html``."""

from __future__ import annotations

import json
from pathlib import Path

from gpudoctor.report.html import with_section
from gpudoctor.tryfix.render import section_html
from gpudoctor.tryfix.session import TrialsOutcome


def attach(run_dir: Path, outcome: TrialsOutcome, suffix: str = "") -> None:
    """Write trials.json and add the trials to the run directory's report.json and report.html
    (``suffix``: a rank's, ``.rank3``); ``outcome.knob_prices`` are the compile knobs' own prices
    the trials were predicted by (pipeline.knob_prices_for)."""
    trials = [rec.to_dict() for rec in outcome.trials]
    not_tried = [item.to_dict() for item in outcome.not_tried]
    note = outcome.note
    prices = outcome.knob_prices
    data = {"trials": trials, "trials_not_tried": not_tried, "note": note, "knob_prices": prices}
    (run_dir / "trials.json").write_text(json.dumps(data, indent=2) + "\n")
    report_json = run_dir / f"report{suffix}.json"
    if report_json.is_file():
        report = json.loads(report_json.read_text())
        report |= {"trials": trials, "trials_not_tried": not_tried, "trials_note": note,
                   "knob_prices": prices}
        report_json.write_text(json.dumps(report, indent=2) + "\n")
    report_html = run_dir / f"report{suffix}.html"
    if report_html.is_file():
        page = report_html.read_text()
        report_html.write_text(with_section(page, section_html(outcome)))
