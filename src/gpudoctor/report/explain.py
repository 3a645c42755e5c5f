"""Render `explain`'s ranked hypotheses: the likeliest first, each with its evidence numbers, what
to check next, the fixes in order, and the fix to avoid."""

from __future__ import annotations

import json
import math

from rich.console import Console, Group
from rich.padding import Padding
from rich.text import Text

from gpudoctor.explain import HEALTHY_IDS, UNCHECKED_IDS, Explanation

MAX_SHOWN = 12


def to_json(ex: Explanation) -> str:
    """Strict JSON: a NaN or infinity that reached a number is null (json.dumps would write NaN,
    which JSON parsers reject)."""
    return json.dumps(_finite(ex.to_dict()), indent=1, default=str, allow_nan=False)


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def render_console(ex: Explanation, console: Console, limit: int = MAX_SHOWN) -> None:
    console.print(Text("gpudoctor explain", style="bold"))
    for s in ex.sources:
        line = Text(f"  {s.path}: {s.kind}" + (f" ({s.detail})" if s.detail else ""), style="dim")
        if s.partial:
            line.append(f"  partial: {s.partial}", style="yellow")
        console.print(line)
    if not ex.hypotheses:
        console.print(Text("Nothing to explain in these files.", style="yellow"))
        return
    console.print(Text(f"Hypotheses, most likely first ({len(ex.hypotheses)})", style="bold"))
    for rank, (_, h) in enumerate(ex.hypotheses[:limit], 1):
        healthy = h.id in HEALTHY_IDS
        head = Text(f"{rank}. ")
        head.append(h.id, style="bold green" if healthy else "bold")
        head.append(f"  {h.title}")
        if h.id in UNCHECKED_IDS:
            head.append("  (not checked)", style="yellow")
        else:
            head.append(f"  ({100 * (h.confidence or 0):.0f}% confidence)", style="dim")
        if h.subject:
            head.append(f"  [{h.subject[:70]}]", style="cyan")
        if h.partial:
            head.append("  partial data", style="yellow")
        console.print(head)
        body: list = [Text(h.summary)]
        if h.evidence.numbers:
            nums = ", ".join(f"{k}={_fmt(v)}" for k, v in list(h.evidence.numbers.items())[:8])
            body.append(Text(f"evidence: {nums}", style="dim"))
        for item in h.check_next[:3]:
            body.append(Text(f"check: {item}", style="cyan"))
        for i, fix in enumerate(h.fixes, 1):
            body.append(Text(f"fix {i}: {fix.title}", style="green"))
            if fix.code and i == 1:
                body.append(Padding(Text(fix.code.splitlines()[0], style="green dim"),
                                    (0, 0, 0, 7)))
        if h.wrong_fix:
            body.append(Text(f"avoid: {h.wrong_fix}", style="red"))
        console.print(Padding(Group(*body), (0, 0, 0, 3)))
    if len(ex.hypotheses) > limit:
        console.print(Text(f"... {len(ex.hypotheses) - limit} more in --json", style="dim"))


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)
