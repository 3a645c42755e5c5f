"""A CPU rank's operators as its "kernels": time per operator name and step, operators per step, and
the work they were given (FLOPs and bytes by the cost model, analysis/opcost.py, from the recorded
shapes). With them a CPU (gloo) straggler's cause is judged as a GPU rank's is: the same operators
slower on the same work (its cores slower, or shared with other processes), or more work (a larger
batch)."""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis.intervals import contains
from gpudoctor.analysis.opcost import op_cost
from gpudoctor.analysis.steps import Steps
from gpudoctor.trace.model import Trace

# the names compared across ranks (kernels or operators): the longest ones cover the step
MAX_NAMES = 80


def in_steps(trace: Trace, ops: np.ndarray, steps: Steps) -> np.ndarray:
    """The operators of ``ops`` starting inside a step."""
    return ops[contains(steps.start, steps.end, trace.host.ts[ops])] if len(steps) and ops.size else ops[:0]


def ms_by_name(trace: Trace, names: np.ndarray, durations_ns: np.ndarray,
               n: int) -> dict[str, float]:
    """ms per step by name (string ids ``names``, one per event), the longest MAX_NAMES: a GPU
    rank's kernels, a CPU rank's operators."""
    if not len(names):
        return {}
    uniq, inv = np.unique(names, return_inverse=True)
    total = np.bincount(inv, weights=durations_ns)
    top = np.argsort(-total, kind="stable")[:MAX_NAMES]
    return {trace.string(int(uniq[k])): float(total[k]) / n / 1e6 for k in top.tolist()}


def op_ms(trace: Trace, ops: np.ndarray, n: int) -> dict[str, float]:
    """ms per step by operator name, the longest MAX_NAMES."""
    host = trace.host
    return ms_by_name(trace, host.name[ops], (host.end - host.ts)[ops], n)


def op_work(trace: Trace, ops: np.ndarray, n: int) -> tuple[float, float]:
    """FLOPs and bytes per step of ``ops``, each call costed from its recorded shapes (nested
    operators are counted with their parents: the figure is compared between ranks running the same
    program, never read as a rate); (0, 0) when no shapes were recorded."""
    host = trace.host
    args = trace.op_args(ops.tolist())
    cache: dict[tuple[int, bytes, bytes], tuple[float, float]] = {}
    flops = nbytes = 0.0
    for i, a in args.items():
        if a is None:
            continue
        key = (int(host.name[i]), bytes(a.input_dims), bytes(a.input_type))
        cost = cache.get(key)
        if cost is None:
            c = op_cost(trace.strings[key[0]], trace.input_dims(i), trace.input_types(i),
                        np.nan if a.flops is None else a.flops)
            cost = cache[key] = (c.flops if c.known else 0.0, c.bytes if c.known else 0.0)
        flops += cost[0]
        nbytes += cost[1]
    return flops / n, nbytes / n
