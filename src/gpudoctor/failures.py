"""How the command line fails and warns: one line on stderr, Python's own form only with --debug.

Shared by the typer app (cli.py) and the fast ``analyze PATH --json`` path (__main__.py), which
must fail the same way without importing the app.
"""

from __future__ import annotations

import sys
import traceback
import warnings
from pathlib import Path
from typing import NoReturn

from gpudoctor.controls import visible_controls

PACKAGE_DIR = str(Path(__file__).resolve().parent)
PYTHON_SHOWWARNING = warnings.showwarning  # Python's own, for warnings not raised in gpudoctor
debug = {"on": False}  # --debug, set once the command line is read


def fail(exc: BaseException, line: str, code: int) -> NoReturn:
    """Exit with ``code`` after one line on stderr (with --debug, the traceback first)."""
    if debug["on"]:
        traceback.print_exception(exc)
    sys.stderr.write(visible_controls(line.replace("\n", " ")) + "\n")
    sys.exit(code)


def fail_on(exc: BaseException) -> NoReturn:
    """The line and exit code for an exception that reached the command line: a GpuDoctorError
    says what is wrong (its own code), anything else is an internal error (1)."""
    from gpudoctor.errors import GpuDoctorError

    if isinstance(exc, GpuDoctorError):
        fail(exc, f"error: {exc}", exc.exit_code)
    fail(exc,
         f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", 1)


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # type: ignore[no-untyped-def]
    """A warning raised in gpudoctor's own code (numpy's above all: an overflow, a division by zero)
    reaches the user as one line saying what it means; --debug shows Python's own form. Warnings of
    a program that `gpudoctor run` runs are its own: they show as Python shows them."""
    ours = str(Path(filename).resolve()).startswith(PACKAGE_DIR) if filename else False
    if debug["on"] or not ours:
        PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)
        return
    where = "/".join(Path(filename).parts[-3:])
    hint = "a number of this report may be off: " if issubclass(category, RuntimeWarning) else ""
    sys.stderr.write(visible_controls(
        f"gpudoctor: warning: {category.__name__}: {message} (at {where}:{lineno}); {hint}rerun "
        "with --debug and report it").replace("\n", " ") + "\n")
