"""The HTML report: renders in headless Chromium without console errors or network references,
and shows hostile trace strings (kernel names, sources, finding text) as text, never as markup."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

import pytest
from browser import load_page

from gpudoctor.core.finding import Evidence, Finding, Fix
from gpudoctor.report.html import render_html
from gpudoctor.report.model import SCHEMA_VERSION, Report
from gpudoctor.report.sections import (
    BreakdownSection,
    CeilingsSection,
    GpuSection,
    MemorySection,
    RooflineRow,
    RooflineSection,
    StepsSection,
)
from gpudoctor.report.svg import LogAxes, axes_for, plottable, roofline_svg

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"
QUOTES = 'void at::native::reduce<"quotes" & ampersands>'
CONSOLE_XSS = "<script>console.error('xss-executed')</script>"
TITLE_BREAK = "</title></circle><script>alert(3)</script>"

# H100 SXM datasheet ceilings (dense): bf16/fp16 989 TFLOP/s, tf32 494.5, fp8 1979, fp32 FMA 67;
# HBM3 3.35 TB/s
CEILINGS = CeilingsSection(
    gpu="NVIDIA H100 80GB HBM3",
    source="datasheet: NVIDIA H100 Tensor Core GPU datasheet (SXM5)",
    matrix_flops={"bf16": 989e12, "fp16": 989e12, "tf32": 494.5e12, "fp8": 1979e12, "fp32": 67e12},
    vector_flops=67e12,
    hbm_bytes_per_s=3.35e12,
    h2d_pinned_bytes_per_s=25e9,
)


def _kernel(name, kind, dtype, time_ms, flops, nbytes, bound, count=1.0):
    seconds = time_ms / 1e3
    achieved = flops / seconds if seconds else 0.0
    intensity = flops / nbytes if nbytes else 0.0
    roof = CEILINGS.matrix_flops.get(dtype, CEILINGS.vector_flops)
    attainable = min(roof, CEILINGS.hbm_bytes_per_s * intensity) if intensity else roof
    return RooflineRow(
        name=name,
        kind=kind,
        dtype=dtype,
        count_per_step=count,
        time_ms_per_step=time_ms,
        flops=flops,
        bytes=nbytes,
        achieved_flops=achieved,
        achieved_bytes_per_s=nbytes / seconds if seconds else 0.0,
        intensity=intensity,
        roof_flops=roof,
        attainable_flops=attainable,
        efficiency=achieved / attainable if attainable and achieved else 0.0,
        bound=bound,
    )


KERNELS = [
    _kernel(
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas",
        "gemm (tensor cores)",
        "bf16",
        4.2,
        2.52e12,
        1.0e10,
        "compute",
        count=48,
    ),
    _kernel(SCRIPT, "elementwise", "bf16", 1.6, 0.5e9, 4.0e9, "memory", count=96),
    _kernel(IMG, "softmax", "fp32", 0.9, 0.3e9, 2.4e9, "memory", count=24),
    _kernel(QUOTES, "reduction", "fp32", 0.5, 0.2e9, 1.2e9, "memory", count=24),
    _kernel(CONSOLE_XSS, "normalization", "bf16", 0.3, 0.1e9, 0.8e9, "memory", count=24),
    _kernel(TITLE_BREAK, "other", "", 0.05, 1e6, 2e6, "latency", count=200),
    _kernel(
        "Memcpy HtoD (Pageable -> Device)", "memcpy HtoD pageable", "", 2.1, 0.0, 1.6e8, "unknown"
    ),
    _kernel(
        "void at::native::vectorized_gather_kernel<16>",
        "index / gather",
        "",
        0.2,
        0.0,
        0.0,
        "unknown",
    ),
]
PLOTTED = 6  # the memcpy (no FLOPs) and the gather (no bytes) are left out

FINDINGS = (
    Finding(
        id="pageable-copy",
        title="Host-to-device copies from pageable memory stall the GPU",
        severity="major",
        saving_ms=2.0,
        predicted_speedup=1.16,
        summary=f"Each step copies 160 MB from pageable memory ({IMG}); the GPU waits 2.0 ms.",
        evidence=Evidence(
            numbers={"copies_per_step": 4, "pageable_bytes": 1.6e8, "GB/s": 7.6, "note": SCRIPT},
            ops=("aten::copy_", "aten::to"),
            kernels=("Memcpy HtoD (Pageable -> Device)",),
            sources=(f"/home/u/train.py:42 <module> {QUOTES}",),
        ),
        fixes=(
            Fix("Pin the loader's memory", "DataLoader(ds, pin_memory=True, num_workers=4)"),
            Fix("Copy without blocking", "x = x.to('cuda', non_blocking=True)  # if a < b & c > d"),
        ),
        wrong_fix="More DataLoader workers: the copy itself is the bottleneck, not loading.",
    ),
    Finding(
        id="unfused-elementwise",
        title="Chains of small elementwise kernels",
        severity="minor",
        saving_ms=0.9,
        predicted_speedup=1.07,
        summary=f"96 elementwise launches per step such as {SCRIPT} read and write the same tensors.",
        evidence=Evidence(numbers={"kernels_per_step": 96}, kernels=(SCRIPT, CONSOLE_XSS)),
        fixes=(Fix("Compile the model", "model = torch.compile(model)"),),
    ),
)


def make_report(kernels=KERNELS) -> Report:
    return Report(
        schema_version=SCHEMA_VERSION,
        tool_version="0.1.0",
        source=f"runs/{SCRIPT}/trace.json.gz",
        gpu=GpuSection(
            name="NVIDIA H100 80GB HBM3",
            memory_bytes=85_520_809_984,
            sm_count=132,
            compute_capability="9.0",
        ),
        ceilings=CEILINGS,
        steps=StepsSection(
            method="ProfilerStep",
            count=5,
            median_ms=12.4,
            per_step_ms=(12.6, 12.4, 12.3, 12.5, 12.2),
        ),
        step_ms=12.4,
        gpu_busy_pct=79.0,
        mfu=0.41,
        breakdown=BreakdownSection(
            busy_ms=9.8,
            idle_ms=2.6,
            kernels_per_step=440.0,
            copies_per_step=0.0,
            triton_ms=0.0,
            cuda_graph_ms=0.0,
            by_kind={
                "gemm (tensor cores)": 4.2,
                "elementwise": 1.6,
                "memcpy HtoD pageable": 2.1,
                "softmax": 0.9,
                "reduction": 0.5,
                "normalization": 0.3,
                "other": 0.2,
            },
        ),
        idle={"pageable-copy": 2.0, "dispatch": 0.4, "host-sync": 0.2, "input-pipeline": 0.0},
        roofline=RooflineSection(
            model_tflop_per_step=120.96, placed_fraction=0.83, kernels=tuple(kernels)
        ),
        memory=MemorySection(applicable=False, reason=""),
        findings=FINDINGS,
        not_applicable={"communication": f"single GPU; no NCCL kernels {IMG}"},
        warnings=(f"2 kernels of unknown kind: {QUOTES}",),
    )


@pytest.fixture(scope="module")
def page_html() -> str:
    return render_html(make_report())


@pytest.fixture(scope="module")
def page(page_html, tmp_path_factory):
    path: Path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(page_html, encoding="utf-8")
    return load_page(path)


# --- in the browser -----------------------------------------------------------------------------


def test_page_renders_findings_and_chart(page):
    for finding in FINDINGS:
        assert finding.title in page.dom
        assert finding.id in page.dom
    assert "<svg" in page.dom
    assert page.dom.count("<circle") == PLOTTED
    assert "2 of 8 kernels not plotted" in page.dom


def test_page_has_no_console_errors(page):
    assert page.console_errors == []
    assert "xss-executed" not in page.stderr


def test_hostile_names_are_text_in_the_dom(page):
    dom = page.dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "&lt;img src=x onerror=alert(2)&gt;" in dom
    assert "&lt;/title&gt;&lt;/circle&gt;&lt;script&gt;alert(3)" in dom
    assert "&quot;quotes&quot; &amp; ampersands" in dom or '"quotes" &amp; ampersands' in dom
    assert '<img src="x"' not in dom and "<img" not in dom
    assert "<script" not in dom.lower()
    assert "onerror=" not in dom.replace("onerror=alert(2)&gt;", "")


# --- pure Python --------------------------------------------------------------------------------


def test_no_network_references(page_html):
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page_html, re.IGNORECASE)
    assert "@import" not in page_html and "url(" not in page_html
    assert "<script" not in page_html.lower()


def test_trace_strings_are_escaped(page_html):
    for raw in (SCRIPT, IMG, CONSOLE_XSS, TITLE_BREAK, QUOTES):
        assert raw not in page_html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page_html
    assert "&lt;img src=x onerror=alert(2)&gt;" in page_html
    assert "reduce&lt;&quot;quotes&quot; &amp; ampersands&gt;" in page_html
    # inside the SVG tooltips too
    titles = re.findall(r"<title>(.*?)</title>", page_html, re.DOTALL)
    assert any("&lt;/title&gt;&lt;/circle&gt;&lt;script&gt;" in t for t in titles)
    assert "if a &lt; b &amp; c &gt; d" in page_html  # fix code inside <pre>


def test_fragment_mode():
    fragment = render_html(make_report(), standalone=False)
    assert not re.search(r"<(?:html|head|body)[\s>]", fragment, re.IGNORECASE)
    assert fragment.startswith('<div class="gpud">') and fragment.rstrip().endswith("</div>")
    assert "<svg" in fragment and FINDINGS[0].title in fragment
    assert make_report()._repr_html_() == fragment


def test_svg_scale_places_a_point_inside_the_plot():
    point = RooflineRow(
        name="k",
        kind="",
        dtype="",
        count_per_step=0.0,
        time_ms_per_step=1.0,
        flops=0.0,
        bytes=0.0,
        achieved_flops=1e12,
        achieved_bytes_per_s=0.0,
        intensity=10.0,
        roof_flops=0.0,
        attainable_flops=0.0,
        efficiency=0.0,
        bound="memory",
    )
    ax = axes_for(CEILINGS, [point])
    assert isinstance(ax, LogAxes)
    assert ax.x_min < 10 < ax.x_max and ax.y_min < 1e12 < ax.y_max
    px, py = ax.x(10.0), ax.y(1e12)
    assert ax.inside(px, py)
    assert ax.x(ax.x_min) == pytest.approx(ax.left) and ax.y(ax.y_max) == pytest.approx(ax.top)
    svg, skipped = roofline_svg(CEILINGS, [point])
    assert skipped == 0
    assert f'cx="{px:.1f}" cy="{py:.1f}"' in svg


def test_every_plotted_kernel_lies_inside_and_zeros_are_skipped():
    points, skipped = plottable(KERNELS)
    assert (len(points), skipped) == (PLOTTED, 2)
    ax = axes_for(CEILINGS, points)
    for p in points:
        assert ax.inside(ax.x(p.intensity), ax.y(p.achieved_flops)), p.name


def test_empty_report_renders():
    html = render_html(make_report(kernels=[]))
    assert "<svg" in html and "All 0 kernels plotted." in html


def test_kernels_per_step_counts_what_launch_bound_counts():
    """The step breakdown's kernel count is the launch-bound finding's (kernels only, an integer
    shown as one); the trace's copies and memsets are named apart."""
    from gpudoctor.pipeline import analyze_path

    report = analyze_path(Path(__file__).parent / "data" / "host_sync" / "trace.json.gz")
    launch = report.finding("launch-bound")
    assert launch is not None and launch.evidence.numbers["kernels_per_step"] == 220.0
    assert (report.breakdown.kernels_per_step, report.breakdown.copies_per_step) == (220.0, 50.0)
    page = render_html(report)
    assert "ms idle; 220 kernels and 50 copies / memsets per step</p>" in page
    counts = re.findall(
        r'</code></td><td>[^<]*</td><td>[^<]*</td><td class="num">([\d.]+)</td>', page
    )
    assert counts and not any(c.endswith(".0") for c in counts)  # the kernel table's calls per step


@pytest.mark.parametrize("gpu", ["NVIDIA H100 80GB HBM3", "NVIDIA H200"])
def test_ceiling_labels_do_not_overlap(gpu):
    """Each ceiling label's box (11 px text, as the page's CSS and the element draw it: a full em
    above the baseline, a quarter below) meets no other's; H100's fp64 and fp32 roofs are 0.15% apart."""
    from gpudoctor.hardware.ceilings import for_gpu_name

    svg, _ = roofline_svg(for_gpu_name(gpu), [])
    labels = [
        (float(y), text)
        for y, text in re.findall(
            r'<text x="[\d.]+" y="([\d.]+)" text-anchor="end" fill='
            r'[^>]*>([^<]*FLOP/s)</text>',
            svg,
        )
    ]
    assert [t.split()[0] for _, t in labels] == [
        "fp64",
        "fp32/vector",
        "tf32",
        "bf16/fp16",
        "fp8/int8",
    ]
    boxes = sorted((y - 11, y + 2.75) for y, _ in labels)
    assert all(upper[1] < lower[0] for upper, lower in pairwise(boxes)), boxes
    assert boxes[0][0] >= 16  # inside the plot: its top margin is 16 px
    assert all(
        'font-size="11"' in m for m in re.findall(r'<text [^>]*text-anchor="end" fill=[^>]*>', svg)
    )
