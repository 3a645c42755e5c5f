"""A big trace in bounded memory: its host events are nested, matched and merged a window at a
time, its op args decoded a batch at a time, its args' offsets kept as their low bits, each op's
cost and each thread mask held compactly. Every answer equals the one computed all at once."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from synth import trace_columns as columns

from gpudoctor.analysis.intervals import contains, union
from gpudoctor.analysis.op_costs import OpCosts
from gpudoctor.analysis.opcost import OpCost
from gpudoctor.pipeline import analyze_path
from gpudoctor.report.json_report import to_json
from gpudoctor.trace import load
from gpudoctor.trace.rawargs import RawArgs

DATA = Path(__file__).parent / "data"
# recorded traces whose rules read op shapes, nesting and every idle cause
SCENARIOS = (
    "misaligned_gemm",
    "naive_attention",
    "per_sample_loop",
    "host_blocking_work",
    "allocator_churn",
    "launch_bound",
    "input_pipeline",
    "healthy_train",
)


def small_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows and batches of a few events, so that a small trace takes many of each."""
    for module, name, size in (
        ("gpudoctor.analysis.intervals", "WINDOW", 64),
        ("gpudoctor.analysis.idle", "WINDOW", 64),
        ("gpudoctor.trace.nesting", "WINDOW", 64),
        ("gpudoctor.trace.model", "DECODE_ROWS", 3),
    ):
        monkeypatch.setattr(importlib.import_module(module), name, size)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_reports_are_the_same_a_window_at_a_time(
    scenario: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = DATA / scenario / "trace.json.gz"
    whole = to_json(analyze_path(path))
    whole_columns = columns(load(path))
    small_windows(monkeypatch)
    assert columns(load(path)) == whole_columns
    assert to_json(analyze_path(path)) == whole


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_ops_talking_to_gpu_a_window_at_a_time(
    scenario: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpudoctor.analysis.host_events import bookkeeping_names
    from gpudoctor.trace.model import HostCat

    idle = importlib.import_module("gpudoctor.analysis.idle")
    trace = load(DATA / scenario / "trace.json.gz")
    host = trace.host
    ops, calls = host.cat == HostCat.OP, host.cat >= HostCat.RUNTIME
    # what each op is, found op by op: a call of its thread starts inside it, or else it keeps books
    talking = np.zeros(len(host), bool)
    keeping = np.zeros(len(host), bool)
    bookkeeping = bookkeeping_names(trace)
    for i in np.flatnonzero(ops).tolist():
        starts = host.ts[calls & (host.thread == host.thread[i])]
        talking[i] = bool(((starts >= host.ts[i]) & (starts <= host.end[i])).any())
        keeping[i] = not talking[i] and bool(bookkeeping[host.name[i]])
    assert talking.any() and not (talking | keeping).all()
    monkeypatch.setattr(idle, "WINDOW", 64)
    found_talking, found_keeping = idle._ops_talking_to_gpu(trace, ops, calls)
    assert np.array_equal(found_talking, talking)
    assert np.array_equal(found_keeping, keeping)


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 30)), max_size=40), st.integers(1, 8))
def test_union_of_unions_is_the_union(spans: list[tuple[int, int]], parts: int) -> None:
    # what merging each window's active events first rests on (analysis/idle.py _host_work)
    s = np.array([a for a, _ in spans], np.int64)
    e = np.array([a + d for a, d in spans], np.int64)
    merged = [union(s[k::parts], e[k::parts]) for k in range(parts)]
    again = union(np.concatenate([m[0] for m in merged]), np.concatenate([m[1] for m in merged]))
    whole = union(s, e)
    assert (again[0].tolist(), again[1].tolist()) == (whole[0].tolist(), whole[1].tolist())


def test_raw_args_offsets_past_their_low_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 low bits: the offsets pass 16 bytes of args several times, as a big trace's pass 4 GiB
    monkeypatch.setattr(importlib.import_module("gpudoctor.trace.rawargs"), "_LOW_BITS", 4)
    texts = [
        b'{"a":1}',
        b"",
        b'{"bb":[2,3,4,5,6,7,8,9]}',
        b'{"c":3}',
        b'{"' + b"d" * 33 + b'":4}',
        b"{}",
    ]
    blobs = [
        (b"".join(texts[:3]), np.array([len(t) for t in texts[:3]])),
        (b"".join(texts[3:]), np.array([len(t) for t in texts[3:]])),
    ]
    for compressed in (False, True):
        args = RawArgs.build(blobs, compressed)
        # ends 7, 7, 31, 38, 77, 79: offsets 3 and 4 each pass another 16 bytes, offset 5 two more
        assert args._wraps.tolist() == [3, 4, 5, 5]
        assert list(args) == texts
        assert args.reordered(np.array([5, 2, 0])).take([0, 1, 2]) == [b"{}", texts[2], texts[0]]


def test_union_merges_nested_touching_and_overlapping_intervals() -> None:
    s, e = union(np.array([5, 0, 1, 10, 20, 20, 30]), np.array([6, 3, 2, 20, 25, 21, 30]))
    assert (s.tolist(), e.tolist()) == ([0, 5, 10, 30], [3, 6, 25, 30])
    assert (s.dtype, e.dtype) == (np.int64, np.int64)


def test_contains_a_window_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.import_module("gpudoctor.analysis.intervals"), "WINDOW", 2)
    inside = contains(
        np.array([0, 10]), np.array([5, 12]), np.array([-1, 0, 4, 5, 9, 10, 11, 12, 99])
    )
    assert inside.tolist() == [False, True, True, False, False, True, True, False, False]


def test_on_threads_is_isin() -> None:
    host = load(DATA / "healthy_train" / "trace.json.gz").host
    for threads in (
        [],
        [0],
        [1, 0],
        [int(host.thread.max())],
        [int(host.thread.max()) + 5],
        np.array([0], np.int32),
    ):
        assert np.array_equal(host.on_threads(threads), np.isin(host.thread, threads))


def test_op_costs_as_a_mapping() -> None:
    a, b = OpCost(flops=1.0, bytes=2.0, dtype="bf16"), OpCost(flops=3.0, bytes=4.0, dtype="")
    costs = OpCosts(np.array([3, 8, 10]), np.array([1, 0, 1], np.int32), [a, b])
    assert dict(costs.items()) == {3: b, 8: a, 10: b}
    assert (costs[8], costs.get(4), 10 in costs, 4 in costs, len(costs), list(costs)) == (
        a,
        None,
        True,
        False,
        3,
        [3, 8, 10],
    )
    assert costs.lookup(np.array([10, -1, 3, 11])) == [b, None, b, None]
    assert costs.slots(np.array([10, -1, 3, 11])).tolist() == [2, -1, 0, -1]
    assert OpCosts(np.zeros(0, np.int64), np.zeros(0, np.int32), []).lookup(np.array([1])) == [None]


def test_op_args_are_one_object_per_distinct_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.import_module("gpudoctor.trace.model"), "DECODE_ROWS", 3)
    trace = load(DATA / "misaligned_gemm" / "trace.json.gz")
    ops = np.flatnonzero(trace.host.cat == 0)
    ids = trace.op_arg_ids(ops)
    values = trace.op_arg_values
    assert len(values) == len(set(map(int, ids[ids >= 0]))) < len(ops)
    assert trace.op_args(ops[:5].tolist()) == {
        int(i): values[k] if k >= 0 else None for i, k in zip(ops[:5], ids[:5])
    }
    assert [trace.input_dims(int(i)) for i in ops[:50]] == [
        trace._decode(values[k].input_dims) if k >= 0 else [] for k in ids[:50].tolist()
    ]


@given(
    st.lists(st.tuples(st.integers(0, 10_000_000), st.integers(1, 3_000_000)), max_size=12),
    st.lists(st.tuples(st.integers(0, 10_000_000), st.integers(1, 3_000_000)), max_size=12),
)
def test_compute_stretches_hold_enough_host_only_work(
    strict: list[tuple[int, int]], work: list[tuple[int, int]]
) -> None:
    # analysis/idle.py _compute_stretches: inside [lo, hi), free of the GPU's operators, each
    # holding HOST_WORK_MIN_NS of host-only operators
    from gpudoctor.analysis.host_events import HOST_WORK_MIN_NS
    from gpudoctor.analysis.idle import _compute_stretches
    from gpudoctor.analysis.intervals import overlap_per_window

    def spans(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        s = np.array([a for a, _ in pairs], np.int64)
        return union(s, s + np.array([d for _, d in pairs], np.int64))

    (ss, se), (ws, we) = spans(strict), spans(work)
    lo, hi = 1_000_000, 9_000_000
    cs, ce = _compute_stretches(ss, se, ws, we, lo, hi)
    assert np.all(cs >= lo) and np.all(ce <= hi) and np.all(cs < ce)
    assert np.all(cs[1:] >= ce[:-1])
    assert overlap_per_window(ss, se, cs, ce).sum() == 0
    assert np.all(overlap_per_window(ws, we, cs, ce) >= HOST_WORK_MIN_NS)
