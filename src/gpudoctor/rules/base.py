"""A rule: one finding id, one check over the Analysis."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpudoctor.analysis import Analysis
from gpudoctor.rules.finding import Finding
from gpudoctor.trace.capabilities import NEEDS


@dataclass(frozen=True)
class Rule:
    """``needs``: what the trace must record for the check to mean anything (trace/capabilities.py
    NEEDS); on a trace that lacks one the rule does not run and the report says so."""

    id: str
    title: str
    check: Callable[[Analysis], Finding | None]
    doc: str = ""
    needs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [n for n in self.needs if n not in NEEDS]
        if unknown:
            raise ValueError(f"rule {self.id}: unknown needs {unknown}; known: {', '.join(NEEDS)}")
