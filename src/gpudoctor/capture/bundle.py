"""The run bundle: one directory per capture, re-analyzable on any machine.

    gpudoctor-runs/<name>-<UTC timestamp>/
        trace.json.gz   the profiled window (torch.profiler / Kineto)
        env.json        GPU, driver, CUDA, torch, clocks, ceilings, capture settings, the
                        unprofiled step time and the window's own overhead, NVML samples
        report.json     the diagnosis (docs/report-schema.md)
        report.html     the same, as one self-contained page
        annotated.trace.json.gz   the trace with the diagnosis drawn on it (report/perfetto.py),
                        for ui.perfetto.dev or chrome://tracing

A distributed job (capture/rank_window.py) shares one run directory:

    gpudoctor-runs/<name>-<UTC timestamp>/
        rank<R>/        each rank's bundle as above; env.json adds rank, world_size, local_rank,
                        hostname and window {first_step, steps}: the step indices every rank recorded
        ranks.json      the ranks, their bundle folders and states (written by rank 0, last)
        report.json     the combined report of the ranks (rank 0), and report.html

Runs recorded before that carry the rank in each file name instead (``trace.rank3.json.gz``).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpudoctor.capture.model_state import ModelState
from gpudoctor.core.loader import LoaderSettings
from gpudoctor.core.numbers import finite_float

ENV_SCHEMA = "1.0"


def global_rank() -> int | None:
    """This process's global rank in a distributed job, else None: torch.distributed once the
    program initialized it, else the launcher's variables (torchrun, accelerate, Lightning,
    SLURM)."""
    rank, world = rank_and_world()
    return None if rank is None else distributed_rank(rank, world)


def rank_and_world() -> tuple[int | None, int | None]:
    """(global rank, world size) as torch.distributed (once the program initialized it) or the
    launcher's variables say; (None, None) outside a launcher, the world size None when unset."""
    # never imported here: only asked if the program did
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except RuntimeError:
        pass
    world = os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", ""))
    for var in ("RANK", "SLURM_PROCID", "PMI_RANK", "OMPI_COMM_WORLD_RANK"):
        value = os.environ.get(var, "")
        if value.isdecimal():  # not isdigit(): '²' is a digit that int() refuses
            return int(value), int(world) if world.isdecimal() else None
    return None, None


def distributed_rank(rank: int, world_size: int | None) -> int | None:
    """``rank`` in a distributed job (world size above 1, or a rank above 0), else None."""
    return int(rank) if (world_size or 0) > 1 or rank > 0 else None


def rank_suffix(rank: int | None) -> str:
    """'' for a single process, '.rank3' for global rank 3: the files of each rank keep apart."""
    return "" if rank is None else f".rank{rank}"


def new_run_dir(base: Path, name: str, rank: int | None = None) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) or "run"
    if rank is not None:
        safe = f"{safe}-rank{rank}"
    path = base / f"{safe}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = base / f"{safe}-{stamp}-{n}"
    return path


def environment() -> dict[str, Any]:
    """What ran where: versions, the GPU and its clocks (NVML where present)."""
    # imported where a bundle is written: ``analyze`` reads env.json (read_run) without them
    import platform

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
        env["gpu"] = {"name": props.name, "memory_bytes": props.total_memory,
                      "sm_count": props.multi_processor_count,
                      "compute_capability": f"{props.major}.{props.minor}"}
        env.update(_nvml_facts())
    else:
        env["gpu"] = None
    return env


def _nvml_facts() -> dict[str, Any]:
    try:
        import pynvml

        from gpudoctor.capture.nvml import current_device_handle

        pynvml.nvmlInit()
        h = current_device_handle(pynvml)  # this rank's GPU, not the machine's first
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


GIT_TIMEOUT_S = 5.0


def git_commit(folder: Path) -> dict[str, Any]:
    """{"git_commit": short hash or None, "git_dirty": bool or None} of the repository holding
    ``folder``: None where there is no git, no repository, or git takes longer than 5 s."""
    import subprocess  # imported where a bundle is written, as in ``environment``

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                                  timeout=GIT_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    if commit is None:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def program_facts(path_or_module: str, args: tuple[str, ...] | list[str],
                  is_module: bool) -> dict[str, Any]:
    """env.json's ``program``: what ran (script path made absolute, or module) with its arguments,
    and the git commit of the repository the script lives in (``gpudoctor history``, ``diff
    --last``)."""
    folder: Path | None = None
    target = path_or_module
    if is_module:
        try:
            import importlib.util

            spec = importlib.util.find_spec(path_or_module)
            origin = spec.origin if spec is not None else None
            folder = Path(origin).parent if origin and origin not in ("built-in", "frozen") else None
        except (ImportError, ValueError):
            folder = None
    else:
        script = Path(path_or_module).resolve()
        target, folder = str(script), script.parent
    facts: dict[str, Any] = {"target": target, "args": [str(a) for a in args],
                             "is_module": is_module}
    facts.update(git_commit(folder) if folder is not None and folder.is_dir()
                 else {"git_commit": None, "git_dirty": None})
    return facts


def unprofiled_step(result: Any) -> float | None:
    """The unprofiled step time of a capture: capture/timing.py's estimate (the median of the
    chosen steps, or behind a DataLoader the mean over whole rounds of its queue); the mean of the
    samples for a result that carries no estimate."""
    estimate = getattr(result, "unprofiled", None)
    if estimate is not None:
        return float(estimate.ms)
    import statistics  # imported where a bundle is written, as in ``environment``

    samples = result.unprofiled_step_ms
    return statistics.fmean(samples) if samples else None


def capture_facts(result: Any, config: Any, profiled_step_ms: float | None) -> dict[str, Any]:
    """The capture half of env.json: settings, timings, the window's overhead, NVML, errors."""
    unprofiled = unprofiled_step(result)
    estimate = getattr(result, "unprofiled", None)
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
        "step_source": result.step_source or None,
        "root_module": result.root_module or None,
        "outermost_calls_per_step": getattr(result, "outermost_calls_per_step", None),
        "training_forwards_without_optimizer": result.training_forwards,
        "steps_seen": result.steps_seen,
        "steps_recorded": result.steps_recorded,
        "window_opened_at_step": result.window_opened_at_step,
        "unprofiled_step_ms": None if unprofiled is None else round(unprofiled, 4),
        "unprofiled": estimate.to_dict() if estimate is not None else None,
        "unprofiled_step_ms_samples": [round(x, 4) for x in result.unprofiled_step_ms],
        # each sample's step (the boundary that closed it), where the capture counted them
        "unprofiled_step_index": list(getattr(result, "unprofiled_step_index", [])),
        # the DataLoader's fetch on the program's thread: its share of unprofiled_step_ms and in
        # each sample (capture/timing.py fetch_in_step)
        "unprofiled_fetch_ms": None if getattr(result, "unprofiled_fetch", None) is None
        else round(result.unprofiled_fetch, 4),
        "unprofiled_fetch_ms_samples": [round(x, 4)
                                        for x in getattr(result, "unprofiled_fetch_ms", [])],
        # how far the GPU trailed the host at each sample's closing boundary (capture/marks.py
        # leads_ms)
        "unprofiled_lead_ms_samples": [round(x, 4)
                                       for x in getattr(result, "unprofiled_lead_ms", [])],
        "unprofiled_before_window_ms": [round(x, 4) for x in result.unprofiled_before_ms],
        "unprofiled_after_window_ms": [round(x, 4) for x in result.unprofiled_after_ms],
        "generate": result.generate or None,
        "notes": list(result.notes),
        "window_wall_s": round(result.window_wall_s, 4),
        "window_overhead": overhead,
        "nvml": result.nvml,
        "error": result.error,
        "memory_at_error": result.memory_at_error,
        "model_state": _model_state_json(getattr(result, "model_state", None)),
        # the DataLoader the steps fetched from most, and the CPUs the program may use
        "dataloader": None if getattr(result, "loader", None) is None else result.loader.to_dict(),
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def env_file_of(path: Path) -> Path | None:
    """The env.json beside a trace (``trace.rank3.json.gz`` -> ``env.rank3.json``) or in a run
    directory."""
    if path.is_dir():
        found = sorted(path.glob("env*.json"))
        return found[0] if len(found) == 1 else None
    match = re.fullmatch(r"trace((?:\.rank\d+)?)\.json(?:\.gz)?", path.name)
    candidate = path.parent / f"env{match.group(1) if match else ''}.json"
    return candidate if candidate.is_file() else None


@dataclass(frozen=True)
class RunFacts:
    """What ``analyze`` reads from a run bundle's env.json (empty for a bare trace)."""

    unprofiled_step_ms: float | None = None  # the step timed outside the profiler
    model_state: ModelState | None = None  # the optimizer's parameter/gradient/state bytes
    step_source: str = ""  # what marked the steps of a live capture
    unprofiled: dict[str, Any] | None = None  # its uncertainty: capture.unprofiled (capture/timing.py)
    cut_after: int | None = None  # the window ended early (capture.error) after this many whole steps
    # the DataLoader's fetch on the program's thread, of unprofiled_step_ms (capture.unprofiled_fetch_ms)
    unprofiled_fetch_ms: float | None = None
    loader: LoaderSettings | None = None  # the DataLoader's settings (capture.dataloader)
    # how far the GPU trailed the host at the timed steps' boundaries, their median
    # (capture.unprofiled_lead_ms_samples)
    unprofiled_lead_ms: float | None = None
    # outermost modules with parameters called in a step (capture.outermost_calls_per_step)
    outermost_calls: int | None = None
    # the class of the outermost module the steps called (capture.root_module); "" when not seen
    root_module: str = ""


def read_env(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The env.json beside a trace or in a run directory, parsed ({} when there is none, or it
    cannot be read, or it is not an object)."""
    env_file = env_file_of(Path(path))
    return read_json_object(env_file) if env_file is not None else {}


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON file holding an object ({} when it cannot be read or holds something else)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def facts_of(env: dict[str, Any]) -> RunFacts:
    """What ``analyze`` needs of a parsed env.json, each field checked (malformed reads as
    absent)."""
    capture = env.get("capture")
    if not isinstance(capture, dict):
        return RunFacts()
    return RunFacts(_unprofiled_step(capture.get("unprofiled_step_ms")),
                    ModelState.parse(capture.get("model_state")),
                    _step_source(capture.get("step_source")),
                    _unprofiled_facts(capture.get("unprofiled")),
                    cut_after(capture.get("error"), capture.get("steps_recorded")),
                    _unprofiled_fetch(capture.get("unprofiled_fetch_ms"),
                                      capture.get("unprofiled_step_ms")),
                    LoaderSettings.parse(capture.get("dataloader")),
                    median_or_none(capture.get("unprofiled_lead_ms_samples")),
                    _positive_int(capture.get("outermost_calls_per_step")),
                    _class_name(capture.get("root_module")))


def _class_name(value: Any) -> str:
    """A Python class name (an identifier, dotted for a nested class); "" otherwise."""
    if not isinstance(value, str) or not 0 < len(value) <= 200:
        return ""
    return value if all(part.isidentifier() for part in value.split(".")) else ""


def _positive_int(value: Any) -> int | None:
    """A whole number of 1 or more (bool is not one); None otherwise."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def median_or_none(samples: Any) -> float | None:
    """The median of a list of numbers (None where it is not a non-empty list of them)."""
    if not isinstance(samples, list) or not samples:
        return None
    numbers = [finite_float(x) for x in samples]
    return None if any(x is None for x in numbers) else float(statistics.median(numbers))


def read_run(path: str | os.PathLike[str]) -> RunFacts:
    """The one reader of the env.json beside a trace or in a run directory: parsed once, each
    field checked (a missing, unreadable or malformed file or field reads as absent)."""
    return facts_of(read_env(path))


def cut_after(error: Any, steps_recorded: Any) -> int | None:
    """The whole steps of a window the program's error ended early (None: it ended as planned)."""
    if not error or not isinstance(steps_recorded, int) or isinstance(steps_recorded, bool) or steps_recorded < 0:
        return None
    return steps_recorded


def _model_state_json(state: ModelState | None) -> dict[str, Any] | None:
    return None if state is None else state.to_dict()


def _step_source(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _unprofiled_step(value: Any) -> float | None:
    """capture.unprofiled_step_ms where it is a finite positive number, else None."""
    ms = finite_float(value)
    return ms if ms is not None and ms > 0 else None


def _unprofiled_fetch(value: Any, step: Any) -> float | None:
    """capture.unprofiled_fetch_ms where it is a share of a known step, else None."""
    step_ms, fetch_ms = _unprofiled_step(step), finite_float(value)
    ok = fetch_ms is not None and step_ms is not None and 0 <= fetch_ms <= step_ms
    return fetch_ms if ok else None


def _unprofiled_facts(value: Any) -> dict[str, Any] | None:
    """capture.unprofiled as written by capture_facts, or None when absent or malformed."""
    if not isinstance(value, dict):
        return None
    numbers = all(isinstance(value.get(k), (int, float)) and value[k] >= 0
                  for k in ("ms", "spread_ms", "steps"))
    return value if numbers and isinstance(value.get("trusted"), bool) else None
