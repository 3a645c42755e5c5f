"""The cost of each op that launched GPU work (analysis/roofline.py), held as arrays: the ops of
every step repeat a few hundred distinct costs, so a 4 GB trace's 640k ops are two arrays and a
short list, not a dict entry each (60 MB; benchmarks/BENCHMARKS-loading.md, "Traces of any
size")."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping
from typing import Any

import numpy as np

from gpudoctor.analysis.opcost import OpCost


class OpCosts(Mapping[int, OpCost]):
    """Host op index -> its OpCost."""

    def __init__(self, ops: np.ndarray, which: np.ndarray, table: list[OpCost]) -> None:
        self.ops = ops  # [ops] host op indices, sorted, distinct
        self.which = which  # int32 [ops]: each op's cost in ``table``
        self.table = table

    def slots(self, ops: np.ndarray) -> np.ndarray:
        """int64 [ops]: each op's position in ``self.ops``, -1 for an op without a cost."""
        at = np.searchsorted(self.ops, ops)
        found = at < len(self.ops)
        found[found] = self.ops[at[found]] == ops[found]
        return np.where(found, at, -1)

    def lookup(self, ops: np.ndarray) -> list[OpCost | None]:
        """The cost of each op (None without one): ``get`` for many at once."""
        slot = self.slots(np.asarray(ops))
        if not len(self.ops):
            return [None] * len(slot)
        table = [*self.table, None]
        return [table[k] for k in np.where(slot >= 0, self.which[slot], -1).tolist()]

    def __getitem__(self, op: int) -> OpCost:
        at = int(np.searchsorted(self.ops, op))
        if at < len(self.ops) and self.ops[at] == op:
            return self.table[int(self.which[at])]
        raise KeyError(op)

    def __iter__(self) -> Iterator[int]:
        return iter(self.ops.tolist())

    def __len__(self) -> int:
        return len(self.ops)

    def items(self) -> ItemsView[int, OpCost]:
        return _Items(self)


class _Items(ItemsView[int, OpCost]):
    """Every (op, cost) from the arrays at once, not a search per op."""

    _mapping: Any

    def __iter__(self) -> Iterator[tuple[int, OpCost]]:
        costs: OpCosts = self._mapping
        return zip(costs.ops.tolist(), map(costs.table.__getitem__, costs.which.tolist()))
