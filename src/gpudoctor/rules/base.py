"""A rule: one finding id, one check over the Analysis."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpudoctor.analysis import Analysis
from gpudoctor.rules.finding import Finding


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    check: Callable[[Analysis], Finding | None]
    doc: str = ""
