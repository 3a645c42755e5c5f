"""Run the user's program in-process, exactly as ``python SCRIPT ARGS`` / ``python -m MODULE``
would, with a capture session attached; write the run bundle and return an exit code.

Steps are found by the session's hooks (capture/hooks.py): optimizer steps, ``generate`` calls,
the outermost module's forward, CUDA graph replays, or ``gpudoctor.step()``. A program in which
none of them shows within ``wait_s`` seconds gets a time window, opened and closed at the next
module call, optimizer step or DataLoader batch. No signal handler is installed: the program's
own SIGALRM, threads and imports are left alone.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import runpy
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpudoctor.capture.bundle import global_rank
from gpudoctor.capture.rank_window import RankSync
from gpudoctor.capture.session import CaptureConfig, CaptureResult, CaptureSession, Phase
from gpudoctor.errors import InputError

# In a distributed job, what the program left behind (its globals, the frames of the exception
# that ended it) is kept until the interpreter exits, as under plain ``python``. Freed earlier, a
# DDP model whose process group the program destroyed can deadlock in torch: the Reducer's
# deallocation holds the GIL while ~ProcessGroupGloo joins a worker thread that needs the GIL
# (pytorch/pytorch#56297; seen here on torch 2.13 CPU, gloo, 2 ranks, about one run in two).
_KEPT: list[object] = []


class StopProgram(BaseException):
    """Raised inside the program once the window is recorded (``--exit-after``)."""


@dataclass(frozen=True)
class Target:
    """What to run: a script path or a module name, and its arguments."""

    path_or_module: str
    args: tuple[str, ...] = ()
    is_module: bool = False

    @property
    def name(self) -> str:
        return self.path_or_module.rsplit(".", 1)[-1] if self.is_module else Path(
            self.path_or_module).stem

    def check(self) -> None:
        if self.is_module:
            # as `python -m` finds it: the working directory first (_execute puts it there too; the
            # gpudoctor command's own sys.path[0] is its bin folder, where no user package is)
            sys.path.insert(0, os.getcwd())
            try:
                found = importlib.util.find_spec(self.path_or_module)
            except (ImportError, ValueError):
                found = None
            finally:
                sys.path.remove(os.getcwd())  # the first occurrence: the one put there above
            if found is None:
                raise InputError(
                    f"no module named {self.path_or_module!r}; check the name and that it is "
                    "importable")
        else:
            path = Path(self.path_or_module)
            if not path.is_file():
                what = "is a directory" if path.is_dir() else "does not exist"
                raise InputError(f"script {path} {what}; pass a Python file (or -m MODULE)")


@dataclass
class Outcome:
    """How the program ended and what was captured."""

    exit_code: int
    result: CaptureResult
    stopped_by_us: bool
    message: str = ""


def run_program(
    target: Target,
    config: CaptureConfig,
    out_dir: Path,
    exit_after: bool = True,
    wait_s: float = 30.0,
    window_s: float = 3.0,
    sync: RankSync | None = None,
) -> Outcome:
    """``sync``: a distributed job whose ranks agree on the window (capture/rank_window.py); the
    bundle then goes to ``sync.bundle_dir()``, and ``out_dir`` serves only a time window."""
    target.check()
    session = CaptureSession(config, out_dir, wait_s=wait_s, window_s=window_s,
                             rank=None if sync is not None else global_rank(), sync=sync)
    stopped = False
    message = ""

    def window_done() -> None:
        if exit_after:
            raise StopProgram

    session.on_window_done = window_done
    saved = (list(sys.argv), list(sys.path))
    code = 0
    keep = sync is not None
    try:
        session.start()
        _freeze_our_objects()
        left = _execute(target)
        if keep:
            _KEPT.append(left)
    except StopProgram as exc:
        stopped = True
        if keep:
            _KEPT.append(exc.__traceback__)
    except SystemExit as exc:
        if keep:
            _KEPT.append(exc.__traceback__)
        code = _exit_code(exc)
        if session.phase is Phase.WINDOW:
            session.fail(f"the program exited (sys.exit({code})) inside the window")
    except KeyboardInterrupt:
        session.fail("interrupted by Ctrl-C")
        message = "interrupted by Ctrl-C"
        code = 130
    except BaseException as exc:  # noqa: BLE001 - the program's own error: its traceback, as Python prints it
        if keep:
            _KEPT.append(exc.__traceback__)
        _print_user_traceback(exc)
        session.fail(f"{type(exc).__name__}: {exc}")
        code = 1
    finally:
        session.close()
        sys.argv[:], sys.path[:] = saved
        _unfreeze_our_objects()
    if session.conflict:
        message, code = session.conflict, code or 2
    return Outcome(code, session.result, stopped, message)


@contextlib.contextmanager
def program_stdout_to_stderr() -> Iterator[None]:
    """Send everything the program prints to stdout (Python, C extensions and child processes
    alike: file descriptor 1) to stderr, so that gpudoctor's own stdout stays parseable."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no usable stdout (closed): nothing to keep apart
        yield
        return
    os.dup2(2, 1)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _freeze_our_objects() -> None:
    """Move every object alive now (gpudoctor's imports, torch's, the profiler's preloaded
    ``torch._inductor``: ~900 modules) out of the garbage collector's reach, so that the program's
    full collections scan what the program made, as they would without gpudoctor (``gc.freeze``,
    made for this: objects that live as long as the process). A host-bound program that makes
    thousands of tensors a step ran slower with ``torch._inductor`` imported first, and back near
    its own pace with it frozen (benchmarks/BENCHMARKS-capture.md "Evidence moved from the source:
    capture")."""
    import gc

    gc.freeze()


def _unfreeze_our_objects() -> None:
    """The program is over: the frozen objects go back to the collector, so that the interpreter's
    shutdown collects them too. Left frozen, triton's objects outlive its bindings, and nanobind
    prints about a hundred "leaked instance" lines after every report (torch 2.13, triton 3.9)."""
    import gc

    gc.unfreeze()


def _execute(target: Target) -> dict[str, object]:
    """Run the program; its globals once it returns."""
    if target.is_module:
        sys.argv[:] = [target.path_or_module, *target.args]
        sys.path.insert(0, os.getcwd())
        return runpy.run_module(target.path_or_module, run_name="__main__", alter_sys=True)
    script = str(Path(target.path_or_module))
    sys.argv[:] = [script, *target.args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    return runpy.run_path(script, run_name="__main__")


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback without gpudoctor's and runpy's frames in front of the program's own."""
    tb = exc.__traceback__
    while tb is not None and _ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    if tb is None and isinstance(exc, SyntaxError):
        # the script did not compile: Python shows the file, line and message, with no frame
        traceback.print_exception(type(exc), exc, None)
        return
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__)


def _ours(filename: str) -> bool:
    return filename in (__file__, runpy.__file__) or filename.endswith(("runpy.py",
                                                                        "<frozen runpy>"))


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1
