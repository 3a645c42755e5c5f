"""Operators an edit adds before a launch (autocast's casts) cost the host nothing where another
edit replays that launch in a CUDA graph (replay/edits.py ``changes``; benchmarks/BENCHMARKS-replay.md
"Casts inside a CUDA graph")."""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis.steps import segment
from gpudoctor.replay.edits import Edit, changes, merge
from gpudoctor.replay.graph import build
from gpudoctor.replay.simulate import replay
from gpudoctor.trace import parse
from tests.synth import TraceBuilder


def _launch_bound(steps: int = 4) -> bytes:
    """20 GEMMs a step, 30 us of host apiece, 3 us on the GPU each."""
    b = TraceBuilder()
    for s in range(steps):
        t0 = s * 640
        b.step(s, t0, 640)
        for k in range(20):
            b.launch("ampere_sgemm_64x32_nn", t0 + 20 + 30 * k, t0 + 30 + 30 * k, 3.0,
                     op="aten::mm", launch_dur=5.0)
    return b.to_bytes()


def test_casts_added_before_launches_a_graph_replays_cost_the_host_nothing() -> None:
    trace = parse(_launch_bound())
    graph = build(trace, segment(trace))
    launches = graph.host[graph.dev_launched_by]
    kernels = graph.dev_index
    graphed = Edit(calls_removed=launches, calls_graphed=launches)
    casts = Edit(added_at=kernels, added_launches=1.0)
    cast_host = changes(graph, casts).gap_ns.sum() - graph.gap_ns.sum()
    assert cast_host > 0  # eager, each cast costs the host an operator
    together = changes(graph, merge([graphed, casts]))
    alone = changes(graph, graphed)
    assert np.array_equal(together.gap_ns, alone.gap_ns)
    assert replay(graph, together).step_ns == replay(graph, alone).step_ns
    # calls a fix removes without a graph (a fused kernel's): the operator it adds is the host's
    fused = changes(graph, merge([Edit(calls_removed=launches), casts]))
    assert fused.gap_ns.sum() > changes(graph, Edit(calls_removed=launches)).gap_ns.sum()
