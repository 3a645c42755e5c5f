"""``gpudoctor history`` in the terminal: run directories, newest first."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.core.trial_record import HOST_PACE_NOTED_SHARE
from gpudoctor.diff.history import RunEntry, prediction_errors

RUN_MAX = 40  # a longer run name folds (names are the program's and the UTC start's: 26 for train_gpt2)
PROGRAM_FLOOR = 24  # a program with its arguments wraps at its spaces, never narrower than this
WORD_MAX = 24  # a finding id or GPU word longer than this may fold
STEP_NOTE = ("step ms: mean of the steps timed without the profiler, outliers left out, as "
             "gpudoctor diff compares them; (p): of the profiled steps")


def _program(e: RunEntry) -> str:
    return " ".join([("-m " if e.is_module else "") + Path(e.program).name if e.program
                     else "?", *e.args])


def _cells(e: RunEntry) -> dict[str, str]:
    step = "-" if e.step_ms is None else f"{e.step_ms:.3f}" + ("" if e.step_kind == "unprofiled"
                                                               else " (p)")
    top = "-" if e.top_finding is None else e.top_finding + (f" ({e.top_saving_ms:.2f} ms)"
                                                             if e.top_saving_ms else "")
    return {"recorded (UTC)": e.recorded_utc.replace("T", " ")[:16], "run": Path(e.path).name,
            "program": _program(e), "commit": e.git_commit or "-",
            "GPU": e.gpu.removeprefix("NVIDIA ") or "-", "step ms": step, "top finding": top}


def _fit(columns: list[str], rows: list[dict[str, str]], width: int,
         stacked: bool) -> dict[str, int] | None:
    """Content widths of ``columns`` within ``width``, or None when they cannot fit. ``stacked``:
    the run cell holds the run's name over its program. The run's name, commit and step stay whole;
    the program, top finding and GPU wrap at their spaces, no narrower than their floors (the run's
    name, PROGRAM_FLOOR, the longest id or word), then get back what room is left, the nearest to
    its whole cell first."""
    def longest(c: str) -> int:
        return max(len(c), *(len(r[c]) for r in rows))

    def word(c: str) -> int:
        return min(max(max(len(w) for w in r[c].split()) for r in rows), WORD_MAX)

    natural = {c: longest(c) for c in columns}
    name = min(max(len(r["run"]) for r in rows), RUN_MAX)
    natural["run"] = max(name, longest("program")) if stacked else name
    floor = {"run": name} if stacked else {"program": min(natural.get("program", 0), PROGRAM_FLOOR)}
    floor |= {"top finding": max(word("top finding"), len("finding")),
              "GPU": max(word("GPU"), len("GPU"))}
    out = {c: min(natural[c], floor.get(c, natural[c])) for c in columns}
    # a space either side of a cell, a rule between
    left = width - (3 * len(columns) - 1) - sum(out.values())
    if left < 0:
        return None
    for c in sorted(columns, key=lambda c: natural[c] - out[c]):  # the nearest to whole first
        more = min(natural[c] - out[c], left)
        out[c], left = out[c] + more, left - more
    return out


def render_history(entries: list[RunEntry], base: Path, console: Console) -> None:
    """One row a run, newest first, within the console's width: where not every column fits whole,
    the program, top finding and GPU wrap; narrower, the recorded time goes (the run's name ends
    with it), then the program goes under the run's name, then the commit goes."""
    if not entries:
        console.print(Text(f"no run directory under {base} or the folders in it (gpudoctor run "
                           "writes one per run)"))
        return
    rows = [_cells(e) for e in entries]
    columns = ["recorded (UTC)", "run", "program", "commit", "GPU", "step ms", "top finding"]
    title = f"Runs under {base}, newest first ({len(entries)})"
    if len({r["GPU"] for r in rows}) == 1:  # one GPU for all: named once, in the title
        columns.remove("GPU")
        title += f", all on {entries[0].gpu}" if entries[0].gpu else ""
    if all(r["commit"] == "-" for r in rows):
        columns.remove("commit")
    narrow = [c for c in columns if c not in ("recorded (UTC)", "program")]
    layouts = [(columns, False), (columns[1:], False), (narrow, True),
               ([c for c in narrow if c != "commit"], True)]
    for cols, stacked in layouts:
        widths = _fit(cols, rows, console.width, stacked)
        if widths is not None:
            break
    else:  # not even the floors fit: the narrowest layout, its wrapping columns shrunk by rich
        widths = None
    table = Table(title=title, title_justify="left", show_edge=False)
    for col in cols:
        table.add_column(col, justify="right" if col == "step ms" else "left", overflow="fold",
                         no_wrap=col in ("recorded (UTC)", "commit", "step ms"),
                         width=None if widths is None else widths[col])
    for r in rows:
        cells = {c: Text(r[c]) for c in cols}
        if stacked:
            cells["run"] = Text.assemble(r["run"], "\n", (r["program"], "dim"))
        table.add_row(*cells.values())
    console.print(table)
    note = "; run: its name (the program and its UTC start) over the program" if stacked else ""
    console.print(Text(STEP_NOTE + note, style="dim"))


# the host pace column (tryfix/host_pace.py)
PACE_NOTE = ("host pace: the trial's time a launch call over its capture's; further than "
             f"{HOST_PACE_NOTED_SHARE:.0%} from 1, a step the host holds after the knob measured at that "
             "pace, the prediction at the capture's")


def _pace(pace: float | None) -> Text:
    if pace is None:
        return Text("-")
    return Text(f"{pace:.2f}", style="yellow" if abs(pace - 1) > HOST_PACE_NOTED_SHARE else "")


_NUMERIC = ("predicted", "measured", "pred / meas", "host pace")


def _prediction_cells(e: RunEntry, p) -> dict[str, Text]:
    ratio = p.ratio
    return {"recorded (UTC)": Text(e.recorded_utc.replace("T", " ")[:16]),
            "program": Text(_program(e)), "knob": Text(p.knob), "finding": Text(p.finding or "-"),
            "predicted": Text(f"x{p.predicted_speedup:.2f}"),
            "measured": Text(f"x{p.measured_speedup:.2f}"),
            "pred / meas": Text(f"{ratio:.2f}",
                                style="" if 1 / 1.25 <= ratio <= 1.25 else "yellow"),
            "host pace": _pace(p.host_pace), "priced by": Text(p.predicted_by),
            "by": Text(p.predicted_by.split(" ")[0])}


def _prediction_layout(rows: list[dict[str, Text]], width: int) -> list[str]:
    """The predictions table's columns that fit ``width`` whole: all of them; narrower, "priced by"
    shortened to its first word ("replay", "formula"), then without the recorded time, then
    without the finding (the knob names its fix). The host pace goes where no trial has one.
    Where even the last does not fit, it is taken and its program column folds."""
    full = ["recorded (UTC)", "program", "knob", "finding", "predicted", "measured",
            "pred / meas", "host pace", "priced by"]
    if all(r["host pace"].plain == "-" for r in rows):
        full.remove("host pace")
    short = [("by" if c == "priced by" else c) for c in full]
    layouts = [full, short, short[1:], [c for c in short[1:] if c != "finding"]]

    def needed(cols: list[str]) -> int:  # a space either side of a cell, a rule between
        return sum(max(len(c), *(len(r[c].plain) for r in rows)) for c in cols) + 3 * len(cols) - 1

    return next((cols for cols in layouts if needed(cols) <= width), layouts[-1])


def render_predictions(entries: list[RunEntry], base: Path, console: Console) -> None:
    """Each --try-fixes trial's predicted speedup beside the measured one, per program, and how far
    the predictions were off over them all (by how they were priced)."""
    runs = [e for e in entries if e.predictions]
    unreadable = [Path(e.path).name for e in entries if e.report_unreadable]
    if unreadable:  # their trials cannot be counted: say so rather than count them as none
        shown = ", ".join(unreadable[:5]) + (f" and {len(unreadable) - 5} more"
                                             if len(unreadable) > 5 else "")
        console.print(Text(f"left out: {len(unreadable)} run(s) whose report.json cannot be read "
                           f"({shown}): their trials are not counted"))
    for e in entries:
        if e.trials_unreadable:  # a trial record missing a field or holding one of the wrong type
            name = Path(e.path).name
            console.print(Text(f"left out: the trials of {name}: {e.trials_unreadable}"))
    if not runs:
        console.print(Text(f"no run under {base} has a trial both predicted and measured "
                           "(gpudoctor run --try-fixes records them)"))
        return
    rows = [_prediction_cells(e, p) for e in runs for p in e.predictions]
    cols = _prediction_layout(rows, console.width)
    table = Table(title=f"Predicted vs measured, {len(rows)} trials under {base}",
                  title_justify="left", show_edge=False)
    for col in cols:
        numeric = col in _NUMERIC
        table.add_column(col, justify="right" if numeric else "left", overflow="fold",
                         no_wrap=col != "program")
    for r in rows:
        table.add_row(*(r[c] for c in cols))
    console.print(table)
    errors = prediction_errors(runs)
    lines = [f"{name}: {s['trials']} trials, median predicted / measured {s['median_ratio']:.2f}, "
             f"{s['within_1_25x']} within 1.25x" for name, s in (("all", errors["all"]),
                                                                 *errors["by"].items())
             if s["trials"]]
    console.print(Text("\n".join(lines)))
    if any(p.host_pace is not None for e in runs for p in e.predictions):
        console.print(Text(PACE_NOTE, style="dim"))
