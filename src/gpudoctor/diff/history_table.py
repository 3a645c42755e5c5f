"""``gpudoctor history`` in the terminal: run directories, newest first."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.diff.history import RunEntry, prediction_errors


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


def render_predictions(entries: list[RunEntry], base: Path, console: Console) -> None:
    """Each --try-fixes trial's predicted speedup beside the measured one, per program, and how far
    the predictions were off over them all (by how they were priced)."""
    runs = [e for e in entries if e.predictions]
    if not runs:
        console.print(Text(f"no run under {base} has a trial both predicted and measured "
                           "(gpudoctor run --try-fixes records them)"))
        return
    table = Table(title=f"Predicted vs measured, {sum(len(e.predictions) for e in runs)} trials under {base}",
                  title_justify="left", show_edge=False)
    for col in ("recorded (UTC)", "program", "knob", "finding", "predicted", "measured", "pred / meas", "priced by"):
        table.add_column(col, justify="right" if col in ("predicted", "measured", "pred / meas") else "left",
                         overflow="fold")
    for e in runs:
        program = " ".join([("-m " if e.is_module else "") + Path(e.program).name if e.program else "?", *e.args])
        for p in e.predictions:
            ratio = p["predicted_speedup"] / p["measured_speedup"]
            table.add_row(Text(e.recorded_utc.replace("T", " ")[:16]), Text(program), Text(p["knob"]),
                          Text(p["finding"] or "-"), f"x{p['predicted_speedup']:.2f}", f"x{p['measured_speedup']:.2f}",
                          Text(f"{ratio:.2f}", style="" if 1 / 1.25 <= ratio <= 1.25 else "yellow"),
                          Text(p["predicted_by"]))
    console.print(table)
    errors = prediction_errors(runs)
    lines = [f"{name}: {s['trials']} trials, median predicted / measured {s['median_ratio']:.2f}, "
             f"{s['within_1_25x']} within 1.25x" for name, s in (("all", errors["all"]), *errors["by"].items())
             if s["trials"]]
    console.print(Text("\n".join(lines)))
