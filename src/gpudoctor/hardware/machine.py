"""Machine profiles: measured ceilings saved per GPU (by UUID) in the user's cache directory, and
found again by ``analyze`` / ``run`` for traces of a GPU with the same name.

    $XDG_CACHE_HOME/gpudoctor/machines/<uuid>.json   (default ~/.cache/gpudoctor/machines)
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoctor.hardware.ceilings import PCIE4_X16_BYTES_PER_S, Ceilings, from_spec
from gpudoctor.hardware.specs import find_spec

if TYPE_CHECKING:  # what the probes measured (hardware/probe.py), which ``analyze`` never runs
    from gpudoctor.hardware.probe import Measurement

PROFILE_SCHEMA = "1.0"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpudoctor" / "machines"


def ceilings_from(measurements: list[Measurement], gpu_name: str, uuid: str,
                  memory_bytes: int) -> Ceilings:
    """Measured roofs; what no probe measured (vector FLOP/s) comes from the datasheet row if
    any."""
    by = {m.probe: m.value for m in measurements if m.value > 0}
    spec = find_spec(gpu_name)
    sheet = from_spec(spec) if spec else None
    matrix = {dtype: by[f"gemm.{dtype}"] for dtype in ("fp32", "tf32", "bf16", "fp16", "fp8")
              if f"gemm.{dtype}" in by}
    hbm = max((v for k, v in by.items() if k.startswith("hbm.")), default=0.0)
    day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    return Ceilings(
        gpu=gpu_name,
        matrix_flops=matrix,
        vector_flops=sheet.vector_flops if sheet else by.get("gemm.fp32", 0.0),
        hbm_bytes_per_s=hbm,
        h2d_pinned_bytes_per_s=by.get("h2d.pinned",
                                      sheet.h2d_pinned_bytes_per_s if sheet
                                      else PCIE4_X16_BYTES_PER_S),
        memory_bytes=memory_bytes,
        source=f"measured {day} on {uuid or gpu_name} (gpudoctor bench)",
        extra={"l2_bytes_per_s": by.get("l2.copy"), "launch_eager_s": by.get("launch.eager"),
               "launch_graph_s": by.get("launch.graph"), "datasheet": spec.key if spec else None,
               # the profiler's host time per recorded event: the replay's prior
               # (replay/observer.py)
               "profiler_event_s": by.get("profiler.event"),
               # measured GEMM rates by shape: what the misaligned-gemm and small-gemm findings use
               "gemm_curve": {k: v for k, v in by.items() if k.startswith("gemm.")}},
    )


def save_profile(uuid: str, data: dict[str, Any], folder: Path | None = None) -> Path:
    folder = folder or cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in uuid) or "gpu"
    path = folder / f"{safe}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(
        json.dumps({"schema_version": PROFILE_SCHEMA, **data}, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


def measured_ceilings_for(gpu_name: str, folder: Path | None = None) -> Ceilings | None:
    """The newest saved profile of a GPU with this name (None when there is none or it is
    unreadable)."""
    folder = folder or cache_dir()
    if not folder.is_dir():
        return None
    best: tuple[str, Ceilings] | None = None
    for path in folder.glob("*.json"):
        try:
            data = json.loads(path.read_text())
            c = data["ceilings"]
            if c.get("gpu") != gpu_name:
                continue
            ceilings = Ceilings(
                gpu=c["gpu"], matrix_flops={k: float(v) for k, v in c["matrix_flops"].items()},
                vector_flops=float(c["vector_flops"]), hbm_bytes_per_s=float(c["hbm_bytes_per_s"]),
                h2d_pinned_bytes_per_s=float(c["h2d_pinned_bytes_per_s"]),
                memory_bytes=int(c["memory_bytes"]),
                source=str(c["source"]), extra=dict(c.get("extra") or {}),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if not ceilings.matrix_flops or ceilings.hbm_bytes_per_s <= 0:
            continue
        if isinstance(data.get("gemm_grid"), dict) and data["gemm_grid"].get("rows"):
            # the card's own GEMM times by shape: what the fixes' GEMMs are priced with
            # (hardware/gemm_rate.py)
            ceilings.extra["gemm_grid"] = data["gemm_grid"]
        stamp = str(data.get("measured_utc", ""))
        if best is None or stamp > best[0]:
            best = (stamp, ceilings)
    return best[1] if best else None


def collectives_profile_for(gpu_name: str, folder: Path | None = None) -> Path | None:
    """The newest saved profile of a GPU with this name that holds NCCL curves (``gpudoctor bench``
    on 2+ GPUs), for plan/collective_cost.py ``load_curves``; None when there is none."""
    folder = folder or cache_dir()
    if not folder.is_dir():
        return None
    best: tuple[str, Path] | None = None
    for path in folder.glob("*.json"):
        try:
            data = json.loads(path.read_text())
            if data["ceilings"].get("gpu") != gpu_name or not data["collectives"].get("curves"):
                continue
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        stamp = str(data.get("measured_utc", ""))
        if best is None or stamp > best[0]:
            best = (stamp, path)
    return best[1] if best else None
