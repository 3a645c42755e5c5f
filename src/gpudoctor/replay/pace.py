"""The host's pace after a fix: a host that does less work a step runs what is left of it faster.

In a trap and its fixed twin profiled alike, the operators both programs run took a median 1.18x
longer in the one with more host work, up to 1.45-1.59x where the fix removed five sixths of it;
replaying the fixed step at the trap's pace under-priced those fixes. The host time left after an
edit is scaled by the share of the host's work that remains, to the power ``PACE_EXPONENT``
(chosen on the recorded traps, variants and twins; checked on later runs). A fix that takes a
phase of its own off the thread (the loader's fetch, the optimizer's loop: ``Edit.paced``) keeps
the pace: its twins ran the rest no faster. Evidence: benchmarks/BENCHMARKS-replay.md "The host's
pace" and "The lab three more times and the variants, at the host's pace".
"""

from __future__ import annotations

import msgspec

from gpudoctor.replay.graph import StepGraph
from gpudoctor.replay.simulate import Changes, host_times

PACE_EXPONENT = 0.1
# Below this fall of the host's work the pace is left alone: it moves the step by under 0.5%.
MIN_FALL = 0.05


def paced(graph: StepGraph, edited: Changes, work_before_ns: float,
          work_after_ns: float) -> Changes | None:
    """``edited`` with its host gaps and calls at the pace of a host doing ``work_after_ns`` a step
    where it did ``work_before_ns``; None where the host's work did not fall enough to matter."""
    if work_before_ns <= 0 or work_after_ns <= 0 or work_after_ns > (1 - MIN_FALL) * work_before_ns:
        return None
    pace = (work_after_ns / work_before_ns) ** PACE_EXPONENT
    gap, own = host_times(graph, edited)
    tail = graph.tail_ns if edited.tail_ns is None else edited.tail_ns
    return msgspec.structs.replace(edited, gap_ns=gap * pace, own_ns=own * pace,
                                   tail_ns=float(tail) * pace)
