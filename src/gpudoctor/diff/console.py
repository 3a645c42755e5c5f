"""``gpudoctor diff`` in the terminal (rich). Every string from a trace goes in as ``Text``, never
as markup: a kernel named ``[bold]x`` prints as written."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpudoctor.core.finding import speedup_text
from gpudoctor.diff.compare import Diff, FindingChange, Row
from gpudoctor.diff.match import KernelChange
from gpudoctor.diff.samples import FASTER, SLOWER, UNKNOWN

VERDICT_STYLE = {FASTER: "bold green", SLOWER: "bold red", UNKNOWN: "bold yellow"}
KERNEL_ROWS = 10


def _ms(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _signed(value: float, digits: int = 3) -> str:
    return f"{value:+.{digits}f}"


def verdict_line(d: Diff) -> Text:
    """One line: the verdict, the speedup, both step times, the change and its interval."""
    s = d.step
    text = Text()
    text.append(d.verdict.upper() if d.verdict in (FASTER, SLOWER) else d.verdict,
                VERDICT_STYLE.get(d.verdict, "bold"))
    text.append(f"  x{s.speedup:.3f}" if s.after_ms > 0 else "")
    text.append(f"  {s.before_ms:.3f} -> {s.after_ms:.3f} ms mean step ({s.change_pct:+.1f}%")
    if s.ci_low_pct is not None and s.ci_high_pct is not None:
        text.append(
            f"; {100 * s.confidence:.0f}% interval {s.ci_low_pct:+.1f}% to {s.ci_high_pct:+.1f}%")
    text.append(f"; run-to-run floor {s.floor_pct:g}%)")
    return text


def samples_line(d: Diff) -> Text:
    s = d.step
    where = "unprofiled steps timed by gpudoctor run (env.json)" if d.samples_kind == "unprofiled" else \
        "profiled steps of the traces"
    line = f"{where}: {s.n_before} before, {s.n_after} after; {s.method}"
    dropped = [*(f"{v:.3g}" for v in s.dropped_before), *(f"{v:.3g}" for v in s.dropped_after)]
    if dropped:
        line += f"; outliers left out: {', '.join(dropped)} ms"
    return Text(line)


def _header(d: Diff) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for label, side in (("before", d.before), ("after", d.after)):
        what = f"{side.path}  ({side.kind}"
        what += f"; {side.gpu})" if side.gpu else ")"
        commit = side.program.get("git_commit") if side.program else None
        if commit:
            what += f"  commit {commit}"
        grid.add_row(label, Text(what))
    grid.add_row("samples", samples_line(d))
    grid.add_row("verdict", verdict_line(d))
    return Panel(grid, title="gpudoctor diff", expand=False)


def _findings(d: Diff) -> Table | None:
    if not d.findings:
        return None
    table = Table(title="Findings", title_justify="left", show_edge=False)
    for col in ("status", "id", "predicted saving", "measured", "measured / predicted",
                "saving left"):
        table.add_column(col, justify="left" if col in ("status", "id") else "right")
    order = {"resolved": 0, "new": 1, "persisting": 2}
    for f in sorted(d.findings, key=lambda f: order[f.status]):
        table.add_row(Text(f.status,
                           style={"resolved": "green", "new": "red"}.get(f.status, "")), Text(f.id),
                      *_finding_cells(f))
    return table


def _finding_cells(f: FindingChange) -> tuple[str, str, str, str]:
    predicted = ("-" if f.saving_before_ms is None
                 else f"{f.saving_before_ms:.3f} ms ({speedup_text(f.predicted_speedup)})")
    measured = ratio = "-"
    if f.status == "resolved" and f.measured_saving_ms is not None:
        measured = f"{f.measured_saving_ms:.3f} ms" + (f" (x{f.measured_speedup:.2f})"
                                                       if f.measured_speedup else "")
        ratio = "-" if f.ratio is None else f"{f.ratio:.2f}"
    after = "-" if f.saving_after_ms is None else f"{f.saving_after_ms:.3f} ms"
    return predicted, measured, ratio, after


def _rows_table(title: str, rows: tuple[Row, ...]) -> Table | None:
    if not rows:
        return None
    table = Table(title=title, title_justify="left", show_edge=False)
    table.add_column("")
    for col in ("before", "after", "delta"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(Text(r.name), _ms(r.before_ms), _ms(r.after_ms), _signed(r.delta_ms))
    return table


def _kernel_table(title: str, rows: list[KernelChange]) -> Table | None:
    if not rows:
        return None
    table = Table(title=title, title_justify="left", show_edge=False)
    table.add_column("kernel", overflow="fold")
    for col in ("before", "after", "delta", "calls b/a"):
        table.add_column(col, justify="right")
    table.add_column("matched by")
    for k in rows:
        calls = f"{k.before.calls_per_step if k.before else 0:g}/{k.after.calls_per_step if k.after else 0:g}"
        key = (k.before or k.after).key  # type: ignore[union-attr]
        name = Text(k.name)
        if key.op:
            shapes = key.shapes if len(key.shapes) <= 48 else key.shapes[:47] + "…"
            name.append(f"  ({key.op}{' ' + shapes if shapes else ''})", style="dim")
        table.add_row(name, _ms(k.ms_before), _ms(k.ms_after), _signed(k.delta_ms), calls,
                      Text(k.level))
    return table


def render_console(d: Diff, console: Console) -> None:
    parts: list = [_header(d)]
    for note in d.step.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    for table in (
        _findings(d),
        _rows_table("Step breakdown (ms per profiled step)", d.categories),
        _rows_table("GPU idle by cause (ms per step)", d.idle),
        _kernel_table("Kernels that changed most (ms per profiled step)",
                      d.changed_kernels(KERNEL_ROWS)),
        _kernel_table("Appeared", d.appeared(KERNEL_ROWS)),
        _kernel_table("Disappeared", d.disappeared(KERNEL_ROWS)),
    ):
        if table is not None:
            parts.append(Text(""))
            parts.append(table)
    for w in d.warnings:
        parts.append(Text(f"warning: {w}", style="yellow"))
    console.print(Group(*parts))
