"""scripts/suite_stability.py: the outcomes it reads from pytest's JUnit XML and the tests it
names as changed between runs."""

from __future__ import annotations

import sys
from pathlib import Path

from script_module import load

stability = load("suite_stability", "scripts")

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_ok" time="0.1"/>
<testcase classname="tests.test_a" name="test_bad" time="0.1"><failure message="x">boom</failure></testcase>
<testcase classname="tests.test_b" name="test_skip[1]" time="0.0"><skipped message="why"/></testcase>
<testcase classname="tests.test_b" name="test_teardown" time="0.1"><failure message="f"/></testcase>
<testcase classname="tests.test_b" name="test_teardown" time="0.1"><error message="e"/></testcase>
</testsuite></testsuites>"""


def test_outcomes_are_read_per_test_and_the_worst_of_a_twice_written_one_kept(
    tmp_path: Path,
) -> None:
    junit = tmp_path / "run.xml"
    junit.write_text(JUNIT)
    assert stability.outcomes(junit) == {
        "tests.test_a::test_ok": "passed",
        "tests.test_a::test_bad": "failed",
        "tests.test_b::test_skip[1]": "skipped",
        "tests.test_b::test_teardown": "failed",
    }
    assert stability.outcomes(tmp_path / "absent.xml") == {}  # a run that crashed before writing


def test_changed_names_flips_failures_and_tests_missing_from_a_run() -> None:
    runs = [
        {"a": "passed", "b": "passed", "c": "skipped", "d": "failed"},
        {"a": "passed", "b": "failed", "c": "skipped", "d": "failed"},
        {"a": "passed", "c": "skipped", "d": "failed"},
    ]
    assert stability.changed(runs) == {
        "b": ["passed", "failed", "absent"],
        "d": ["failed", "failed", "failed"],
    }
    assert stability.changed([{"a": "passed"}] * 3) == {}


def test_a_run_with_a_hog_reports_its_outcomes(tmp_path: Path, monkeypatch) -> None:
    """Two runs (pytest stood in for: it writes the JUnit XML above) each beside one real busy loop,
    which is gone when its run ends; a test failed in both runs is named and the exit code is 1."""
    calls, hogs = [], []
    popen = stability.subprocess.Popen

    def track(*args, **kwargs):
        hogs.append(popen(*args, **kwargs))
        return hogs[-1]

    monkeypatch.setattr(stability.subprocess, "Popen", track)

    def fake_call(cmd, **kwargs):
        calls.append(cmd)
        junit = next(a for a in cmd if a.startswith("--junitxml="))[len("--junitxml=") :]
        Path(junit).write_text(JUNIT)
        return 1

    monkeypatch.setattr(stability.subprocess, "call", fake_call)
    code = stability.main(
        ["--runs", "2", "--hogs", "1", "--out", str(tmp_path), "--", "-m", "not e2e"]
    )
    assert code == 1  # test_bad failed in both runs
    assert [c[-2:] for c in calls] == [["-m", "not e2e"]] * 2 and calls[0][:3] == [
        sys.executable,
        "-m",
        "pytest",
    ]
    assert len(hogs) == 2 and all(h.returncode is not None for h in hogs)  # killed and reaped
    summary = (tmp_path / "summary.json").read_text()
    assert '"tests.test_a::test_bad": [\n   "failed",\n   "failed"\n  ]' in summary
