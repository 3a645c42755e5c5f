"""``gpudoctor bench``: measure this card's ceilings and health, save them as its machine profile.

The saved profile (hardware/machine.py) is what ``analyze`` and ``run`` use afterwards for traces
of a GPU with the same name; the report header then says "measured <date> on <uuid>".
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpudoctor.errors import InputError
from gpudoctor.hardware.ceilings import Ceilings, from_spec
from gpudoctor.hardware.health import HealthReading, health_findings, read_health
from gpudoctor.hardware.machine import ceilings_from, save_profile
from gpudoctor.hardware.probe import Measurement, ProbePlan, run_probes
from gpudoctor.hardware.specs import find_spec
from gpudoctor.rules.finding import Finding

# probe -> (datasheet key in Ceilings.matrix_flops, or an attribute of Ceilings)
_VS_DATASHEET = {
    "gemm.fp32": "fp32", "gemm.tf32": "tf32", "gemm.bf16": "bf16", "gemm.fp16": "fp16", "gemm.fp8": "fp8",
    "hbm.read": "hbm", "hbm.write": "hbm", "hbm.copy": "hbm", "hbm.triad": "hbm",
    "h2d.pinned": "pcie", "d2h.pinned": "pcie", "h2d.pageable": "pcie",
}


@dataclass
class BenchResult:
    gpu: str
    uuid: str
    measured_utc: str
    measurements: list[Measurement]
    health: HealthReading
    findings: list[Finding]
    ceilings: Ceilings
    datasheet: Ceilings | None
    profile_path: Path | None = None
    notes: list[str] = field(default_factory=list)

    def vs_datasheet(self, m: Measurement) -> float | None:
        key = _VS_DATASHEET.get(m.probe)
        sheet = self.datasheet
        if key is None or sheet is None or m.value <= 0:
            return None
        ref = {"hbm": sheet.hbm_bytes_per_s, "pcie": sheet.h2d_pinned_bytes_per_s}.get(key, sheet.matrix_flops.get(key))
        return m.value / ref if ref else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": "1.0",
            "gpu": self.gpu,
            "uuid": self.uuid,
            "measured_utc": self.measured_utc,
            "measurements": [dict(m.to_dict(), vs_datasheet=self.vs_datasheet(m)) for m in self.measurements],
            "health": {"readings": self.health.readings, "unreadable": self.health.unreadable,
                       "error": self.health.error},
            "findings": [f.to_dict() for f in self.findings],
            "ceilings": self.ceilings.to_dict(),
            "datasheet": self.datasheet.to_dict() if self.datasheet else None,
            "notes": self.notes,
        }


def plan_lines(quick: bool) -> list[str]:
    """What a bench run would do (``--dry-run``)."""
    plan = ProbePlan(quick=quick)
    return [f"probe {name}" for name in plan.names()] + ["read NVML health", "save the machine profile"]


def run_bench(quick: bool = False, save: bool = True, progress: Callable[[str], None] | None = None) -> BenchResult:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        raise InputError("bench needs PyTorch with CUDA") from None
    if not torch.cuda.is_available():
        raise InputError("bench measures a CUDA GPU and none is visible here (torch.cuda.is_available() is False); "
                         "`gpudoctor bench --dry-run` lists what it would measure")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    health = read_health()
    uuid = str(health.readings.get("uuid") or getattr(props, "uuid", "") or props.name)
    notes = []
    if health.error:
        notes.append(health.error)
    if (health.readings.get("other_processes") or 0) > 1:
        notes.append("other processes were using the GPU: figures may be low")
    measurements = run_probes(ProbePlan(quick=quick), progress)
    spec = find_spec(props.name)
    if spec is None:
        notes.append(f"no datasheet row for {props.name!r}: measured ceilings only, no % of spec")
    ceilings = ceilings_from(measurements, props.name, uuid, props.total_memory)
    result = BenchResult(
        gpu=props.name,
        uuid=uuid,
        measured_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        measurements=measurements,
        health=health,
        findings=health_findings(health),
        ceilings=ceilings,
        datasheet=from_spec(spec) if spec else None,
        notes=notes,
    )
    if save:
        result.profile_path = save_profile(uuid, result.to_dict())
    return result


def render_bench_html(result: BenchResult) -> str:
    from gpudoctor.report.svg import roofline_svg

    measured = result.ceilings.to_dict()
    svg, _ = roofline_svg(measured, [], reference=result.datasheet.to_dict() if result.datasheet else None)
    rows = "".join(
        f"<tr><td>{html.escape(m.probe)}</td><td class=num>{html.escape(_fmt(m))}</td>"
        f"<td class=num>{'' if result.vs_datasheet(m) is None else f'{100 * result.vs_datasheet(m):.0f} %'}</td></tr>"
        for m in result.measurements
    )
    health = "".join(f"<li>{html.escape(f.title)}: {html.escape(f.summary)}</li>" for f in result.findings) or "<li>healthy</li>"
    return (
        "<!DOCTYPE html><html><head><meta charset=utf-8><title>gpudoctor bench</title><link rel=icon href=\"data:,\">"
        "<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:60em}td,th{padding:2px 10px}"
        ".num{text-align:right}</style></head><body>"
        f"<h1>gpudoctor bench: {html.escape(result.gpu)}</h1><p>{html.escape(result.uuid)} · "
        f"{html.escape(result.measured_utc)}</p><h2>Measured roofline</h2>{svg}"
        "<p>Solid: measured; dashed: datasheet.</p>"
        f"<h2>Ceilings</h2><table><tr><th>probe</th><th>measured</th><th>of datasheet</th></tr>{rows}</table>"
        f"<h2>Health</h2><ul>{health}</ul></body></html>"
    )


def _fmt(m: Measurement) -> str:
    if m.unit == "FLOP/s":
        return f"{m.value / 1e12:.1f} TFLOP/s"
    if m.unit == "B/s":
        return f"{m.value / 1e9:.1f} GB/s"
    return f"{m.value * 1e6:.2f} us"
