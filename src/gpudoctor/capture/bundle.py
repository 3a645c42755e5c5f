"""The run bundle: one directory per capture, re-analyzable on any machine.

    gpudoctor-runs/<name>-<UTC timestamp>/
        trace.json.gz   the profiled window (torch.profiler / Kineto)
        env.json        GPU, driver, CUDA, torch, clocks, ceilings, capture settings, the
                        unprofiled step time and the window's own overhead, NVML samples
        report.json     the diagnosis (docs/report-schema.md)
        report.html     the same, as one self-contained page
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ENV_SCHEMA = "1.0"


def new_run_dir(base: Path, name: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) or "run"
    path = base / f"{safe}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = base / f"{safe}-{stamp}-{n}"
    return path


def environment() -> dict[str, Any]:
    """What ran where: versions, the GPU and its clocks (NVML where present)."""
    import torch

    env: dict[str, Any] = {
        "schema_version": ENV_SCHEMA,
        "recorded_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "argv": list(sys.argv),
        "cwd": os.getcwd(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env["gpu"] = {"name": props.name, "memory_bytes": props.total_memory, "sm_count": props.multi_processor_count,
                      "compute_capability": f"{props.major}.{props.minor}"}
        env.update(_nvml_facts())
    else:
        env["gpu"] = None
    return env


def _nvml_facts() -> dict[str, Any]:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "clocks_mhz": {
                "sm": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "sm_max": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "mem": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "mem_max": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
            },
            "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
        }
    except Exception as exc:  # noqa: BLE001 - optional facts
        return {"nvml_error": f"{type(exc).__name__}: {exc}"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def capture_facts(result: Any, config: Any, profiled_step_ms: float | None) -> dict[str, Any]:
    """The capture half of env.json: settings, timings, the window's overhead, NVML, errors."""
    unprofiled = statistics.median(result.unprofiled_step_ms) if result.unprofiled_step_ms else None
    overhead = None
    if unprofiled and profiled_step_ms:
        overhead = {
            "profiled_step_ms": round(profiled_step_ms, 4),
            "unprofiled_step_ms": round(unprofiled, 4),
            "ratio": round(profiled_step_ms / unprofiled, 4),
        }
    return {
        "steps": config.steps,
        "skip": config.skip,
        "stack": config.stack,
        "steps_seen": result.steps_seen,
        "steps_recorded": result.steps_recorded,
        "unprofiled_step_ms": None if unprofiled is None else round(unprofiled, 4),
        "unprofiled_step_ms_samples": [round(x, 4) for x in result.unprofiled_step_ms],
        "window_wall_s": round(result.window_wall_s, 4),
        "window_overhead": overhead,
        "nvml": result.nvml,
        "error": result.error,
        "memory_at_error": result.memory_at_error,
        "model_state": getattr(result, "model_state", {}) or None,
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def model_state_of_run(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The optimizer's parameter/gradient/state bytes recorded in a run directory's env.json."""
    p = Path(path)
    env_file = (p if p.is_dir() else p.parent) / "env.json"
    if not env_file.is_file():
        return None
    try:
        value = json.loads(env_file.read_text()).get("capture", {}).get("model_state")
    except (OSError, ValueError, AttributeError):
        return None
    keys = ("params", "param_bytes", "grad_bytes", "state_bytes")
    if not isinstance(value, dict) or not all(isinstance(value.get(k), int) and value[k] >= 0 for k in keys):
        return None
    return value


def unprofiled_step_of(path: str | os.PathLike[str]) -> float | None:
    """The unprofiled step time recorded in a run directory's env.json (None elsewhere)."""
    p = Path(path)
    env_file = (p if p.is_dir() else p.parent) / "env.json"
    if not env_file.is_file():
        return None
    try:
        value = json.loads(env_file.read_text()).get("capture", {}).get("unprofiled_step_ms")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None
