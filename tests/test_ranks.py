"""The multi-rank analysis on synthetic rank sets derived from the recorded 2-GPU DDP trace
(tests/ranksynth.py): planted clock offsets are recovered, a rank held up by a planted DataLoader
delay is named the straggler with that cause, a planted stretch of a collective shows as exposed
communication, and the legacy layout (trace.rankN.json.gz side by side) is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from gpudoctor.errors import InputError
from gpudoctor.pipeline import analyze_ranks, is_rank_set
from gpudoctor.ranks.sections import RankRow
from gpudoctor.ranks.summary import _OP_NAMES
from gpudoctor.report.html import render_html
from gpudoctor.report.ranks_section import timeline_svg

sys.path.insert(0, str(Path(__file__).parent))
import ranksynth

SRC = Path(__file__).parent.parent / "src"
OFFSETS_US = [0.0, 1234.567, -98765.4321, 5_000_000.0]
LAST = [6, 13, 20]  # the last all-reduce of each of the 3 steps (7 per step)
DELAY_US = 3000.0
EXTRA_US = 2000.0


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ranksynth.rank_set(
        tmp_path_factory.mktemp("clean"),
        3,
        offsets_us=OFFSETS_US[:3],
        env={1: {"hostname": "<b>node1</b>"}},
    )


@pytest.fixture(scope="module")
def late(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ranksynth.rank_set(
        tmp_path_factory.mktemp("late"),
        4,
        offsets_us=OFFSETS_US,
        late=2,
        late_k=LAST,
        delay_us=DELAY_US,
    )


@pytest.fixture(scope="module")
def stretched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ranksynth.rank_set(
        tmp_path_factory.mktemp("stretched"),
        3,
        offsets_us=OFFSETS_US[:3],
        stretched_k=LAST,
        extra_us=EXTRA_US,
        layout="legacy",
    )


def _row(report, rank: int) -> RankRow:
    return next(r for r in report.ranks if r.rank == rank)


def test_clean_set_offsets_recovered_and_no_straggler(clean: Path) -> None:
    report = analyze_ranks([clean], jobs=1)
    offsets = [_row(report, r).clock_offset_us for r in range(3)]
    assert np.abs(np.array(offsets) - OFFSETS_US[:3]).max() < 10.0
    assert (
        report.finding("straggler") is None
    )  # identical ranks: nobody straggles, unlike a top-k pick
    assert report.distributed.matched_collectives == 21
    assert report.distributed.straggler_rank is None
    # the recorded trace: of 0.976 ms of all-reduce per step, 0.947 ms runs with no compute beside it
    assert report.distributed.exposed_comm.exposed_ms == pytest.approx(0.9471, abs=1e-4)
    assert report.distributed.exposed_comm.wait_for_slowest_ms == 0.0
    assert [r.comm_ms for r in report.ranks] == [0.9761] * 3


def test_straggler_named_with_its_planted_cause(late: Path) -> None:
    report = analyze_ranks([late], jobs=2)  # worker processes
    f = report.finding("straggler")
    assert f is not None
    assert f.evidence.numbers["rank"] == 2
    assert f.evidence.numbers["cause"] == "input-pipeline"
    # every other rank waits the planted 3 ms in each step's last all-reduce
    assert f.saving_ms == pytest.approx(DELAY_US / 1000, rel=0.01)
    assert f.evidence.numbers["held_up_per_step"] == 1.0
    assert [r.straggler for r in report.ranks] == [False, False, True, False]
    offsets = np.array([_row(report, r).clock_offset_us for r in range(4)])
    assert np.abs(offsets - OFFSETS_US).max() < 10.0
    # the others' exposed wait is the planted delay (within 5%); the straggler waits for no one
    for r in (0, 1, 3):
        assert _row(report, r).comm_wait_ms == pytest.approx(DELAY_US / 1000, rel=0.05)
        assert _row(report, r).comm_exposed_ms - 0.9471 == pytest.approx(DELAY_US / 1000, rel=0.05)
    assert _row(report, 2).comm_wait_ms == 0.0
    # the combined report carries the straggler's own single-GPU diagnosis: its DataLoader
    assert report.finding("input-pipeline") is not None
    assert "rank 2's, the straggler" in report.warnings[0]


def test_exposed_comm_split_prices_the_planted_stretch(stretched: Path) -> None:
    base = 0.9471  # the recorded trace's exposed all-reduce per step (test above)
    report = analyze_ranks(sorted(stretched.glob("trace.rank*.json.gz")), jobs=1)
    e = report.distributed.exposed_comm
    assert e.exposed_ms - base == pytest.approx(EXTRA_US / 1000, rel=0.05)
    assert e.wait_for_slowest_ms == 0.0
    assert e.transfer_ms + e.overlap_not_taken_ms == pytest.approx(e.exposed_ms, abs=1e-3)
    f = report.finding("exposed-comm")
    # less what the overlapped all-reduce would slow the compute beside it by (exposed_comm.OVERLAP_COST)
    n = f.evidence.numbers if f is not None else {}
    assert n["overlap_slows_compute_ms"] == pytest.approx(
        0.2357 * (n["overlap_not_taken_bucket_ms"] + n["overlap_not_taken_issued_late_ms"]),
        abs=1e-3,
    )
    assert f is not None and f.saving_ms == pytest.approx(
        e.overlap_not_taken_ms - n["overlap_slows_compute_ms"], abs=1e-3
    )
    assert report.finding("straggler") is None
    # a 32 MiB all-reduce taking 2.2 ms: far under the bus bandwidth an H200's NVLink gives
    slow = report.finding("slow-collective")
    assert slow is not None
    assert slow.evidence.numbers["op"] == "all-reduce" and slow.evidence.numbers["ratio"] < 0.5


def test_legacy_layout_and_rank_set_detection(stretched: Path, clean: Path, tmp_path: Path) -> None:
    import gpudoctor

    assert is_rank_set(stretched) and is_rank_set(clean)
    assert not is_rank_set(clean / "rank0") and not is_rank_set(tmp_path)
    report = gpudoctor.analyze(stretched)  # the public API reads a rank set whole
    assert [r.rank for r in report.ranks] == [0, 1, 2]
    legacy = tmp_path / "legacy"
    for r in range(2):  # separate <name>-rankR-<stamp> run directories
        d = legacy / f"train-rank{r}-20261125T000000Z"
        d.mkdir(parents=True)
        (d / "trace.json.gz").symlink_to(stretched / f"trace.rank{r}.json.gz")
    assert [r.rank for r in analyze_ranks([legacy], jobs=1).ranks] == [0, 1]


def test_one_rank_or_a_repeated_rank_is_refused(clean: Path) -> None:
    with pytest.raises(InputError, match="at least 2"):
        analyze_ranks([clean / "rank0"])
    with pytest.raises(InputError, match="appears twice"):
        analyze_ranks([clean / "rank0", clean / "rank0"])
    with pytest.raises(InputError, match="--jobs 0"):
        analyze_ranks([clean], jobs=0)


def test_json_html_and_timeline(clean: Path) -> None:
    report = analyze_ranks([clean], jobs=1)
    d = report.to_dict()
    assert [r["rank"] for r in d["ranks"]] == [0, 1, 2]
    assert set(d["ranks"][0]) >= {
        "step_ms",
        "busy_ms",
        "idle",
        "comm_exposed_ms",
        "straggler",
        "clock_offset_us",
    }
    tl = d["distributed"]["timeline"]
    assert [r["rank"] for r in tl["ranks"]] == [0, 1, 2]
    # aligned clocks: identical ranks start their step at the same instant
    assert {r["start_us"] for r in tl["ranks"]} == {0.0}
    page = render_html(report)
    assert "&lt;b&gt;node1&lt;/b&gt;" in page and "<b>node1</b>" not in page
    ET.fromstring(timeline_svg(report.distributed.timeline))  # well-formed SVG
    assert "<svg" in page and not any(r["straggler"] for r in d["ranks"])


def test_cli_analyze_many_ranks(late: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="140")
    run = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "analyze", str(late), "--json", "-j", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["distributed"]["straggler_rank"] == 2
    assert out["distributed"]["straggler_cause"] == "input-pipeline"
    bad = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "analyze", str(late / "rank0"), str(tmp_path / "no")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "does not exist" in bad.stderr


def test_collective_names_map_to_plan_ops() -> None:
    from gpudoctor.plan.collective_cost import OPS

    assert set(_OP_NAMES.values()) <= set(OPS)


def test_rank_directory_with_a_trace_and_its_gzipped_copy(clean: Path, tmp_path: Path) -> None:
    import gzip

    for r in range(2):
        d = tmp_path / "run" / f"rank{r}"
        d.mkdir(parents=True)
        data = (clean / f"rank{r}" / "trace.json.gz").read_bytes()
        (d / "trace.json.gz").write_bytes(data)
        (d / "trace.json").write_bytes(
            gzip.decompress(data)[:10]
        )  # the unzipped leftover is not read
        (d / "report.json").write_text("{}")
    assert is_rank_set(tmp_path / "run")
    assert [r.rank for r in analyze_ranks([tmp_path / "run"], jobs=1).ranks] == [0, 1]


def test_worker_processes_give_the_inline_result(late: Path) -> None:
    assert analyze_ranks([late], jobs=2).to_dict() == analyze_ranks([late], jobs=1).to_dict()


def test_eight_ranks_with_offsets_straggler_and_wait_exact(tmp_path: Path) -> None:
    """Eight ranks (the set benchmarks/bench_ranks_vs_hta.py compares with HTA): rank 5 reaches
    each step's last all-reduce 5 ms late (a planted DataLoader fetch), every clock is shifted by
    a planted offset. The offsets come back exactly, rank 5 is named with its cause, priced at the
    planted 5 ms a step, and the mean wait over the ranks is 7/8 of it (rank 5 itself does not wait)."""
    offsets = [0.0, 850.0, -1500.0, 2500.0, -400.0, 300.0, 12_000.0, -7000.0]
    folder = ranksynth.rank_set(
        tmp_path / "eight", 8, offsets_us=offsets, late=5, late_k=LAST, delay_us=5000.0
    )
    report = analyze_ranks([folder], jobs=2)
    f = report.finding("straggler")
    assert f is not None
    assert (f.evidence.numbers["rank"], f.evidence.numbers["cause"]) == (5, "input-pipeline")
    assert f.saving_ms == pytest.approx(5.0, abs=1e-4)
    assert [r.straggler for r in report.ranks] == [r == 5 for r in range(8)]
    assert (
        np.abs(np.array([_row(report, r).clock_offset_us for r in range(8)]) - offsets).max() < 10.0
    )
    # 7/8 x 5 ms = 4.375 planted; measured 12.3 us a step less
    assert report.distributed.exposed_comm.wait_for_slowest_ms == pytest.approx(4.3627, abs=1e-4)


def test_every_ranks_column_is_named() -> None:
    """The console table's and the HTML table's last column (the straggler mark) has a header."""
    from gpudoctor.report.ranks_section import ranks_html, ranks_table

    report = analyze_ranks([Path(__file__).parent / "data" / "gloo_straggler"])
    table = ranks_table(report)
    assert [str(c.header) for c in table.columns][-1] == "verdict" and all(
        str(c.header) for c in table.columns
    )
    assert [str(c) for c in table.columns[-1].cells] == ["", "straggler"]
    page = ranks_html(report)
    assert "<th></th>" not in page and "<th>how</th><th>verdict</th></tr>" in page
