"""Terminal table of a bench run: each ceiling measured vs datasheet, then the health."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.bench import BenchResult, _fmt


def render_bench(result: BenchResult, console: Console) -> None:
    table = Table(title=f"gpudoctor bench: {result.gpu} ({result.uuid})", title_justify="left")
    table.add_column("probe")
    table.add_column("measured", justify="right")
    table.add_column("of datasheet", justify="right")
    table.add_column("detail")
    for m in result.measurements:
        ratio = result.vs_datasheet(m)
        detail = ", ".join(f"{k}={v}" for k, v in m.detail.items() if k in ("shape_MxNxK", "error"))
        table.add_row(m.probe, _fmt(m), f"{100 * ratio:.0f}%" if ratio else "-", Text(detail))
    console.print(table)
    for f in result.findings:
        console.print(Text(f"[{f.severity}] {f.id}: {f.summary}"))
    if not result.findings:
        console.print(Text("health: no anomaly NVML could see", style="green"))
    if result.health.unreadable:
        console.print(Text(f"NVML could not read: {', '.join(result.health.unreadable)}", style="dim"))
    for note in result.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    if result.profile_path:
        console.print(Text(f"machine profile saved: {result.profile_path} (analyze and run use it for this GPU)",
                           style="dim"))
