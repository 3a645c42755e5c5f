"""The lab's table: trap, expected finding, what the doctor said, predicted vs measured speedup.

Each trap takes two lines (trap / expected finding, top finding / rank of the expected one, sick /
fixed step time, predicted / measured speedup, verdict / their ratio), so the table fits 80 columns
without cutting a name or a number.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.lab.verify import RATIO_BAND, TrapVerdict

_STYLE = {"pass": "green", "healthy": "green", "diagnosed": "yellow", "missed": "red",
          "unhealthy": "red", "error": "bold red"}


def _two(first: str, second: str, style: str = "") -> Text:
    text = Text(first, style=style)
    text.append("\n")
    text.append(second, style="dim")
    return text


def _rank(v: TrapVerdict) -> str:
    if not v.expected:
        return ""
    return f"expected #{v.rank}" if v.rank else "expected: not found"


def render_lab(verdicts: Sequence[TrapVerdict], console: Console) -> None:
    table = Table(title="gpudoctor lab", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, leading=1)
    table.add_column(_two("trap", "expected finding"), no_wrap=True)
    table.add_column(_two("top finding", "rank of expected"), no_wrap=True)
    table.add_column(_two("sick ms", "fixed ms"), justify="right", no_wrap=True)
    table.add_column(_two("predicted", "measured"), justify="right", no_wrap=True)
    table.add_column(_two("verdict", "ratio"), no_wrap=True)
    for v in verdicts:
        table.add_row(
            _two(v.trap, v.expected or "(healthy)"),
            _two(v.top_finding or "-", _rank(v)),
            _two(f"{v.sick_ms:.2f}" if v.sick_ms else "-",
                 f"{v.fixed_ms:.2f}" if v.fixed_ms else "-"),
            _two(f"x{v.predicted_speedup:.2f}" if v.predicted_speedup else "-",
                 f"x{v.measured_speedup:.2f}" if v.measured_speedup else "-"),
            _two(v.verdict, f"{v.ratio:.2f}" if v.ratio else "", style=_STYLE.get(v.verdict, "")),
        )
    console.print(table)
    for v in verdicts:
        if v.error:
            console.print(f"{v.trap}: {v.error}", markup=False, highlight=False, soft_wrap=True)
    traps = [v for v in verdicts if v.expected]
    if traps:
        top = sum(v.rank == 1 for v in traps)
        within = sum(v.verdict == "pass" for v in traps)
        console.print(f"planted finding ranked first: {top}/{len(traps)}; predicted speedup within "
                      f"{RATIO_BAND[1]:g}x of measured either way: {within}/{len(traps)}")
