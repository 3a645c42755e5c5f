"""The host's lead over the GPU at the unprofiled steps' boundaries (capture/marks.py leads_ms),
and the profiler's cost fitted to it where the GPU's work sets the step (replay/observer.py
``_lead_fit``). The bundles are two fp32 gallery programs run by ``gpudoctor run --try-fixes
--fixes bf16-autocast`` on an H100 (torch 2.11, benchmarks/BENCHMARKS-replay.md "The host's lead
over the GPU"): each keeps the trial's measured speedup beside the trace."""

from __future__ import annotations

import json
import math
import statistics
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudoctor.capture.bundle import facts_of, median_or_none, read_run
from gpudoctor.capture.session import CaptureConfig, CaptureSession
from gpudoctor.core.clock import ManualClock
from gpudoctor.pipeline import analyze_path, analyze_trace, choose_ceilings, knob_prices_for
from gpudoctor.replay.observer import (
    FROM_LEAD,
    FROM_PRIOR,
    FROM_STEP,
    FROM_STEP_AND_LEAD,
    LEAD_MISS_SHARE,
    LEAD_STEADY_SHARE,
    PRIOR_SCALE,
    replayed_lead_ns,
)
from gpudoctor.rules.whatif import step_model
from gpudoctor.trace.load import load
from gpudoctor.tryfix.trial import plan

DATA = Path(__file__).parent / "data"
KNOBS = DATA / "knobs_h100"


def _model(bundle: Path, lead_ms: float | None):
    run, trace = read_run(bundle), load(bundle)
    a = analyze_trace(
        trace,
        choose_ceilings(trace),
        run.unprofiled_step_ms,
        run.model_state,
        run.step_source,
        run.cut_after,
        unprofiled_fetch_ms=run.unprofiled_fetch_ms,
        loader=run.loader,
        unprofiled_lead_ms=lead_ms,
    )
    return run, step_model(a)


def _bf16(bundle: Path) -> tuple[float, float]:
    """The bf16-autocast trial's price now and its measured speedup."""
    trials = json.loads((bundle / "trials.json").read_text())["trials"]
    measured = next(t["measured_speedup"] for t in trials if t["knob"] == "bf16-autocast")
    report = analyze_path(bundle)
    priced = {
        p.knob.id: p
        for p in plan(report.findings, ["bf16-autocast"], knob_prices_for(bundle)).trials
    }
    return priced["bf16-autocast"].predicted_speedup, measured


def test_the_bundle_keeps_the_median_lead() -> None:
    run = read_run(KNOBS / "text_encoder_fp32")
    assert run.unprofiled_lead_ms == pytest.approx(13.5786)
    assert median_or_none([1.0, 3.0, 2.0]) == 2.0
    for bad in (None, [], "3", [1.0, "x"], [True], [float("nan")], [10**400]):
        assert median_or_none(bad) is None


@pytest.mark.parametrize(
    ("name", "scale"), [("text_encoder_fp32", 0.932), ("vit_tiny_fp32_accuracy", 0.830)]
)
def test_where_the_gpu_sets_the_step_the_lead_sets_the_profilers_cost(
    name: str, scale: float
) -> None:
    run, fitted = _model(KNOBS / name, read_run(KNOBS / name).unprofiled_lead_ms)
    # the step is the GPU's: without the lead, the prior stands (from the trace's view operators:
    # 1.11 and 1.12, nearer the lead's scale than PRIOR_SCALE)
    _, prior = _model(KNOBS / name, None)
    assert prior.base.source == FROM_PRIOR
    assert abs(prior.base.scale - scale) < abs(PRIOR_SCALE - scale)
    assert fitted.base.scale == pytest.approx(scale, abs=0.001)
    lead_ns = run.unprofiled_lead_ms * 1e6
    assert replayed_lead_ns(fitted.base.replayed) == pytest.approx(lead_ns, rel=0.001)
    # and the replayed step stays within 1.5% of the measured one either way
    for model in (fitted, prior):
        assert model.base.replayed.step_ns == pytest.approx(run.unprofiled_step_ms * 1e6, rel=0.015)


@pytest.mark.parametrize(
    ("name", "price"), [("text_encoder_fp32", 2.2114), ("vit_tiny_fp32_accuracy", 2.2529)]
)
def test_the_bf16_price_from_the_fitted_host_is_within_1_25x_of_the_trial(
    name: str, price: float
) -> None:
    predicted, measured = _bf16(KNOBS / name)
    assert predicted == pytest.approx(price, abs=1e-4)
    assert 1 / 1.25 <= predicted / measured <= 1.25


def test_a_lead_under_its_floor_or_a_host_bound_step_leaves_the_step_fit() -> None:
    bundle = KNOBS / "text_encoder_fp32"
    run, none = _model(bundle, None)
    # a lead under LEAD_MIN_SHARE of the step is a GPU that waited for the host: it sets no
    # scale, and this step's fit already replays a lead within LEAD_MISS_SHARE of it
    _, tiny = _model(bundle, 0.01 * run.unprofiled_step_ms)
    assert tiny.base.scale == none.base.scale
    # a lead no scale in the range replays (longer than the GPU's whole step): the step's fit
    _, beyond = _model(bundle, 3 * run.unprofiled_step_ms)
    assert beyond.base.scale == none.base.scale


def test_a_step_fit_whose_lead_misses_the_timed_one_takes_the_scale_missing_both_least() -> None:
    # T5 in fp32 (H100, knob set y): its 43.49 ms step holds the GPU's 30.7 ms; fitted to the step,
    # 1.20, the host led the GPU by 5.96 ms at the boundaries where 1.79 was timed. At 0.88 of it
    # (the grid's best, 0.9, refined) the step replays 4% over and the lead 2.87 ms: the host
    # 43.1 ms a step, not 38.2, and TF32's and autocast's GPU savings mostly hide behind it
    # (measured x1.02 and x0.91)
    bundle = KNOBS / "t5_seq2seq_fp32"
    run, fitted = _model(bundle, read_run(bundle).unprofiled_lead_ms)
    assert run.unprofiled_lead_ms == pytest.approx(1.7863, abs=1e-4)
    _, step_only = _model(bundle, None)
    assert step_only.base.source == FROM_STEP and step_only.base.scale == pytest.approx(1.2034, abs=1e-4)
    lead_ns = run.unprofiled_lead_ms * 1e6
    assert abs(replayed_lead_ns(step_only.base.replayed) - lead_ns) > LEAD_MISS_SHARE * (
        run.unprofiled_step_ms * 1e6)
    assert fitted.base.source == FROM_STEP_AND_LEAD
    assert fitted.base.scale == pytest.approx(0.88 * step_only.base.scale, rel=1e-6)
    assert fitted.base.replayed.step_ns / 1e6 == pytest.approx(45.22, abs=0.01)
    assert replayed_lead_ns(fitted.base.replayed) / 1e6 == pytest.approx(2.87, abs=0.01)
    prices = knob_prices_for(bundle)
    assert prices["tf32"]["predicted_speedup"] == pytest.approx(1.0465, abs=1e-4)
    assert prices["bf16-autocast"]["predicted_speedup"] == pytest.approx(0.9447, abs=1e-4)


def test_a_gpu_that_waited_at_the_marks_is_left_no_backlog_there() -> None:
    # The lecture's GPT in fp32 (H100, set q): 56.72 ms a step unprofiled, the GPU's work 43.47 ms,
    # and a per-step sync (the batch's pageable copies). Fitted to the step alone (scale 2.07),
    # the host works 46.8 ms and the GPU still has ~10 ms queued at every mark, so removing the
    # sync, pinning the copy or TF32 each "saved" those 10 ms (x1.21-1.25). The GPU reached
    # the marks as the host stamped them (a median lead of -0.01 ms): the scale that misses the
    # step and that lead least (0.82 of it) leaves the host nearly all of the step, and the sync
    # priced at almost nothing
    bundle = KNOBS / "karpathy_gpt_lecture"
    run, fitted = _model(bundle, read_run(bundle).unprofiled_lead_ms)
    assert run.unprofiled_lead_ms == pytest.approx(-0.0087, abs=1e-4)
    _, step_only = _model(bundle, None)
    assert step_only.base.source == FROM_STEP
    assert replayed_lead_ns(step_only.base.replayed) / 1e6 == pytest.approx(10.16, abs=0.01)
    assert fitted.base.source == FROM_STEP_AND_LEAD
    assert fitted.base.scale == pytest.approx(0.82 * step_only.base.scale, rel=1e-6)
    assert replayed_lead_ns(fitted.base.replayed) / 1e6 == pytest.approx(0.73, abs=0.01)
    assert fitted.base.replayed.step_ns / 1e6 == pytest.approx(60.81, abs=0.01)
    host_ms = fitted.base.replayed.host_work_ns / (fitted.graph.steps - 1) / 1e6
    assert host_ms == pytest.approx(60.56, abs=0.01)
    prices = {f.id: f.predicted_speedup for f in analyze_path(bundle).findings}
    assert prices["host-sync"] == pytest.approx(1.0042, abs=1e-4)
    assert prices["pageable-copy"] == pytest.approx(1.006, abs=1e-4)
    assert prices["naive-attention"] == pytest.approx(1.3684, abs=1e-4)
    knobs = knob_prices_for(bundle)
    assert knobs["tf32"]["predicted_speedup"] == pytest.approx(1.0042, abs=1e-4)
    assert knobs["compile"]["predicted_speedup"] == pytest.approx(1.2217, abs=1e-4)


def test_a_host_the_step_holds_is_fitted_to_the_step_whatever_its_lead() -> None:
    # ResNet-18 in fp32 (H100, knob set w): its long launches with a few kernels queued ahead are
    # no waits (replay/graph.py QUEUE_FULL_MIN), so the host holds its 16.27 ms step at scale 2.43;
    # no scale near it replays the timed lead (1.09 ms) closer without missing the step more.
    # Autocast's casts and compile's batch-norm kernels cost the step what they add (both measured
    # slower: x0.91, x0.86)
    bundle = KNOBS / "resnet18_bn_sgd_loop"
    _, fitted = _model(bundle, read_run(bundle).unprofiled_lead_ms)
    _, step_only = _model(bundle, None)
    assert fitted.base.source == FROM_STEP and fitted.base.scale == step_only.base.scale
    assert fitted.base.scale == pytest.approx(2.4304, abs=1e-4)
    host_ms = fitted.base.replayed.host_work_ns / (fitted.graph.steps - 1) / 1e6
    assert host_ms == pytest.approx(fitted.base.replayed.step_ns / 1e6, rel=1e-3)
    prices = knob_prices_for(bundle)
    assert prices["bf16-autocast"]["predicted_speedup"] == pytest.approx(0.9436, abs=1e-4)
    assert prices["compile"]["predicted_speedup"] == pytest.approx(0.7984, abs=1e-4)


def test_a_host_that_never_syncs_has_no_lead_to_fit() -> None:
    # healthy_train syncs nowhere in its steps: replayed, its host runs further ahead every step,
    # and a lead timed without the profiler is the launch queue's bound, not the host's pace
    trace = load(DATA / "healthy_train")
    measured_ms = 27.0
    plain = step_model(analyze_trace(trace, choose_ceilings(trace), measured_ms))
    leads = plain.base.replayed.leads_ns[1:]
    assert leads.size >= 2 and np.ptp(leads) > LEAD_STEADY_SHARE * plain.base.replayed.step_ns
    for lead_ms in (5.0, 20.0, 40.0):
        led = step_model(
            analyze_trace(trace, choose_ceilings(trace), measured_ms, unprofiled_lead_ms=lead_ms)
        )
        assert led.base.scale == plain.base.scale


class _GpuClock:
    """A GPU whose events complete ``lag_s`` after the host records them (a fake CUDA module)."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock, self.lag_s, self.broken = clock, 0.0, False
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.t = None

            def record(self) -> None:
                if gpu.broken:
                    raise RuntimeError("CUDA error: an illegal memory access")
                self.t = gpu.clock.now() + gpu.lag_s

            def synchronize(self) -> None:
                pass

            def query(self) -> bool:
                return True

            def elapsed_time(self, other: Event) -> float:
                return (other.t - self.t) * 1e3

        self.Event = Event

    def is_initialized(self) -> bool:
        return True


def _session_with_gpu(tmp_path: Path) -> tuple[CaptureSession, ManualClock, _GpuClock]:
    clock = ManualClock()
    session = CaptureSession(
        CaptureConfig(steps=1, skip=0, nvml_interval_s=0), tmp_path, clock=clock
    )
    gpu = _GpuClock(clock)
    session._torch, session._cuda = types.SimpleNamespace(cuda=gpu), True
    return session, clock, gpu


def test_the_session_stamps_the_host_beside_each_mark_and_reads_the_leads(tmp_path: Path) -> None:
    session, clock, gpu = _session_with_gpu(tmp_path)
    marks = []
    for lag_ms in (4.0, 6.0, 6.0, 6.0):  # the GPU trails the host by this much at each boundary
        gpu.lag_s = lag_ms / 1e3
        marks.append(session._stamp())
        clock.advance(0.020)
    session.result.unprofiled_before_ms = [20.0, 20.0]  # the later half of the three steps
    gpu.lag_s = 0.0  # the reference, on the synchronized GPU
    before, after = session._leads(marks, [])
    assert before == pytest.approx([6.0, 6.0]) and after == []
    assert session._host_at == {}  # read once


def test_a_gpu_error_reading_the_leads_costs_the_leads_only(tmp_path: Path) -> None:
    session, _, gpu = _session_with_gpu(tmp_path)
    marks = [session._stamp(), session._stamp()]
    gpu.broken = True
    assert session._leads(marks, []) == ([], [])


_JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(_JSON)
def test_any_json_for_the_lead_samples_reads_as_a_median_or_absent(value: object) -> None:
    lead = facts_of({"capture": {"unprofiled_step_ms": 4.0, "unprofiled_lead_ms_samples": value}})
    got = lead.unprofiled_lead_ms
    if got is not None:
        assert isinstance(value, list) and math.isfinite(got)
        assert got == float(statistics.median([float(x) for x in value]))


@pytest.mark.parametrize("step", [10**400, float("inf"), True, -1.0, "4.0"])
def test_a_step_no_float_holds_reads_as_not_timed(step: object) -> None:
    facts = facts_of({"capture": {"unprofiled_step_ms": step, "unprofiled_fetch_ms": 1.0}})
    assert facts.unprofiled_step_ms is None and facts.unprofiled_fetch_ms is None


def test_each_replayed_price_says_what_gave_the_hosts_pace() -> None:
    # a host-bound step fitted to its own time (manual_sgd, H200), a GPU-set one fitted to its
    # lead, and a trace with no timing at all
    cases = [
        (DATA / "knobs_h200" / "manual_sgd", FROM_STEP),
        (KNOBS / "text_encoder_fp32", FROM_LEAD),
        (DATA / "launch_bound", FROM_PRIOR),
    ]
    for bundle, source in cases:
        paces = {
            f.evidence.numbers.get("host_pace_from")
            for f in analyze_path(bundle).findings
            if f.evidence.numbers.get("priced_by") == "replay"
        }
        assert paces == {source}, bundle
