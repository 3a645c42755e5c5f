"""The lab's table: trap, expected finding, what the doctor said, predicted vs measured speedup."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.lab.verify import RATIO_BAND, TrapVerdict

_STYLE = {"pass": "green", "healthy": "green", "diagnosed": "yellow", "missed": "red", "unhealthy": "red",
          "error": "bold red"}


def render_lab(verdicts: Sequence[TrapVerdict], console: Console) -> None:
    table = Table(title="gpudoctor lab", title_justify="left")
    for col, justify in (("trap", "left"), ("expected", "left"), ("top finding", "left"), ("rank", "right"),
                         ("sick ms", "right"), ("fixed ms", "right"), ("predicted", "right"),
                         ("measured", "right"), ("ratio", "right"), ("verdict", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for v in verdicts:
        table.add_row(
            Text(v.trap), v.expected or "(healthy)", Text(v.top_finding or "-"), str(v.rank or "-"),
            f"{v.sick_ms:.2f}" if v.sick_ms else "-", f"{v.fixed_ms:.2f}" if v.fixed_ms else "-",
            f"x{v.predicted_speedup:.2f}" if v.predicted_speedup else "-",
            f"x{v.measured_speedup:.2f}" if v.measured_speedup else "-",
            f"{v.ratio:.2f}" if v.ratio else "-",
            Text(v.verdict, style=_STYLE.get(v.verdict, "")),
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
                      f"{RATIO_BAND[0]}-{RATIO_BAND[1]}x of measured: {within}/{len(traps)}")
