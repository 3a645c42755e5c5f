"""Trace engine: torch.profiler JSON -> columnar ``Trace`` with kernel <-> launch <-> op links."""

from gpudoctor.trace.kernels import Kind, classify_kernel
from gpudoctor.trace.load import load, parse
from gpudoctor.trace.model import DeviceCat, HostCat, Trace

__all__ = ["DeviceCat", "HostCat", "Kind", "Trace", "classify_kernel", "load", "parse"]
