"""The replay's two ways through the chain (replay/simulate.py): a stretch between waits replayed
with array operations gives the timeline the one-entry-at-a-time loop gives, on random graphs
(several streams, cross-stream waits, removed events, calls that wait, marks, a backlog) and on
the recorded traces' graphs with a fix's edits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.analysis.steps import segment
from gpudoctor.replay import simulate
from gpudoctor.replay.graph import CALL, EVENT_CLASSES, MARK, StepGraph, build
from gpudoctor.replay.simulate import Changes, Replayed, _replay
from gpudoctor.trace import load

DATA = Path(__file__).parent / "data"
EVERY_STRETCH, NO_STRETCH = 1, 10**9


def _same(a: Replayed, b: Replayed) -> None:
    # the array path sums in another order: the same times to well under a nanosecond
    assert a.total_ns == pytest.approx(b.total_ns, rel=1e-12, abs=1e-6)
    assert a.host_end_ns == pytest.approx(b.host_end_ns, rel=1e-12, abs=1e-6)
    assert a.gpu_busy_ns == pytest.approx(b.gpu_busy_ns, rel=1e-9, abs=1e-3)
    np.testing.assert_allclose(a.marks_ns, b.marks_ns, rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(a.dev_start_ns, b.dev_start_ns, rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(a.dev_end_ns, b.dev_end_ns, rtol=1e-12, atol=1e-6)


entries = st.lists(
    st.tuples(
        st.sampled_from([CALL, CALL, CALL, MARK]),
        st.integers(0, 20_000),  # gap
        st.integers(0, 10_000),  # own
        st.lists(  # the call's device rows: stream, duration, removed, waits for an earlier row
            st.tuples(
                st.integers(0, 2), st.integers(0, 30_000), st.booleans(), st.integers(-3, 40)
            ),
            max_size=4,
        ),
        st.integers(-40, 40),  # waits for a row (negative: none)
    ),
    min_size=1,
    max_size=120,
)


def _graph_of(chain: list, backlog: int) -> tuple[StepGraph, Changes]:
    kind, gap, own, wait_on = [], [], [], []
    launched_by, dur, stream, after, removed = [], [], [], [], []
    for s in range(backlog):  # queued before the window
        launched_by.append(-1), dur.append(5_000 + s), stream.append(s % 2), after.append(-1)
        removed.append(False)
    for i, (k, g, o, rows, w) in enumerate(chain):
        kind.append(k), gap.append(g), own.append(o if k == CALL else 0)
        wait_on.append(w if k == CALL else -1)
        if k == MARK:
            continue
        for s, d, gone, a in rows:
            launched_by.append(i), dur.append(d), stream.append(s), removed.append(gone)
            after.append(a)
    n, m = len(kind), len(dur)
    # a wait names an existing row: any, launched before or after the call (the loop reads the
    # profiled end of one not yet replayed)
    wait = np.array([w % m if (w >= 0 and m) else -1 for w in wait_on], np.int64)
    aft = np.array([a % m if (a >= 0 and m) else -1 for a in after], np.int64)
    graph = StepGraph(
        kind=np.array(kind, np.int8),
        host=np.arange(n),
        ts_ns=np.zeros(n, np.int64),
        end_ns=np.zeros(n, np.int64),
        gap_ns=np.array(gap, np.int64),
        own_ns=np.array(own, np.int64),
        wait_on=wait,
        return_ns=np.full(n, 1_500, np.int64),
        load=np.zeros((n + 1, len(EVENT_CLASSES)), np.int64),
        tail_ns=3_000,
        window=(0, 10**9),
        steps=max(kind.count(MARK), 1),
        dev_index=np.arange(m),
        dev_launched_by=np.array(launched_by, np.int64),
        dev_dur_ns=np.array(dur, np.int64),
        dev_stream=np.array(stream, np.int64),
        dev_after=aft,
        dev_ts_ns=np.arange(m, dtype=np.int64) * 7_000,
        dev_backlog=np.array([lb < 0 for lb in launched_by], bool),
        latency_ns=4_000,
        switch_ns=1_200,
        profiled_ns=1,
        coverage="full",
    )
    return graph, Changes(dev_removed=np.array(removed, bool))


@given(entries, st.integers(0, 3))
@settings(max_examples=300, deadline=None)
def test_a_stretch_replayed_as_arrays_gives_the_loops_timeline(chain: list, backlog: int) -> None:
    graph, edits = _graph_of(chain, backlog)
    for ch in (None, edits):
        _same(_replay(graph, ch, EVERY_STRETCH), _replay(graph, ch, NO_STRETCH))


@pytest.mark.parametrize(
    "name",
    ["launch_bound", "host_sync", "ddp4_h200_batch/rank0", "optimizer_loop", "input_pipeline"],
)
def test_recorded_graphs_replay_alike_both_ways_with_and_without_edits(name: str) -> None:
    trace = load(DATA / name / "trace.json.gz")
    graph = build(trace, segment(trace))
    rng = np.random.default_rng(7)
    m = graph.dev_dur_ns.size
    fused = Changes(
        dev_removed=rng.random(m) < 0.3,
        dev_dur_ns=(graph.dev_dur_ns * rng.uniform(0.2, 1.0, m)).astype(np.int64),
        own_ns=graph.own_ns * 0.5,
        waits=rng.random(graph.wait_on.size) < 0.5,
    )
    for ch in (None, fused):
        _same(_replay(graph, ch, EVERY_STRETCH), _replay(graph, ch, NO_STRETCH))


@given(entries, st.integers(0, 3), st.integers(1, 9))
@settings(max_examples=150, deadline=None)
def test_the_loop_read_a_few_entries_at_a_time_gives_the_same_timeline(
    chain: list, backlog: int, chunk: int
) -> None:
    """LOOP_CHUNK entries of lists at a time (bounded memory on a million-entry chain): waits and
    cross-stream waits on rows of earlier chunks read their replayed ends."""
    graph, edits = _graph_of(chain, backlog)
    for ch in (None, edits):
        whole = _replay(graph, ch, NO_STRETCH)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(simulate, "LOOP_CHUNK", chunk)
            _same(_replay(graph, ch, NO_STRETCH), whole)
            _same(_replay(graph, ch, EVERY_STRETCH), whole)
