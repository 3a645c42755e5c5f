"""The multi-rank part of a report: the per-rank table (console and HTML) and the SVG timeline of
one step on every rank, on aligned clocks. Names and paths from the traces stay text: rich
``Text`` in the console, ``esc`` in the page."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from gpudoctor.ranks.sections import Distributed, RankRow, Timeline
from gpudoctor.report.escape import esc
from gpudoctor.report.model import Report

TIMELINE_COLORS = {"compute": "#2b6cb0", "comm": "#dd6b20"}
IDLE_COLOR = "#edf2f7"
ROW_H, LABEL_W, SVG_W, AXIS_H = 18, 70, 900, 22
MAX_ROWS = 64  # a larger job's table and timeline show the first 64 ranks; the JSON has them all


def _idle_text(row: RankRow, top: int = 2) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in list(row.idle.items())[:top]) or "-"


def ranks_table(r: Report) -> Table:
    t = Table(title="ranks (ms per step; clocks aligned on the collectives or send/recv)",
              title_justify="left")
    for name, justify in (("rank", "right"), ("step", "right"), ("busy", "right"),
                          ("idle", "right"), ("top idle causes", "left"), ("comm", "right"),
                          ("exposed", "right"), ("waits", "right"), ("makes others wait", "right"),
                          ("verdict", "left")):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in r.ranks[:MAX_ROWS]:
        t.add_row(str(row.rank), f"{row.step_ms:.2f}", f"{row.busy_ms:.2f}", f"{row.idle_ms:.2f}",
                  Text(_idle_text(row)), f"{row.comm_ms:.2f}", f"{row.comm_exposed_ms:.2f}",
                  f"{row.comm_wait_ms:.2f}", f"{row.wait_imposed_ms:.2f}",
                  Text("straggler", style="bold red") if row.straggler else Text(""))
    return t


def summary_text(d: Distributed) -> str:
    """The job in a line: ranks, matched collectives, exposed communication split, the pipeline."""
    e, pp = d.exposed_comm, d.pipeline
    return (
        f"{d.world_size} ranks, {d.matched_collectives} collectives matched; exposed communication "
        f"{e.exposed_ms:.2f} ms per step = wait for the slowest {e.wait_for_slowest_ms:.2f} + "
        f"overlap not taken {e.overlap_not_taken_ms:.2f} + transfer {e.transfer_ms:.2f}" + (
            f"; pipeline of {pp.stages} stages, {pp.microbatches} micro-batches: bubble "
            f"{pp.bubble_ms:.2f} ms per step on rank {pp.slowest_rank} (formula: "
            f"{100 * pp.expected_share_of_step:.0f}% of the step)"
            if pp else ""))


def ranks_summary(r: Report) -> Text:
    return Text(summary_text(r.distributed) if r.distributed is not None else "")


def _offset_text(row: RankRow) -> str:
    """The offset with its uncertainty where one is stated (ranks/align.py)."""
    unc = row.clock.uncertainty_us if row.clock is not None else None
    return f"{row.clock_offset_us:.1f}" + (f" &plusmn; {unc:.1f}" if unc else "")


def ranks_html(r: Report) -> str:
    head = ("<tr><th>rank</th><th>host</th><th>step ms</th><th>busy ms</th><th>idle ms</th><th>top "
            "idle causes</th><th>comm ms</th><th>exposed ms</th><th>waits ms</th><th>makes others "
            "wait ms</th><th>clock offset us</th><th>how</th><th>verdict</th></tr>")
    body = "".join(
        f"<tr><td>{esc(row.rank)}</td><td>{esc(row.hostname or '')}</td><td>{row.step_ms:.2f}</td>"
        f"<td>{row.busy_ms:.2f}</td><td>{row.idle_ms:.2f}</td><td>{esc(_idle_text(row, 3))}</td>"
        f"<td>{row.comm_ms:.2f}</td><td>{row.comm_exposed_ms:.2f}</td><td>{row.comm_wait_ms:.2f}</td>"
        f"<td>{row.wait_imposed_ms:.2f}</td><td>{_offset_text(row)}</td>"
        f"<td>{esc(row.clock.method if row.clock is not None else '')}</td>"
        f"<td>{'<b>straggler</b>' if row.straggler else ''}</td></tr>"
        for row in r.ranks[:MAX_ROWS])
    d = r.distributed
    return ("<section><h2>Ranks</h2>"
            f'<p class="muted">{esc(summary_text(d) if d is not None else "")}</p>'
            f"<table>{head}{body}</table>"
            f"{timeline_svg(d.timeline if d is not None else None)}</section>")


def timeline_svg(tl: Timeline | None) -> str:
    """One step on every rank: compute (blue), communication (orange), idle (grey), on rank 0's
    clock."""
    if tl is None or not tl.ranks or tl.span_us <= 0:
        return ""
    ranks, span = tl.ranks[:MAX_ROWS], tl.span_us
    scale = (SVG_W - LABEL_W - 10) / span
    height = len(ranks) * ROW_H + AXIS_H

    def x(us: float) -> float:
        return LABEL_W + max(us, 0.0) * scale

    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_W}" height="{height}" '
             f'role="img" aria-label="one step on every rank"><title>step {esc(tl.step)} on '
             'every rank, '
             "aligned clocks</title>")]
    for i, row in enumerate(ranks):
        y = i * ROW_H
        parts.append(f'<text x="4" y="{y + ROW_H - 5}" font-size="11">rank {esc(row.rank)}</text>')
        parts.append(f'<rect x="{x(row.start_us):.1f}" y="{y + 2}" '
                     f'width="{(row.end_us - row.start_us) * scale:.1f}" height="{ROW_H - 4}" '
                     f'fill="{IDLE_COLOR}"><title>idle</title></rect>')
        for a, b, kind in row.bars:
            color = TIMELINE_COLORS.get(kind, "#718096")
            parts.append(f'<rect x="{x(a):.1f}" y="{y + 2}" '
                         f'width="{max((b - a) * scale, 0.5):.1f}" height="{ROW_H - 4}" '
                         f'fill="{color}"><title>{esc(kind)} {a / 1e3:.3f}-{b / 1e3:.3f} '
                         'ms</title></rect>')
    y = len(ranks) * ROW_H + 14
    parts.append(f'<text x="{LABEL_W}" y="{y}" font-size="11">0 ms</text>')
    parts.append(f'<text x="{SVG_W - 10}" y="{y}" font-size="11" '
                 f'text-anchor="end">{span / 1e3:.2f} ms · <tspan fill="#2b6cb0">compute</tspan> · '
                 '<tspan fill="#dd6b20">communication</tspan> · <tspan fill="#a0aec0">idle (light '
                 'grey)</tspan></text>')
    parts.append("</svg>")
    return "".join(parts)
