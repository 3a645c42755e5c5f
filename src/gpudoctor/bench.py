"""``gpudoctor bench``: measure this card's ceilings and health, save them as its machine profile.

The saved profile (hardware/machine.py) is what ``analyze`` and ``run`` use afterwards for traces
of a GPU with the same name; the report header then says "measured <date> on <uuid>".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpudoctor.core.finding import Finding
from gpudoctor.errors import InputError
from gpudoctor.hardware.ceilings import Ceilings, from_spec
from gpudoctor.hardware.health import HealthReading, health_findings, read_health
from gpudoctor.hardware.kinds import ELEMENTWISE_KINDS, kind_probes
from gpudoctor.hardware.machine import ceilings_from, save_profile
from gpudoctor.hardware.probe import Measurement, ProbePlan, run_probes
from gpudoctor.hardware.shapes import shape_probes
from gpudoctor.hardware.specs import find_spec

# probe -> (datasheet key in Ceilings.matrix_flops, or an attribute of Ceilings)
_VS_DATASHEET = {
    "gemm.fp32": "fp32", "gemm.tf32": "tf32", "gemm.bf16": "bf16", "gemm.fp16": "fp16",
    "gemm.fp8": "fp8", "hbm.read": "hbm", "hbm.write": "hbm", "hbm.copy": "hbm", "hbm.triad": "hbm",
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
    collectives: dict[str, Any] = field(default_factory=dict)  # NCCL curves (2+ GPUs)
    gemm_grid: dict[str, Any] = field(default_factory=dict)  # bf16 (M, N, K) grid (hardware/shapes.py)
    attention_grid: dict[str, Any] = field(default_factory=dict)  # causal SDPA (seq, head_dim)
    elementwise: dict[str, Any] = field(default_factory=dict)  # bytes/s by kernel kind (hardware/kinds.py)
    optimizer: dict[str, Any] = field(default_factory=dict)  # torch.optim.AdamW foreach / fused
    overlap: dict[str, Any] = field(default_factory=dict)  # compute under NCCL (hardware/overlap.py, 2+ GPUs)

    def vs_datasheet(self, m: Measurement) -> float | None:
        key = _VS_DATASHEET.get(m.probe)
        sheet = self.datasheet
        if key is None or sheet is None or m.value <= 0:
            return None
        ref = {"hbm": sheet.hbm_bytes_per_s,
               "pcie": sheet.h2d_pinned_bytes_per_s}.get(key, sheet.matrix_flops.get(key))
        return m.value / ref if ref else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": "1.0",
            "gpu": self.gpu,
            "uuid": self.uuid,
            "measured_utc": self.measured_utc,
            "measurements": [dict(m.to_dict(), vs_datasheet=self.vs_datasheet(m))
                             for m in self.measurements],
            "health": {"readings": self.health.readings, "unreadable": self.health.unreadable,
                       "error": self.health.error},
            "findings": [f.to_dict() for f in self.findings],
            "ceilings": self.ceilings.to_dict(),
            "datasheet": self.datasheet.to_dict() if self.datasheet else None,
            "notes": self.notes,
            "collectives": self.collectives,
            "gemm_grid": self.gemm_grid,
            "attention_grid": self.attention_grid,
            "elementwise": self.elementwise,
            "optimizer": self.optimizer,
            "overlap": self.overlap,
        }


def plan_lines(quick: bool) -> list[str]:
    """What a bench run would do (``--dry-run``)."""
    plan = ProbePlan(quick=quick)
    sizes = "4" if quick else "7"
    shapes = [f"probe gemm_grid: bf16 M x N x K, each of {sizes} sizes 256..16384",
              "probe attention_grid: causal SDPA, seq 512..8192, head_dim 64/128",
              f"probe elementwise: bytes/s of {', '.join(ELEMENTWISE_KINDS)}",
              "probe optimizer: torch.optim.AdamW step, foreach and fused, over bf16 parameters"]
    multi = [("with 2+ GPUs: peer-to-peer copy, NCCL all-reduce / all-gather / reduce-scatter 1 "
              "KiB..4 GiB (torchrun)"),
             ("with 2+ GPUs: overlap: GEMM and memory-bound throughput under a concurrent NCCL "
              "all-reduce, and the all-reduce under GEMMs (torchrun)")]
    return [f"probe {name}" for name in plan.names()] + shapes + multi + [
        "read NVML health", "save the machine profile"]


def run_bench(
    quick: bool = False,
    save: bool = True,
    progress: Callable[[str], None] | None = None,
    collectives: bool | None = None,
    max_bytes: str = "4GiB",
    shapes: bool = True,
) -> BenchResult:
    """``collectives``: NCCL curves across the GPUs (default: with 2+ GPUs, not in --quick).
    ``shapes``: the GEMM and attention grids, the elementwise-kind and optimizer rates that ``plan
    train --bench`` reads (hardware/shapes.py, hardware/kinds.py); with collectives, also compute
    under an overlapped all-reduce (hardware/overlap.py)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        raise InputError("bench needs PyTorch with CUDA") from None
    if not torch.cuda.is_available():
        raise InputError("bench measures a CUDA GPU and none is visible here "
                         "(torch.cuda.is_available() is False); `gpudoctor bench --dry-run` lists "
                         "what it would measure")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    health = read_health()
    uuid = str(health.readings.get("uuid") or getattr(props, "uuid", "") or props.name)
    notes = []
    if health.error:
        notes.append(health.error)
    if (health.readings.get("other_processes") or 0) > 1:
        notes.append("other processes were using the GPU: figures may be low")
    measurements = run_probes(ProbePlan(quick=quick), progress)
    grids = shape_probes(ProbePlan(quick=quick), progress) if shapes else {}
    kinds = kind_probes(ProbePlan(quick=quick), progress) if shapes else {}
    curves: dict[str, Any] = {}
    gpus = torch.cuda.device_count()
    if collectives is None:
        collectives = gpus >= 2 and not quick
    overlap: dict[str, Any] = {}
    if collectives:
        if gpus < 2:
            notes.append("collectives need 2 or more GPUs; this machine shows one")
        else:
            if progress:
                progress("peer-to-peer, NCCL collectives and compute under an all-reduce")
            measurements += p2p_probe(torch)
            curves = run_collectives(gpus, max_bytes, overlap=shapes)
            overlap = curves.pop("overlap", None) or {"error": curves.get("error")
                                                      or "torchrun returned no overlap"}
            overlap = overlap if shapes else {}
            measurements += _peaks(curves)
    if shapes and not overlap:
        overlap = overlap_skipped(gpus)
        notes.append(overlap["skipped"])
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
    result.collectives = curves
    result.gemm_grid = grids.get("gemm_grid", {})
    result.attention_grid = grids.get("attention_grid", {})
    result.elementwise = kinds.get("elementwise", {})
    result.optimizer = kinds.get("optimizer", {})
    result.overlap = overlap
    if save:
        result.profile_path = save_profile(uuid, result.to_dict())
    return result


def overlap_skipped(gpus: int) -> dict[str, str]:
    """The ``overlap`` section of a bench that could not measure it (one GPU, or no collectives)."""
    why = "this machine shows one GPU" if gpus < 2 else "collectives were not measured (--no-collectives, --quick)"
    return {
        "skipped": "compute under an overlapped NCCL all-reduce needs 2+ GPUs and "
                   f"collectives: {why}"}


def p2p_probe(torch: Any) -> list[Measurement]:
    """GPU 0 -> GPU 1 copy bandwidth of a 1 GiB buffer (through NVLink / PCIe peer access)."""
    import statistics

    src = torch.rand(256 * 1024**2, device="cuda:0")
    dst = torch.empty(256 * 1024**2, device="cuda:1")
    times = []
    for i in range(12):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        if i >= 2:
            times.append(start.elapsed_time(end) / 1e3)
    peer = bool(torch.cuda.can_device_access_peer(0, 1))
    return [Measurement("p2p.gpu0->gpu1", src.numel() * 4 / statistics.median(times), "B/s",
                        {"peer_access": peer})]


def run_collectives(gpus: int, max_bytes: str, overlap: bool = False) -> dict[str, Any]:
    """NCCL all-reduce / all-gather / reduce-scatter curves under torchrun
    (hardware/collective_bandwidth.py); with ``overlap``, its ``"overlap"`` key holds compute under
    an all-reduce (hardware/overlap.py)."""
    import json
    import subprocess
    import sys
    import tempfile

    out = Path(tempfile.mkdtemp()) / "collectives.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={gpus}", "-m", "gpudoctor.hardware.collective_bandwidth", "--out",
           str(out), "--max-bytes", max_bytes]
    cmd += ["--overlap"] if overlap else []
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not out.exists():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {"error": f"torchrun failed ({done.returncode}): {tail}"}
    return json.loads(out.read_text())


def _peaks(curves: dict[str, Any]) -> list[Measurement]:
    out = []
    for op, rows in (curves.get("curves") or {}).items():
        if rows:
            best = max(rows, key=lambda r: r["busbw_Bps"])
            out.append(Measurement(f"nccl.{op}.busbw", best["busbw_Bps"], "B/s",
                                   {"at_bytes": best["bytes"],
                                    "world_size": curves.get("world_size")}))
    return out
