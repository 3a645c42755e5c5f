"""``gpudoctor analyze A B ...``: traces that are the ranks of one job get the combined ranks
report; traces that are not (single-GPU traces a shell glob brought together, ranks of different
runs) are each diagnosed on their own, so that no trace's findings disappear behind another's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.pipeline import analyze_inputs
from gpudoctor.ranks.job import apart
from gpudoctor.report.model import Report, Reports
from gpudoctor.trace.job import JobFacts, job_facts

DATA = Path(__file__).parent / "data"
SRC = Path(__file__).parent.parent / "src"
HEALTHY = DATA / "healthy_train" / "trace.json.gz"
SYNC = DATA / "host_sync" / "trace.json.gz"  # host-sync, critical: the finding that used to vanish
DDP = DATA / "ddp2_h100" / "slow"


def gd(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="120")
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", "analyze", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


def test_two_single_gpu_traces_are_each_diagnosed_json() -> None:
    out = gd(str(HEALTHY), str(SYNC), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) == {"schema_version", "tool_version", "separate_traces", "reports"}
    assert doc["separate_traces"] == (
        f"{HEALTHY} records no process group (distributedInfo) and no collective or send/recv"
    )
    first, second = doc["reports"]
    assert (first["source"], second["source"]) == (str(HEALTHY), str(SYNC))
    assert first["verdict"]["status"] == "healthy"
    assert second["verdict"]["top_finding"] == "host-sync"
    sync = next(f for f in second["findings"] if f["id"] == "host-sync")
    assert sync["severity"] == "critical"
    assert "ranks" not in first and "ranks" not in second


def test_two_single_gpu_traces_are_each_diagnosed_console() -> None:
    out = gd(str(HEALTHY), str(SYNC), "--width", "200")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("2 traces, diagnosed one by one: they are not the ranks of one job")
    one, two = text.index(f"1/2: {HEALTHY}"), text.index(f"2/2: {SYNC}")
    assert one < text.index("Verdict: healthy") < two < text.index("Verdict: fix host-sync first")
    assert "ranks (ms per step" not in text


def test_separate_traces_refuse_one_html_page(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    out = gd(str(HEALTHY), str(SYNC), "--html", str(page))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1
    assert out.stderr.startswith(
        "error: --html writes one report, and these 2 traces are not the ranks of one job"
    )
    assert "gpudoctor analyze TRACE --html PAGE.html" in out.stderr
    assert not page.exists()


def test_rank_traces_named_one_by_one_are_still_one_ranks_report() -> None:
    out = gd(str(DDP / "rank0" / "trace.json.gz"), str(DDP / "rank1" / "trace.json.gz"), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert "reports" not in doc and "separate_traces" not in doc
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["distributed"]


@pytest.mark.parametrize("case", ["gloo_healthy", "pp2_h200_imbalance"])
def test_rank_directories_named_one_by_one_are_one_job(case: str) -> None:
    report = analyze_inputs([DATA / case / "rank0", DATA / case / "rank1"], jobs=1)
    assert isinstance(report, Report)
    assert [r.rank for r in report.ranks] == [0, 1]


def test_ranks_of_different_runs_are_diagnosed_apart() -> None:
    a, b = DATA / "ddp2_h100" / "healthy" / "rank0", DATA / "ddp2_h200_sync" / "rank0"
    report = analyze_inputs([a, b], jobs=1)
    assert isinstance(report, Reports)
    assert report.why == f"{a}/trace.json.gz and {b}/trace.json.gz are both rank 0"
    assert [r.source for r in report.reports] == [
        str(a / "trace.json.gz"),
        str(b / "trace.json.gz"),
    ]
    c = DATA / "ddp4_h200_sync" / "rank1"
    assert apart([job_facts(a), job_facts(c)]) == (
        f"{a}/trace.json.gz and {c}/trace.json.gz come from different jobs (world_size 2 and 4)"
    )


def test_job_facts_read_from_the_traces() -> None:
    single = job_facts(HEALTHY)
    assert (single.distributed, single.communicates) == (None, False)
    nccl = job_facts(DDP / "rank1")
    assert (
        nccl.distributed["rank"],
        nccl.distributed["world_size"],
        nccl.distributed["backend"],
    ) == (1, 2, "nccl")
    assert nccl.communicates
    gloo = job_facts(DATA / "gloo_healthy" / "rank0")
    assert gloo.distributed["backend"] == "gloo" and gloo.communicates


def _job(source: str, rank: int | None, world: int = 2, communicates: bool = True) -> JobFacts:
    info = None if rank is None else {"rank": rank, "world_size": world, "backend": "nccl"}
    return JobFacts(source, info, communicates)


def test_the_rule() -> None:
    assert apart([_job("a", 0), _job("b", 1)]) == ""
    # an exporter that writes no distributedInfo: the collectives say they are ranks
    assert apart([_job("a", None), _job("b", None)]) == ""
    assert apart([_job("a", None), _job("b", None, communicates=False)]) == (
        "b records no process group (distributedInfo) and no collective or send/recv"
    )
    assert (
        apart([_job("a", 0), _job("b", None)])
        == "b records no process group (distributedInfo) while a does"
    )
    assert apart([_job("a", 0), _job("b", 1), _job("c", 2)]) == "3 traces for a world size of 2"
    gloo = JobFacts("g", {"rank": 1, "world_size": 2, "backend": "gloo"}, True)
    assert apart([_job("a", 0), gloo]) == "a and g come from different jobs (backend nccl and gloo)"
