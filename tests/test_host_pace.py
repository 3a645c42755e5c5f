"""The host's pace in a trial's process beside the capture's (tryfix/host_pace.py), on the OPT
bundle of knob set x4 (H100, torch 2.11): the capture, its bf16-autocast trial and its tf32 trial,
each with its trace (tests/data/knobs_h100/opt_causal_lm_fp32)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpudoctor.analysis.observer import MIN_LAUNCH_CALLS, launch_call_ns
from gpudoctor.analysis.steps import segment
from gpudoctor.core.trial_record import HOST_PACE_NOTED_SHARE as NOTED_SHARE
from gpudoctor.core.trial_record import PeakMemory, TrialRecord
from gpudoctor.trace import parse
from gpudoctor.tryfix.host_pace import launch_ns_of, pace_note
from gpudoctor.tryfix.knobs import BY_ID
from gpudoctor.tryfix.trial import Baseline, Trials, numerics
from tests.synth import TraceBuilder

OPT = Path(__file__).parent / "data" / "knobs_h100" / "opt_causal_lm_fp32"


def test_the_trials_launch_calls_beside_the_captures() -> None:
    # the autocast trial's host ran 1.17x slower a launch call; it measured x1.33 where x1.66 was
    # priced at the capture's pace. The tf32 trial's ran at the capture's (1.035), and measured
    # x1.94 against x2.03 priced
    capture = launch_ns_of(OPT)
    assert capture == 5688.0
    autocast = launch_ns_of(OPT / "trials" / "bf16-autocast")
    assert autocast == 6646.5
    ratio, note = pace_note(autocast, capture)
    assert ratio == 1.169
    assert note.startswith("its host ran slower than the capture's (6.6 us a launch call against 5.7)")
    ratio, note = pace_note(launch_ns_of(OPT / "trials" / "tf32"), capture)
    assert ratio == 1.035 and note == ""


def test_a_pace_within_the_share_or_unknown_says_nothing() -> None:
    assert pace_note(1.0 + NOTED_SHARE - 1e-9, 1.0) == (pytest.approx(1.15), "")
    assert pace_note(None, 5.0) == (None, "")
    assert pace_note(5.0, None) == (None, "")
    assert pace_note(5.0, 0.0) == (None, "")
    assert "faster" in pace_note(0.5, 1.0)[1]


def test_no_trace_or_an_unreadable_one_gives_no_pace(tmp_path: Path) -> None:
    assert launch_ns_of(tmp_path) is None
    (tmp_path / "trace.json.gz").write_bytes(b"not gzip at all")
    assert launch_ns_of(tmp_path) is None


def test_too_few_launch_calls_give_no_median() -> None:
    b = TraceBuilder()
    for i in range(MIN_LAUNCH_CALLS - 1):
        b.step(i, i * 100, 100)
        b.launch("k", i * 100 + 10, i * 100 + 20, 10)
    trace = parse(b.to_bytes())
    assert launch_call_ns(trace, segment(trace)) is None
    b.step(MIN_LAUNCH_CALLS, MIN_LAUNCH_CALLS * 100, 100)
    b.launch("k", MIN_LAUNCH_CALLS * 100 + 10, MIN_LAUNCH_CALLS * 100 + 20, 10, launch_dur=6.0)
    trace = parse(b.to_bytes())
    assert launch_call_ns(trace, segment(trace)) == 4_000.0


def _record(knob: str, status: str = "ok") -> TrialRecord:
    return TrialRecord(
        knob=knob, knobs=(knob,), reference="control", title=knob, finding=None,
        predicted_speedup=1.66, predicted_saving_ms=None, predicted_by="replay", status=status,
        reason="", verdict=None, measured_speedup=1.33, speedup_ci95=None, baseline_ms=None,
        trial_ms=None, change_pct=None, change_ci95_pct=None, n_baseline=0, n_trial=0,
        method=None, peak_memory_bytes=PeakMemory(None, None),
        numerics=numerics((), (), checked=False), effects=(), exit_code=0, wall_s=1.0,
        cwd=".", dir=".", files_written=None,
    )


def test_a_trial_keeps_its_pace_and_says_so_beside_its_verdict(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(OPT, run)
    trials = Trials(None, {}, run, Baseline((), (), None, skip=0), trace=True)
    rec = trials._paced(_record("bf16-autocast"), [BY_ID["bf16-autocast"]],
                        run / "trials" / "bf16-autocast")
    assert rec.host_pace == 1.169 and "its host ran slower than the capture's" in rec.reason
    assert TrialRecord.from_dict(rec.to_dict()).host_pace == 1.169
    # a compile knob launches through Triton: its launch calls are not compared
    compiled = trials._paced(_record("compile"), [BY_ID["compile"]], run / "trials" / "bf16-autocast")
    assert compiled.host_pace is None and compiled.reason == ""
    # a trial that did not end well, or kept no trace
    failed = trials._paced(_record("tf32", "crashed"), [BY_ID["tf32"]], run / "trials" / "tf32")
    assert failed.host_pace is None
    bare = trials._paced(_record("tf32"), [BY_ID["tf32"]], tmp_path / "nowhere")
    assert bare.host_pace is None
    # a record written before the field reads back without it
    d = _record("tf32").to_dict()
    assert "host_pace" not in d and TrialRecord.from_dict(d).host_pace is None
