"""The offline doctor end to end: path -> Trace -> Analysis -> findings -> Report."""

from __future__ import annotations

import os
from typing import Any

from gpudoctor.analysis import analyze_trace
from gpudoctor.errors import NoGpuActivityError
from gpudoctor.hardware.ceilings import Ceilings, for_gpu_name, load_file
from gpudoctor.report.build import build_report
from gpudoctor.report.model import Report
from gpudoctor.rules.registry import run_rules
from gpudoctor.trace import Trace, load

DEFAULT_GPU = "h100-sxm"


def choose_ceilings(trace: Trace, gpu: str | None = None, ceilings: Any = None) -> Ceilings:
    """--ceilings FILE, else --gpu NAME, else the GPU named in the trace's deviceProperties."""
    if isinstance(ceilings, Ceilings):
        return ceilings
    if ceilings is not None:
        return load_file(ceilings)
    if gpu:
        return for_gpu_name(gpu)
    if trace.gpu and trace.gpu.name:
        return for_gpu_name(trace.gpu.name)
    raise NoGpuActivityError(
        f"{trace.source} names no GPU (no deviceProperties); pass --gpu NAME (e.g. --gpu {DEFAULT_GPU}) "
        "or --ceilings FILE"
    )


def analyze_loaded(trace: Trace, gpu: str | None = None, ceilings: Any = None) -> Report:
    if len(trace.device) == 0:
        raise NoGpuActivityError(
            f"{trace.source} has no GPU events (kernels, memcpy): it is a CPU-only profile; record with "
            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU machine"
        )
    chosen = choose_ceilings(trace, gpu, ceilings)
    analysis = analyze_trace(trace, chosen)
    return build_report(analysis, run_rules(analysis))


def analyze_path(path: str | os.PathLike[str], gpu: str | None = None, ceilings: Any = None) -> Report:
    return analyze_loaded(load(path), gpu=gpu, ceilings=ceilings)
