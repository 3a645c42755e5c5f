"""The trap lab: small workloads that each plant one GPU performance problem, with fixed twins.

Nothing here imports torch until a trap is loaded:

    >>> from gpudoctor.lab import load_trap
    >>> trap = load_trap("host_sync")          # imports torch
    >>> sick = trap.build_sick("cuda")
    >>> sick.step()
"""

from __future__ import annotations

from gpudoctor.lab.registry import (
    BASELINE_IDS,
    TRAP_IDS,
    load_baselines,
    load_trap,
    load_traps,
)
from gpudoctor.lab.trap import Baseline, Trap, Workload

__all__ = [
    "BASELINE_IDS",
    "TRAP_IDS",
    "Baseline",
    "Trap",
    "Workload",
    "load_baselines",
    "load_trap",
    "load_traps",
]
