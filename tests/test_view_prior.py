"""The prior scale on the profiler's per-event cost, where the step cannot tell it, comes from the
median recorded time of the window's view operators (analysis/observer.py ``view_operator_ns``,
replay/observer.py ``prior_scale``) for a trace that comes with its run's timing; a bare trace, or a
machine profile's measured costs, keep PRIOR_SCALE (benchmarks/BENCHMARKS-replay.md "The host's
pace from its view operators")."""

from pathlib import Path

import msgspec
import pytest

from gpudoctor.analysis.observer import MIN_VIEW_OPERATORS, view_operator_ns
from gpudoctor.pipeline import _run_model, diagnose_loaded
from gpudoctor.replay import observer
from gpudoctor.replay.observer import FROM_LEAD, FROM_PRIOR, FROM_STEP, PRIOR_SCALE, prior_scale
from gpudoctor.rules import whatif
from gpudoctor.rules.whatif import step_model
from gpudoctor.trace import load

DATA = Path(__file__).parent / "data"
DISTILBERT = DATA / "knobs_h100" / "distilbert_classifier"  # the GPU holds its step


def test_the_prior_is_proportional_to_the_view_operators_time_within_its_range():
    assert prior_scale(None) == PRIOR_SCALE
    assert prior_scale(0.0) == PRIOR_SCALE
    assert prior_scale(1_000.0) == pytest.approx(observer.PRIOR_SCALE_PER_VIEW_US)
    assert prior_scale(2_603.0) == pytest.approx(1.87416)
    lo, hi = observer.PRIOR_SCALE_RANGE
    assert prior_scale(1.0) == lo and prior_scale(1e9) == hi


def test_the_view_operators_median_and_too_few_of_them():
    a, model = _run_model(DISTILBERT)
    lo, hi = model.graph.window
    assert view_operator_ns(a.trace, lo, hi) == 2_603.0
    # a window a few operators long holds fewer than MIN_VIEW_OPERATORS
    views = [i for i in range(len(a.trace.host)) if a.trace.string(
        a.trace.host.name[i]) == "aten::view"]
    first = int(a.trace.host.ts[views[0]])
    assert MIN_VIEW_OPERATORS > 1
    assert view_operator_ns(a.trace, first, first + 1) is None


def _without_lead(path):
    """The run's analysis without the host's lead it timed: the step alone tells the scale."""
    a, _ = _run_model(path)
    return msgspec.structs.replace(a, unprofiled_lead_ms=None)


def test_a_run_whose_gpu_holds_the_step_takes_the_view_prior():
    model = step_model(_without_lead(DISTILBERT))
    assert model.base.source == FROM_PRIOR
    assert model.base.scale == pytest.approx(prior_scale(2_603.0))


def test_the_hosts_timed_lead_sets_the_scale_where_the_step_cannot():
    # the host ran 10.6 ms ahead of the GPU at the step's edges: the scale that replays that lead
    # (the run's long launches with few queued ahead are no waits: replay/graph.py QUEUE_FULL_MIN)
    _, model = _run_model(DISTILBERT)
    assert model.base.source == FROM_LEAD
    assert model.base.scale == pytest.approx(1.4752, abs=1e-4)


def test_a_bare_trace_keeps_the_fixed_prior():
    bare = step_model(diagnose_loaded(load(DISTILBERT)).analysis)
    assert bare.base.source == FROM_PRIOR and bare.base.scale == PRIOR_SCALE


def test_a_machine_profiles_costs_keep_the_fixed_prior(monkeypatch):
    per_event = 3_000.0
    monkeypatch.setattr(whatif, "measured_costs",
                        lambda a: {"op": per_event, "runtime": per_event, "annotation": per_event})
    model = step_model(_without_lead(DISTILBERT))
    assert model.base.source == FROM_PRIOR and model.base.scale == PRIOR_SCALE


def test_a_step_that_tells_the_scale_is_fitted_not_taken_from_the_views():
    _, model = _run_model(DATA / "twins_h100" / "pageable_h2d")
    assert model.base.source == FROM_STEP
    # 0.62 with its one-off cudaHostAlloc in the steady state (replay/graph.py one_off_calls)
    assert model.base.scale == pytest.approx(0.5320, abs=1e-4)
