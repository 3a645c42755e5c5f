"""benchmarks/bench_plan_comm.py's pure helpers: the size labels of its tables and the per-column
error summary it prints under the across-GPU-counts table."""

from __future__ import annotations

import pytest
from script_module import load

b = load("bench_plan_comm")
MIB = 2**20
ROWS = [  # measured 100 us each; errors: preset -50%, -20%, +10%; held +100%, +30%, -5%
    {"bytes": 1024, "measured": 100e-6, "preset": 50e-6, "held": 200e-6},
    {"bytes": MIB, "measured": 100e-6, "preset": 80e-6, "held": 130e-6},
    {"bytes": 4 * 2**30, "measured": 100e-6, "preset": 110e-6, "held": 95e-6},
]


def test_size_labels() -> None:
    assert [b.size(n) for n in (1024, 256 * 1024, MIB, 4 * 2**30)] == [
        "1 KiB",
        "256 KiB",
        "1 MiB",
        "4 GiB",
    ]


def test_summary_all_sizes_and_from_1_mib() -> None:
    every = b.summary(ROWS, ("preset", "held"))
    assert every["preset"] == pytest.approx((0.2, 0.5))
    assert every["held"] == pytest.approx((0.3, 1.0))
    big = b.summary(ROWS, ("preset", "held"), MIB)  # the 1 KiB row is left out
    assert big["preset"] == pytest.approx((0.15, 0.2))
    assert big["held"] == pytest.approx((0.175, 0.3))


def test_summary_of_no_row_is_refused() -> None:
    with pytest.raises(ValueError, match="no row of 8589934592 bytes or more"):
        b.summary(ROWS, ("preset",), 8 * 2**30)
