"""The Report as one self-contained HTML file: inline CSS and SVG, no script, no network.

``render_html(report)`` returns a full page; ``render_html(report, standalone=False)`` returns a
``<div>`` fragment (its CSS scoped under ``.gpud``) for Jupyter's ``_repr_html_``. Every string
that comes from the trace is passed through ``esc`` before it joins the markup.
"""

from __future__ import annotations

from typing import Any

from gpudoctor.core.finding import Finding, speedup_text
from gpudoctor.report.escape import esc
from gpudoctor.report.model import Report
from gpudoctor.report.sections import AnnotatedTraceSection, RooflineRow
from gpudoctor.report.svg import BOUND_COLORS, roofline_svg, si
from gpudoctor.trace.kernels import short_name

TOP_KERNELS = 15
KIND_COLORS = ("#2b6cb0", "#3182ce", "#63b3ed", "#805ad5", "#b794f4", "#38a169", "#68d391",
               "#d69e2e", "#f6ad55", "#dd6b20", "#e53e3e", "#319795", "#4fd1c5", "#975a16")
IDLE_COLORS = ("#4a5568", "#718096", "#a0aec0", "#cbd5e0", "#2d3748", "#e2e8f0",
               "#1a202c", "#edf2f7")

CSS = """
.gpud{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
 color:#1a202c;line-height:1.45;max-width:1100px;margin:0 auto;padding:8px 16px}
.gpud h1{font-size:1.5em;margin:.3em 0}.gpud h2{font-size:1.2em;margin:1.4em 0 .5em;
 border-bottom:1px solid #e2e8f0;padding-bottom:.2em}.gpud h3{font-size:1.05em;margin:.2em 0}
.gpud code,.gpud pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em}
.gpud pre{background:#f7fafc;border:1px solid #e2e8f0;border-radius:4px;padding:8px;overflow-x:auto}
.gpud .meta{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:8px}
.gpud .meta div{background:#f7fafc;border-radius:6px;padding:6px 10px}
.gpud .meta b{display:block;font-size:1.15em}.gpud .meta span{color:#4a5568;font-size:.85em}
.gpud .warn{background:#fffaf0;border-left:4px solid #dd6b20;padding:4px 10px;margin:6px 0}
.gpud .na{color:#4a5568}
.gpud .bar{display:flex;height:28px;border-radius:4px;overflow:hidden;border:1px solid #cbd5e0}
.gpud .bar div{height:100%}
.gpud .legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:6px 0;font-size:.88em}
.gpud .sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:4px;
 vertical-align:-1px}
.gpud table{border-collapse:collapse;font-size:.88em;margin:4px 0}
.gpud th,.gpud td{padding:3px 8px;border-bottom:1px solid #edf2f7;text-align:left;vertical-align:top}
.gpud th{background:#f7fafc}.gpud .num{text-align:right;font-variant-numeric:tabular-nums;
 white-space:nowrap}
.gpud td.name{min-width:240px;max-width:420px;word-break:break-all}
.gpud .scroll{overflow-x:auto}
.gpud svg.roofline{max-width:100%;height:auto;font-size:11px}
.gpud svg .grid{stroke:#edf2f7}.gpud svg .roof{stroke-width:2}.gpud svg .vector{stroke-dasharray:6 4}
.gpud svg text{fill:#4a5568}.gpud svg .axis{font-size:12px;fill:#1a202c}
.gpud svg circle{fill-opacity:.6;stroke:#1a202c;stroke-width:.6}
.gpud .finding{border:1px solid #e2e8f0;border-left-width:6px;border-radius:6px;padding:8px 14px;
 margin:12px 0}
.gpud .badge{display:inline-block;color:#fff;border-radius:10px;padding:0 9px;font-size:.8em;
 font-weight:600;margin-right:6px;vertical-align:2px}
.gpud .sev-critical{border-left-color:#c53030}.gpud .badge.sev-critical{background:#c53030}
.gpud .sev-major{border-left-color:#dd6b20}.gpud .badge.sev-major{background:#dd6b20}
.gpud .sev-minor{border-left-color:#d69e2e}.gpud .badge.sev-minor{background:#b7791f}
.gpud .sev-info{border-left-color:#718096}.gpud .badge.sev-info{background:#718096}
.gpud .fid{color:#4a5568;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.85em}
.gpud .wrong{background:#fff5f5;border-left:4px solid #c53030;padding:4px 10px}
.gpud .muted{color:#718096;font-size:.88em}
.gpud .verdict{font-weight:600;margin:.4em 0 .8em}.gpud .verdict.healthy{color:#2f855a}
"""


def render_html(report: Report, standalone: bool = True) -> str:
    """The report as HTML: a whole page, or a fragment for notebooks."""
    if report.host_only:
        sections = [_header(report), _host_breakdown(report), _host_ops(report), _findings(report)]
    else:
        sections = [_header(report), _breakdown(report), _idle_table(report), _roofline(report),
                    _kernel_table(report), _findings(report)]
    # a multi-rank report (GPU or CPU job): the ranks and their timeline after the header
    if report.ranks:
        # imported here: it brings rich (the console's table), which one trace's page never needs
        from gpudoctor.report.ranks_section import ranks_html

        sections.insert(1, ranks_html(report))
    body = "\n".join(sections)
    fragment = f'<div class="gpud">\n<style>{CSS}</style>\n{body}\n</div>'
    if not standalone:
        return fragment
    title = esc(f"gpudoctor: {'CPU-only' if report.host_only else report.gpu.name or 'GPU'} report")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<link rel="icon" href="data:,">\n<title>{title}</title>\n</head>\n'
        f"<body>\n{fragment}\n</body>\n</html>\n"
    )


def with_section(page: str, section: str) -> str:
    """``page`` (``render_html``'s) with ``section`` added as its last section: inside the report's
    container, where its styles reach it (after ``</div>`` the page's own serif font and bare
    tables)."""
    end = page.rfind("</body>")
    end = len(page) if end < 0 else end
    at = page.rfind("</div>", 0, end)  # the container's end: the last element the body holds
    at = end if at < 0 else at
    return page[:at] + section + "\n" + page[at:]


# --- header -------------------------------------------------------------------------------------


def _unprofiled_cell(r: Report) -> tuple[str, str] | None:
    """The step timed without the profiler, its standard error and the steps it comes from."""
    if r.unprofiled_step_ms is None:
        return None
    u = r.unprofiled
    value = f"{r.unprofiled_step_ms:.2f} ms"
    label = "unprofiled step" + (" (CPU)" if r.host_only else "")
    if u is not None and u.steps:
        value += f" ± {u.spread_ms:.2f}"
        # int(): env.json may write the count 5.0
        label += f", {int(u.steps)} steps" + ("" if u.trusted else ", uncertain")
    return esc(value), esc(label)


def _header(r: Report) -> str:
    steps = r.steps
    if r.host_only:
        cells = [
            ("none", "GPU: no GPU work recorded (device: cpu)"),
            (f"{r.step_ms:.2f} ms", "step time (mean, CPU)"),
            (f"{esc(steps.count)}", f"steps ({esc(steps.method)})"),
        ]
    else:
        cells = [
            (esc(r.gpu.name or "unknown GPU"), "GPU"),
            (f"{r.step_ms:.2f} ms", "step time (mean)"),
            (f"{r.gpu_busy_pct:.1f} %", "GPU busy"),
            (f"{100 * r.mfu:.1f} %" if r.mfu_known else "n/a", "MFU"),
            (f"{esc(steps.count)}", f"steps ({esc(steps.method)})"),
        ]
    unprofiled = _unprofiled_cell(r)
    if unprofiled is not None:
        cells.insert(1, unprofiled)  # the program's step as it runs, before the profiled one
    meta = "".join(f"<div><b>{value}</b><span>{label}</span></div>" for value, label in cells)
    parts = [
        "<header>",
        "<h1>gpudoctor report</h1>",
        (f'<p class="muted">trace <code>{esc(r.source)}</code> · gpudoctor {esc(r.tool_version)}'
         f" · schema {esc(r.schema_version)}"
         + ("" if r.host_only else f"<br>ceilings: {esc(r.ceilings.source or 'unknown')}") + "</p>"),
        f'<div class="meta">{meta}</div>',
        *(f'<p class="warn">⚠ {esc(w)}</p>' for w in r.warnings),
    ]
    if r.not_applicable:
        items = "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in r.not_applicable.items())
        parts.append(
            f'<p class="na">Analyses not applicable to this trace:</p><ul class="na">{items}</ul>')
    parts.append("</header>")
    return "\n".join(parts)


# --- step breakdown -----------------------------------------------------------------------------


def _segments(r: Report) -> list[tuple[str, float, str]]:
    """(label, ms per step, colour) of the model's bar segments (Report.step_segments)."""
    out = []
    for seg in r.step_segments():
        colors = IDLE_COLORS if seg.idle else KIND_COLORS
        out.append((seg.label, seg.ms, colors[seg.rank % len(colors)]))
    return out


def _breakdown(r: Report) -> str:
    segs = _segments(r)
    total = sum(ms for _, ms, _ in segs)
    if total <= 0:
        return '<section><h2>Step breakdown</h2><p class="muted">No GPU time in the steps.</p></section>'
    bar = "".join(
        f'<div style="width:{100 * ms / total:.3f}%;background:{color}" title="{esc(label)}: '
        f'{ms:.3f} ms">'
        "</div>" for label, ms, color in segs
    )
    legend = "".join(
        f'<span><i class="sw" style="background:{color}"></i>{esc(label)} {ms:.2f} ms</span>'
        for label, ms, color in segs
    )
    b = r.breakdown
    launches = f"{_count(b.kernels_per_step)} kernels" + (
        f" and {_count(b.copies_per_step)} copies / memsets" if b.copies_per_step else "")
    return (
        "<section><h2>Step breakdown</h2>"
        f'<p class="muted">per step: {b.busy_ms:.2f} ms busy + {b.idle_ms:.2f} ms idle; '
        f"{launches} per step</p>"
        f'<div class="bar">{bar}</div><div class="legend">{legend}</div></section>'
    )


def _count(value: float) -> str:
    """A per-step count: ``220``, not ``220.0``; ``2.5`` when the steps differ."""
    return f"{value:.0f}" if value == round(value) else f"{value:.1f}"


def _idle_table(r: Report) -> str:
    rows = [(c, ms) for c, ms in sorted(r.idle.items(), key=lambda kv: -kv[1]) if ms > 0]
    if not rows:
        return '<section><h2>Idle causes</h2><p class="muted">The GPU was never idle in the steps.</p></section>'
    body = "".join(
        f'<tr><td>{esc(cause)}</td><td class="num">{ms:.3f}</td>'
        f'<td class="num">{_pct(ms, r.step_ms)}</td></tr>' for cause, ms in rows
    )
    return (
        "<section><h2>Idle causes</h2><table><thead><tr><th>cause</th>"
        '<th class="num">ms / step</th><th class="num">% of step</th></tr></thead>'
        f"<tbody>{body}</tbody></table></section>"
    )


# --- host (CPU-only traces) ---------------------------------------------------------------------


def _host_breakdown(r: Report) -> str:
    by_category = r.host.by_category if r.host is not None else {}
    parts = [(k, ms) for k, ms in by_category.items() if ms > 0]
    total = sum(ms for _, ms in parts)
    if total <= 0:
        return '<section><h2>Host breakdown</h2><p class="muted">No host time in the steps.</p></section>'
    colors = [KIND_COLORS[i % len(KIND_COLORS)] for i in range(len(parts))]
    bar = "".join(
        f'<div style="width:{100 * ms / total:.3f}%;background:{c}" title="{esc(label)}: {ms:.3f} '
        'ms"></div>'
        for (label, ms), c in zip(parts, colors)
    )
    rows = "".join(
        f'<tr><td><i class="sw" style="background:{c}"></i>{esc(label)}</td><td '
        f'class="num">{ms:.3f}</td><td class="num">{_pct(ms, r.step_ms)}</td></tr>'
        for (label, ms), c in zip(parts, colors)
    )
    return (
        "<section><h2>Host breakdown</h2>"
        '<p class="muted">per step, CPU time on the step thread: top-level ops by category; '
        "python / untraced is the rest of the step (the interpreter between ops).</p>"
        f'<div class="bar">{bar}</div><table><thead><tr><th>category</th><th class="num">ms / '
        'step</th><th class="num">% of '
        f'step</th></tr></thead><tbody>{rows}</tbody></table></section>'
    )


def _host_ops(r: Report) -> str:
    ops = r.host.ops if r.host is not None else ()
    if not ops:
        return ""
    rows = "".join(
        f'<tr><td class="name"><code>{esc(op.name)}</code></td><td>{esc(op.category)}</td>'
        + _num(f"{op.calls_per_step:g}") + _num(f"{op.ms_per_step:.3f}")
        + _num(_pct(op.ms_per_step, r.step_ms)) + "</tr>"
        for op in ops
    )
    return (
        '<section><h2>Top host ops</h2><div '
        'class="scroll"><table><thead><tr><th>op</th><th>category</th><th class="num">calls / '
        'step</th><th class="num">ms / step</th><th class="num">% of step</th></tr>'
        f"</thead><tbody>{rows}</tbody></table></div></section>"
    )


# --- roofline -----------------------------------------------------------------------------------


def _roofline(r: Report) -> str:
    kernels = r.roofline.kernels
    svg, skipped = roofline_svg(r.ceilings, kernels)
    legend = "".join(f'<span><i class="sw" style="background:{c}"></i>{b}-bound</span>'
                     for b, c in BOUND_COLORS.items())
    note = (f"{skipped} of {len(kernels)} kernels not plotted (no FLOPs or no bytes known)."
            if skipped else f"All {len(kernels)} kernels plotted.")
    placed = 100 * r.roofline.placed_fraction
    return (
        "<section><h2>Roofline</h2>"
        f'<p class="muted">Circle area ∝ time per step; hover a circle for details. {note} '
        f"{placed:.0f} % of kernel time has known FLOPs or bytes.</p>"
        f'{svg}<div class="legend">{legend}</div></section>'
    )


def _kernel_table(r: Report) -> str:
    kernels = sorted(r.roofline.kernels, key=lambda k: -k.time_ms_per_step)
    if not kernels:
        return ""
    head = ("<tr><th>kernel</th><th>kind</th><th>dtype</th><th class='num'>calls / step</th>"
            "<th class='num'>ms / step</th><th class='num'>% of step</th><th "
            "class='num'>TFLOP/s</th><th class='num'>GB/s</th><th class='num'>FLOP/byte</th><th "
            "class='num'>efficiency</th><th>bound</th></tr>")
    rows = "".join(_kernel_row(k, r.step_ms) for k in kernels[:TOP_KERNELS])
    more = (f'<p class="muted">{len(kernels) - TOP_KERNELS} more kernels not shown.</p>'
            if len(kernels) > TOP_KERNELS else "")
    return (f'<section><h2>Top kernels</h2><div class="scroll"><table><thead>{head}</thead>'
            f"<tbody>{rows}</tbody></table></div>{more}</section>")


def _kernel_row(k: RooflineRow, step_ms: float) -> str:
    ms = k.time_ms_per_step
    cells = [
        f'<td class="name" title="{esc(k.name)}"><code>{esc(short_name(k.name))}</code></td>',
        f"<td>{esc(k.kind)}</td>",
        f"<td>{esc(k.dtype or '-')}</td>",
        _num(_count(k.count_per_step)),
        _num(f"{ms:.3f}"),
        _num(_pct(ms, step_ms)),
        _num(f"{k.achieved_flops / 1e12:.2f}"),
        _num(f"{k.achieved_bytes_per_s / 1e9:.1f}"),
        _num(f"{k.intensity:.3g}"),
        _num(f"{100 * k.efficiency:.1f} %"),
        f"<td>{esc(k.bound)}</td>",
    ]
    return f"<tr>{''.join(cells)}</tr>"


# --- findings -----------------------------------------------------------------------------------


def _findings(r: Report) -> str:
    if not r.findings and r.host_only:
        return ('<section><h2>Findings</h2><p class="muted">No GPU findings: no GPU work was '
                'recorded in this '
                "window.</p></section>")
    if not r.findings:
        return '<section><h2>Findings</h2><p class="muted">No findings: nothing to fix here.</p></section>'
    v = r.verdict()
    verdict = f'<p class="verdict{" healthy" if v.status == "healthy" else ""}">Verdict: {esc(v.text)}</p>'
    return ("<section><h2>Findings</h2>" + verdict
            + "".join(_finding(f, _trace_note(r.annotated_trace, f.id), r.held_back_behind(i))
                      for i, f in enumerate(r.findings))
            + "</section>")


def _trace_note(trace: AnnotatedTraceSection | None, finding_id: str) -> str:
    """Where the finding lies in the annotated trace: ui.perfetto.dev cannot open a local file from
    a link, so the note names the file, the track and the slice, and when it starts."""
    place = trace.findings.get(finding_id) if trace is not None and trace.file else None
    if trace is None or place is None:
        return ""
    return (f'<p class="muted">In the annotated trace <code>{esc(trace.file)}</code> (open it at '
            'ui.perfetto.dev or in '
            f"chrome://tracing): track <code>{esc(place.track)}</code>, slice "
            f"<code>{esc(place.slice)}</code>, {place.from_start_ms:.3f} ms after the "
            f"trace's start (ts {esc(place.ts_us)} µs); placed by {esc(place.placed_by)}.</p>")


def _finding(f: Finding, trace_note: str = "", after: list[str] | None = None) -> str:
    sev = f.severity if f.severity in ("critical", "major", "minor", "info") else "info"
    note = f.replayed_note()
    beyond = "" if note is None else f'<p class="muted">{esc(note)}</p>'
    held = (f" · listed after {esc(', '.join(after))}: "
            f"{'its fix comes' if len(after) == 1 else 'their fixes come'} first" if after else "")
    parts = [
        f'<article class="finding sev-{sev}">',
        f'<h3><span class="badge sev-{sev}">{esc(f.severity)}</span>{esc(f.title)}</h3>',
        (f'<p class="muted"><span class="fid">{esc(f.id)}</span> · saves ≈ {f.saving_ms:.2f} ms '
         'per step'
         f" · predicted speedup {speedup_text(f.predicted_speedup, '×')}{held}</p>"),  # noqa: RUF001 - the multiplication sign
        f"<p>{esc(f.summary)}</p>",
        beyond,
        _evidence(f),
        trace_note,
    ]
    if f.fixes:
        items = "".join(
            f"<li>{esc(fix.title)}"
            + (f"<pre><code>{esc(fix.code)}</code></pre>" if fix.code else "") + "</li>"
            for fix in f.fixes
        )
        parts.append(f"<p><b>Fixes, in order:</b></p><ol>{items}</ol>")
    knobs = f.knob_note()
    if knobs is not None:
        parts.append(f'<p class="muted">{esc(knobs)}</p>')
    if f.wrong_fix:
        parts.append(f'<p class="wrong"><b>Won\'t help:</b> {esc(f.wrong_fix)}</p>')
    parts.append("</article>")
    return "\n".join(parts)


def _evidence(f: Finding) -> str:
    ev = f.evidence
    out = []
    if ev.numbers:
        rows = "".join(f'<tr><td>{esc(k)}</td><td class="num">{esc(_value(v))}</td></tr>'
                       for k, v in ev.numbers.items())
        out.append(f"<table><tbody>{rows}</tbody></table>")
    for label, items in (("ops", ev.ops), ("kernels", ev.kernels), ("sources", ev.sources)):
        if items:
            shown = short_name if label == "kernels" else str
            lis = "".join(f'<li title="{esc(item)}"><code>{esc(shown(item))}</code></li>'
                          for item in items)
            out.append(f"<p><b>{label}</b></p><ul>{lis}</ul>")
    return "<details open><summary>evidence</summary>" + "".join(out) + "</details>" if out else ""


# --- formatting ---------------------------------------------------------------------------------


def _num(text: str) -> str:
    return f'<td class="num">{esc(text)}</td>'


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole > 0 else "-"


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return si(v, "").strip() if abs(v) >= 1e6 else f"{v:.4g}"
    return str(v)
