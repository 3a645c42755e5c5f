"""The small exception hierarchy of gpudoctor.

Every message says what is wrong, what is accepted and what to do, in one line: the CLI prints
it as is and exits with code 2 (bad input) or 1 (an internal error).
"""

from __future__ import annotations


class GpuDoctorError(Exception):
    """Base class of every error gpudoctor raises on purpose."""

    exit_code = 1


class InputError(GpuDoctorError):
    """The user gave something gpudoctor cannot use (a path, a file, an option value)."""

    exit_code = 2


class TraceFormatError(InputError):
    """A file is not a readable torch.profiler (Kineto / Chrome) trace."""


class NoGpuActivityError(InputError):
    """A trace lacks the GPU facts an analysis needs (no GPU named, no events at all)."""


class EmptyTraceError(NoGpuActivityError):
    """A trace file parses but holds no host or GPU events: there is nothing to report on."""


class IncompleteTraceError(InputError):
    """A trace parses but lacks what every analysis needs (host events, GPU time, one clock):
    nothing sound can be reported (trace/capabilities.py)."""


class UnknownGpuError(InputError):
    """A GPU name matches no row of the datasheet table and no ceilings file was given."""


class CeilingsFileError(InputError):
    """A ceilings file is unreadable or lacks a required field."""


class TrialRecordError(InputError):
    """A ``--try-fixes`` trial record read back (trials.json, report.json) lacks a field or holds
    one of the wrong type."""
