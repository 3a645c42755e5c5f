"""A trace from a card the datasheet table knows gets that card's row; one from a card it does not
know still gets its report (host side, idle causes, the findings that need no peak rates), with
the roofline marked unavailable and a one-line warning saying how to give ceilings."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.hardware.ceilings import unavailable
from gpudoctor.pipeline import analyze_path
from gpudoctor.rules.registry import PEAK_PRICED, RULES

DATA = Path(__file__).parent / "data"
SRC = Path(__file__).parent.parent / "src"
TRACE = DATA / "host_sync" / "trace.json.gz"  # recorded on an H100: host-sync and launch-bound


def _renamed(tmp_path: Path, device: str) -> Path:
    """A copy of TRACE whose GPU is ``device`` (the input itself is never touched)."""
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    doc["deviceProperties"][0]["name"] = device
    out = tmp_path / "trace.json.gz"
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out


def _analyze(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # an empty cache: no machine profile measured here can stand in for the datasheet
    env = dict(
        os.environ, PYTHONPATH=str(SRC), COLUMNS="120", XDG_CACHE_HOME=str(tmp_path / "cache")
    )
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", "analyze", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    ("device", "row"),
    [
        ("Tesla T4", "NVIDIA Tesla T4"),
        ("NVIDIA GeForce RTX 3080", "NVIDIA GeForce RTX 3080"),
        ("NVIDIA RTX A6000", "NVIDIA RTX A6000"),
        ("NVIDIA L40", "NVIDIA L40"),
        ("NVIDIA H800", "NVIDIA H800 SXM5 80GB"),
        ("NVIDIA GH200 480GB", "NVIDIA GH200 480GB (96GB HBM3)"),
    ],
)
def test_common_cards_get_their_datasheet_row(tmp_path: Path, device: str, row: str) -> None:
    report = analyze_path(_renamed(tmp_path, device))
    assert report.gpu.name == device
    assert report.ceilings.gpu == row
    assert report.ceilings.source.startswith("datasheet: ")
    assert report.roofline.unavailable is None
    assert report.finding("host-sync") is not None


def test_gh200_is_not_read_as_an_h200(tmp_path: Path) -> None:
    report = analyze_path(_renamed(tmp_path, "NVIDIA GH200 480GB"))
    assert (
        report.ceilings.hbm_bytes_per_s == 4.0e12
    )  # the GH200's 96 GB HBM3, not the H200's 4.8 TB/s


def test_t4_trace_gives_a_report_from_the_command_line(tmp_path: Path) -> None:
    out = _analyze(tmp_path, str(_renamed(tmp_path, "Tesla T4")), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ceilings"]["gpu"] == "NVIDIA Tesla T4"
    assert report["ceilings"]["matrix_flops"]["fp16"] == 65e12
    assert report["verdict"]["top_finding"] == "host-sync"


def test_unknown_card_still_gets_its_report(tmp_path: Path) -> None:
    trace = _renamed(tmp_path, "Some Future GPU")
    before = trace.read_bytes()
    out = _analyze(tmp_path, str(trace), "--json")
    assert out.returncode == 0, out.stderr
    assert trace.read_bytes() == before
    report = json.loads(out.stdout)
    assert report["gpu"]["name"] == "Some Future GPU"
    assert report["ceilings"]["source"] == "none: Some Future GPU is not in the datasheet table"
    # the host side and the idle causes stand; nothing is priced from peaks that are not known
    ids = [f["id"] for f in report["findings"]]
    assert ids[:2] == ["host-sync", "launch-bound"] or ids[:2] == ["launch-bound", "host-sync"]
    assert not set(ids) & set(PEAK_PRICED)
    assert report["verdict"]["status"] == "findings"
    assert report["idle"]["host-sync"] > 1.0
    assert report["roofline"]["kernels"] == [] and report["roofline"]["unavailable"].startswith(
        "unavailable: "
    )
    assert report["not_applicable"]["roofline"] == report["roofline"]["unavailable"]
    assert report["mfu"] is None
    warning = report["warnings"][0]
    assert "\n" not in warning
    assert warning.startswith("GPU 'Some Future GPU' is not in the datasheet table")
    assert "gpudoctor bench" in warning and "--ceilings FILE" in warning


def test_unknown_card_console_report(tmp_path: Path) -> None:
    out = _analyze(tmp_path, str(_renamed(tmp_path, "Some Future GPU")), "--width", "200")
    assert out.returncode == 0, out.stderr
    assert "MFU n/a (no ceilings)" in out.stdout
    assert "1. [critical]" in out.stdout and "host-sync" in out.stdout
    assert re.search(r"note: GPU 'Some Future GPU' is not in the datasheet table", out.stdout)


def test_unknown_card_with_measured_ceilings_draws_the_roofline(tmp_path: Path) -> None:
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text(
        json.dumps(
            {
                "gpu": "Some Future GPU",
                "matrix_flops": {"bf16": 500e12, "fp32": 50e12},
                "hbm_bytes_per_s": 2e12,
                "source": "measured: gpudoctor bench",
            }
        )
    )
    report = analyze_path(_renamed(tmp_path, "Some Future GPU"), ceilings=ceilings)
    assert report.roofline.unavailable is None and report.roofline.kernels
    assert report.ceilings.source == "measured: gpudoctor bench"
    assert not any("not in the datasheet table" in w for w in report.warnings)


def test_an_unknown_gpu_option_is_still_refused(tmp_path: Path) -> None:
    out = _analyze(tmp_path, str(TRACE), "--gpu", "Some Future GPU")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "unknown --gpu" not in out.stdout
    assert "no datasheet row matches GPU 'Some Future GPU'" in out.stderr


def test_every_rule_reading_the_ceilings_is_peak_priced() -> None:
    """A rule that reads ``a.ceilings`` would divide by the zero rates of ``unavailable``: it must
    be skipped on such a card (pageable-copy reads only the host link, which keeps its rate)."""
    readers = set()
    for rule in RULES.values():
        source = Path(sys.modules[rule.check.__module__].__file__ or "").read_text()
        if re.search(r"\.ceilings\b(?!\.h2d_pinned)", source.replace("a.ceilings.h2d_pinned", "")):
            readers.add(rule.id)
    assert readers - {"pageable-copy"} == set(PEAK_PRICED)
    assert not unavailable("x").available


def test_a_rule_that_asks_whether_another_fires_skips_the_peak_priced_ones() -> None:
    """launch-bound asks each rule that owns an idle cause whether it fires (rules/shared.py
    ``owned_elsewhere``); on a card with no ceilings optimizer-loop, priced from the peaks, does not
    run, and asking it divided by a bandwidth of 0 (the optimizer_loop trap, its card unnamed)."""
    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.trace import parse

    data = json.loads(gzip.decompress((DATA / "optimizer_loop" / "trace.json.gz").read_bytes()))
    data.pop("deviceProperties", None)
    report = analyze_loaded(parse(json.dumps(data).encode()))
    assert report.findings and report.finding("optimizer-loop") is None
    assert report.warnings[0].startswith("the trace names no GPU")
