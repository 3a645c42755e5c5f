"""One rank's collectives, read from its own trace: what they take of the step, and how much of
that runs with no compute beside it.

The multi-GPU findings (ranks/: straggler, exposed-comm, slow-collective) compare every rank's
trace; given one rank alone, the single-GPU rules have nothing to say of its collectives, and a
step that is mostly NCCL would read "healthy". This says so, with the numbers, and how to get the
findings (benchmarks/BENCHMARKS-replay.md "Public traces never seen"; tests/test_one_rank.py).
"""

from __future__ import annotations

import msgspec

from gpudoctor.analysis.intervals import overlap_per_window, subtract, union
from gpudoctor.analysis.steps import Steps
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import Trace

# Collectives under this share of the step are not worth a note.
MIN_COMM_SHARE = 0.05


class RankCollectives(msgspec.Struct, frozen=True):
    """This rank's collectives per step (ms), and the part no other kernel overlaps."""

    comm_ms: float
    exposed_ms: float
    step_share: float  # of the step
    exposed_share: float  # of the step
    # the GPU idle with its next kernel queued, held behind another stream (analysis/idle.py
    # gpu-wait): on a rank, mostly a receive or a collective waiting for its peers
    held_ms: float = 0.0
    held_share: float = 0.0  # of the step

    def note(self) -> str:
        held = (f", and its GPU sits idle with work queued, held behind another stream (a "
                f"receive, a collective's peers), {self.held_ms:.2f} ms a step "
                f"({100 * self.held_share:.0f}%)" if self.held_share >= MIN_COMM_SHARE else "")
        return (f"this trace is one rank of a distributed job: its collectives take "
                f"{self.comm_ms:.2f} ms a step ({100 * self.step_share:.0f}% of it), "
                f"{self.exposed_ms:.2f} ms of that with no compute beside it "
                f"({100 * self.exposed_share:.0f}%){held}; the findings on collectives "
                "(exposed-comm, straggler, slow-collective) compare every rank: pass every "
                "rank's trace, `gpudoctor analyze rank0.json rank1.json ...`")


def one_rank_collectives(trace: Trace, steps: Steps,
                         held_ms: float = 0.0) -> RankCollectives | None:
    """This rank's collectives, or None where they take under MIN_COMM_SHARE of the step.
    ``held_ms``: the GPU's gpu-wait idle per step (analysis/idle.py)."""
    dev = trace.device
    if len(dev) == 0 or len(steps) == 0:
        return None
    comm = dev.kind == int(Kind.NCCL)
    if not comm.any():
        return None
    total = max(int((steps.end - steps.start).sum()), 1)
    cs, ce = union(dev.ts[comm], dev.end[comm])
    comm_ns = int(overlap_per_window(cs, ce, steps.start, steps.end).sum())
    if comm_ns < MIN_COMM_SHARE * total:
        return None
    # the collectives' time that no other kernel overlaps
    os_, oe = union(dev.ts[~comm], dev.end[~comm])
    es, ee = subtract(cs, ce, os_, oe)
    exposed_ns = int(overlap_per_window(es, ee, steps.start, steps.end).sum())
    n = len(steps)
    return RankCollectives(comm_ns / n / 1e6, exposed_ns / n / 1e6, comm_ns / total,
                           exposed_ns / total, held_ms, held_ms * 1e6 * n / total)
