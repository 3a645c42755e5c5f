"""The lab's catalog: names, titles and the finding each trap plants (no torch import)."""

from __future__ import annotations

from typing import Any

from gpudoctor.errors import InputError
from gpudoctor.lab.registry import BASELINE_IDS, TRAP_IDS

# traps named otherwise than the finding they plant (a finding can have several traps)
_PLANTS = {"tf32_matmul": "fp32-matmul", "fp32_attention": "fp32-matmul"}
# expected finding per trap: the module's TRAP says the same (tests/test_lab.py checks it)
EXPECTED = {trap: _PLANTS.get(trap, trap.replace("_", "-")) for trap in TRAP_IDS}


def catalog() -> list[dict[str, Any]]:
    from gpudoctor.lab.registry import load_baselines, load_traps

    entries: list[dict[str, Any]] = [
        {"name": t.id, "kind": "trap", "expected_finding": t.expected_finding, "title": t.title}
        for t in load_traps()
    ]
    entries += [{"name": b.id, "kind": "baseline", "expected_finding": None, "title": b.title}
                for b in load_baselines()]
    return entries


def resolve_names(names: list[str], everything: bool) -> list[str]:
    known = list(TRAP_IDS) + list(BASELINE_IDS)
    if everything:
        return known
    if not names:
        raise InputError("name the traps to run (gpudoctor lab list shows them), or pass --all")
    unknown = [n for n in names if n.replace("-", "_") not in known]
    if unknown:
        raise InputError(f"unknown trap {unknown[0]!r}; known: {', '.join(known)}")
    return [n.replace("-", "_") for n in names]
