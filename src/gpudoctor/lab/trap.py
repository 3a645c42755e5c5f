"""The two small types of the trap lab: a ``Workload`` (one step of real work) and a ``Trap``.

A trap is a workload with one planted performance problem (``build_sick``) and its twin with the
problem removed (``build_fixed``): the same work, so their step times can be compared. A
``Baseline`` is a healthy workload that should produce no major finding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class Workload:
    """One repeatable step of work on a device.

    ``step`` runs one training or inference step without synchronizing the device; ``close``
    releases what the workload holds (threads, files, device memory). ``flops_per_step`` is the
    matrix-multiply work of one step where it is known, and ``info`` returns extra facts worth
    recording next to a trace (allocator retries, peak memory, sizes).
    """

    def __init__(
        self,
        step: Callable[[], Any],
        close: Callable[[], None] | None = None,
        *,
        flops_per_step: float | None = None,
        info: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self._step = step
        self._close = close
        self.flops_per_step = flops_per_step
        self._info = info

    def step(self) -> None:
        self._step()

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None

    def info(self) -> dict[str, Any]:
        return dict(self._info()) if self._info is not None else {}


@dataclass(frozen=True)
class Trap:
    """A planted performance problem: a sick workload, its fixed twin, and the finding expected."""

    id: str
    title: str
    expected_finding: str
    build_sick: Callable[[str], Workload]
    build_fixed: Callable[[str], Workload]
    with_stack: bool = False
    description: str = field(default="", compare=False)


@dataclass(frozen=True)
class Baseline:
    """A healthy workload: no finding of severity major or critical is expected in its trace."""

    id: str
    title: str
    build: Callable[[str], Workload]
    with_stack: bool = False
    description: str = field(default="", compare=False)
    expected_finding: None = None
