"""The loader never crashes on arbitrary input: it loads or raises a TraceFormatError."""

from __future__ import annotations

import json
import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth import TraceBuilder

from gpudoctor.errors import InputError
from gpudoctor.trace import parse
from gpudoctor.trace.load import MAX_SPAN_NS

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                     st.text(max_size=20))
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                     max_leaves=20)
# times no profiler writes: they overflowed int64 nanoseconds (with a numpy RuntimeWarning) before
# the loader dropped them (issue 15)
_out_of_range = st.sampled_from([1e20, -1e20, 4.000001e15, 1e300, 2**63, -(2**63)])
_event = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X", "i", "M", "s", "f", 3]),
        "cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "user_annotation", "", None]),
        "name": st.one_of(st.text(max_size=30), st.integers()),
        "ts": st.one_of(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15),
                        st.integers(-(10**15), 10**15), st.text(max_size=5), _out_of_range),
        "dur": st.one_of(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9),
                         st.integers(-(10**9), 10**9), _out_of_range),
        "pid": st.one_of(st.integers(-5, 5), st.text(max_size=5)),
        "tid": st.one_of(st.integers(-5, 5), st.text(max_size=5)),
        "args": st.one_of(_json, st.fixed_dictionaries({}, optional={
            "correlation": st.integers(-3, 50), "External id": st.integers(-3, 50),
            "stream": st.integers(-1, 9), "Input Dims": _json, "Input type": _json,
            "flops": st.one_of(st.integers(0, 10**12), st.floats()), "bytes": st.integers(-10, 10**9)})),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_event, max_size=25))
def test_random_events_load_or_fail_cleanly(events) -> None:
    data = json.dumps({"traceEvents": events, "deviceProperties": [{"name": "NVIDIA H100 80GB HBM3"}]})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a numpy overflow warning is a bug too
            trace = parse(data.encode())
    except InputError:
        return
    assert len(trace.host) + len(trace.device) <= len(events)
    assert 0 <= trace.span[1] <= MAX_SPAN_NS


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_fail_cleanly(blob: bytes) -> None:
    try:
        parse(blob)
    except InputError:
        pass


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=400))
def test_truncations_of_a_real_shape_fail_cleanly(cut: int) -> None:
    t = TraceBuilder()
    t.step(0, 0, 50)
    t.launch("gemm", 1, 2, 10, op="aten::mm", dims=[[8, 8], [8, 8]])
    data = t.to_bytes()
    try:
        parse(data[: min(cut, len(data) - 1)])
    except InputError:
        return
