"""What the step's graph reads a block of host events at a time (bounded memory on traces of
millions of events: benchmarks/BENCHMARKS-loading.md) against the same read of every event at
once: the profiler's work at the steps' edges, the recorded events per gap, and the chain entry
of each launch. Random steps on two threads, blocks of a few events, so that every step and gap
spans several blocks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.analysis import observer
from gpudoctor.analysis.steps import segment
from gpudoctor.replay import graph as step_graph
from gpudoctor.replay.graph import EVENT_CLASSES, build, chain_rows
from gpudoctor.trace import parse
from gpudoctor.trace.model import HostCat
from tests.synth import TraceBuilder

OTHER_TID = 2


def _edges_at_once(trace, recorded, lo, hi):  # type: ignore[no-untyped-def]
    """Each step's first recorded start in [lo, hi) and the latest end of those starting before
    hi, read over every event at once (what the blocks must give)."""
    host = trace.host
    idx = np.flatnonzero(recorded)
    out = []
    for a, b in zip(lo.tolist(), hi.tolist()):
        inside = idx[(host.ts[idx] >= a) & (host.ts[idx] < b)]
        if inside.size == 0:
            continue
        before = idx[host.ts[idx] < b]
        head = min(int(host.ts[inside].min()), a + observer.MAX_STEP_BOUNDARY_NS)
        tail = min(max(int(host.end[before].max()), b - observer.MAX_STEP_BOUNDARY_NS), b)
        out.append((a, head, tail, b))
    return out


steps_strategy = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from(["op", "runtime", "annotation", "launch"]),
            st.floats(0.5, 300.0),
            st.floats(0.5, 80.0),
            st.booleans(),
        ),
        min_size=0,
        max_size=12,
    ),
    min_size=1,
    max_size=5,
)


def _trace(steps):  # type: ignore[no-untyped-def]
    b = TraceBuilder()
    t = 0.0
    for s, events in enumerate(steps):
        start = t
        for kind, gap, dur, other_thread in events:
            t += gap
            tid = OTHER_TID if other_thread else 1
            if kind == "op":
                b.op("aten::add", t, dur, tid=tid)
            elif kind == "annotation":
                b.annotation("my_region", t, dur, tid=tid)
            elif kind == "runtime":
                b.runtime("cudaStreamIsCapturing", t, dur, tid=tid)
            else:
                corr = b.runtime("cudaLaunchKernel", t, dur, tid=tid)
                b.kernel("k", t + dur + 2.0, 5.0, correlation=corr)
            t += dur
        t += 20.0
        b.step(s, start, t - start)
    b.kernel("k", t + 10.0, 5.0, correlation=999_999)  # a GPU event, so the trace loads
    b.runtime("cudaLaunchKernel", t + 5.0, 2.0)
    return parse(b.to_bytes())


@given(steps_strategy, st.integers(1, 7))
@settings(max_examples=80, deadline=None)
def test_the_steps_edges_read_in_blocks_are_those_read_at_once(steps, block: int) -> None:
    trace = _trace(steps)
    host = trace.host
    recorded = (host.cat == HostCat.OP) | (host.cat == HostCat.RUNTIME)
    rng = np.random.default_rng(len(host))
    # steps that start and end at events' own starts (ties), and anywhere
    starts = host.ts.astype(np.int64)
    lo = np.concatenate(
        [
            rng.choice(starts, 4),
            rng.integers(int(starts.min()) - 50_000, int(host.end.max()) + 1, 4),
        ]
    )
    hi = np.concatenate([rng.choice(starts, 4), lo[4:] + rng.integers(1, 400_000, 4)])
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(observer, "WINDOW", block)
        got = observer.step_edge_stretches(trace, recorded, lo, hi)
    assert list(zip(*(x.tolist() for x in got))) == _edges_at_once(trace, recorded, lo, hi)


@given(steps_strategy, st.integers(1, 7))
@settings(max_examples=60, deadline=None)
def test_the_events_per_gap_counted_in_blocks_are_those_counted_at_once(steps, block) -> None:
    trace = _trace(steps)
    if len(trace.device) == 0:
        return
    whole = build(trace, segment(trace))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(step_graph, "WINDOW", block)
        blocked = build(trace, segment(trace))
    np.testing.assert_array_equal(blocked.load, whole.load)
    # every recorded op, runtime call and annotation of the launching threads in the window counted
    assert blocked.load.shape == (whole.kind.size + 1, len(EVENT_CLASSES))


def test_each_launch_finds_its_chain_entry_and_other_events_none() -> None:
    entry_host = np.array([-1, 40, 7, -1, 19, 3], np.int64)  # marks are -1
    hosts = np.array([7, 3, 40, 19, 5, -1, 41, 0], np.int64)
    assert chain_rows(entry_host, hosts).tolist() == [2, 5, 1, 4, -1, -1, -1, -1]
    assert chain_rows(np.array([-1, -1]), hosts).tolist() == [-1] * hosts.size
    assert chain_rows(entry_host, np.empty(0, np.int64)).size == 0
