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
# integers no profiler writes: beyond int32, int64 or uint64, which overflowed numpy columns
# (`internal error: OverflowError`, issue 16)
_huge_ints = st.one_of(
    st.sampled_from([2**31, -(2**31) - 1, 2**32, 2**50 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64,
                     2**70, -(2**70), 10**30, 10**400]),
    st.integers(-(2**80), 2**80),
)
_far_times = st.one_of(_out_of_range, st.sampled_from([2**70, -(2**70), 10**30, 10**400]))


_event = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X", "i", "M", "s", "f", 3]),
        "cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "user_annotation", "", None]),
        "name": st.one_of(st.text(max_size=30), st.integers()),
        "ts": st.one_of(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15),
                        st.integers(-(10**15), 10**15), st.text(max_size=5), _far_times),
        "dur": st.one_of(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9),
                         st.integers(-(10**9), 10**9), _far_times),
        "pid": st.one_of(st.integers(-5, 5), st.text(max_size=5), _huge_ints),
        "tid": st.one_of(st.integers(-5, 5), st.text(max_size=5), _huge_ints),
        "args": st.one_of(_json, st.fixed_dictionaries({}, optional={
            "correlation": st.one_of(st.integers(-3, 50), _huge_ints),
            "External id": st.one_of(st.integers(-3, 50), _huge_ints),
            "stream": st.one_of(st.integers(-1, 9), _huge_ints), "device": st.one_of(st.integers(-1, 3), _huge_ints),
            "grid": st.lists(st.one_of(st.integers(0, 1024), _huge_ints), max_size=3),
            "block": st.lists(st.one_of(st.integers(0, 1024), _huge_ints), max_size=3),
            "Input Dims": _json, "Input type": _json,
            "flops": st.one_of(st.integers(0, 10**12), st.floats()),
            "bytes": st.one_of(st.integers(-10, 10**9), _huge_ints)})),
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
    assert trace.bad_args >= 0
    assert len(trace.host) + len(trace.device) <= len(events)
    assert 0 <= trace.span[1] <= MAX_SPAN_NS


def _shape() -> TraceBuilder:
    """A small trace holding every integer field a profiler writes: ops with External id, a runtime
    launch and its kernel (correlation, device, stream, grid, block), a memcpy (bytes), memory events."""
    t = TraceBuilder()
    t.step(0, 0, 100)
    t.launch("gemm", 1, 2, 10, op="aten::mm", dims=[[8, 8], [8, 8]])
    t.launch("elementwise_kernel", 20, 30, 5, op="aten::add", dims=[[8, 8], [8, 8]])
    corr = t.runtime("cudaMemcpyAsync", 40, 5)
    t.kernel("Memcpy HtoD (Pageable -> Device)", 50, 8, corr, cat="gpu_memcpy", nbytes=4096)
    t.memory(60, 1024, 4096, 8192)
    t.step(1, 100, 100)
    t.launch("gemm", 101, 102, 10, op="aten::mm", dims=[[8, 8], [8, 8]])
    return t


# (where, key): a top-level field of the event, or one of its args ("grid"/"block": one dimension)
_INT_FIELDS = [("event", "pid"), ("event", "tid"), ("args", "correlation"), ("args", "External id"),
               ("args", "stream"), ("args", "device"), ("args", "grid"), ("args", "block"), ("args", "bytes"),
               ("args", "Bytes"), ("args", "Total Allocated"), ("args", "Total Reserved"), ("args", "Device Id"),
               ("args", "Device Type")]


def _load_and_analyze(data: bytes) -> None:
    """Load and diagnose: it works, or fails with an InputError; never another exception, never a
    numpy warning."""
    from gpudoctor.pipeline import analyze_loaded

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            trace = parse(data)
            analyze_loaded(trace)
        except InputError:
            return
    assert 0 <= trace.span[1] <= MAX_SPAN_NS


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_integer_overflow_in_any_integer_field_loads_or_fails_cleanly(data) -> None:
    doc = _shape().to_dict()
    events = doc["traceEvents"]
    for _ in range(data.draw(st.integers(1, 3))):
        where, key = data.draw(st.sampled_from(_INT_FIELDS))
        event = events[data.draw(st.integers(0, len(events) - 1))]
        value = data.draw(_huge_ints)
        target = event if where == "event" else event.setdefault("args", {})
        if key in ("grid", "block"):
            dims = list(target.get(key) or [1, 1, 1])
            dims[data.draw(st.integers(0, 2))] = value
            target[key] = dims
        else:
            target[key] = value
    _load_and_analyze(json.dumps(doc).encode())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_far_out_timestamps_load_or_fail_cleanly(data) -> None:
    doc = _shape().to_dict()
    events = doc["traceEvents"]
    for _ in range(data.draw(st.integers(1, 3))):
        event = events[data.draw(st.integers(0, len(events) - 1))]
        event[data.draw(st.sampled_from(["ts", "dur"]))] = data.draw(_far_times)
    _load_and_analyze(json.dumps(doc).encode())


def test_a_pid_or_correlation_of_2_to_the_70_is_noted_not_a_crash() -> None:
    """Issue 16: a kernel whose pid or correlation is 2**70 raised OverflowError."""
    from gpudoctor.trace.capabilities import trace_notes

    for where, key in (("event", "pid"), ("args", "correlation")):
        doc = _shape().to_dict()
        kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
        (kernel if where == "event" else kernel["args"])[key] = 2**70
        trace = parse(json.dumps(doc).encode())
        notes = " ".join(trace_notes(trace))
        assert ("malformed event was skipped" in notes) if key == "pid" else ("1 event has unreadable args" in notes)


def test_a_device_properties_int_beyond_64_bits_loses_that_field_not_the_gpu() -> None:
    from gpudoctor.trace.capabilities import trace_notes

    doc = _shape().to_dict()
    doc["deviceProperties"][0]["totalGlobalMem"] = 2**70
    _load_and_analyze(json.dumps(doc).encode())
    trace = parse(json.dumps(doc).encode())
    assert trace.gpus[0].name == "NVIDIA H100 80GB HBM3" and trace.gpus[0].memory_bytes == 0
    assert any("unreadable totalGlobalMem" in note for note in trace_notes(trace))


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
