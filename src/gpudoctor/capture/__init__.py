"""Live capture: profile a window of the user's own program (``gpudoctor run``,
``gpudoctor.profile``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpudoctor.capture.session import CaptureConfig, CaptureResult, CaptureSession, step

__all__ = ["CaptureConfig", "CaptureResult", "CaptureSession", "step"]


def __getattr__(name: str) -> Any:
    """The session's names, imported on first use: reading a run directory (capture.bundle, on
    every ``gpudoctor analyze``) needs none of the live-capture machinery."""
    if name in __all__:
        from gpudoctor.capture import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
