"""One capture driven by a framework's own step marks, and its run bundle (shared by the hooks).

The hooks call ``step()`` once per optimizer step; no optimizer or module hook is installed
(``CaptureSession.start(hook_optimizers=False)``), so the framework's marks are the only step
boundaries. The bundle is written once: when the session is done, or when training ends, fails
or the interpreter exits with the window still open (then with what was captured).

In a distributed job the ranks agree on the window's steps and share one run directory exactly
as under ``gpudoctor run`` (capture/rank_window.py, ``live.finish_ranked``): ``RUN/rank<R>/``, and
rank 0 writes the combined report.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpudoctor.capture.bundle import new_run_dir
from gpudoctor.capture.rank_window import DEFAULT_TIMEOUT_S, RankInfo, RankSync
from gpudoctor.capture.session import CaptureConfig, CaptureSession
from gpudoctor.errors import GpuDoctorError, InputError

if TYPE_CHECKING:
    from gpudoctor.report.model import Report

DEFAULT_OUT = "gpudoctor-runs"


def missing(framework: str, package: str) -> InputError:
    """The one-line error for a hook whose framework is not installed."""
    return InputError(f"gpudoctor.integrations needs {framework} for this hook, and it is not "
                      f"installed: pip install {package}")


class RunCapture:
    """A capture session, its run directory and, once finished, its report."""

    def __init__(self, *, skip: int, steps: int, stack: bool,
                 out: str | os.PathLike[str], name: str, rank: RankInfo | None, quiet: bool = False,
                 rank_timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.config = CaptureConfig(steps=steps, skip=skip, stack=stack)
        self.rank = rank.rank if rank is not None else None
        # distributed: the ranks agree on the steps and share RUN/; run_dir is this rank's bundle
        # until the end, then RUN on rank 0 (which holds the combined report)
        self.sync = RankSync(rank, Path(out), name, steps, rank_timeout_s) if rank is not None else None
        self.run_dir = self.sync.bundle_dir() if self.sync is not None else new_run_dir(
            Path(out), name)
        self.session = CaptureSession(self.config, self.run_dir, sync=self.sync)
        self.quiet = quiet
        self.report: Report | None = None
        self.note = ""
        self.started = False
        self.finished = False

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        self.session.start(hook_optimizers=False)
        atexit.register(self._at_exit)

    def step(self) -> None:
        """One optimizer step ended; the bundle is written as soon as the session is done."""
        if not self.started or self.finished:
            return
        self.session.step()
        if self.session.done:
            self.finish()

    def fail(self, error: str) -> None:
        """Training raised: close the window with what was captured and write the bundle."""
        if self.started and not self.finished:
            self.session.fail(error)
            self.finish()

    def finish(self) -> None:
        """Close the session and write the bundle (once; a no-op before start)."""
        if not self.started or self.finished:
            return
        self.finished = True
        atexit.unregister(self._at_exit)
        self.session.close()
        from gpudoctor.live import diagnose_capture, finish_ranked

        result = self.session.result
        if self.sync is not None:
            self.run_dir = self.sync.bundle_dir()  # agreed by now (or chosen alone)
        if result.trace_path is not None or self.sync is not None:
            try:
                if self.sync is not None:
                    self.run_dir, self.report, self.note = finish_ranked(result,
                                                                         self.config, self.sync)
                else:
                    self.report, self.note = diagnose_capture(result, self.config, self.run_dir)
            except Exception as exc:  # noqa: BLE001 - a failed diagnosis must not end the user's training
                self.note = (f"the trace is in {result.trace_path}, but diagnosing it failed "
                             f"({type(exc).__name__}: {exc}); rerun `gpudoctor --debug analyze "
                             f"{self.run_dir}` for the traceback")
            if result.error:
                self.note = _join(self.note,
                                  f"the window ended early ({result.error}): the report covers "
                                  "what was captured")
        if result.trace_path is None:
            self.note = _join(self.session.conflict or self._why_nothing(), self.note)
        self._announce()

    def require_report(self) -> Report:
        if self.report is None:
            raise GpuDoctorError(self.note
                                 or "no window was recorded yet: the report is written when the "
                                    "window closes")
        return self.report

    def _why_nothing(self) -> str:
        cfg, seen = self.config, self.session.result.steps_seen
        if self.session.result.internal_error:
            return f"gpudoctor failed while recording ({self.session.result.internal_error}) and detached"
        return (f"training ended after {seen} optimizer step{'s' * (seen != 1)}, before the "
                f"window closed (skip {cfg.skip} + 1 warm-up + steps {cfg.steps} = "
                f"{cfg.skip + 1 + cfg.steps}): nothing was recorded; lower skip or steps")

    def _announce(self) -> None:
        if self.quiet:
            return
        where = f"gpudoctor{'' if self.rank is None else f' (rank {self.rank})'}:"
        if self.report is not None:
            top = next((f for f in self.report.findings if f.severity in ("critical",
                                                                          "major")), None)
            verdict = f"top finding {top.id} (~{top.saving_ms:.2f} ms/step)" if top else "no major finding"
            print(f"{where} step {self.report.step_ms:.2f} ms, {verdict}; report in {self.run_dir}",
                  file=sys.stderr)
        if self.note:
            print(f"{where} {self.note}", file=sys.stderr)

    def _at_exit(self) -> None:
        result = self.session.result
        if result.trace_path is None and result.steps_seen >= self.config.skip:
            self.fail("the program exited inside the window")
        else:
            self.finish()


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a and b else a or b
