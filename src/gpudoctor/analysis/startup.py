"""One-time start-up inside the window: a runtime call that runs for a tenth of a second or more
without waiting for the GPU (no launch, synchronize or copy) is the process creating its CUDA
context, loading kernels or setting up a library, which no later step pays. A window that holds it
(a script profiled from its first line, no step markers) prices it as if every step did
(benchmarks/BENCHMARKS-replay.md "Public traces never seen"; tests/test_degenerate_traces.py).
"""

from __future__ import annotations

import numpy as np

from gpudoctor.trace.model import HostCat, Trace

STARTUP_CALL_NS = 100_000_000
# calls that wait for the GPU (or its queue) may last as long as the work they wait for
_WAITS = ("Launch", "Synchronize", "Memcpy", "Memset", "Wait", "Query")


def startup_note(trace: Trace, lo: int, hi: int) -> str | None:
    """The note on such calls that start in the analysed steps [lo, hi) (a step left out as
    one-off work takes its own with it), or None."""
    host = trace.host
    if len(host) == 0:
        return None
    runtime = (host.cat == HostCat.RUNTIME) | (host.cat == HostCat.DRIVER)
    long = np.flatnonzero(runtime & (host.dur >= STARTUP_CALL_NS) & (host.ts >= lo)
                          & (host.ts < hi))
    long = [int(i) for i in long.tolist()
            if not any(w in trace.strings[int(host.name[i])] for w in _WAITS)]
    if not long:
        return None
    dur = host.dur
    total = int(dur[long].sum())
    top = max(long, key=lambda i: int(dur[i]))
    return (f"the window holds one-time start-up: {len(long)} runtime call"
            f"{'s' * (len(long) != 1)} of {total / 1e9:.1f} s without GPU work to wait for (the "
            f"longest, {trace.strings[int(host.name[top])]}, "
            f"{dur[top] / 1e9:.1f} s: the process creating its CUDA context "
            "or setting up a library), which no later step pays and which the step and its prices "
            "include here; profile steps after the first few: torch.profiler.schedule(wait=1, "
            "warmup=1, active=3) and prof.step() each iteration")
