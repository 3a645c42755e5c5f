"""core/arrays.py: numpy's unique, set operations and median, the same values to the bit, without
the numpy.ma import that numpy's own make on their first call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gpudoctor.core.arrays import difference, distinct, intersection, median, union

ints = st.lists(st.integers(-(2**40), 2**40), max_size=60)
small_ints = st.lists(st.integers(-5, 5), max_size=30)
floats = st.lists(
    st.floats(-1e12, 1e12, allow_nan=False, allow_subnormal=False), min_size=1, max_size=60
)


@given(ints, small_ints)
def test_the_set_helpers_are_numpys(a: list[int], b: list[int]) -> None:
    x, y = np.array(a, np.int64), np.array(b, np.int64)
    for ours, theirs in (
        (distinct(x), np.unique(x)),
        (union(x, y), np.union1d(x, y)),
        (difference(x, y), np.setdiff1d(x, y)),
        (intersection(x, y), np.intersect1d(x, y)),
    ):
        assert ours.dtype == theirs.dtype
        assert ours.tolist() == theirs.tolist()


@given(floats)
def test_the_median_is_numpys_to_the_bit(values: list[float]) -> None:
    x = np.array(values)
    assert median(x) == np.median(x)
    assert median(x.astype(np.int64)) == np.median(x.astype(np.int64))


def test_edge_cases() -> None:
    assert distinct(np.array(["b", "a", "b"])).tolist() == ["a", "b"]
    assert distinct(np.array([[3, 1], [1, 3]])).tolist() == [1, 3]  # flattened, as np.unique
    assert distinct(np.array([], np.int32)).dtype == np.int32
    assert np.isnan(median(np.array([1.0, np.nan, 2.0])))
    assert median(np.array([7])) == 7.0
    assert median([1, 2]) == 1.5


def test_analysing_the_benchmark_trace_imports_no_numpy_ma() -> None:
    """What the helpers are for: numpy.ma costs a whole ``analyze`` process about 7 ms
    (benchmarks/BENCHMARKS-loading.md, "A fast whole process: numpy.ma left out"). Other traces may still import it
    through ``np.isin``'s sorting path."""
    code = (
        "import sys\n"
        "from gpudoctor.pipeline import analyze_path\n"
        f"analyze_path({str(Path(__file__).parents[1] / 'benchmarks' / 'data' / 'bench_170k.json.gz')!r})\n"
        "print('numpy.ma' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
