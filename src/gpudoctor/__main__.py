"""``python -m gpudoctor`` (and the ``gpudoctor`` command).

``analyze PATH --json``, the form that scripts and batch jobs run over many traces, goes straight
to the pipeline: the typer app, rich and the pydantic that typer brings take about 0.1 s to import
and set up, a fifth of the whole run on a 150k-event trace (benchmarks/bench_load.py
--whole-process). It does what the typer command does (cli.analyze) and fails the same way
(failures.py). Every other command line, ``--help`` and ``--debug`` included, goes to the typer app.
"""

from __future__ import annotations

import gc
import os
import sys
import warnings

_python_showwarning = warnings.showwarning


def main() -> None:
    path = _plain_analyze_json(sys.argv[1:])
    if path is None:
        from gpudoctor.cli import main as typer_main

        typer_main()
        return
    # a gzipped trace is read and inflated on a second thread while the analysis is imported
    # (gpudoctor/core/inflate.py; the loader takes it): 0.06-0.08 s less on a 48 MB trace
    from gpudoctor.core.inflate import inflate_ahead

    inflate_ahead(path)
    warnings.showwarning = _show_warning
    # numpy starts one OpenBLAS thread per core at import, and no analysis multiplies matrices:
    # on 2 cores the threads cost 0.05-0.1 s of CPU time for nothing (`import numpy` alone).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        from pathlib import Path

        # The imports create objects that live as long as the process and hold no garbage: the
        # cyclic collector would only rescan them (about 0.02 s of the imports' 0.17-0.19 s of CPU,
        # 2-core x86_64). Frozen, later collections skip them.
        gc.disable()
        from gpudoctor.pipeline import analyze_inputs
        from gpudoctor.report.json_report import to_json

        gc.freeze()
        gc.enable()
        report = analyze_inputs([Path(path)])
        sys.stdout.write(to_json(report) + "\n")
    except KeyboardInterrupt:  # as click does for the typer app: a new line, then exit 130
        sys.stderr.write("\n")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback, as the typer app fails
        from gpudoctor.failures import fail_on

        fail_on(exc)
    sys.exit(0)


def _plain_analyze_json(argv: list[str]) -> str | None:
    """PATH when ``argv`` is exactly ``analyze PATH --json`` or ``analyze --json PATH``, else
    None."""
    if len(argv) != 3 or argv[0] != "analyze" or "--json" not in argv[1:]:
        return None
    path = argv[2] if argv[1] == "--json" else argv[1]
    return path if path and not path.startswith("-") else None


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # type: ignore[no-untyped-def]
    """The command line's warning line (failures.show_warning), its module imported only when a
    warning comes."""
    warnings.showwarning = _python_showwarning  # what failures records as Python's own
    from gpudoctor.failures import show_warning

    warnings.showwarning = show_warning
    show_warning(message, category, filename, lineno, file, line)


if __name__ == "__main__":
    main()
