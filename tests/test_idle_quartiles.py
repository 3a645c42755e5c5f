"""The first quartile of each op's call durations (analysis/host_events.py setup_calls), from one sort:
the same numbers np.percentile gives group by group, to the last bit."""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis.host_events import _first_quartiles


def test_small_groups_by_hand() -> None:
    values = np.array([10, 7, 1, 100, 4, 2, 3, 5], np.int64)
    group = np.array([0, 1, 1, 2, 1, 1, 1, 1])
    # group 0: [10]; group 1: [1, 2, 3, 4, 5, 7] -> position 1.25 -> 2.25; group 2: [100]
    assert _first_quartiles(values, group, 3).tolist() == [10.0, 2.25, 100.0]


def test_equals_numpy_percentile_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        groups = int(rng.integers(1, 30))
        n = int(rng.integers(groups, 1500))
        group = np.concatenate([np.arange(groups), rng.integers(0, groups, n - groups)])
        values = rng.integers(0, 10 ** int(rng.integers(1, 13)), n).astype(np.int64)
        expected = np.array([np.percentile(values[group == k], 25) for k in range(groups)])
        assert np.array_equal(_first_quartiles(values, group, groups), expected)
