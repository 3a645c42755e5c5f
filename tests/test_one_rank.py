"""One rank of a distributed job read alone (analysis/collectives.py): its collectives are said in
a note with the numbers, and how to get the findings that compare every rank. Read with the
other ranks, the note is not there: the multi-GPU findings say it."""

from __future__ import annotations

import json
from pathlib import Path

from gpudoctor.pipeline import analyze_inputs, analyze_path
from gpudoctor.report.json_report import to_json

DATA = Path(__file__).parent / "data" / "pp2_h200_imbalance"
NOTE = "this trace is one rank of a distributed job"


def test_a_rank_alone_says_what_its_collectives_take() -> None:
    report = analyze_path(DATA / "rank0" / "trace.json.gz")
    assert report.warnings[0] == (
        "this trace is one rank of a distributed job: its collectives take 7.50 ms a step (79% "
        "of it), 7.46 ms of that with no compute beside it (78%); the findings on collectives "
        "(exposed-comm, straggler, slow-collective) compare every rank: pass every rank's trace, "
        "`gpudoctor analyze rank0.json rank1.json ...`"
    )


def test_a_rank_alone_whose_collectives_run_exposed_is_not_called_healthy() -> None:
    """Rank 0 of the pipeline pair: no finding is major, and its collectives run with no compute
    beside them for 78% of its step. The verdict says so instead of "healthy"; a DDP rank whose
    collectives run exposed 3% of its step keeps its findings' verdict."""
    report = analyze_path(DATA / "rank0" / "trace.json.gz")
    verdict = report.verdict()
    assert verdict.status == "collectives" and verdict.top_finding is None
    assert verdict.text == (
        "no finding on this rank is major, but its collectives run with no compute beside them "
        "for 78% of its step: analyze every rank's trace for the findings on them"
    )
    assert json.loads(to_json(report))["exposed_collectives_share"] == 0.7837
    ddp = analyze_path(DATA.parent / "ddp2_h200_sync" / "rank0" / "trace.json.gz")
    assert ddp.verdict().status == "findings"
    assert round(ddp.exposed_collectives_share, 4) == 0.0276


def test_the_ranks_read_together_need_no_such_note() -> None:
    report = analyze_inputs([DATA / "rank0" / "trace.json.gz", DATA / "rank1" / "trace.json.gz"])
    text = to_json(report)
    assert NOTE not in text and "exposed_collectives_share" not in text
    assert json.loads(text)["findings"]


def test_a_single_gpu_trace_has_no_collectives_note() -> None:
    report = analyze_path(Path(__file__).parent / "data" / "healthy_train" / "trace.json.gz")
    assert not any(NOTE in w for w in report.warnings)
