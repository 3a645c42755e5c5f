"""gpudoctor diff and history on the command line: exit codes, the CI gate, one-line errors, the
JSON schema, and the HTML page in a real browser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from browser import load_page
from runs import DATA, MANIFEST, make_run, rewrite_trace, twin_runs
from trial_records import record

SRC = Path(__file__).parent.parent / "src"
HEALTHY = DATA / "healthy_train" / "trace.json.gz"
TIMES = MANIFEST["healthy_train"]["sick_times_ms"]


def gd(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="120")
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=180,
        check=False,
    )


def one_line_error(out: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    return lines[0]


def test_diff_of_a_lab_twin_prints_verdict_and_resolved_finding(tmp_path):
    sick, fixed = twin_runs(tmp_path, "host_sync")
    out = gd("diff", sick, fixed, "--width", "120")
    assert out.returncode == 0, out.stderr
    assert "FASTER" in out.stdout and "unprofiled steps" in out.stdout
    assert "resolved" in out.stdout and "host-sync" in out.stdout


SCHEMA = {
    "top": [
        "after",
        "before",
        "categories",
        "findings",
        "idle",
        "kernels",
        "samples",
        "schema_version",
        "segments",
        "step",
        "verdict",
        "warnings",
    ],
    "step": [
        "after_ms",
        "before_ms",
        "change_pct",
        "ci_high_pct",
        "ci_low_pct",
        "confidence",
        "delta_ms",
        "dropped_after",
        "dropped_before",
        "floor_pct",
        "method",
        "n_after",
        "n_before",
        "notes",
        "sd_after_ms",
        "sd_before_ms",
        "speedup",
        "verdict",
    ],
    "side": [
        "gpu",
        "kind",
        "notes",
        "path",
        "profiled_step_ms",
        "program",
        "samples_ms",
        "trace",
        "unprofiled_step_ms",
    ],
    "kernels": [
        "appeared",
        "appeared_top",
        "changed_most",
        "disappeared",
        "disappeared_top",
        "matched",
    ],
    "kernel": ["after", "after_ms", "before", "before_ms", "delta_ms", "matched_by", "name"],
    "group": ["calls_per_step", "kind", "ms_per_step", "name", "op", "shapes", "site"],
    "finding": [
        "id",
        "measured_saving_ms",
        "measured_speedup",
        "predicted_speedup",
        "ratio",
        "saving_after_ms",
        "saving_before_ms",
        "status",
        "title",
    ],
    "gate": ["exit_code", "fail_if_slower_pct", "failed"],
}


def test_json_schema_is_stable(tmp_path):
    sick, fixed = twin_runs(tmp_path, "fp32_matmul")
    out = gd("diff", sick, fixed, "--json", "--fail-if-slower", "5%")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert sorted(d) == sorted([*SCHEMA["top"], "gate"])
    assert d["schema_version"] == "1.0" and d["verdict"] == "faster"
    assert sorted(d["step"]) == SCHEMA["step"]
    assert sorted(d["before"]) == SCHEMA["side"] == sorted(d["after"])
    assert sorted(d["kernels"]) == SCHEMA["kernels"]
    kernel = d["kernels"]["changed_most"][0]
    assert sorted(kernel) == SCHEMA["kernel"] and sorted(kernel["before"]) == SCHEMA["group"]
    assert sorted(d["findings"]) == ["new", "persisting", "resolved"]
    assert sorted(d["findings"]["resolved"][0]) == SCHEMA["finding"]
    assert sorted(d["gate"]) == SCHEMA["gate"] and d["gate"]["failed"] is False
    assert (
        sorted(d["samples"]) == ["after", "before", "kind"] and d["samples"]["kind"] == "unprofiled"
    )
    assert sorted(d["segments"]) == ["after", "before"]


def test_gate_fails_only_beyond_threshold_and_noise(tmp_path):
    base = make_run(tmp_path / "base", HEALTHY, TIMES)
    slow = make_run(tmp_path / "slow", HEALTHY, [t * 1.10 for t in TIMES])
    out = gd("diff", base, slow, "--fail-if-slower", "5%")
    assert out.returncode == 4, out.stderr
    assert "FAILED" in out.stderr and "exit code 4" in out.stderr and "SLOWER" in out.stdout
    assert gd("diff", base, slow, "--fail-if-slower", "20").returncode == 0
    # 10% measured but its interval reaches below 9.8%: a 9.8% gate cannot call it beyond noise
    assert gd("diff", base, slow, "--fail-if-slower", "9.8").returncode == 0
    same = gd("diff", base, base, "--fail-if-slower", "5")
    assert same.returncode == 0 and "no difference beyond noise" in same.stdout


@pytest.mark.parametrize("value", ["abc", "-5%", "0", "nan"])
def test_bad_gate_value_is_one_line(tmp_path, value):
    line = one_line_error(gd("diff", HEALTHY, HEALTHY, "--fail-if-slower", value))
    assert "--fail-if-slower" in line and "5%" in line


def test_bad_inputs_are_one_line_errors(tmp_path):
    assert "does not exist" in one_line_error(gd("diff", tmp_path / "nope", HEALTHY))
    run = make_run(tmp_path / "r", HEALTHY, TIMES)
    (run / "trace.json.gz").unlink()
    assert "without its trace" in one_line_error(gd("diff", HEALTHY, run))
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": []}')
    assert "AFTER" in one_line_error(gd("diff", HEALTHY, empty))
    assert "BEFORE and AFTER" in one_line_error(gd("diff", HEALTHY))
    assert "either --last or two paths" in one_line_error(gd("diff", HEALTHY, HEALTHY, "--last"))
    assert "directory" in one_line_error(gd("diff", HEALTHY, HEALTHY, "--html", tmp_path))


def test_last_and_history(tmp_path):
    runs = tmp_path / "gpudoctor-runs"
    program = {"target": "/src/train.py", "args": [], "is_module": False, "git_commit": "abc1234"}
    line = one_line_error(gd("diff", "--last", cwd=tmp_path))
    assert "does not exist" in line
    make_run(runs / "train-1", HEALTHY, TIMES, "2026-11-20T00:00:00+00:00", program)
    assert "only one run" in one_line_error(gd("diff", "--last", cwd=tmp_path))
    make_run(
        runs / "train-2", HEALTHY, [t * 0.8 for t in TIMES], "2026-11-21T00:00:00+00:00", program
    )
    out = gd("diff", "--last", "--width", "120", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "FASTER" in out.stdout and "train-1 -> " in out.stderr
    hist = gd("history", "--json", cwd=tmp_path)
    assert hist.returncode == 0, hist.stderr
    entries = json.loads(hist.stdout)
    assert [Path(e["path"]).name for e in entries] == ["train-2", "train-1"]
    assert entries[0]["git_commit"] == "abc1234" and entries[0]["program"] == "/src/train.py"
    table = gd("history", runs, "--width", "140")
    assert table.returncode == 0 and "train-2" in table.stdout and "abc1234" in table.stdout
    assert "does not exist" in one_line_error(gd("history", tmp_path / "none"))


HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)>'


def test_html_page_renders_and_trace_names_stay_text(tmp_path):
    src = DATA / "pageable_copy" / "trace.json.gz"

    def hostile(
        data,
    ):  # kernel names go through short_name (templates collapse); op names are shown whole
        for e in data["traceEvents"]:
            if e.get("cat") in ("kernel", "cpu_op"):
                e["name"] = HOSTILE + e["name"]

    after = rewrite_trace(src, tmp_path / "after.json.gz", hostile)
    page = tmp_path / "diff.html"
    out = gd("diff", src, after, "--html", page)
    assert out.returncode == 0, out.stderr
    html = page.read_text()
    assert "<svg" in html and "BEFORE" in html and "<script" not in html.lower()
    result = load_page(page)
    assert result.console_errors == []
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;aten::"
        in result.dom
    )
    assert "<script" not in result.dom.lower() and "<img" not in result.dom


def test_history_predictions_view_and_json(tmp_path):
    runs = tmp_path / "gpudoctor-runs"
    folder = make_run(runs / "train-1", HEALTHY, TIMES, "2026-11-20T00:00:00+00:00")
    trials = [record(predicted_speedup=1.5, measured_speedup=1.25).to_dict()]
    (folder / "report.json").write_text(json.dumps({"trials": trials, "findings": []}))
    table = gd("history", runs, "--predictions", "--width", "160")
    assert table.returncode == 0, table.stderr
    assert "bf16-autocast" in table.stdout and "x1.50" in table.stdout and "x1.25" in table.stdout
    assert "1 trials, median predicted / measured 1.20, 1 within 1.25x" in table.stdout
    out = gd("history", runs, "--predictions", "--json")
    data = json.loads(out.stdout)
    assert data["prediction_errors"]["all"] == {"trials": 1, "median_ratio": 1.2, "within_1_25x": 1}
    empty = gd("history", tmp_path / "gpudoctor-runs", "--predictions")
    assert empty.returncode == 0


def test_history_predictions_fit_a_narrow_terminal_by_dropping_columns_not_folding_words(
    tmp_path,
):
    runs = tmp_path / "gpudoctor-runs"
    folder = make_run(runs / "train-1", HEALTHY, TIMES, "2026-11-20T00:00:00+00:00")
    trials = [record(knob="compile-reduce-overhead", finding="unfused-elementwise",
                     predicted_by="replay (the knob's own edit)").to_dict(),
              record(predicted_by="formula").to_dict()]
    (folder / "report.json").write_text(json.dumps({"trials": trials, "findings": []}))
    wide = gd("history", runs, "--predictions", "--width", "200").stdout
    assert "recorded (UTC)" in wide and "priced by" in wide and "replay (the knob's own edit)" in wide
    assert "host pace" not in wide  # no trial has one
    narrow = gd("history", runs, "--predictions", "--width", "80").stdout
    lines = narrow.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines)
    assert "recorded (UTC)" not in narrow and "priced by" not in narrow
    # each cell whole on its own line: the knob, the first word of how it was priced
    rows = [line for line in lines if "compile-reduce-overhead" in line or "bf16-autocast" in line]
    assert len(rows) == 2
    assert "replay" in rows[0] and "formula" in rows[1] and "x1.80" in rows[0]


def test_history_predictions_says_which_runs_it_could_not_read(tmp_path):
    """A report.json cut short (a crash mid-write) is not a run without trials: it is named."""
    runs = tmp_path / "gpudoctor-runs"
    folder = make_run(runs / "train-1", HEALTHY, TIMES, "2026-11-20T00:00:00+00:00")
    (folder / "report.json").write_text('{"trials": [{"knob": "bf16-autoc')
    table = gd("history", runs, "--predictions", "--width", "160")
    assert table.returncode == 0, table.stderr
    assert (
        "left out: 1 run(s) whose report.json cannot be read (train-1): their trials are not counted"
        in table.stdout
    )
    data = json.loads(gd("history", runs, "--predictions", "--json").stdout)
    assert (
        data["left_out_unreadable"] == [str(folder)]
        and data["runs"][0]["report_unreadable"] is True
    )


def test_history_predictions_name_a_trial_record_they_cannot_read(tmp_path):
    """A trial record with a field of the wrong type leaves its run's trials out, with the field
    named, and the other runs' trials counted: one line, no traceback."""
    runs = tmp_path / "gpudoctor-runs"
    bad = make_run(runs / "train-1", HEALTHY, TIMES, "2026-11-20T00:00:00+00:00")
    trials = [record().to_dict(), record(knob="tf32").to_dict() | {"measured_speedup": "fast"}]
    (bad / "report.json").write_text(json.dumps({"trials": trials, "findings": []}))
    good = make_run(runs / "train-2", HEALTHY, TIMES, "2026-11-21T00:00:00+00:00")
    (good / "report.json").write_text(json.dumps({"trials": [record().to_dict()], "findings": []}))
    table = gd("history", runs, "--predictions", "--width", "200")
    assert table.returncode == 0 and "Traceback" not in table.stderr, table.stderr
    assert (
        "left out: the trials of train-1: report.json trials[1]: 'measured_speedup' is 'fast', "
        "not a number or null"
    ) in table.stdout
    assert "1 trials, median predicted / measured" in table.stdout  # train-2's
    data = json.loads(gd("history", runs, "--predictions", "--json").stdout)
    assert data["left_out_unreadable"] == [str(bad)]
    by_path = {r["path"]: r for r in data["runs"]}
    unreadable = by_path[str(bad)]["trials_unreadable"]
    assert unreadable.startswith("report.json trials[1]: 'measured_speedup'")
    assert by_path[str(bad)]["predictions"] == [] and "trials_unreadable" not in by_path[str(good)]
