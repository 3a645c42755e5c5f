"""Children that gpudoctor (or its benchmarks) stop with SIGINT must take it, whatever SIGINT the
parent inherited."""

from __future__ import annotations

import signal
from collections.abc import Callable


def default_sigint_in_child() -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` that gives the child default SIGINT handling (a
    Python child: KeyboardInterrupt), or None when it gets that anyway.

    A process started with SIGINT ignored (a script's background job: ``cmd &``, and whatever it
    runs) passes SIG_IGN on through exec, and a Python child then installs no KeyboardInterrupt
    handler: the Ctrl-C its parent sends to stop it would do nothing. A handled SIGINT is reset by
    exec itself, so the child is forked plainly then (no ``preexec_fn``: the fast spawn path, no
    Python code between fork and exec). Works with ``start_new_session=True``."""
    return _restore_default_sigint if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else None


def _restore_default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
