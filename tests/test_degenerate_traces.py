"""Degenerate traces never get confident findings (issue 15, item 5).

A trace with nothing sound to say gets a one-line error and exit code 2; a usable but incomplete
one gets a report that says what the trace lacks, and no finding of a rule that needs it
(trace/capabilities.py, Rule.needs). Each case is built from a small healthy trace (tests/synth.py)
with one thing taken away or broken, plus the recorded host_sync trace with its launch events
stripped.
"""

from __future__ import annotations

import gzip
import itertools
import json
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth import TraceBuilder

from gpudoctor.cli import main
from gpudoctor.errors import IncompleteTraceError, InputError
from gpudoctor.pipeline import analyze_loaded
from gpudoctor.report.html import render_html
from gpudoctor.report.json_report import to_json
from gpudoctor.rules.registry import RULES
from gpudoctor.trace import parse
from gpudoctor.trace.model import NEEDS

DATA = Path(__file__).parent / "data"
LINK_RULES = {rid for rid, rule in RULES.items() if "launch_links" in rule.needs}
OP_RULES = {rid for rid, rule in RULES.items() if "cpu_ops" in rule.needs}


def healthy(steps: int = 4) -> TraceBuilder:
    """ProfilerStep ranges, five op -> cudaLaunchKernel -> kernel per step and a blocking
    .item() (aten::item around cudaStreamSynchronize) at the end of each step."""
    t = TraceBuilder()
    host = 0.0
    for s in range(steps):
        t.step(s, host, 100)
        for k in range(5):
            t.launch(f"kernel_{k}", host + 5 + k * 15, host + 20 + k * 15, 8, op=f"aten::op{k}")
        t.op("aten::item", host + 84, 12)
        t.runtime("cudaStreamSynchronize", host + 85, 10)
        host += 100
    return t


def without(t: TraceBuilder, *cats: str) -> TraceBuilder:
    t.events = [e for e in t.events if e["cat"] not in cats]
    return t


def mutate(t: TraceBuilder, cat: str | None, **changes) -> TraceBuilder:
    """Apply ``changes`` (field -> function of the old value) to the events of ``cat`` (None: all)."""
    for e in t.events:
        if cat is None or e["cat"] == cat:
            for key, fn in changes.items():
                e[key] = fn(e[key])
    return t


def cli(tmp_path: Path, t: TraceBuilder, monkeypatch, capsys, *extra: str) -> tuple[int, str, str]:
    """Run ``gpudoctor analyze`` in-process on the trace; any Python warning fails the run."""
    path = t.write(tmp_path / "trace.json")
    monkeypatch.setattr(sys, "argv", ["gpudoctor", "analyze", str(path), "--width", "160", *extra])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(SystemExit) as exit_:
            main()
    out = capsys.readouterr()
    return int(exit_.value.code or 0), out.out, out.err


def report_of(t: TraceBuilder):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return analyze_loaded(parse(t.to_bytes()))


def assert_needs_met(report, trace_bytes: bytes) -> None:
    """Every finding comes from a rule whose needs the trace has."""
    caps = parse(trace_bytes).capabilities
    for f in report.findings:
        assert not caps.lacks(RULES[f.id].needs), (f.id, RULES[f.id].needs)


def assert_one_line_error(code: int, out: str, err: str, *phrases: str) -> None:
    assert code == 2, (code, out, err)
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "Warning" not in err
    for phrase in phrases:
        assert phrase in err, err


def test_the_healthy_base_has_every_capability_and_finds_its_syncs() -> None:
    t = healthy()
    caps = parse(t.to_bytes()).capabilities
    assert all(caps.has(n) for n in ("launch_links", "cpu_ops"))
    report = report_of(t)
    assert report.finding("host-sync") is not None
    assert not any("the trace lacks" in w for w in report.warnings)


# --- unusable: one line, exit code 2 ----------------------------------------------------------


def test_a_single_op_at_ts_1e20_is_refused_without_a_numpy_warning(
    tmp_path, monkeypatch, capsys
) -> None:
    t = TraceBuilder()
    t.op("aten::mm", 1e20, 10)
    code, out, err = cli(tmp_path, t, monkeypatch, capsys)
    assert_one_line_error(code, out, err, "has a usable time (ts=1e+20 us)", "since the epoch")


def test_a_duration_beyond_any_profiler_is_refused(tmp_path, monkeypatch, capsys) -> None:
    t = TraceBuilder()
    t.op("aten::mm", 10, 1e19)
    code, out, err = cli(tmp_path, t, monkeypatch, capsys)
    assert_one_line_error(code, out, err, "dur=1e+19 us")


@pytest.mark.parametrize("chunked", [False, True])
def test_json_nested_deeper_than_the_decoder_reads_is_refused_in_one_line(
    tmp_path, monkeypatch, capsys, chunked: bool
) -> None:
    """An event's args nested 3000 levels deep: msgspec stops at its limit with a RecursionError,
    which is the file's fault, not the program's (exit 2, one line), read whole or in chunks."""
    t = healthy()
    t.events[0].setdefault("args", {})["deep"] = "DEEP"
    original = t.to_bytes

    def nested() -> bytes:  # Python's own json cannot build it either
        return original().replace(b'"DEEP"', b"[" * 3000 + b"]" * 3000)

    monkeypatch.setattr(t, "to_bytes", lambda gz=False: nested())
    if chunked:
        import importlib

        monkeypatch.setattr(importlib.import_module("gpudoctor.trace.load"), "CHUNKED_FROM", 0)
    code, out, err = cli(tmp_path, t, monkeypatch, capsys)
    assert_one_line_error(code, out, err, "nests its JSON deeper than a profiler writes")


def test_an_out_of_range_event_among_good_ones_is_dropped_and_said() -> None:
    t = healthy()
    t.op("aten::mm", 1e20, 10)
    t.op("aten::mm", 5, -1e300)
    trace = parse(t.to_bytes())
    assert trace.bad_times == 2 and trace.span[1] < 10**9
    report = report_of(t)
    assert any("2 events with a start or duration no profiler writes" in w for w in report.warnings)
    assert report.step_ms == pytest.approx(0.1)


def test_epoch_based_float_timestamps_load_like_relative_ones() -> None:
    relative = report_of(healthy())
    epoch = report_of(mutate(healthy(), None, ts=lambda ts: ts + 1.7e15 + 0.123))
    assert epoch.step_ms == pytest.approx(relative.step_ms, abs=1e-3)
    assert [f.id for f in epoch.findings] == [f.id for f in relative.findings]


def test_events_that_span_decades_are_refused(tmp_path, monkeypatch, capsys) -> None:
    t = mutate(
        healthy(), "kernel", ts=lambda ts: ts + 1.7e15
    )  # GPU on the epoch clock, host relative
    code, out, err = cli(tmp_path, t, monkeypatch, capsys)
    assert_one_line_error(code, out, err, "days", "mix clocks")


def test_gpu_events_outside_the_host_span_are_refused(tmp_path, monkeypatch, capsys) -> None:
    t = mutate(healthy(), "kernel", ts=lambda ts: ts + 1e6)  # one second after the host stopped
    code, out, err = cli(tmp_path, t, monkeypatch, capsys)
    assert_one_line_error(code, out, err, "never overlap in time")


@pytest.mark.parametrize(
    ("cat", "dur"), [("kernel", 0.0), (None, 0.0), ("kernel", -5.0), (None, -5.0)]
)
def test_gpu_events_without_duration_are_refused(tmp_path, monkeypatch, capsys, cat, dur) -> None:
    t = mutate(healthy(), cat, dur=lambda _: dur)
    code, out, err = cli(tmp_path, t, monkeypatch, capsys)
    assert_one_line_error(code, out, err, "all 20 GPU events last zero time", "records no GPU time")


def test_a_cpu_only_trace_without_durations_is_refused() -> None:
    t = mutate(without(healthy(), "kernel", "cuda_runtime"), None, dur=lambda _: 0.0)
    with pytest.raises(IncompleteTraceError, match="host events last zero time"):
        report_of(t)


def test_kernels_without_any_host_event_are_refused(tmp_path, monkeypatch, capsys) -> None:
    t = without(healthy(), "cpu_op", "cuda_runtime", "user_annotation")
    code, out, err = cli(tmp_path, t, monkeypatch, capsys)
    assert_one_line_error(
        code, out, err, "20 GPU events but no host (CPU) events", "ProfilerActivity.CPU"
    )


# --- usable but incomplete: a report that says what is missing ---------------------------------


@pytest.mark.parametrize("case", ["no-runtime", "no-correlation"])
def test_without_launch_links_the_report_says_so_and_no_host_side_rule_fires(case: str) -> None:
    t = healthy()
    if case == "no-runtime":
        without(t, "cuda_runtime")
        reason = "no cuda_runtime / cuda_driver events"
    else:
        for e in t.events:
            if e["cat"] == "kernel":
                del e["args"]["correlation"]
        reason = "no GPU event carries the correlation id"
    report = report_of(t)
    assert report.finding("host-sync") is None
    assert not {f.id for f in report.findings} & LINK_RULES
    assert_needs_met(report, t.to_bytes())
    note = next(
        w for w in report.warnings if w.startswith("the trace lacks kernel-to-launch links")
    )
    assert reason in note and "host-sync" in note.split("skipped ", 1)[1]
    # the step keeps its host boundaries (it used to collapse onto the last GPU event) ...
    assert report.steps.count == 4 and report.step_ms == pytest.approx(0.1)
    assert report.gpu_busy_pct == pytest.approx(40.0)
    # ... and no idle is blamed on a host cause it cannot be tied to
    assert {k for k, v in report.idle.items() if v > 0} == {"unattributed"}
    # the note reaches every renderer
    assert note in json.loads(to_json(report))["warnings"]
    assert "the trace lacks kernel-to-launch links" in render_html(report)


def test_without_launch_links_the_console_shows_the_note(tmp_path, monkeypatch, capsys) -> None:
    code, out, err = cli(tmp_path, without(healthy(), "cuda_runtime"), monkeypatch, capsys)
    assert code == 0, err
    assert "note: the trace lacks kernel-to-launch links" in out
    assert "host-sync  save" not in out and "launch-bound  save" not in out
    assert err == ""


def test_without_ops_the_shape_rules_are_skipped_and_the_syncs_still_found() -> None:
    t = without(healthy(), "cpu_op")
    report = report_of(t)
    assert_needs_met(report, t.to_bytes())
    note = next(w for w in report.warnings if w.startswith("the trace lacks operator events"))
    assert all(rid in note for rid in OP_RULES)
    # cudaStreamSynchronize is a runtime event: the launch links are there, so host-sync stands
    assert report.finding("host-sync") is not None


def test_without_step_markers_the_steps_are_found_and_the_report_says_how() -> None:
    t = healthy()
    t.events = [e for e in t.events if not e["name"].startswith("ProfilerStep")]
    report = report_of(t)
    assert report.steps.method != "profiler-step"
    assert any(
        w.startswith("no step markers") or w.startswith("no ProfilerStep#N")
        for w in report.warnings
    )


def test_one_step_is_a_report() -> None:
    report = report_of(healthy(steps=1))
    assert report.steps.count == 1 and report.step_ms == pytest.approx(0.1)
    assert report.finding("host-sync") is not None


def test_negative_durations_among_good_ones_are_read_as_zero_and_said() -> None:
    t = healthy()
    t.events[1]["dur"] = -3.0  # one op
    trace = parse(t.to_bytes())
    assert trace.negative_durations == 1
    assert any("1 event has a negative duration, read as 0" in w for w in report_of(t).warnings)


def test_a_sync_in_fewer_steps_than_one_each_is_not_called_zero_per_step() -> None:
    t = TraceBuilder()
    host = 0.0
    for s in range(4):
        t.step(s, host, 100)
        for k in range(5):
            t.launch(f"kernel_{k}", host + 5 + k * 15, host + 20 + k * 15, 8, op=f"aten::op{k}")
        if s == 3:  # one sync in four steps, that drains the queue
            t.op("aten::item", host + 84, 12)
            t.runtime("cudaStreamSynchronize", host + 85, 10)
        host += 100
    finding = report_of(t).finding("host-sync")
    assert finding is not None
    assert finding.summary.startswith("1 blocking sync in 4 steps makes the host wait")
    assert "0.00 ms" not in finding.summary and finding.evidence.numbers["syncs_per_step"] == 0.25


# --- the recorded host_sync trace with its launch events stripped --------------------------------


def _stripped(tmp_path: Path, *cats: str) -> Path:
    data = json.loads(gzip.decompress((DATA / "host_sync" / "trace.json.gz").read_bytes()))
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") not in cats]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(data))
    return path


def test_host_sync_without_runtime_events_names_no_sync(tmp_path: Path) -> None:
    """Issue 15: '[critical] host-sync save ~0.023 ms/step (x20.00) ... 0 blocking syncs per step'."""
    full = analyze_loaded(parse((DATA / "host_sync" / "trace.json.gz").read_bytes()))
    report = analyze_loaded(parse(_stripped(tmp_path, "cuda_runtime").read_bytes()))
    assert report.finding("host-sync") is None
    assert not {f.id for f in report.findings} & LINK_RULES
    assert any(w.startswith("the trace lacks kernel-to-launch links: 91%") for w in report.warnings)
    # the steps are the program's, not a sliver at the end of the trace
    assert report.step_ms == pytest.approx(full.step_ms, rel=0.01)
    assert report.gpu_busy_pct == pytest.approx(full.gpu_busy_pct, abs=0.5)


def test_host_sync_without_driver_events_keeps_its_steps_and_says_what_is_unlinked(
    tmp_path: Path,
) -> None:
    full = analyze_loaded(parse((DATA / "host_sync" / "trace.json.gz").read_bytes()))
    report = analyze_loaded(parse(_stripped(tmp_path, "cuda_driver").read_bytes()))
    assert report.step_ms == pytest.approx(full.step_ms, rel=0.01)  # it was 1.286 of 10.469 ms
    assert any(
        "69 of the 810 GPU events recorded in the window (9%) have no launch record" in w
        for w in report.warnings
    )
    assert report.finding("host-sync") is not None


# --- the vocabulary -------------------------------------------------------------------------------


def test_every_rule_needs_only_known_capabilities() -> None:
    for rule in RULES.values():
        assert set(rule.needs) <= set(NEEDS), rule.id


def test_a_rule_with_an_unknown_need_is_refused() -> None:
    from gpudoctor.rules.base import Rule

    with pytest.raises(ValueError, match="unknown needs"):
        Rule("x", "x", lambda a: None, needs=("gpu_magic",))


# --- fuzz: whatever is taken away or broken, a report or a clean error --------------------------

_broken = st.fixed_dictionaries(
    {
        "drop": st.sets(st.sampled_from(["cuda_runtime", "cpu_op", "user_annotation", "kernel"])),
        "uncorrelate": st.booleans(),
        "scale": st.sampled_from([1.0, 0.0, -1.0, 1e3]),
        "scale_cat": st.sampled_from([None, "kernel", "cpu_op", "cuda_runtime"]),
        "shift": st.sampled_from([0.0, 1.7e15, 1e6, -50.0, 1e20]),
        "shift_cat": st.sampled_from([None, "kernel", "cpu_op"]),
        "steps": st.integers(1, 4),
    }
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_broken)
def test_broken_traces_get_a_sound_report_or_a_clean_error(how) -> None:
    t = without(healthy(how["steps"]), *how["drop"])
    if how["uncorrelate"]:
        for e in t.events:
            if e["cat"] == "kernel":
                e["args"].pop("correlation", None)
    mutate(t, how["scale_cat"], dur=lambda d: d * how["scale"])
    mutate(t, how["shift_cat"], ts=lambda ts: ts + how["shift"])
    data = t.to_bytes()
    try:
        report = report_of(t)
    except InputError as exc:  # TraceFormatError and IncompleteTraceError among them
        assert "\n" not in str(exc)
        return
    assert report.step_ms > 0
    assert_needs_met(report, data)
    for f in report.findings:
        assert "0 blocking syncs" not in f.summary


def test_a_live_window_with_nothing_sound_writes_its_run_directory_and_says_why(
    tmp_path: Path,
) -> None:
    from gpudoctor.capture.session import CaptureConfig, CaptureResult
    from gpudoctor.live import diagnose_capture

    trace = mutate(healthy(), "kernel", dur=lambda _: 0.0).write(tmp_path / "trace.json")
    report, note = diagnose_capture(
        CaptureResult(trace_path=trace, device="cuda"), CaptureConfig(), tmp_path / "run"
    )
    assert report is None
    assert (
        note.startswith("the recorded window cannot be diagnosed: ")
        and "records no GPU time" in note
    )
    assert (tmp_path / "run" / "env.json").exists()


def test_a_live_windows_status_says_what_it_came_to(tmp_path: Path) -> None:
    """The CLI branches on the status, never on the note's words: a window the doctor cannot judge,
    a window with no GPU named (try-fixes still runs there), and a diagnosed one."""
    from gpudoctor.capture.session import CaptureConfig, CaptureResult
    from gpudoctor.live import RunStatus, diagnose_capture

    broken = mutate(healthy(), "kernel", dur=lambda _: 0.0).write(tmp_path / "broken.json")
    found = diagnose_capture(
        CaptureResult(trace_path=broken, device="cuda"), CaptureConfig(), tmp_path / "a"
    )
    assert found.status is RunStatus.NOT_DIAGNOSED and found.report is None
    # a window whose trace names no GPU (no deviceProperties) but holds GPU work: diagnosed, as on
    # a card the datasheet table does not know
    unnamed = tmp_path / "unnamed.json"
    data = json.loads(healthy().write(tmp_path / "named.json").read_text())
    data.pop("deviceProperties", None)
    unnamed.write_text(json.dumps(data))
    found = diagnose_capture(
        CaptureResult(trace_path=unnamed, device="cuda"), CaptureConfig(), tmp_path / "b"
    )
    assert found.status is RunStatus.DIAGNOSED and found.report is not None
    assert found.report.warnings[0].startswith("the trace names no GPU: no roofline")
    found = diagnose_capture(
        CaptureResult(trace_path=healthy().write(tmp_path / "ok.json"), device="cuda"),
        CaptureConfig(),
        tmp_path / "c",
    )
    assert found.status is RunStatus.DIAGNOSED and found.report is not None
    report, note = found  # unpacks as (report, note) for the callers that need no status
    assert report is found.report and note == found.note


@pytest.mark.parametrize("how", ["no deviceProperties", "an empty name"])
def test_gpu_work_on_a_card_the_trace_does_not_name_is_diagnosed_without_peak_rates(
    how: str,
) -> None:
    """Kernels, and deviceProperties missing or naming no card (a public vLLM trace on an MI300X
    wrote name ""): the host side and the idle causes need no peak rates, as on a card the table
    does not know; the report says how to add them."""
    data = json.loads(healthy().to_bytes())
    if how == "no deviceProperties":
        data.pop("deviceProperties", None)
    else:
        for props in data["deviceProperties"]:
            props["name"] = ""
    report = analyze_loaded(parse(json.dumps(data).encode()))
    assert report.findings and report.ceilings.source == "none: the trace names no GPU"
    assert report.warnings[0] == (
        "the trace names no GPU: no roofline, MFU or peak-priced findings (fp32-matmul, "
        "small-gemm, misaligned-gemm, naive-attention, unfused-elementwise, optimizer-loop, "
        "per-sample-loop); for them, pass --gpu NAME, or --ceilings FILE (gpudoctor bench's JSON)"
    )


OLD_CATEGORIES = {
    "cpu_op": "Operator",
    "cuda_runtime": "Runtime",
    "kernel": "Kernel",
    "gpu_memcpy": "Memcpy",
    "gpu_memset": "Memset",
}


def test_pytorch_1_8_category_names_read_as_todays() -> None:
    """PyTorch 1.8's Kineto wrote Operator, Runtime, Kernel, Memcpy, Memset for the categories
    written in lower case since; both read the same (the TensorBoard plugin reads both too)."""
    data = json.loads(healthy().to_bytes())
    for e in data["traceEvents"]:
        e["cat"] = OLD_CATEGORIES.get(e.get("cat"), e.get("cat"))
    old = analyze_loaded(parse(json.dumps(data).encode()))
    new = report_of(healthy())
    assert [(f.id, f.saving_ms) for f in old.findings] == [
        (f.id, f.saving_ms) for f in new.findings
    ]
    assert old.step_ms == new.step_ms and old.findings


@pytest.mark.parametrize("chunked", [False, True])
def test_events_of_a_category_no_profiler_writes_are_counted_and_said(
    tmp_path: Path, chunked: bool
) -> None:
    from gpudoctor.trace.load import load

    data = json.loads(healthy().to_bytes())
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels:
        e["cat"] = "KERNEL"
    path = tmp_path / "caps.json"
    path.write_text(json.dumps(data))
    trace = load(path, chunked=chunked)
    assert trace.unknown_categories == len(kernels) > 0 and len(trace.device) == 0
    assert any(
        note.startswith(
            f"{len(kernels)} complete events of a category neither Kineto nor PyTorch writes "
            "were left out"
        )
        for note in analyze_loaded(trace).warnings
    )


def test_gpu_events_that_start_before_their_launch_are_said() -> None:
    """Kernels moved 100 us before their launch calls: the GPU's clock and the host's disagree.
    Within 5 us of the call (records taken microseconds apart) they are read as in step."""
    for shift_us, said in ((100.0, True), (3.0, False)):
        data = json.loads(healthy().to_bytes())
        kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"]
        launches = {
            e["args"]["correlation"]: e["ts"]
            for e in data["traceEvents"]
            if e.get("cat") == "cuda_runtime"
        }
        for e in kernels:
            e["ts"] = launches[e["args"]["correlation"]] - shift_us
        notes = analyze_loaded(parse(json.dumps(data).encode())).warnings
        found = [n for n in notes if "start before the call that launched them" in n]
        assert bool(found) is said, notes
        if said:
            assert found[0].startswith(f"{len(kernels)} GPU events start before the call")
            assert "(by up to 100.0 us)" in found[0]


@pytest.mark.parametrize(
    ("call", "said"),
    [("cudaDeviceGetStreamPriorityRange", True), ("cudaStreamSynchronize", False)],
)
def test_one_time_startup_in_the_window_is_said(call: str, said: bool) -> None:
    """A 0.5 s runtime call in a window without step markers (a script profiled from its first
    line): the process creating its CUDA context (said), or a synchronize waiting for GPU work (a
    wait may last as long as that work: not said). A step left out as one-off work takes its
    start-up with it."""
    t = without(healthy(steps=1), "user_annotation")  # one iteration: the trace is one step
    t.runtime(call, -600_000, 500_000)
    notes = analyze_loaded(parse(t.to_bytes())).warnings
    found = [n for n in notes if n.startswith("the window holds one-time start-up")]
    assert bool(found) is said, notes
    if said:
        assert found[0].startswith(
            "the window holds one-time start-up: 1 runtime call of 0.5 s without GPU work to wait "
            f"for (the longest, {call}, 0.5 s"
        )


def test_gpu_events_recorded_twice_are_said() -> None:
    """Every kernel written a second time (a window merged into its own file by hand): the counts
    and times of those kernels double, and the report says so. Two launches of one kernel name
    at different times are not repeats."""
    data = json.loads(healthy().to_bytes())
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"]
    data["traceEvents"] += [dict(e) for e in kernels]
    notes = analyze_loaded(parse(json.dumps(data).encode())).warnings
    assert any(
        n.startswith(f"{len(kernels)} GPU events are recorded twice (the same start, end, stream")
        for n in notes
    ), notes
    assert not any("recorded twice" in n for n in report_of(healthy()).warnings)


@pytest.mark.parametrize("token", ["inf", "-inf", "nan", "Infinity", "NaN"])
def test_a_bare_inf_or_nan_value_is_read_as_null_and_said(token: str) -> None:
    """Kineto wrote `"memory bandwidth (GB/s)": inf` for a copy of no duration (not JSON): the file
    is read with that value as null, the rest as written, and the report counts it. A name that
    holds the same text inside its quotes is left alone."""
    t = healthy()
    t.op('aten::mul": inf, "x', 5, 1)
    raw = t.to_bytes().replace(b'"device": 0', b'"device": 0, "bandwidth": ' + token.encode(), 1)
    trace = parse(raw)
    assert trace.non_finite_numbers == 1
    assert 'aten::mul": inf, "x' in trace.strings
    assert (
        analyze_loaded(trace)
        .warnings[0]
        .startswith(
            "1 value written as a bare inf or nan (not JSON; some Kineto versions write one"
        )
    )
    with pytest.raises(InputError, match="is not valid JSON"):
        parse(raw.replace(token.encode(), b"infx", 1))


def _healthy_findings(raw: bytes) -> list[tuple[str, float]]:
    return [(f.id, f.saving_ms) for f in analyze_loaded(parse(raw)).findings]


def test_text_after_a_byte_order_mark_reads_as_the_same_trace() -> None:
    """An editor's UTF-8 BOM, or the file saved as UTF-16 ("Unicode"): the same JSON, the same
    report."""
    raw = healthy().to_bytes()
    want = _healthy_findings(raw)
    assert want
    assert _healthy_findings(b"\xef\xbb\xbf" + raw) == want
    assert _healthy_findings(raw.decode().encode("utf-16")) == want


def test_chromes_array_form_may_leave_out_its_closing_bracket() -> None:
    """The trace event format allows a JSON array of events without its closing ']' (a tracer
    that stopped writing); one cut inside an event is still refused, where it stops."""
    events = json.dumps(healthy().to_dict()["traceEvents"]).encode()
    assert _healthy_findings(events[:-1] + b",\n") == _healthy_findings(events)
    with pytest.raises(InputError, match="is not valid JSON"):
        parse(events[: len(events) // 2])


def test_complete_events_without_a_duration_are_counted_and_said() -> None:
    """Operators written without "dur" (a hand-made or converted trace): read as 0 long, which
    leaves their children unowned, and said; a negative duration keeps its own note."""
    data = json.loads(healthy().to_bytes())
    ops = [e for e in data["traceEvents"] if e.get("cat") == "cpu_op"]
    for e in ops:
        del e["dur"]
    trace = parse(json.dumps(data).encode())
    assert trace.missing_durations == len(ops) > 0 and trace.negative_durations == 0
    assert any(
        w.startswith(f"{len(ops)} complete events have no duration (dur), read as 0")
        for w in analyze_loaded(trace).warnings
    )
    assert parse(healthy().to_bytes()).missing_durations == 0


def test_a_negative_size_or_count_in_device_properties_is_unknown() -> None:
    data = json.loads(healthy().to_bytes())
    data["deviceProperties"][0].update(numSms=-5, totalGlobalMem=-1, l2CacheSize=-3)
    gpu = parse(json.dumps(data).encode()).gpu
    assert gpu is not None and (gpu.sm_count, gpu.memory_bytes, gpu.l2_bytes) == (0, 0, 0)
    report = json.loads(to_json(analyze_loaded(parse(json.dumps(data).encode()))))
    assert report["gpu"]["sm_count"] == 0 and report["findings"]


def test_a_trace_whose_every_event_is_malformed_says_so(tmp_path, monkeypatch, capsys) -> None:
    """A real trace with its pids written as 404.5 (no profiler's): every event is skipped, and
    the error says why rather than that the window held nothing."""
    data = json.loads(gzip.decompress((DATA / "host_sync" / "trace.json.gz").read_bytes()))
    for e in data["traceEvents"]:
        if "pid" in e:
            e["pid"] = 404.5
    path = tmp_path / "floats.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(sys, "argv", ["gpudoctor", "analyze", str(path)])
    with pytest.raises(SystemExit) as exit_:
        main()
    out = capsys.readouterr()
    assert_one_line_error(
        int(exit_.value.code or 0),
        out.out,
        out.err,
        "events could be read (each is malformed",
    )


def test_gpu_events_overlapping_on_one_stream_are_said() -> None:
    """Kernels stretched to run 0.2 ms into the next on their stream (times that are not the
    GPU's): said. A kernel starting a few microseconds under its predecessor's tail, as Hopper's
    programmatic dependent launch does, is not."""
    for stretch_us, said in ((200.0, True), (5.0, False)):
        data = json.loads(healthy().to_bytes())
        kernels = sorted(
            (e for e in data["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"]
        )
        for e, nxt in itertools.pairwise(kernels):
            e["dur"] = nxt["ts"] - e["ts"] + stretch_us
        notes = analyze_loaded(parse(json.dumps(data).encode())).warnings
        found = [n for n in notes if "before an earlier one on the same stream has ended" in n]
        assert bool(found) is said, notes
