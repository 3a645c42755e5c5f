"""gpudoctor: why is my GPU workload slow, by how much, and what exactly do I change?

    >>> import gpudoctor
    >>> report = gpudoctor.analyze("trace.json.gz")
    >>> report.findings[0].id
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpudoctor.core.version import __version__

__all__ = ["__version__", "analyze", "profile", "step"]

if TYPE_CHECKING:
    from gpudoctor.report.model import Report


def analyze(path: Any, *, gpu: str | None = None, ceilings: Any = None) -> Report:
    """Load a torch.profiler trace (file or run directory) and return the diagnosis; a run
    directory of a distributed job (``rank*/`` bundles, ``trace.rankN.json.gz`` files) gets the
    combined multi-rank report (``pipeline.analyze_ranks``).

    ``gpu`` names a datasheet row to use instead of the GPU recorded in the trace; ``ceilings``
    is a path to a ceilings JSON file (as written by ``gpudoctor bench``) or a ``Ceilings``.
    """
    from gpudoctor.pipeline import analyze_path, analyze_ranks, is_rank_set

    if is_rank_set(path):
        return analyze_ranks([path], gpu=gpu, ceilings=ceilings)
    return analyze_path(path, gpu=gpu, ceilings=ceilings)


def profile(steps: int = 5, skip: int = 3, stack: bool = False, out: Any = None) -> Any:
    """Profile a window of the code in a ``with`` block and diagnose it:

        with gpudoctor.profile(steps=5, skip=3) as doc:
            for batch in loader:
                train_step(batch)
                doc.step()
        doc.report()
    """
    from gpudoctor.live import profile as _profile

    return _profile(steps=steps, skip=skip, stack=stack, out=out)


def step() -> None:
    """Mark a step boundary for ``gpudoctor run`` / ``gpudoctor.profile`` (no-op otherwise)."""
    from gpudoctor.capture.session import step as _step

    _step()
