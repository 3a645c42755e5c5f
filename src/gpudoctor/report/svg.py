"""The roofline chart as inline SVG: log-log axes, one roof per dtype, kernels as circles.

x is arithmetic intensity (FLOP/byte), y is achieved FLOP/s. The roofs are drawn as
min(roof, bandwidth x intensity): the memory diagonal from ``hbm_bytes_per_s`` up to the highest
roof, then a horizontal line per dtype from its ridge point (roof / bandwidth) to the right edge.
A circle's area is proportional to the kernel's time per step; its colour says what bounds it.
Every string from the trace goes through ``esc`` (report/escape.py), titles included.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpudoctor.report.escape import esc
from gpudoctor.report.sections import RooflineRow

WIDTH, HEIGHT = 760, 440
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 92, 16, 16, 48
MAX_RADIUS, MIN_RADIUS = 18.0, 2.5

BOUND_COLORS = {
    "compute": "#2b6cb0",
    "memory": "#dd6b20",
    "latency": "#c53030",
    "unknown": "#718096",
}
ROOF_COLOR, VECTOR_COLOR, DIAGONAL_COLOR = "#2d3748", "#805ad5", "#38a169"
# A ceiling label's text box: the font size it is drawn at (set on the element, so a page's CSS
# cannot change it) from a full em above its baseline to a quarter em below (descenders); labels
# stack at least LABEL_GAP apart. H100's fp64 (66.9 TFLOP/s) and fp32 (67) roofs are one line apart
# by a pixel: their labels stepped 12 px and their boxes of ~14 px overlapped.
LABEL_PX = 11
LABEL_ASCENT, LABEL_DESCENT, LABEL_GAP = LABEL_PX, 0.25 * LABEL_PX, 1.0


class Roofs(Protocol):
    """What the chart draws of a set of ceilings: a report's ``CeilingsSection``, or the
    ``hardware.ceilings.Ceilings`` that ``gpudoctor bench`` measured or the datasheet gives."""

    @property
    def matrix_flops(self) -> Mapping[str, float]: ...  # dtype -> FLOP/s

    @property
    def vector_flops(self) -> float: ...

    @property
    def hbm_bytes_per_s(self) -> float: ...


@dataclass(frozen=True)
class _Span:
    """The roofs of two sets of ceilings at once, for the axes only (``_merged``)."""

    matrix_flops: Mapping[str, float]
    vector_flops: float
    hbm_bytes_per_s: float


def si(value: float, unit: str) -> str:
    """1.23e12 -> '1.23 T<unit>'."""
    if not math.isfinite(value) or value == 0:
        return f"0 {unit}"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


@dataclass(frozen=True)
class LogAxes:
    """Decade-aligned log-log scale from data values to SVG pixels."""

    x_min: float
    x_max: float
    y_min: float
    y_max: float

    left: float = MARGIN_LEFT
    right: float = WIDTH - MARGIN_RIGHT
    top: float = MARGIN_TOP
    bottom: float = HEIGHT - MARGIN_BOTTOM

    def x(self, value: float) -> float:
        span = math.log10(self.x_max) - math.log10(self.x_min)
        return self.left + (math.log10(value) - math.log10(self.x_min)) / span * (self.right
                                                                                  - self.left)

    def y(self, value: float) -> float:
        span = math.log10(self.y_max) - math.log10(self.y_min)
        return self.bottom - (math.log10(value) - math.log10(self.y_min)) / span * (
            self.bottom - self.top)

    def inside(self, px: float, py: float) -> bool:
        return self.left <= px <= self.right and self.top <= py <= self.bottom


def plottable(kernels: Sequence[RooflineRow]) -> tuple[list[RooflineRow], int]:
    """Kernels with a positive intensity and achieved FLOP/s, and how many were left out."""
    keep = [k for k in kernels if _positive(k.intensity) and _positive(k.achieved_flops)]
    return keep, len(kernels) - len(keep)


def axes_for(ceilings: Roofs, points: Sequence[RooflineRow]) -> LogAxes:
    """Decades that hold every roof, the ridge points and every point, with some room around."""
    roofs = _roofs(ceilings)
    bw = float(ceilings.hbm_bytes_per_s)
    xs = [float(p.intensity) for p in points]
    ys = [float(p.achieved_flops) for p in points]
    ridges = [r / bw for _, r in roofs if bw > 0]
    # data get a factor of 2 of room, so that no circle sits on the frame
    x_lo = min([x / 2 for x in xs] + [r / 100 for r in ridges] + [0.1])
    x_hi = max([x * 2 for x in xs] + [r * 10 for r in ridges] + [100.0])
    top = max(ys + [r for _, r in roofs] + [1e9])
    y_lo = min([y / 2 for y in ys] + [top / 1e4])
    return LogAxes(
        x_min=10 ** math.floor(math.log10(x_lo)),
        x_max=10 ** math.ceil(math.log10(x_hi * 1.0001)),
        y_min=10 ** math.floor(math.log10(y_lo)),
        y_max=10 ** math.ceil(math.log10(top * 1.5)),
    )


def roofline_svg(
    ceilings: Roofs, kernels: Sequence[RooflineRow], reference: Roofs | None = None
) -> tuple[str, int]:
    """The chart's markup and the number of kernels that could not be placed on it.

    ``reference``: other ceilings (the datasheet's, next to measured ones) drawn dashed.
    """
    points, skipped = plottable(kernels)
    ax = axes_for(ceilings if reference is None else _merged(ceilings, reference), points)
    parts = [
        (f'<svg class="roofline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
         f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="Roofline chart">'),
        (f'<rect x="{ax.left}" y="{ax.top}" width="{ax.right - ax.left}" '
         f'height="{ax.bottom - ax.top}" fill="#fff" stroke="#cbd5e0"/>'),
        *_grid(ax),
        *(_roof_lines(ax, reference, dashed=True) if reference else []),
        *_roof_lines(ax, ceilings),
        *_circles(ax, points),
        "</svg>",
    ]
    return "\n".join(parts), skipped


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _roofs(ceilings: Roofs) -> list[tuple[str, float]]:
    """(label, FLOP/s) per distinct roof; dtypes sharing a peak share a line ("bf16/fp16")."""
    named = [(str(d), float(v)) for d, v in ceilings.matrix_flops.items() if _positive(v)]
    vector = ceilings.vector_flops
    if _positive(vector):
        named.append(("vector", float(vector)))
    merged: dict[float, list[str]] = {}
    for name, value in named:
        merged.setdefault(value, []).append(name)
    return [("/".join(names), value) for value, names in merged.items()]


def _decades(lo: float, hi: float) -> list[float]:
    return [10.0**e for e in range(round(math.log10(lo)), round(math.log10(hi)) + 1)]


def _grid(ax: LogAxes) -> list[str]:
    out = []
    for v in _decades(ax.x_min, ax.x_max):
        px = ax.x(v)
        out.append(
            f'<line x1="{px:.1f}" y1="{ax.top}" x2="{px:.1f}" y2="{ax.bottom}" class="grid"/>')
        out.append(f'<text x="{px:.1f}" y="{ax.bottom + 16}" text-anchor="middle">{v:g}</text>')
    for v in _decades(ax.y_min, ax.y_max):
        py = ax.y(v)
        out.append(
            f'<line x1="{ax.left}" y1="{py:.1f}" x2="{ax.right}" y2="{py:.1f}" class="grid"/>')
        out.append(
            f'<text x="{ax.left - 6}" y="{py + 4:.1f}" '
            f'text-anchor="end">{esc(si(v, "FLOP/s"))}</text>')
    mid_x, mid_y = (ax.left + ax.right) / 2, (ax.top + ax.bottom) / 2
    out.append(f'<text x="{mid_x:.0f}" y="{HEIGHT - 10}" text-anchor="middle" class="axis">'
               "arithmetic intensity (FLOP/byte)</text>")
    out.append(f'<text x="14" y="{mid_y:.0f}" text-anchor="middle" class="axis" '
               f'transform="rotate(-90 14 {mid_y:.0f})">achieved FLOP/s</text>')
    return out


def _merged(a: Roofs, b: Roofs) -> Roofs:
    """Ceilings whose roofs span both sets (for the axes only)."""
    matrix = {f"{k}@a": v for k, v in a.matrix_flops.items()}
    matrix.update({f"{k}@b": v for k, v in b.matrix_flops.items()})
    return _Span(matrix, max(a.vector_flops, b.vector_flops),
                 a.hbm_bytes_per_s or b.hbm_bytes_per_s)


def _roof_lines(ax: LogAxes, ceilings: Roofs, dashed: bool = False) -> list[str]:
    roofs = sorted(((d, r) for d, r in _roofs(ceilings) if ax.y_min <= r <= ax.y_max),
                   key=lambda dr: -dr[1])
    bw = float(ceilings.hbm_bytes_per_s)
    out = []
    if bw > 0 and roofs:
        x0 = max(ax.x_min, ax.y_min / bw)
        x1 = min(ax.x_max, roofs[0][1] / bw)
        if x1 > x0:
            out.append(_line(ax, x0, bw * x0, x1, bw * x1, DIAGONAL_COLOR, "roof", dashed))
            if not dashed:
                out.append(_diagonal_label(ax, x0, x1, bw))
    for dtype, roof in reversed(roofs):  # lowest first
        x0 = max(ax.x_min, roof / bw) if bw > 0 else ax.x_min
        color = VECTOR_COLOR if "vector" in dtype else ROOF_COLOR
        cls = "roof vector" if "vector" in dtype else "roof"
        out.append(_line(ax, x0, roof, ax.x_max, roof, color, cls, dashed))
    if dashed:
        return out  # datasheet roofs: lines only, the legend says what dashes are
    for (dtype, roof), y in zip(reversed(roofs),
                                label_baselines(ax, [r for _, r in reversed(roofs)])):
        color = VECTOR_COLOR if "vector" in dtype else ROOF_COLOR
        out.append(f'<text x="{ax.right - 4}" y="{y:.1f}" text-anchor="end" fill="{color}" '
                   f'font-size="{LABEL_PX}">{esc(dtype)} {esc(si(roof, "FLOP/s"))}</text>')
    return out


def label_box(baseline: float) -> tuple[float, float]:
    """(top, bottom) in pixels of a ceiling label drawn at ``baseline``."""
    return baseline - LABEL_ASCENT, baseline + LABEL_DESCENT


def label_baselines(ax: LogAxes, roofs: list[float]) -> list[float]:
    """Baselines of the labels of ``roofs`` (FLOP/s, lowest first): each just above its line,
    right-aligned, and where roofs lie close together stepped up until no two boxes (``label_box``)
    meet. Labels that would then rise above the plot are stepped down from its top instead."""
    step = LABEL_ASCENT + LABEL_DESCENT + LABEL_GAP
    out: list[float] = []
    for roof in roofs:
        out.append(min(ax.y(roof) - 4, out[-1] - step) if out else ax.y(roof) - 4)
    lowest_top = ax.top + LABEL_ASCENT  # the highest baseline whose box stays inside the plot
    for i in range(len(out) - 1, -1, -1):  # from the top label down: none above the frame, none meeting
        limit = lowest_top if i == len(out) - 1 else out[i + 1] + step
        out[i] = max(out[i], limit)
    return out


def _diagonal_label(ax: LogAxes, x0: float, x1: float, bw: float) -> str:
    """'HBM 3.35 TB/s' along the diagonal, at its geometric middle, above the line."""
    mid = math.sqrt(x0 * x1)
    px, py = ax.x(mid), ax.y(bw * mid)
    angle = math.degrees(math.atan2(ax.y(bw * x1) - ax.y(bw * x0), ax.x(x1) - ax.x(x0)))
    return (f'<text x="{px:.1f}" y="{py - 6:.1f}" text-anchor="middle" fill="{DIAGONAL_COLOR}" '
            f'transform="rotate({angle:.1f} {px:.1f} {py:.1f})">HBM {esc(si(bw, "B/s"))}</text>')


def _line(ax: LogAxes, x0: float, y0: float, x1: float, y1: float, color: str, cls: str,
          dashed: bool = False) -> str:
    dash = ' stroke-dasharray="6 4" opacity="0.6"' if dashed else ""
    return (f'<line x1="{ax.x(x0):.1f}" y1="{ax.y(y0):.1f}" x2="{ax.x(x1):.1f}" '
            f'y2="{ax.y(y1):.1f}" stroke="{color}" class="{cls}"{dash}/>')


def _circles(ax: LogAxes, points: Sequence[RooflineRow]) -> list[str]:
    biggest = max((p.time_ms_per_step for p in points), default=0.0)
    out = []
    # largest first, so that small circles stay on top and keep their tooltips reachable
    for p in sorted(points, key=lambda p: -p.time_ms_per_step):
        t = p.time_ms_per_step
        r = max(MIN_RADIUS, MAX_RADIUS * math.sqrt(t / biggest)) if biggest > 0 else MIN_RADIUS
        color = BOUND_COLORS.get(p.bound, BOUND_COLORS["unknown"])
        out.append(f'<circle cx="{ax.x(float(p.intensity)):.1f}" '
                   f'cy="{ax.y(float(p.achieved_flops)):.1f}" r="{r:.1f}" '
                   f'fill="{color}"><title>{esc(point_title(p))}</title></circle>')
    return out


def point_title(p: RooflineRow) -> str:
    """Tooltip text (not yet escaped): name, kind, dtype, time, TFLOP/s, GB/s, efficiency."""
    return "\n".join([
        p.name,
        f"kind: {p.kind}   dtype: {p.dtype or '-'}   bound: {p.bound}",
        f"time: {p.time_ms_per_step:.3f} ms/step",
        f"achieved: {p.achieved_flops / 1e12:.2f} TFLOP/s, {p.achieved_bytes_per_s / 1e9:.1f} GB/s",
        f"intensity: {p.intensity:.3g} FLOP/byte   efficiency: {100 * p.efficiency:.1f} %",
    ])
