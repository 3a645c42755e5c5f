"""Live capture: profile a window of the user's own program (``gpudoctor run``, ``gpudoctor.profile``)."""

from gpudoctor.capture.session import CaptureConfig, CaptureResult, CaptureSession, step

__all__ = ["CaptureConfig", "CaptureResult", "CaptureSession", "step"]
