"""One-off calls (replay/graph.py ``one_off_calls``): a long call the window holds in one step only
is left out of the steady state the unprofiled step's median times; one that recurs, waits or
syncs stays. On a recorded twin: per_sample_loss_loop's one cudaHostAlloc."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.replay.graph import CALL, MARK, one_off_calls

DATA = Path(__file__).parent / "data" / "twins_h100"
STEP_NS = 1_000_000


def _chain(names_per_step: list[list[int]], own_ns: int = 100_000):
    kind, name, own = [], [], []
    for step in names_per_step:
        kind.append(MARK), name.append(-1), own.append(0)
        for n in step:
            kind.append(CALL), name.append(n), own.append(own_ns)
    kind = np.array(kind, np.int8)
    return kind, np.array(name), np.array(own, np.int64), np.full(kind.size, -1, np.int64)


def test_a_long_call_in_one_step_only_is_a_one_off() -> None:
    kind, name, own, wait_on = _chain([[1, 7], [1], [1], [1]])
    flags = one_off_calls(kind, name, own, wait_on, None, STEP_NS)
    assert flags.tolist() == [False, False, True, False, False, False, False, False, False]


def test_a_call_in_two_steps_a_waiting_call_a_sync_and_a_short_call_are_not() -> None:
    kind, name, own, wait_on = _chain([[1, 7], [1, 7], [1], [1]])
    assert not one_off_calls(kind, name, own, wait_on, None, STEP_NS).any()
    kind, name, own, wait_on = _chain([[1, 7], [1], [1], [1]])
    wait_on[2] = 0
    assert not one_off_calls(kind, name, own, wait_on, None, STEP_NS).any()
    wait_on[2] = -1
    sync = np.zeros(kind.size, bool)
    sync[2] = True
    assert not one_off_calls(kind, name, own, wait_on, sync, STEP_NS).any()
    kind, name, own, wait_on = _chain([[1, 7], [1], [1], [1]], own_ns=19_999)  # under 2% of 1 ms
    assert not one_off_calls(kind, name, own, wait_on, None, STEP_NS).any()


def test_two_steps_tell_no_one_off() -> None:
    kind, name, own, wait_on = _chain([[1, 7], [1]])
    assert not one_off_calls(kind, name, own, wait_on, None, STEP_NS).any()


def test_the_recorded_one_off_is_the_pinned_block_of_a_read() -> None:
    from gpudoctor.pipeline import diagnose_path
    from gpudoctor.replay.graph import build

    a = diagnose_path(DATA / "per_sample_loss_loop").analysis
    graph = build(a.trace, a.steps)
    flagged = np.flatnonzero(graph.one_off)
    names = [a.trace.string(a.trace.host.name[graph.host[i]]) for i in flagged]
    assert names == ["cudaHostAlloc"]
    assert graph.own_ns[flagged[0]] == pytest.approx(1.909e6, rel=0.01)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.integers(0, 3_000_000),
                          st.booleans(), st.booleans()), max_size=60),
       st.integers(-5, 5_000_000))
def test_any_chain_flags_only_calls_that_did_not_wait(rows, profiled_ns) -> None:
    """Whatever the chain (marks anywhere, names repeated or not, any times), only calls that did
    not wait and do not sync are flagged, and nothing raises."""
    kind = np.array([CALL if call else MARK for call, *_ in rows], np.int8)
    name = np.array([n for _, n, *_ in rows], np.int64)
    own = np.array([o for _, _, o, *_ in rows], np.int64)
    wait_on = np.array([0 if w else -1 for *_, w, _ in rows], np.int64)
    sync = np.array([s for *_, s in rows], bool)
    flags = one_off_calls(kind, name, own, wait_on, sync, profiled_ns)
    assert flags.shape == kind.shape
    assert not (flags & ((kind != CALL) | (wait_on >= 0) | sync)).any()
