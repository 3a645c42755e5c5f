"""The capture session: count steps, stay out of the way, profile a window of them.

Outside the window each step boundary costs one CUDA event record (no synchronization); the
event pairs give the unprofiled step time on the GPU timeline, which the doctor compares with
the profiled one (the observer effect). The window is ``torch.profiler`` with a schedule:
``skip`` steps untouched, one warm-up step (the profiler starts, its events are dropped), then
``steps`` recorded steps, each marked ``ProfilerStep#N``.

Step boundaries come from, in order: ``gpudoctor.step()`` when the program calls it; else a
global optimizer-step hook (every ``optimizer.step()``); else the caller's own ``step()``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudoctor.capture.nvml import NvmlSampler
from gpudoctor.errors import InputError

_ACTIVE: list[CaptureSession] = []  # the session gpudoctor.step() talks to


class CaptureError(InputError):
    """The capture could not run (a profiler already active, no step ever seen...)."""


@dataclass(frozen=True)
class CaptureConfig:
    steps: int = 5
    """Steps to record."""
    skip: int = 10
    """Steps to run untouched first: compilation, autotuning and allocator warm-up stay out."""
    stack: bool = False
    """Record Python stacks so findings point at file.py:line (more profiler overhead)."""
    record_memory: bool = True
    """profile_memory=True: peaks, churn, fragmentation."""
    nvml_interval_s: float = 0.2
    """How often NVML is sampled during the window (0 disables sampling)."""

    def __post_init__(self) -> None:
        if not isinstance(self.steps, int) or self.steps < 1:
            raise InputError(f"--steps must be a positive integer, got {self.steps!r}")
        if not isinstance(self.skip, int) or self.skip < 0:
            raise InputError(f"--skip must be 0 or more, got {self.skip!r}")
        if self.nvml_interval_s < 0:
            raise InputError(f"nvml interval must be >= 0 s, got {self.nvml_interval_s!r}")


@dataclass
class CaptureResult:
    """What a session recorded."""

    trace_path: Path | None = None
    steps_seen: int = 0
    steps_recorded: int = 0
    unprofiled_step_ms: list[float] = field(default_factory=list)
    nvml: dict[str, Any] = field(default_factory=dict)
    window_wall_s: float = 0.0
    device: str = "cpu"
    error: str = ""  # what interrupted the window, if anything
    memory_at_error: dict[str, Any] = field(default_factory=dict)
    model_state: dict[str, Any] = field(default_factory=dict)  # from the stepped optimizer (model_state_of)

    @property
    def complete(self) -> bool:
        return self.trace_path is not None and not self.error


class CaptureSession:
    """Profiles steps ``skip + 2 .. skip + 1 + steps`` of whatever calls ``step()``."""

    def __init__(self, config: CaptureConfig, out_dir: Path) -> None:
        self.config = config
        self.out_dir = out_dir
        self.result = CaptureResult()
        self.explicit_steps = False  # gpudoctor.step() was called: optimizer hooks are ignored
        self._torch: Any = None
        self._cuda = False
        self._prof: Any = None
        self._events: list[Any] = []  # CUDA events (or perf_counter stamps) at boundaries
        self._hook: Any = None
        self._sampler: NvmlSampler | None = None
        self._window_start = 0.0
        self.done = False
        self.on_window_done: Callable[[], None] | None = None  # e.g. stop the program
        self.conflict = ""  # why the window could not open (the program's own profiler)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, hook_optimizers: bool = True) -> None:
        import torch

        self._torch = torch
        self._cuda = torch.cuda.is_available()
        self.result.device = torch.cuda.get_device_name() if self._cuda else "cpu"
        if hook_optimizers:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        _ACTIVE.append(self)
        if self.config.skip == 0:
            self._open_window()

    def close(self) -> None:
        """Detach everything; safe to call twice, and from an exception handler."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._prof is not None:
            self._finish_window(error=self.result.error or "the program stopped inside the window")
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self._compute_unprofiled_times()

    def fail(self, error: str) -> None:
        """The program raised inside (or before the end of) the window: keep what was captured."""
        self.result.error = error
        if self._prof is not None and self._cuda:
            self.result.memory_at_error = _memory_state(self._torch)
        self.close()

    # -- steps ---------------------------------------------------------------------------------

    def _on_optimizer_step(self, optimizer: Any = None, *_: Any) -> None:
        if optimizer is not None and not self.result.model_state:
            self.result.model_state = model_state_of(optimizer)
        if not self.explicit_steps:
            self.step()

    def step(self) -> None:
        """One step boundary: the step that just ended is ``steps_seen``."""
        if self.done:
            return
        self.result.steps_seen += 1
        seen = self.result.steps_seen
        cfg = self.config
        if self._prof is None:
            self._mark()
            if seen == cfg.skip:
                self._open_window()
            return
        self._prof.step()
        self.result.steps_recorded = max(0, seen - cfg.skip - 1)
        if self.result.steps_recorded >= cfg.steps:
            self.finish_now()

    def open_now(self) -> None:
        """Start a time window at once: no steps, everything recorded until ``finish_now``."""
        if self._prof is None and not self.done:
            self._open_window(stepped=False)

    def finish_now(self) -> None:
        """End the window, write the trace, then tell whoever waits for it."""
        if self._prof is not None:
            self._finish_window()
        self.done = True
        if self.on_window_done is not None:
            self.on_window_done()

    # -- the window ----------------------------------------------------------------------------

    def _open_window(self, stepped: bool = True) -> None:
        torch = self._torch
        if torch.autograd.profiler._is_profiler_enabled:
            # The program profiles itself and two profilers cannot record at once. Step aside and
            # let it run on untouched: stopping it here would leave its profiler running.
            self.done = True
            self.conflict = (
                "the program already runs torch.profiler, and two profilers cannot record at once; "
                "analyze the trace it writes with `gpudoctor analyze TRACE`, or remove its profiler"
            )
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
            return
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self._cuda else [])
        self._prof = profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=1, active=self.config.steps, repeat=1) if stepped else None,
            record_shapes=True,
            with_flops=True,
            profile_memory=self.config.record_memory,
            with_stack=self.config.stack,
        )
        self._prof.start()
        self._window_start = time.perf_counter()
        if self.config.nvml_interval_s > 0 and self._cuda:
            self._sampler = NvmlSampler(self.config.nvml_interval_s)
            self._sampler.start()

    def _finish_window(self, error: str = "") -> None:
        prof, self._prof = self._prof, None
        try:
            prof.stop()
        finally:
            self.result.window_wall_s = time.perf_counter() - self._window_start
            if self._sampler is not None:
                self.result.nvml = self._sampler.stop()
                self._sampler = None
        if error:
            self.result.error = error
        self.out_dir.mkdir(parents=True, exist_ok=True)
        raw = self.out_dir / "trace.json"
        prof.export_chrome_trace(str(raw))
        self.result.trace_path = _gzip(raw)

    # -- unprofiled timing ---------------------------------------------------------------------

    def _mark(self) -> None:
        if self._cuda:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()
            self._events.append(event)
        else:
            self._events.append(time.perf_counter())

    def _compute_unprofiled_times(self) -> None:
        """Step times between boundaries outside the window, the first half dropped (warm-up)."""
        marks = self._events
        self._events = []
        if len(marks) < 2:
            return
        if self._cuda:
            self._torch.cuda.synchronize()
            times = [a.elapsed_time(b) for a, b in itertools.pairwise(marks)]
        else:
            times = [(b - a) * 1e3 for a, b in itertools.pairwise(marks)]
        self.result.unprofiled_step_ms = times[len(times) // 2 :]


def step() -> None:
    """Mark a step boundary for the active gpudoctor capture (a no-op when none is active).

    Call it once per training / inference iteration when the program has no optimizer step, or
    when one iteration steps several optimizers.
    """
    if _ACTIVE:
        session = _ACTIVE[-1]
        session.explicit_steps = True
        session.step()


def _gzip(raw: Path) -> Path:
    import gzip
    import shutil

    target = raw.with_suffix(".json.gz")
    with raw.open("rb") as src, gzip.open(target, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    raw.unlink()
    return target


def _memory_state(torch: Any) -> dict[str, Any]:
    try:
        stats = torch.cuda.memory_stats()
        free, total = torch.cuda.mem_get_info()
    except Exception:  # noqa: BLE001 - the device may be unusable after the error
        return {}
    keys = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
            "reserved_bytes.all.peak", "num_alloc_retries", "num_ooms")
    state = {k: stats.get(k) for k in keys}
    state.update(free_bytes=free, total_bytes=total)
    return state


def model_state_of(optimizer: Any) -> dict[str, Any]:
    """Bytes of the parameters, gradients and optimizer states an optimizer holds (on the GPU).

    The memory-pressure finding uses them to say what fills the card and what each change frees;
    it runs once, after the first optimizer step, when the states exist.
    """
    import torch

    params = grads = states = n = 0
    dtypes: dict[str, int] = {}
    seen: set[int] = set()
    try:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) in seen or not isinstance(p, torch.Tensor) or p.device.type != "cuda":
                    continue
                seen.add(id(p))
                n += p.numel()
                params += p.numel() * p.element_size()
                dtypes[str(p.dtype).replace("torch.", "")] = dtypes.get(str(p.dtype).replace("torch.", ""), 0) + p.numel()
                if p.grad is not None:
                    grads += p.grad.numel() * p.grad.element_size()
                for value in optimizer.state.get(p, {}).values():
                    if isinstance(value, torch.Tensor) and value.device.type == "cuda":
                        states += value.numel() * value.element_size()
    except (AttributeError, KeyError, TypeError, RuntimeError):
        return {}
    if not n:
        return {}
    return {"optimizer": type(optimizer).__name__, "params": n, "param_bytes": params, "grad_bytes": grads,
            "state_bytes": states, "param_dtype": max(dtypes, key=dtypes.__getitem__)}
