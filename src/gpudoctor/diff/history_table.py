"""``gpudoctor history`` in the terminal: run directories, newest first."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.diff.history import RunEntry


def render_history(entries: list[RunEntry], base: Path, console: Console) -> None:
    if not entries:
        console.print(Text(f"no run directory under {base} (gpudoctor run writes one per run)"))
        return
    table = Table(title=f"Runs under {base}, newest first ({len(entries)})", title_justify="left", show_edge=False)
    for col in ("recorded (UTC)", "run", "program", "commit", "GPU", "step ms", "top finding"):
        table.add_column(col, justify="right" if col == "step ms" else "left", overflow="fold",
                         no_wrap=col in ("recorded (UTC)", "run", "commit", "step ms"))
    for e in entries:
        program = " ".join([("-m " if e.is_module else "") + Path(e.program).name if e.program else "?", *e.args])
        step = "-" if e.step_ms is None else f"{e.step_ms:.3f}" + ("" if e.step_kind == "unprofiled" else " (p)")
        top = "-" if e.top_finding is None else e.top_finding + (
            f" ({e.top_saving_ms:.2f} ms)" if e.top_saving_ms else "")
        table.add_row(Text(e.recorded_utc.replace("T", " ")[:16]), Text(Path(e.path).name), Text(program),
                      Text(e.git_commit or "-"), Text(e.gpu or "-"), step, Text(top))
    console.print(table)
    console.print(Text("step ms: unprofiled mean; (p): the profiled step (no unprofiled timing)", style="dim"))
