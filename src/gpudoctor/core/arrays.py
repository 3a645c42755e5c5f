"""Small array helpers the analyses share: numpy's, without the numpy.ma import."""

from __future__ import annotations

from typing import Any

import numpy as np


def distinct(values: Any) -> np.ndarray:
    """The sorted distinct values of an array of integers or strings, flattened: ``np.unique``
    without options, which imports numpy.ma on its first call to check for a mask (numpy 2.x
    ``_unique1d``): about 7 ms of a whole ``analyze`` process (benchmarks/BENCHMARKS-loading.md,
    "A fast whole process: numpy.ma left out"). NaNs are not merged: keep ``np.unique`` for
    floats."""
    ordered = np.sort(np.asarray(values).ravel())
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def union(a: Any, b: Any) -> np.ndarray:
    """``np.union1d`` (the sorted distinct values of both), through ``distinct``."""
    return distinct(np.concatenate((np.asarray(a).ravel(), np.asarray(b).ravel())))


def difference(a: Any, b: Any) -> np.ndarray:
    """``np.setdiff1d`` (the sorted distinct values of ``a`` not in ``b``), through ``distinct``."""
    kept = distinct(a)
    return kept[~np.isin(kept, distinct(b), assume_unique=True)]


def intersection(a: Any, b: Any) -> np.ndarray:
    """``np.intersect1d`` (the sorted distinct values in both), through ``distinct``."""
    kept = distinct(a)
    return kept[np.isin(kept, distinct(b), assume_unique=True)]


def median(values: Any) -> np.floating:
    """``np.median`` of the flattened values, the same float to the bit, without the numpy.ma
    import ``np.median`` makes on its first call to check for a mask (see ``distinct``). NaN where
    a value is NaN."""
    flat = np.asarray(values).ravel()
    n = flat.size
    if n == 0:
        return flat.astype(float).mean()  # NaN, with numpy's "Mean of empty slice" warning
    if flat.dtype.kind in "fc" and np.isnan(flat).any():
        return np.float64(np.nan)
    k = n // 2
    part = np.partition(flat, (k - 1, k) if n % 2 == 0 else k)
    return part[k - 1:k + 1].mean() if n % 2 == 0 else part[k:k + 1].mean()


__all__ = ["difference", "distinct", "intersection", "median", "union"]
