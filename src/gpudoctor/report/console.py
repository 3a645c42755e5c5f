"""Terminal report (rich): header, breakdown bar, idle causes, top findings with their first fix."""

from __future__ import annotations

import io

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpudoctor.core.finding import speedup_text, step_after_text
from gpudoctor.report.model import Report, Reports
from gpudoctor.report.ranks_section import ranks_summary, ranks_table

SEVERITY_STYLE = {"critical": "bold white on red", "major": "bold red", "minor": "yellow",
                  "info": "dim"}
_BAR_COLORS = ["green", "cyan", "blue", "magenta", "bright_green", "bright_cyan",
               "bright_blue", "white"]
_IDLE_COLORS = {"input-pipeline": "red", "host-sync": "bright_red", "dispatch": "yellow",
                "host-work": "orange3",
               "op-setup": "orchid"}
BAR_WIDTH = 60
MAX_FINDINGS = 8
MAX_HOST_OPS = 10
AUTOGRAD_PREFIX = "autograd::engine::evaluate_function: "  # its category says backward


def render_console(report: Report | Reports, console: Console,
                   max_findings: int = MAX_FINDINGS) -> None:
    """Print the report on ``console`` (the command line gives a report/safe.py ``SafeConsole``)."""
    if isinstance(report, Reports):
        _render_each(report, console, max_findings)
        return
    console.print(_header(report))
    if report.host_only:
        _render_host(report, console, max_findings)
        return
    console.print(_breakdown(report))
    console.print()
    if report.ranks:  # a multi-rank report: the ranks side by side first
        console.print(ranks_table(report))
        console.print(ranks_summary(report))
        console.print()
    if any(v > 0 for v in report.idle.values()):
        console.print(_idle_table(report))
        console.print()
    console.print(_findings(report, max_findings))
    for note in report.warnings:
        console.print(Text(f"note: {note}", style="dim"))
    for name, reason in report.not_applicable.items():
        console.print(Text(f"{name}: not applicable — {reason}", style="dim"))


def _render_each(many: Reports, console: Console, max_findings: int) -> None:
    """Traces that are not one job's ranks: each report in turn, headed by its file."""
    n = len(many.reports)
    console.print(Text(f"{n} traces, diagnosed one by one: they are not the ranks of one job "
                       f"({many.why}). For a multi-GPU analysis pass the ranks of one distributed "
                       "run (its run directory, or its rank traces).", style="bold"))
    for i, report in enumerate(many.reports, 1):
        console.print()
        console.rule(Text(f"{i}/{n}: {report.source}"), style="bold")
        render_console(report, console, max_findings)


def render_text(report: Report | Reports, width: int = 100) -> str:
    """The console report as plain text, no colour (``str(report)``)."""
    buffer = io.StringIO()
    plain = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    render_console(report, plain)
    return buffer.getvalue()


def _header(r: Report) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    # a long path folds onto the next line: never cut to ".../data/sa..."
    grid.add_column(overflow="fold")
    grid.add_row("trace", Text(r.source, overflow="fold"))
    if r.host_only:
        grid.add_row("GPU", Text("none: no GPU work was recorded (device: cpu)"))
    else:
        grid.add_row("GPU", Text(r.gpu.name or "not named in the trace"))
        grid.add_row("ceilings", Text(f"{r.ceilings.source}"))
    mfu = ("n/a (no ceilings)" if r.roofline.unavailable else f"{100 * r.mfu:.1f}%"
           if r.mfu_known else "n/a (no FLOPs recorded)")
    where = "host (CPU) time" if r.host_only else f"GPU busy {r.gpu_busy_pct:.1f}%; MFU {mfu}"
    marked = r.steps.source or r.steps.method
    profiled = f"{r.step_ms:.3f} ms mean over {r.steps.count} steps ({marked}); {where}"
    if r.unprofiled_step_ms is not None:
        # the program as it runs: timed without the profiler; the profiled step beside it
        grid.add_row("step", Text(f"{r.unprofiled_text()}, timed without the profiler"))
        grid.add_row("profiled", Text(profiled))
    else:
        grid.add_row("step", Text(profiled))
    generate = r.steps.generate
    if generate is not None and generate.decode_ms_per_token is not None:
        grid.add_row("generate", Text(f"{generate.forwards_per_call} forwards per call; prefill "
                                      f"{generate.prefill_ms or 0:.2f} ms, decode "
                                      f"{generate.decode_ms_per_token:.2f} ms per token "
                                      "(unprofiled)"))
    return Panel(grid, title="gpudoctor", expand=False)


def _render_host(r: Report, console: Console, max_findings: int = MAX_FINDINGS) -> None:
    """A CPU-only report: the host's step by category and its top-level ops; no GPU findings. A CPU
    job's ranks (gloo) come first, with their findings (straggler, exposed communication)."""
    if r.ranks:
        console.print(ranks_table(r))
        console.print(ranks_summary(r))
        console.print()
    console.print(_host_breakdown(r))
    console.print()
    if r.host is not None and r.host.ops:
        console.print(_host_ops(r))
        console.print()
    if r.findings:
        console.print(_findings(r, max_findings))
    else:
        console.print(Text("No GPU findings: no GPU work was recorded in this window.",
                           style="yellow"))
    for note in r.warnings:
        console.print(Text(f"note: {note}", style="dim"))


def _host_breakdown(r: Report) -> Group:
    step = max(r.step_ms, 1e-9)
    bar = Text()
    legend = Table.grid(padding=(0, 2))
    legend.add_column()
    legend.add_column(justify="right")
    legend.add_column(justify="right")
    for i, (label, ms) in enumerate((r.host.by_category if r.host is not None else {}).items()):
        color = _BAR_COLORS[i % len(_BAR_COLORS)]
        bar.append("█" * round(BAR_WIDTH * ms / step), style=color)
        legend.add_row(Text("■ ", style=color) + Text(label), f"{ms:.3f} ms",
                       f"{100 * ms / step:.1f}%")
    return Group(Text("Host breakdown (per step, CPU time)", style="bold"), bar, legend)


def _host_ops(r: Report) -> Table:
    table = Table(title="Top host ops (top-level, per step)", title_justify="left",
                  title_style="bold", show_edge=False)
    table.add_column("op", no_wrap=True, overflow="ellipsis")
    table.add_column("category", no_wrap=True)
    table.add_column("calls/step", justify="right", no_wrap=True)
    table.add_column("ms/step", justify="right", no_wrap=True)
    table.add_column("% of step", justify="right", no_wrap=True)
    for op in (r.host.ops if r.host is not None else ())[:MAX_HOST_OPS]:
        table.add_row(op.name.removeprefix(AUTOGRAD_PREFIX), op.category, f"{op.calls_per_step:g}",
                      f"{op.ms_per_step:.3f}", f"{100 * op.ms_per_step / max(r.step_ms, 1e-9):.1f}")
    return table


def _breakdown(r: Report) -> Group:
    step = max(r.step_ms, 1e-9)
    parts = [(seg.label, seg.ms, _IDLE_COLORS.get(seg.cause, "bright_black") if seg.idle
              else _BAR_COLORS[seg.rank % len(_BAR_COLORS)]) for seg in r.step_segments()]
    bar = Text()
    legend = Table.grid(padding=(0, 2))
    legend.add_column()
    legend.add_column(justify="right")
    legend.add_column(justify="right")
    for label, ms, color in parts:
        cells = round(BAR_WIDTH * ms / step)
        bar.append("█" * cells, style=color)
        if ms / step >= 0.005:
            legend.add_row(Text("■ ", style=color) + Text(label), f"{ms:.3f} ms",
                           f"{100 * ms / step:.1f}%")
    return Group(Text("Step breakdown (per step)", style="bold"), bar, legend)


def _idle_table(r: Report) -> Table:
    table = Table(title="GPU idle by cause", title_justify="left", title_style="bold",
                  show_edge=False)
    table.add_column("cause")
    table.add_column("ms / step", justify="right")
    table.add_column("% of step", justify="right")
    for cause, ms in r.idle.items():
        if ms > 0:
            table.add_row(cause, f"{ms:.3f}", f"{100 * ms / max(r.step_ms, 1e-9):.1f}")
    return table


def _findings(r: Report, limit: int) -> Group:
    if not r.findings:
        return Group(
            Text("No findings: nothing in this trace costs a measurable share of the step.",
                 style="green"))
    verdict = r.verdict()
    items: list[RenderableType] = [
        Text(f"Verdict: {verdict.text}", style="green" if verdict.status == "healthy" else "bold"),
        Text(f"Findings, ranked by time saved per step ({len(r.findings)})", style="bold"),
    ]
    together = r.all_fixes
    if together is not None:
        after = step_after_text(together.step_after_ms, together.predicted_speedup)
        items.append(Text(f"All {len(together.ids)} replayed fixes together: "
                          f"{together.step_ms:.3f} -> {after} a step "
                          f"({speedup_text(together.predicted_speedup)})"))
    else:  # no fix replayed: the one reason the whole step was priced by its rules' formulas
        reasons = {f.evidence.numbers.get("priced_by_formula_because") for f in r.findings}
        if len(reasons) == 1 and None not in reasons:
            items.append(Text(f"Priced by formula: {reasons.pop()}", style="dim"))
    for rank, f in enumerate(r.findings[:limit], 1):
        head = Text(f"{rank}. ")
        head.append(f"[{f.severity}]", style=SEVERITY_STYLE.get(f.severity, ""))
        head.append(f" {f.id}", style="bold")
        head.append(f"  save ~{f.saving_ms:.3f} ms/step ({speedup_text(f.predicted_speedup)})")
        priced_by = f.evidence.numbers.get("priced_by")
        if priced_by:  # replayed step, or the rule's formula where the fix is not a graph edit
            head.append(f"  [{priced_by}]", style="dim")
        before = r.held_back_behind(rank - 1)
        if before:
            head.append(f"  (after {', '.join(before)}: "
                        f"{'its fix comes' if len(before) == 1 else 'their fixes come'} first)",
                        style="dim")
        items.append(head)
        body: list[RenderableType] = [Text(f.summary)]
        replayed = f.replayed_note()
        if replayed is not None:
            body.append(Text(replayed, style="dim"))
        where = f.evidence.sources or f.evidence.ops or f.evidence.kernels
        if where:
            body.append(Text(f"at: {', '.join(where[:3])}", style="dim"))
        if f.fixes:
            body.append(Text(f"fix: {f.fixes[0].title}", style="green"))
            if f.fixes[0].code:
                body.append(Padding(Text(f.fixes[0].code.splitlines()[0], style="green dim"),
                                    (0, 0, 0, 5)))
        knobs = f.knob_note()
        if knobs is not None:
            body.append(Text(knobs, style="dim"))
        items.append(Padding(Group(*body), (0, 0, 0, 3)))
    if len(r.findings) > limit:
        items.append(Text(f"... {len(r.findings) - limit} more in --json / --html", style="dim"))
    return Group(*items)
