"""The capture session: find the steps, stay out of the way, profile a window of them.

Steps come from the step detector (capture/detect.py) fed by hooks (capture/hooks.py), or from
``step()`` calls (``gpudoctor.step()``, the framework callbacks). The window is
``torch.profiler`` with a schedule: ``skip`` steps untouched, one warm-up step (the profiler
starts, its events are dropped), then ``steps`` recorded steps, each marked ``ProfilerStep#N``.
The profiler starts and stops only inside a hook or a ``step()`` call, at a step boundary.

Outside the window each boundary costs one CUDA event record (no synchronization; a host clock
reading until the program starts CUDA, and for good in a program that never does). The event
pairs give the unprofiled step time on the GPU timeline: the second half of the steps before
the window (the first half is warm-up: compilation, autotuning, the allocator) and
``calibration_steps`` steps after it, which the doctor compares with the profiled step (the
observer effect); capture/marks.py turns the events into times and capture/timing.py makes one
number of them, with its uncertainty (a ``--try-fixes`` trial first waits for its steps to settle
and times those: capture/trial_timing.py). Once the window closes only the hook that marks the
steps stays: the steps after it are timed as the program runs without gpudoctor, bar that one hook
and one event per step.

A program whose steps cannot be seen gets a time window: ``wait_s`` seconds after the start,
the profiler opens at the next safe point (any module call, optimizer step, DataLoader batch,
graph replay) and closes at the first one ``window_s`` later.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from gpudoctor.capture.bundle import rank_suffix
from gpudoctor.capture.detect import PROGRAM_PROFILER, Source, StepDetector
from gpudoctor.capture.hooks import Hooks, Listener
from gpudoctor.capture.loader_queue import LoaderQueue
from gpudoctor.capture.marks import (
    CompileWatch,
    FinishedIntervals,
    interval_steps,
    intervals_ms,
    leads_ms,
    token_times,
)
from gpudoctor.capture.model_state import ModelState
from gpudoctor.capture.nvml import NvmlSampler
from gpudoctor.capture.quiet import kineto_chatter_filtered
from gpudoctor.capture.rank_window import RankSync
from gpudoctor.capture.timing import (
    SETTLE_STEPS,
    TRIAL_SETTLE_MAX_S,
    TRIAL_SETTLE_MAX_STEPS,
    UnprofiledStep,
    fetch_in_step,
    unprofiled_step,
)
from gpudoctor.capture.trial_timing import TrialTiming
from gpudoctor.core.clock import SYSTEM_CLOCK, Clock
from gpudoctor.core.loader import LoaderSettings
from gpudoctor.errors import InputError

_ACTIVE: list[CaptureSession] = []  # the session gpudoctor.step() talks to
_TOKEN_CALLS_KEPT = 16  # generate() calls whose per-token timing is kept
# An evaluation before training (a loss estimate over many no-grad batches before the first
# optimizer step) would otherwise hold the window: the window waits this many steps and seconds
# past ``skip`` for training to start (tests/test_capture_steps.py;
# benchmarks/BENCHMARKS-gallery.md "Set g").
EVAL_WAIT_STEPS = 2000
EVAL_WAIT_S = 30.0


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
    calibration_steps: int = 8
    """Unprofiled steps timed after the window (the program runs this many more steps, plus one
    left to settle after the trace is written: capture/timing.py SETTLE_STEPS). 8 rather than 5:
    the median of 8 steps is the steady state even when two of them are slow."""
    profile: bool = True
    """False: no profiler window. The session ends where the window would open (after ``skip``
    steps) with the unprofiled step times alone, timed exactly as a profiled run times them
    (``gpudoctor run --try-fixes`` trials)."""
    trial: bool = False
    """A ``--try-fixes`` trial that records a window too: past ``skip`` its steps settle and are
    timed as a trial without a window times them, and only then does the window open (a verdict
    needs tryfix/trial.py's minimum of steps and seconds)."""
    patience: int = 32
    """Training-like forwards to wait for an optimizer step before forwards count as steps (a
    gradient-accumulation loop of more micro-batches than this is cut at each micro-batch)."""

    def __post_init__(self) -> None:
        if not isinstance(self.steps, int) or self.steps < 1:
            raise InputError(f"--steps must be a positive integer, got {self.steps!r}")
        if not isinstance(self.skip, int) or self.skip < 0:
            raise InputError(f"--skip must be 0 or more, got {self.skip!r}")
        if self.nvml_interval_s < 0:
            raise InputError(f"nvml interval must be >= 0 s, got {self.nvml_interval_s!r}")
        if not isinstance(self.calibration_steps, int) or self.calibration_steps < 0:
            raise InputError(f"--calibrate must be 0 or more steps, got {self.calibration_steps!r}")


@dataclass
class CaptureResult:
    """What a session recorded."""

    trace_path: Path | None = None
    step_source: str = ""  # a Source value: what marked the steps ("" when none was found)
    root_module: str = ""  # the outermost module's class, when forwards were seen
    training_forwards: int = 0  # its forwards with gradients that waited for an optimizer step
    steps_seen: int = 0
    steps_recorded: int = 0
    window_opened_at_step: int | None = None
    unprofiled_step_ms: list[float] = field(default_factory=list)
    unprofiled_before_ms: list[float] = field(default_factory=list)
    unprofiled_after_ms: list[float] = field(default_factory=list)
    # each sample's step: the boundary count that closed it (capture/marks.py interval_steps)
    unprofiled_step_index: list[int] = field(default_factory=list)
    unprofiled_before_steps: list[int] = field(default_factory=list)
    unprofiled_after_steps: list[int] = field(default_factory=list)
    unprofiled: UnprofiledStep | None = None  # the one number made of them (capture/timing.py)
    # the DataLoader's fetch on the program's thread in each of unprofiled_step_ms (empty: no
    # loader, or not known for every sample), and its share of the one number (capture/timing.py
    # fetch_in_step)
    unprofiled_fetch_ms: list[float] = field(default_factory=list)
    unprofiled_fetch: float | None = None
    # how far the GPU's work trailed the host at each timed step's closing boundary (ms): the
    # host's own pace where the GPU's work sets the step (capture/marks.py leads_ms)
    unprofiled_lead_ms: list[float] = field(default_factory=list)
    # the DataLoader the steps fetched from most (capture/loader_queue.py); None without one
    loader: LoaderSettings | None = None
    generate: dict[str, Any] = field(default_factory=dict)  # per-token timing of generate() calls
    nvml: dict[str, Any] = field(default_factory=dict)
    window_wall_s: float = 0.0
    device: str = "cpu"
    error: str = ""  # what interrupted the window, if anything
    program_s: float = 0.0  # seconds from the session's start to its close (the program's run, under gpudoctor run)
    internal_error: str = ""  # gpudoctor's own failure inside a hook (a trace it could not write): it detached
    memory_at_error: dict[str, Any] = field(default_factory=dict)
    model_state: ModelState | None = None  # from the stepped optimizer (model_state_of)
    # calls of outermost modules with parameters in grad mode in one step (between the first two
    # boundaries): each a compiled forward and backward under the compile knobs
    # (tryfix/knobs.py on_outermost_module); None where none was seen there
    outermost_calls_per_step: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.trace_path is not None and not self.error


class Phase(Enum):
    BEFORE = "before"  # counting steps, timing them
    WINDOW = "window"  # the profiler records
    AFTER = "after"  # timing the calibration steps
    BORROW = "borrow"  # the program runs its own profiler: diagnose the window it records
    DONE = "done"  # everything detached


class CaptureSession(Listener):
    """Profiles steps ``skip + 2 .. skip + 1 + steps`` of whatever the detector calls a step."""

    def __init__(self, config: CaptureConfig, out_dir: Path, wait_s: float | None = None,
                 window_s: float = 3.0, rank: int | None = None, sync: RankSync | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock  # host stamps, the time window and a trial's time bounds (core/clock.py)
        self.out_dir = out_dir
        self.sync = sync  # a distributed job: the window's steps are agreed with the other ranks
        self._open_at: int | None = None  # the step count at which the agreed window opens
        self.wait_s = wait_s  # None: no time window fallback
        self.window_s = window_s
        self.rank = rank
        self.result = CaptureResult()
        self.detector = StepDetector(patience=config.patience)
        self.phase = Phase.BEFORE
        self.on_window_done: Callable[[], None] | None = None  # e.g. stop the program
        self.conflict = ""  # why the window could not open (the program's own profiler)
        self._torch: Any = None
        self._cuda = False
        self._hooks: Hooks | None = None
        self._root_ref: weakref.ref[Any] | None = None
        self._foreign: Any = None  # the program's own profiler, once it stopped
        self._model_state_tried = False
        self._total = 0  # boundaries seen, all sources together (never restarts)
        self.loader = LoaderQueue()  # the DataLoader's queue of ready batches (capture/loader_queue.py)
        self._compiles = CompileWatch()  # a step in which torch.compile compiled is cut from the marks
        # a trial's settle-and-time (capture/trial_timing.py), on the steps the GPU has finished
        self._trial = TrialTiming(max_steps=TRIAL_SETTLE_MAX_STEPS, max_s=TRIAL_SETTLE_MAX_S)
        self._finished = FinishedIntervals()
        self._after_backlog = 0  # steps after the window left untimed (the refilled queue)
        self._prof: Any = None
        self._timed_window = False
        self._iterations = 0
        self._iteration_marker: Any = None
        self._epoch = -1
        self._count = 0  # boundaries of the current source (this epoch)
        # calls of outermost modules with parameters, in grad mode, since the first boundary (the
        # global hooks see every one until the second): one model called once a step is 1, a GAN's
        # two networks or a loop over a list of blocks more
        self._outer_calls = 0
        self._in_window = 0
        self._before: list[Any] = []  # CUDA events (or perf_counter stamps) at boundaries
        self._after: list[Any] = []
        # the boundary count (``_total``) at each of those marks, None at a cut: each timed step's
        # index, by which a trial is compared with its control over the same steps
        self._before_steps: list[int | None] = []
        self._after_steps: list[int | None] = []
        # seconds the DataLoader's fetches took on the program's thread since the last mark, and at
        # each mark (by its boundary count) what the step it closed fetched
        self._fetch_s = 0.0
        self._fetch_by_step: dict[int, float] = {}
        self._fetched = False  # any batch fetched at all: the fetch clock stays after the window
        self._host_at: dict[int, float] = {}  # each CUDA event mark's host clock reading, by id
        self._tokens: list[list[Any]] = []  # per generate() call: start, each forward, end
        self._sampler: NvmlSampler | None = None
        self._started_at = 0.0
        self._window_start = 0.0
        # while the steps are an evaluation before training: the step count and the clock when
        # the window first waited for training, and whether an optimizer holds the model's
        # parameters (None: not waiting); the evaluation's forwards passed over so far
        self._eval_wait: tuple[int, float, bool] | None = None
        self._eval_forwards_passed = 0

    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, hook_optimizers: bool = True) -> None:
        """Attach. ``hook_optimizers=False``: no hooks at all, the caller marks steps with
        step()."""
        import torch

        self._torch = torch
        self._cuda = torch.cuda.is_available()
        # Kineto detaches CUPTI when the window stops only with TEARDOWN_CUPTI=1; left attached, its
        # callbacks slow every later launch (pytorch/pytorch#144455), and the steps timed after the
        # window ran slower than before it in launch-bound programs
        # (benchmarks/BENCHMARKS-capture.md "Evidence moved from the source: capture"). Kineto reads
        # the variable when the trace stops; torch sets it to 0 itself where CUDA graphs cannot take
        # a teardown, and a value the user set is kept.
        os.environ.setdefault("TEARDOWN_CUPTI", "1")
        self.result.device = "cpu"  # the GPU's name once the program uses it (_note_device)
        self._started_at = self.clock.now()
        if hook_optimizers:
            _preload_profiler_imports(torch)
            self._hooks = Hooks(torch, self)
            self._hooks.install()
        _ACTIVE.append(self)

    def close(self) -> None:
        """Detach everything; safe to call twice, and from an exception handler."""
        if self._started_at and not self.result.program_s:
            self.result.program_s = self.clock.now() - self._started_at
        self._export_foreign()
        if self._hooks is not None:
            self._hooks.remove()
            self._hooks = None
        if self._prof is not None:
            try:
                self._finish_window(error=self.result.error
                                    or "the program stopped inside the window")
            except Exception as exc:  # noqa: BLE001 - reported after the program (runner, live), never raised
                self.result.internal_error = self.result.internal_error or _failure(exc)
        if self.sync is not None and self._open_at is None and self.phase is not Phase.DONE:
            # never ready: the other ranks need not wait for it
            self.sync.leave(self.result.steps_seen)
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if self.phase is not Phase.DONE:
            self.phase = Phase.DONE
            self._note_detector()
            self._compute_unprofiled_times()

    def _note_detector(self) -> None:
        self._note_device()
        self.result.training_forwards = self.detector.training_forwards
        if not self.result.root_module:
            self.result.root_module = self.detector.root_name

    def fail(self, error: str) -> None:
        """The program raised inside (or before the end of) the window: keep what was captured."""
        self.result.error = error
        if self._prof is not None and self._gpu_in_use():
            self.result.memory_at_error = _memory_state(self._torch)
        self.close()

    def broke(self, exc: Exception) -> None:
        """A hook's call raised (the trace could not be written, ...): keep what that was, stop
        recording and detach everything; the program runs on as if gpudoctor were not there."""
        self.result.internal_error = self.result.internal_error or _failure(exc)
        prof, self._prof = self._prof, None
        with contextlib.suppress(Exception):
            if prof is not None:
                prof.stop()
        with contextlib.suppress(Exception):
            if self._sampler is not None:
                self._sampler.stop()
                self._sampler = None
        with contextlib.suppress(Exception):
            if self.sync is not None and self._open_at is None:
                # the other ranks need not wait for this one
                self.sync.leave(self.result.steps_seen)
        with contextlib.suppress(Exception):
            self._complete(stop_program=False)
        self.phase = Phase.DONE

    # -- what the hooks report ---------------------------------------------------------------

    def step(self) -> None:
        """An explicit boundary: gpudoctor.step(), doc.step() or a framework callback."""
        if self.detector.explicit():
            try:
                self._boundary()
            except Exception as exc:  # noqa: BLE001 - called from the program's loop: gpudoctor's failure stays ours
                self.broke(exc)

    def optimizer_step(self, optimizer: Any) -> None:
        if self.phase is Phase.DONE:
            return
        if not self._model_state_tried:
            # once: on a CPU-only program it finds nothing, and walking every parameter on every
            # step cost 5 us of a 0.6 ms step (cpu_only's 6 tensors; more with more tensors)
            self._model_state_tried = True
            self.result.model_state = model_state_of(optimizer)
        if self.detector.optimizer_step(id(optimizer)):
            self._boundary()

    def outer_forward(self, module: Any) -> None:
        if self.phase is Phase.DONE or self._hooks is None:
            return
        torch = self._torch
        training_like = bool(torch.is_grad_enabled() and getattr(module, "training", False))
        params = self._hooks.parameter_count(module)
        boundary = self.detector.outer_forward(id(module), params, training_like,
                                               type(module).__name__)
        self._keep_root(module)
        if boundary:
            self._boundary()
        elif self._timed_window and self.detector.root == id(module):
            self._mark_iteration()
        if params > 0 and torch.is_grad_enabled():
            self._outer_calls += 1  # after the boundary it may open: this call is the next step's

    def generate_start(self) -> None:
        if self.phase is Phase.DONE:
            return
        if self._timed_window:
            self._mark_iteration()
        if self.detector.generate_call():
            self._boundary()
        if self.phase in (Phase.BEFORE, Phase.AFTER) and self.detector.source is Source.GENERATE:
            self._tokens.append([self._stamp()])
            del self._tokens[:-_TOKEN_CALLS_KEPT]

    def _keep_root(self, module: Any) -> None:
        """Hold the outermost module (weakly) once the detector chose it: the hooks narrow to it."""
        if self.detector.root == id(module) and self._root_module() is not module:
            try:
                self._root_ref = weakref.ref(module)
            except TypeError:
                self._root_ref = None

    def token_forward(self, module: Any) -> None:
        """A forward inside generate(): a token; the model is the outermost module all the same."""
        if self._hooks is not None and self.phase is not Phase.DONE:
            self.detector.see_module(id(module), self._hooks.parameter_count(module),
                                     type(module).__name__)
            self._keep_root(module)
        if self._tokens and self.phase in (Phase.BEFORE, Phase.AFTER):
            self._tokens[-1].append(self._stamp())

    def generate_end(self) -> None:
        if self._tokens and self.phase in (Phase.BEFORE, Phase.AFTER):
            self._tokens[-1].append(self._stamp())
            self._tokens[-1].append(None)  # closed: start, forwards..., end, None

    def backward_call(self) -> None:
        if self.phase is not Phase.DONE and self.detector.backward_call():
            self._boundary()

    def graph_replay(self) -> None:
        if self.phase is not Phase.DONE and self.detector.graph_replay():
            self._boundary()

    def batch(self, iterator: Any) -> None:
        """A DataLoader batch is about to be fetched (capture/loader_queue.py)."""
        self.loader.batch(iterator, self._total)

    def batch_fetched(self, seconds: float) -> None:
        """A DataLoader's fetch took ``seconds`` on the program's thread."""
        self._fetch_s += seconds
        self._fetched = True

    def foreign_profiler(self, profiler: Any, starting: bool) -> None:
        """The program starts or stops a torch.profiler of its own."""
        if profiler is self._prof or self.phase is Phase.DONE:
            return
        if starting and self._prof is not None:
            # ours must make way, or the program's profiler would fail to start
            self._finish_window(
                error="the program started its own torch.profiler inside the window")
            self._complete(stop_program=False)
        elif starting and self.phase is Phase.BEFORE:
            self.phase = Phase.BORROW
            self.conflict = "the program runs torch.profiler itself (gpudoctor's window never opened)"
        elif not starting and self.phase is Phase.BORROW:
            self._foreign = profiler  # exported by the program, or by us once the program is over

    def foreign_export(self, profiler: Any, path: str) -> None:
        """The program exported its own profiler's trace: keep a copy and diagnose that window
        (its results can be saved once only, so we copy the file rather than export again)."""
        if self.phase is not Phase.BORROW or profiler is self._prof:
            return
        import shutil

        raw = self._trace_file()
        try:
            if path.endswith(".gz"):
                shutil.copyfile(path, raw.with_suffix(".json.gz"))
                self.result.trace_path = raw.with_suffix(".json.gz")
            else:
                shutil.copyfile(path, raw)
                self.result.trace_path = _gzip(raw)
        except OSError as exc:
            self.result.notes.append(
                f"the program's own trace {path} could not be copied ({exc.strerror})")
            return
        self._borrowed()

    def _borrowed(self) -> None:
        self.result.step_source = PROGRAM_PROFILER
        self.conflict = ""
        self.result.notes.append(
            "the program runs its own torch.profiler: this report diagnoses the window it recorded")
        self._complete(stop_program=False)  # the program goes on

    def _export_foreign(self) -> None:
        """The program ended without exporting its profiler's window: export it now."""
        profiler, self._foreign = self._foreign, None
        if profiler is None or self.phase is not Phase.BORROW:
            return
        raw = self._trace_file()
        try:
            profiler.export_chrome_trace(str(raw))
        except Exception as exc:  # noqa: BLE001 - its profiler, its state: say so and step aside
            self.result.notes.append(
                f"the program's own profiler window could not be exported ({type(exc).__name__})")
            return
        self.result.trace_path = _gzip(raw)
        self._borrowed()

    def safe_point(self) -> None:
        """A place where the profiler may start or stop: drives the time-window fallback."""
        if self.wait_s is None or self.phase is Phase.DONE:
            return
        now = self.clock.now()
        if self._timed_window:
            if now - self._window_start >= self.window_s:
                self.finish_now()
        elif self.phase is Phase.BEFORE and self._count == 0 and now - self._started_at >= self.wait_s:
            self.open_now()

    # -- boundaries --------------------------------------------------------------------------

    def _boundary(self) -> None:
        """A step ended: count it, then what the phase does with it (time it, or record it)."""
        if self.phase is Phase.DONE or self._timed_window:
            return
        if self.phase is Phase.BEFORE and self.detector.epoch != self._epoch:
            self._epoch, self._count, self._before = self.detector.epoch, 0, []
            self._eval_wait = None
            self._before_steps = []
            self.result.steps_seen = 0
            self.result.step_source = self.detector.source.value if self.detector.source else ""
            self.result.root_module = self.detector.root_name
        self._count += 1
        self._total += 1
        self.loader.step_ended(self._total)
        self.result.steps_seen += 1
        if self.phase is Phase.BEFORE:
            self._step_before_window()
        elif self.phase is Phase.WINDOW:
            self._step_in_window()
        elif self.phase is Phase.AFTER:
            self._step_after_window()

    def _step_before_window(self) -> None:
        """Timed; past ``skip`` the window opens (a trial first settles and times its steps, one
        without a window ends there instead)."""
        cfg = self.config
        if self.loader.backlog and self._before:
            self._before = []  # the steps so far ate the loader's start-up backlog: not timed
            self._before_steps = []
        self._mark_step(self._before, self._before_steps)
        if self._count == 1:
            self._outer_calls = 0
        if self._count == 2:
            self.result.outermost_calls_per_step = self._outer_calls or None
            self._narrow_hooks()  # the source has repeated: discovery is over
        if self._count < max(cfg.skip, 1):
            return
        if self._evaluating_before_training():
            self._eval_forwards_passed += 1
            return
        if not cfg.profile:
            if not self._trial_wants_more(cfg.skip):
                self._complete()  # a trial: the steps before the window are all it times
            return
        if cfg.trial and self._open_at is None and self._trial_wants_more(cfg.skip):
            return  # a trial that records a window times its settled steps first
        if self._open_at is None:
            if self.loader.serving_backlog(self._count, cfg.skip,
                                           distributed=self.sync is not None):
                return
            self._open_at = self._agree()
        if self._count >= self._open_at:
            self._open_window(stepped=True)

    def _step_in_window(self) -> None:
        """The profiler's schedule moves on a step; after the last recorded one the trace is
        written."""
        cfg = self.config
        # the first step starts the recording and the last one stops it: Kineto logs each
        # (only these two go through the filter: its few syscalls stay out of the other steps)
        if self._in_window == 0 or self._in_window >= cfg.steps:
            # torch warns at the warm-up -> record transition that events are cleared "at the
            # end of each cycle": the window is one cycle (repeat=1), and the line would land on
            # the program's stderr on every run
            with kineto_chatter_filtered(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Warning: Profiler clears events",
                                        category=UserWarning)
                self._prof.step()
        else:
            self._prof.step()
        self._in_window += 1
        self.result.steps_recorded = max(0, self._in_window - 1)
        if self.result.steps_recorded >= cfg.steps:
            self._finish_window()
            self.phase = Phase.AFTER
            # the step after this one is not timed either: it settles after the export
            # (capture/timing.py SETTLE_STEPS), and behind a DataLoader its workers refilled
            # their queue meanwhile
            self._after_backlog = self.loader.depth + SETTLE_STEPS
            if cfg.calibration_steps == 0:
                self._complete()
            else:
                self._keep_step_hook_only()

    def _step_after_window(self) -> None:
        """Timed, until the calibration steps are (then the session ends)."""
        if self._after_backlog > 0:  # the loader refilled its queue while the trace was written
            self._after_backlog -= 1
            return
        self._mark_step(self._after, self._after_steps)
        timed = sum(a is not None and b is not None for a, b in itertools.pairwise(self._after))
        if timed >= self.loader.calibration_target(self.config.calibration_steps):
            self._complete()

    def _agree(self) -> int:
        """The step count at which the window opens: this one, or in a distributed job the one every
        rank agreed on (capture/rank_window.py; this call waits for the other ranks, bounded)."""
        if self.sync is None:
            return self._count
        window = self.sync.agree(self._count)
        self.result.notes.extend(window.notes)
        self.out_dir = self.sync.bundle_dir()
        if window.open_at > self._count:
            # the step now starting began with the wait for the other ranks: not an unprofiled step
            self._before.extend([None, self._stamp()])
            self._before_steps.extend([None, self._total])
            self._fetch_s = 0.0
        return window.open_at

    def open_now(self) -> None:
        """Start a time window at once: no steps, everything recorded until ``finish_now``."""
        if self._prof is None and self.phase is Phase.BEFORE:
            self._open_window(stepped=False)

    def finish_now(self) -> None:
        """End the window (and the session), write the trace, then tell whoever waits for it."""
        if self._prof is not None:
            self._finish_window()
        self._complete()

    def _complete(self, stop_program: bool = True) -> None:
        if self.phase is Phase.DONE:
            return
        self._note_detector()
        if self._hooks is not None:
            self._hooks.remove()
            self._hooks = None
        self.phase = Phase.DONE
        self._compute_unprofiled_times()
        if stop_program and self.on_window_done is not None:
            self.on_window_done()

    # -- the window ----------------------------------------------------------------------------

    def _open_window(self, stepped: bool) -> None:
        torch = self._torch
        if torch.autograd.profiler._is_profiler_enabled:
            # The program profiles itself and two profilers cannot record at once. Step aside and
            # let it run on untouched: stopping it here would leave its profiler running.
            self.conflict = (
                "the program already runs torch.profiler, and two profilers cannot record at once; "
                "analyze the trace it writes with `gpudoctor analyze TRACE`, or remove its profiler"
            )
            self.phase = Phase.BORROW  # wait for its window to end, then diagnose that
            return
        from torch.profiler import ProfilerActivity, profile, schedule

        detector = self.detector
        detector.lock()
        self.result.step_source = detector.source.value if stepped and detector.source else Source.TIME.value
        self.result.root_module = detector.root_name
        self.result.window_opened_at_step = self._count if stepped else None
        if self._eval_forwards_passed and detector.source is not Source.FORWARD:
            self.result.notes.append(
                f"the window waited past an evaluation before training ({self._eval_forwards_passed}"
                " forwards with no grad) for the training steps")
        if stepped:
            self._narrow_hooks()
        self._note_device()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                               if self._gpu_in_use() else [])
        self._prof = profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=1, active=self.config.steps, repeat=1)
            if stepped else None, record_shapes=True,
            with_flops=True,
            profile_memory=self.config.record_memory,
            with_stack=self.config.stack,
        )
        # Kineto's "USDT: ... profiler_start" line (capture/quiet.py)
        with kineto_chatter_filtered():
            self._prof.start()
        if stepped:
            self._label_window()
        self.phase = Phase.WINDOW
        self._timed_window = not stepped
        self._window_start = self.clock.now()
        if self.config.nvml_interval_s > 0 and self._gpu_in_use():
            self._sampler = NvmlSampler(self.config.nvml_interval_s)
            self._sampler.start()

    def _label_window(self) -> None:
        """Top-level ``gpudoctor_window`` in the trace: the 0-based index of the step recorded as
        ProfilerStep#1 (ProfilerStep#k is step first_step + k - 1) and, in a distributed job, the
        rank: the trace alone says which steps of the program it holds."""
        label: dict[str, Any] = {"first_step": self._count + 1, "steps": self.config.steps}
        if self.sync is not None:
            label.update(rank=self.sync.info.rank, world_size=self.sync.info.world_size)
        with contextlib.suppress(Exception):  # a label, never worth failing the window for
            self._prof.add_metadata_json("gpudoctor_window", json.dumps(label))

    def _narrow_hooks(self) -> None:
        """Once the source is known, every module call need not go through the global hooks: keep
        a hook on the outermost module when its forwards are steps or tokens, else none."""
        if self._hooks is not None:
            keep_root = self.detector.source in (Source.FORWARD, Source.GENERATE)
            self._hooks.narrow_to(self._root_module() if keep_root else None)

    def _evaluating_before_training(self) -> bool:
        """The steps are forwards of the model evaluated (no grad, or eval mode) and an optimizer
        that has not stepped yet holds its parameters: an evaluation before training. The window
        waits for the training (its optimizer steps replace the forwards, capture/detect.py), at
        most EVAL_WAIT_STEPS steps and EVAL_WAIT_S seconds; after that the forwards are the steps
        (a program that builds an optimizer and only evaluates)."""
        d = self.detector
        if d.source is not Source.FORWARD or not d.forwards_from_eval or d.optimizer_seen:
            return False
        if self._eval_wait is None:  # once an epoch: the scan walks every object of the program
            self._eval_wait = (self._count, self.clock.now(), self._optimizer_holds_root())
        count, since, trained = self._eval_wait
        waiting = trained and (self._count - count < EVAL_WAIT_STEPS
                               and self.clock.now() - since < EVAL_WAIT_S)
        if trained and not waiting and self._eval_forwards_passed:
            self.result.notes.append(
                f"the model was evaluated for {self._eval_forwards_passed} forwards with an "
                "optimizer built and not stepped, and training did not start: the window records "
                "those forwards")
            self._eval_forwards_passed = 0
        return waiting

    def _optimizer_holds_root(self) -> bool:
        """Whether a torch.optim optimizer alive in the program holds a parameter of the
        outermost module."""
        module = self._root_module()
        if module is None:
            return False
        try:
            params = {id(p) for p in module.parameters()}
            optimizer = self._torch.optim.Optimizer
            for obj in gc.get_objects():
                # type(), not isinstance(): no object's __class__ runs (deprecated proxies warn)
                if issubclass(type(obj), optimizer) and any(
                        id(p) in params for group in obj.param_groups for p in group["params"]):
                    return True
        except Exception:  # noqa: BLE001 - the program's objects: a failed scan only stops the wait
            return False
        return False

    def _root_module(self) -> Any:
        """The outermost module object (the detector keeps only its id)."""
        module = self._root_ref() if self._root_ref is not None else None
        return module if module is not None and id(module) == self.detector.root else None

    def _mark_iteration(self) -> None:
        """Inside a time window: a ``gpudoctor.iteration#N`` range per iteration the hooks can see
        (the outermost module's forward, a generate call), so the report still has per-iteration
        numbers (analysis/steps.py reads them)."""
        from torch.autograd.profiler import record_function

        self._close_iteration()
        self._iterations += 1
        marker = record_function(f"gpudoctor.iteration#{self._iterations}")
        marker.__enter__()
        self._iteration_marker = marker

    def _close_iteration(self) -> None:
        marker, self._iteration_marker = self._iteration_marker, None
        if marker is not None:
            marker.__exit__(None, None, None)

    def _trace_file(self) -> Path:
        """Where the window's trace is written (gzipped next to it): ``trace.json``, or
        ``trace.rank3.json`` in a distributed job."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return self.out_dir / f"trace{rank_suffix(self.rank)}.json"

    def _finish_window(self, error: str = "") -> None:
        self._close_iteration()
        prof, self._prof = self._prof, None
        try:
            with kineto_chatter_filtered():
                prof.stop()
        finally:
            self.result.window_wall_s = self.clock.now() - self._window_start
            if self._sampler is not None:
                self.result.nvml = self._sampler.stop()
                self._sampler = None
        if error:
            self.result.error = error
        raw = self._trace_file()
        prof.export_chrome_trace(str(raw))
        self.result.trace_path = _gzip(raw)

    def _keep_step_hook_only(self) -> None:
        """The window is over: of the hooks, keep only the one that marks the steps, so that the
        steps timed after it run as the program runs alone (the DataLoader, backward and
        profiler wrappers, the optimizer hook of a forward-stepped loop: all gone)."""
        if self._hooks is None:
            return
        source = self.detector.source
        root = self._root_module() if source in (Source.FORWARD, Source.GENERATE) else None
        self._hooks.keep_only(optimizer=source is Source.OPTIMIZER,
                              backward=source is Source.BACKWARD,
                              generate=source is Source.GENERATE,
                              replay=source is Source.GRAPH, root=root,
                              loader=self._fetched)

    # -- unprofiled timing ---------------------------------------------------------------------

    def _gpu_in_use(self) -> bool:
        """Has the program started CUDA? Until it has, nothing of gpudoctor's touches the GPU: a
        program that never does (tests/programs/cpu_only.py on a GPU machine) gets no CUDA
        context, no CUPTI and no events from gpudoctor, and its steps are timed on the host."""
        return self._cuda and bool(self._torch.cuda.is_initialized())

    def _note_device(self) -> None:
        if self._gpu_in_use() and self.result.device == "cpu":
            with contextlib.suppress(Exception):  # a name, never worth failing the capture for
                self.result.device = self._torch.cuda.get_device_name()

    def _trial_wants_more(self, skip: int) -> bool:
        """A trial behind a DataLoader with workers times past its start-up backlog and over two
        rounds of its queue (capture/timing.py keeps the later half, which must hold one round),
        bounded by 3 rounds past ``skip``; then every trial runs on until its steps have settled
        and enough of them are timed (``_trial_unsettled``)."""
        if self.loader.serving_backlog(self._count, skip, distributed=self.sync is not None):
            return True
        depth = self.loader.depth
        if depth and len(self._before) <= 2 * depth and self._count < max(skip, 1) + 3 * depth:
            return True
        try:
            return self._trial_unsettled(skip)
        except Exception as exc:  # noqa: BLE001 - never the program's failure: stop waiting, time what there is
            self.result.notes.append("the steps could not be read while waiting for them "
                                     f"to settle ({type(exc).__name__}); the later half of those "
                                     "run is timed")
            self._trial.abandon()
            return False

    def _trial_unsettled(self, skip: int) -> bool:
        """Past ``skip``, the trial's own decision (capture/trial_timing.py) on the steps the GPU
        has finished: no sync, the program's own overlap of host and GPU is kept."""
        now = self.clock.now()
        intervals = self._finished_intervals(self._before, self._before_steps)
        runs_on = self._trial.on_step(intervals, self._count - max(skip, 1), self.loader.depth,
                                      now, steps=self._finished.steps)
        if not runs_on and self._trial.note:
            self.result.notes.append(self._trial.note)
        return runs_on

    def _finished_intervals(self, marks: list[Any],
                            steps: list[int | None] | None = None) -> list[float]:
        """The intervals between ``marks`` up to the last one the GPU has reached, and their steps
        in ``self._finished.steps`` where ``steps`` are given (capture/marks.py)."""
        return self._finished.read(marks, steps)

    def _mark_step(self, marks: list[Any], steps: list[int | None]) -> None:
        """A step boundary's stamp, and its count in ``steps``; a step in which torch.compile
        compiled is cut from the series."""
        stamp = self._stamp()
        if self._compiles.changed() and marks:
            marks.append(None)  # the step that ended compiled: not a step as it runs
            steps.append(None)
        marks.append(stamp)
        steps.append(self._total)
        self._fetch_by_step[self._total] = self._fetch_s
        self._fetch_s = 0.0

    def _stamp(self) -> Any:
        if self._gpu_in_use():
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()
            self._host_at[id(event)] = self.clock.now()
            return event
        return self.clock.now()

    def _leads(self, before: list[Any], after: list[Any]) -> tuple[list[float], list[float]]:
        """The leads of the two series' timed steps (capture/marks.py leads_ms), against a
        reference event recorded on the GPU just synchronized; empty where not known."""
        host_at, self._host_at = self._host_at, {}
        if not self._gpu_in_use() or not host_at:
            return [], []
        try:
            reference = self._torch.cuda.Event(enable_timing=True)
            reference.record()
            reference_host = self.clock.now()
            reference.synchronize()
            early = [] if self._trial.timed_ms else leads_ms(before, host_at, reference,
                                                              reference_host)
            after_leads = leads_ms(after, host_at, reference, reference_host)
        except Exception:  # noqa: BLE001 - the leads are extra: the step times stand without them
            return [], []
        kept = len(self.result.unprofiled_before_ms)
        return early[len(early) - kept:] if kept and len(early) >= kept else [], after_leads

    def _fetches(self, steps: list) -> list[float] | None:
        """Each timed step's DataLoader fetch (ms), where every one is known (a step the window cut
        has none) and one was fetched from; else None."""
        fetched = [self._fetch_by_step[i] * 1e3 for i in steps if i in self._fetch_by_step]
        return fetched if fetched and any(fetched) and len(fetched) == len(steps) else None

    def _compute_unprofiled_times(self) -> None:
        """Step times between boundaries outside the window, and the one number made of them.

        Before the window: the last half of its steps (at least 3 when there are 3; the first
        are warm-up: compilation, autotuning, the allocator). After it: every step timed. Which
        set (or both) the number comes from, and how, is capture/timing.py's choice: on a GPU the
        launch-bound programs ran slower per step right after the profiler stopped than before it
        started, while on a CPU the steps before a window at --skip 5 are still warming up
        (benchmarks/BENCHMARKS-capture.md "Evidence moved from the source: capture").
        """
        before, after, tokens = self._before, self._after, self._tokens
        before_steps, after_steps = self._before_steps, self._after_steps
        self._before, self._after, self._tokens = [], [], []
        self._before_steps, self._after_steps = [], []
        try:
            if self._gpu_in_use() and (len(before) > 1 or len(after) > 1 or tokens):
                self._torch.cuda.synchronize()
            early = intervals_ms(before)
            early_steps = interval_steps(before, before_steps)
            keep = max(min(3, len(early)), len(early) - len(early) // 2)
            trial_ms = self._trial.timed_ms  # a trial whose steps settled: the steps it timed
            self.result.unprofiled_before_ms = list(trial_ms) if trial_ms else early[
                len(early) - keep:]
            self.result.unprofiled_before_steps = list(self._trial.timed_steps) if trial_ms else (
                early_steps[len(early_steps) - keep:])
            self.result.unprofiled_after_ms = intervals_ms(after)
            self.result.unprofiled_after_steps = interval_steps(after, after_steps)
            self.result.generate = token_times(tokens)
            leads = self._leads(before, after)
        except Exception as exc:  # noqa: BLE001 - a GPU left unusable by the program's own error
            self.result.notes.append(
                f"the unprofiled steps could not be timed ({type(exc).__name__})")
            return
        r = self.result
        window_step = r.window_opened_at_step
        last_before = None if window_step is None else self._total - self._count + window_step
        r.unprofiled = unprofiled_step(r.unprofiled_before_ms, r.unprofiled_after_ms,
                                       self.loader.depth, last_before,
                                       self._fetches(r.unprofiled_before_steps),
                                       self._fetches(r.unprofiled_after_steps))
        chosen = r.unprofiled.samples_from if r.unprofiled is not None else "before"

        def pick(before: list, after: list) -> list:  # the series the one number came from
            return {"before": before, "after": after}.get(chosen, before + after)

        r.unprofiled_step_ms = pick(r.unprofiled_before_ms, r.unprofiled_after_ms)
        r.unprofiled_step_index = pick(r.unprofiled_before_steps, r.unprofiled_after_steps)
        r.loader = self.loader.settings
        lead = pick(*leads)
        r.unprofiled_lead_ms = lead if len(lead) == len(r.unprofiled_step_ms) else []
        fetched = self._fetches(r.unprofiled_step_index) or []
        if (r.unprofiled is not None and any(fetched)
                and len(fetched) == len(r.unprofiled_step_ms)):
            r.unprofiled_fetch_ms = fetched
            r.unprofiled_fetch = fetch_in_step(r.unprofiled.ms, r.unprofiled_step_ms, fetched,
                                               self.loader.depth)
        if r.step_source and r.step_source != Source.TIME.value and (
            r.unprofiled is None or not r.unprofiled.trusted):
            why = r.unprofiled.why if r.unprofiled is not None else "no step could be timed without the profiler"
            more = ("start the program's own profiler later, or leave it out"
                    if r.step_source == PROGRAM_PROFILER
                    else "raise --skip or --calibrate, or let the program run longer")
            r.notes.append(f"the unprofiled step is uncertain: {why}; the observer-effect "
                           f"calibration is weak ({more})")


def step() -> None:
    """Mark a step boundary for the active gpudoctor capture (a no-op when none is active).

    Call it once per training / inference iteration when the program's own loop is not one
    gpudoctor can see (no module, optimizer or generate call marks it).
    """
    if _ACTIVE:
        _ACTIVE[-1].step()


def _preload_profiler_imports(torch: Any) -> None:
    """Import now what ``torch.profiler`` imports when it starts: its ``prepare_trace`` touches
    ``torch._inductor`` (torch 2.11-2.13), which pulls in dynamo and sympy (about 900 modules,
    2.5 s on a 2-core CPU). Loaded here, before the program runs, it neither stalls the program
    inside its loop nor races an import the program has half done."""
    # an optional speed-up: the profiler imports it again if this fails
    with contextlib.suppress(Exception):
        import torch._inductor  # noqa: F401


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


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


def model_state_of(optimizer: Any) -> ModelState | None:
    """Bytes of the parameters, gradients and optimizer states an optimizer holds (on the GPU);
    None when it holds no parameter on the GPU or cannot be read.

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
                dtype = str(p.dtype).replace("torch.", "")
                dtypes[dtype] = dtypes.get(dtype, 0) + p.numel()
                if p.grad is not None:
                    grads += p.grad.numel() * p.grad.element_size()
                for value in optimizer.state.get(p, {}).values():
                    if isinstance(value, torch.Tensor) and value.device.type == "cuda":
                        states += value.numel() * value.element_size()
    except (AttributeError, KeyError, TypeError, RuntimeError):
        return None
    if not n:
        return None
    return ModelState(n, params, grads, states, optimizer=type(optimizer).__name__,
                      param_dtype=max(dtypes, key=dtypes.__getitem__))
