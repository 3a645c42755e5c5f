"""``gpudoctor diff --html``: one self-contained page (inline CSS and SVG, no script, no network).

The picture is the two step breakdowns side by side on one ms scale: BEFORE's bar above AFTER's,
each segment a GPU kind or an idle cause, the same colour on both bars. Every string that comes
from a trace (kernel, op and file names) goes through ``esc`` before it joins the markup.
"""

from __future__ import annotations

from gpudoctor.core.finding import speedup_text
from gpudoctor.diff.compare import Diff, FindingChange, Row
from gpudoctor.diff.match import KernelChange
from gpudoctor.diff.samples import FASTER, SLOWER
from gpudoctor.report.escape import esc
from gpudoctor.report.html import CSS, IDLE_COLORS, KIND_COLORS

SVG_WIDTH, BAR_HEIGHT, LABEL_WIDTH, TOP = 760, 34, 70, 26
EXTRA_CSS = """
.gpud .verdict{font-size:1.25em;font-weight:700;padding:6px 12px;border-radius:6px;display:inline-block}
.gpud .v-faster{background:#f0fff4;color:#22543d}.gpud .v-slower{background:#fff5f5;color:#822727}
.gpud .v-same{background:#f7fafc;color:#2d3748}
.gpud .neg{color:#22543d}.gpud .pos{color:#9b2c2c}
.gpud svg.steps{max-width:100%;height:auto;font-size:11px}
"""


def _colors(labels: list[str]) -> dict[str, str]:
    colors, busy_i, idle_i = {}, 0, 0
    for label in labels:
        if label.startswith("idle"):
            colors[label] = IDLE_COLORS[idle_i % len(IDLE_COLORS)]
            idle_i += 1
        else:
            colors[label] = KIND_COLORS[busy_i % len(KIND_COLORS)]
            busy_i += 1
    return colors


def breakdown_svg(d: Diff) -> str:
    """The side-by-side step breakdown picture (ms per profiled step, one scale for both bars)."""
    sides = [("BEFORE", list(d.segments_before)), ("AFTER", list(d.segments_after))]
    labels = list(dict.fromkeys(label for _, segs in sides
                                for label, _ in sorted(segs, key=lambda s: -s[1])))
    order = {label: i for i, label in enumerate(labels)}
    colors = _colors(labels)
    longest = max((sum(ms for _, ms in segs) for _, segs in sides), default=0.0) or 1.0
    scale = (SVG_WIDTH - LABEL_WIDTH - 90) / longest
    height = TOP + 2 * (BAR_HEIGHT + 14) + 4
    parts = [(f'<svg class="steps" viewBox="0 0 {SVG_WIDTH} {height}" width="{SVG_WIDTH}" '
             f'height="{height}" role="img" xmlns="http://www.w3.org/2000/svg"><title>Step '
             'breakdown, before and after</title>'),
             f'<text x="{LABEL_WIDTH}" y="14">ms per profiled step (one scale for both bars)</text>']
    for row, (name, segs) in enumerate(sides):
        y = TOP + row * (BAR_HEIGHT + 14)
        parts.append(f'<text x="0" y="{y + BAR_HEIGHT / 2 + 4:.1f}" class="axis">{name}</text>')
        x = float(LABEL_WIDTH)
        for label, ms in sorted(segs, key=lambda s: order[s[0]]):
            w = ms * scale
            parts.append(f'<rect x="{x:.2f}" y="{y}" width="{max(w, 0.0):.2f}" '
                         f'height="{BAR_HEIGHT}" fill="{colors[label]}"><title>{esc(label)}: '
                         f'{ms:.3f} ms</title></rect>')
            x += w
        total = sum(ms for _, ms in segs)
        parts.append(
            f'<text x="{x + 6:.1f}" y="{y + BAR_HEIGHT / 2 + 4:.1f}">{total:.2f} ms</text>')
    parts.append("</svg>")
    legend = "".join('<span><i class="sw" '
                     f'style="background:{colors[label]}"></i>{esc(label)}</span>'
                     for label in labels)
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def _num(value: float | None, digits: int = 3, signed: bool = False) -> str:
    if value is None:
        return '<td class="num">-</td>'
    text = f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    extra = " neg" if signed and value < 0 else " pos" if signed and value > 0 else ""
    return f'<td class="num{extra}">{text}</td>'


def _header(d: Diff) -> str:
    s = d.step
    css = "v-faster" if d.verdict == FASTER else "v-slower" if d.verdict == SLOWER else "v-same"
    interval = ("" if s.ci_low_pct is None else
                f"; {100 * s.confidence:.0f}% interval {s.ci_low_pct:+.1f}% to "
                f"{s.ci_high_pct:+.1f}%")
    sides = "".join(
        f"<tr><th>{label}</th><td><code>{esc(side.path)}</code></td><td>{esc(side.kind)}</td>"
        f"<td>{esc(side.gpu or '-')}</td><td>{esc((side.program or {}).get('git_commit') or '-')}</td>"
        f'<td class="num">{len(side.samples)}</td></tr>'
        for label, side in (("before", d.before), ("after", d.after)))
    dropped = len(s.dropped_before) + len(s.dropped_after)
    return (
        "<header><h1>gpudoctor diff</h1>"
        f'<p><span class="verdict {css}">{esc(d.verdict)}</span> '
        f"<b>x{s.speedup:.3f}</b>: {s.before_ms:.3f} → {s.after_ms:.3f} ms mean step "
        f"({s.change_pct:+.1f}%{esc(interval)}; run-to-run floor {s.floor_pct:g}%)</p>"
        f'<p class="muted">samples: {esc(d.samples_kind)} step times, {s.n_before} before and '
        f'{s.n_after} after'
        f" ({esc(s.method)}{f'; {dropped} outliers left out' if dropped else ''})</p>"
        '<table><thead><tr><th></th><th>path</th><th>kind</th><th>GPU</th><th>commit</th>'
        f'<th class="num">samples</th></tr></thead><tbody>{sides}</tbody></table>'
        + "".join(f'<p class="warn">⚠ {esc(w)}</p>' for w in (*d.step.notes, *d.warnings))
        + "</header>"
    )


def _finding_row(f: FindingChange) -> str:
    predicted = ("-" if f.saving_before_ms is None
                 else f"{f.saving_before_ms:.3f} ms ({speedup_text(f.predicted_speedup)})")
    measured = "-"
    if f.status == "resolved" and f.measured_saving_ms is not None:
        measured = f"{f.measured_saving_ms:.3f} ms" + (f" (x{f.measured_speedup:.2f})"
                                                       if f.measured_speedup else "")
    return (f"<tr><td>{esc(f.status)}</td><td><code>{esc(f.id)}</code> {esc(f.title)}</td>"
            f'<td class="num">{esc(predicted)}</td><td class="num">{esc(measured)}</td>'
            f'{_num(f.ratio, 2)}{_num(f.saving_after_ms)}</tr>')


def _findings(d: Diff) -> str:
    if not d.findings:
        return '<section><h2>Findings</h2><p class="muted">No finding on either side.</p></section>'
    order = {"resolved": 0, "new": 1, "persisting": 2}
    rows = "".join(_finding_row(f) for f in sorted(d.findings, key=lambda f: order[f.status]))
    return ("<section><h2>Findings</h2><table><thead><tr><th>status</th><th>finding</th>"
            '<th class="num">predicted saving (before)</th><th class="num">measured</th>'
            '<th class="num">measured / predicted</th><th class="num">saving left '
            '(after)</th></tr></thead>'
            f"<tbody>{rows}</tbody></table></section>")


def _rows(title: str, rows: tuple[Row, ...]) -> str:
    if not rows:
        return ""
    body = "".join(f"<tr><td>{esc(r.name)}</td>{_num(r.before_ms)}{_num(r.after_ms)}{_num(r.delta_ms, signed=True)}"
                   "</tr>" for r in rows)
    return (f"<section><h2>{esc(title)}</h2><table><thead><tr><th></th><th class=num>before</th>"
            "<th class=num>after</th><th "
            f"class=num>delta</th></tr></thead><tbody>{body}</tbody></table></section>")


def _kernels(title: str, rows: list[KernelChange]) -> str:
    if not rows:
        return ""
    body = "".join(
        f'<tr><td class="name">{esc(k.name)}</td><td>{esc((k.before or k.after).key.op)}</td>'  # type: ignore[union-attr]
        f"{_num(k.ms_before)}{_num(k.ms_after)}{_num(k.delta_ms, signed=True)}<td>{esc(k.level)}</td></tr>"
        for k in rows)
    return (f'<section><h2>{esc(title)}</h2><div '
            'class="scroll"><table><thead><tr><th>kernel</th><th>op</th>'
            "<th class=num>before</th><th class=num>after</th><th class=num>delta</th><th>matched "
            f"by</th></tr></thead><tbody>{body}</tbody></table></div></section>")


def render_html(d: Diff) -> str:
    """The whole page."""
    body = "\n".join([
        _header(d),
        f"<section><h2>Step breakdown</h2>{breakdown_svg(d)}</section>",
        _findings(d),
        _rows("Step breakdown (ms per profiled step)", d.categories),
        _rows("GPU idle by cause (ms per profiled step)", d.idle),
        _kernels("Kernels that changed most (ms per profiled step)", d.changed_kernels()),
        _kernels("Appeared", d.appeared()),
        _kernels("Disappeared", d.disappeared()),
    ])
    return ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<link rel="icon" href="data:,">\n<title>gpudoctor diff: '
            f'{esc(d.verdict)}</title>\n</head>\n'
            f'<body>\n<div class="gpud">\n<style>{CSS}{EXTRA_CSS}</style>\n{body}\n</div>\n</body>\n</html>\n')
