"""A bench run for people: the terminal table (each ceiling measured vs datasheet, then the health)
and the HTML page with the measured roofline."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.bench import BenchResult
from gpudoctor.hardware.probe import Measurement
from gpudoctor.report.escape import esc
from gpudoctor.report.svg import roofline_svg


def render_console(result: BenchResult, console: Console) -> None:
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
        console.print(Text(f"NVML could not read: {', '.join(result.health.unreadable)}",
                           style="dim"))
    for note in result.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    if result.profile_path:
        console.print(Text(f"machine profile saved: {result.profile_path} (analyze and run use it "
                           "for this GPU)",
                           style="dim"))


def render_html(result: BenchResult) -> str:
    svg, _ = roofline_svg(result.ceilings, [], reference=result.datasheet)
    rows = "".join(
        f"<tr><td>{esc(m.probe)}</td><td class=num>{esc(_fmt(m))}</td>"
        f"<td class=num>{_pct(result.vs_datasheet(m))}</td></tr>"
        for m in result.measurements
    )
    health = ("".join(f"<li>{esc(f.title)}: {esc(f.summary)}</li>" for f in result.findings)
              or "<li>healthy</li>")
    return (
        "<!DOCTYPE html><html><head><meta charset=utf-8><title>gpudoctor bench</title><link "
        "rel=icon href=\"data:,\"><style>body{font-family:system-ui,sans-serif;margin:2em;max-width:60em}td,th{padding:2px 10px}"
        ".num{text-align:right}</style></head><body>"
        f"<h1>gpudoctor bench: {esc(result.gpu)}</h1><p>{esc(result.uuid)} · "
        f"{esc(result.measured_utc)}</p><h2>Measured roofline</h2>{svg}"
        "<p>Solid: measured; dashed: datasheet.</p>"
        "<h2>Ceilings</h2><table><tr><th>probe</th><th>measured</th><th>of "
        f"datasheet</th></tr>{rows}</table><h2>Health</h2><ul>{health}</ul></body></html>"
    )


def _pct(ratio: float | None) -> str:
    return "" if ratio is None else f"{100 * ratio:.0f} %"


def _fmt(m: Measurement) -> str:
    if m.unit == "FLOP/s":
        return f"{m.value / 1e12:.1f} TFLOP/s"
    if m.unit == "B/s":
        return f"{m.value / 1e9:.1f} GB/s"
    return f"{m.value * 1e6:.2f} us"
