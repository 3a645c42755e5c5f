"""A loop over groups of rows found from a mask (a mixture of experts' dispatch), as per-sample-loop.

The real trace is the moe_expert_dispatch twin (tests/programs/twins, recorded on an H100, torch
2.11): 4 blocks, each looping over 8 experts with ``(choice == e).nonzero()``, ``x[rows]``, two
matmuls and ``index_add_``. The synthetic ones check what makes such a loop: the mask's read
repeated like an iteration and the results added back into place.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from synth import TraceBuilder

from gpudoctor.pipeline import analyze_path, diagnose_path
from gpudoctor.rules import per_sample_loop
from gpudoctor.rules.shared import step_ops

MOE = Path(__file__).parent / "data" / "twins_h100" / "moe_expert_dispatch"


def test_each_block_loops_over_its_experts_and_keeps_one_iteration() -> None:
    a = diagnose_path(MOE).analysis
    n = len(a.steps)
    ops = step_ops(a)
    loops, groups = per_sample_loop._dispatch_loops(a, ops)
    forward = [loop for loop in loops if not per_sample_loop._is_backward(a, loop)]
    # one loop a block, not one loop whose period is a block (the router and the norm between)
    assert len(forward) / n == 4 and groups == 8
    assert {period for _seq, _first, _end, period in forward} == {19}
    assert all(end - first == 8 * 19 for _seq, first, end, _period in forward)
    backward = [loop for loop in loops if per_sample_loop._is_backward(a, loop)]
    assert len(backward) / n == 4
    edit = per_sample_loop.edit(a, None)
    # every expert's read (its operator and its runtime call) waits no more: the batched call reads
    # no count on the host
    reads = np.unique(a.trace.host.outermost(edit.unwait))
    assert reads.size / n == 32 and {a.trace.strings[i] for i in a.trace.host.name[reads]} == {
        "aten::nonzero"
    }


def test_the_batched_groups_are_priced_and_written_with_the_programs_values() -> None:
    report = analyze_path(MOE)
    f = report.findings[0]
    assert f.id == "per-sample-loop" and f.severity == "critical"
    assert "8 groups" in f.summary and "4 loops a step" in f.summary
    assert f.evidence.numbers["groups_per_loop"] == 8
    assert f.evidence.numbers["loop_ops_removed_per_step"] == 992
    assert f.predicted_speedup == pytest.approx(4.6198, abs=1e-3)  # x5.27 measured
    codes = "\n".join(fix.code for fix in f.fixes)
    assert "G = 8" in codes and "minlength=8" in codes and "nonzero" not in codes
    assert "CUDA graphs will not help" in f.wrong_fix
    # the graph launch-bound prices comes after dynamic-shapes (a major finding here): every
    # expert's row count is a new shape each step, which a CUDA graph cannot replay
    ids = [g.id for g in report.findings]
    assert ids[:3] == ["per-sample-loop", "dynamic-shapes", "launch-bound"]
    assert report.finding("dynamic-shapes").saving_ms < report.finding("launch-bound").saving_ms


def _groups_loop(
    tmp_path: Path, scatter: str | None, groups: int = 12, where: bool = False
) -> Path:
    """Three steps, each a loop over ``groups`` groups: eq, nonzero (a sync; inside ``aten::where``
    where ``where``: ``torch.where(mask)``, as Hugging Face's Mixtral block finds an expert's
    tokens), index, mm, then ``scatter`` (or nothing); the GPU runs each kernel 5 us after its
    launch."""
    t = TraceBuilder()
    host = 0.0
    body = ["aten::eq", "aten::nonzero", "aten::index", "aten::mm", "aten::add", "aten::mul"]
    if scatter is not None:
        body.append(scatter)
    for step in range(3):
        start = host
        host += 10
        for _g in range(groups):
            for name in body:
                if name == "aten::nonzero" and where:
                    t.op("aten::where", host - 1, 14.0)
                t.launch(f"k_{name[6:]}", host, host + 5, 3.0, op=name, launch_dur=4.0)
                if name == "aten::nonzero":
                    t.runtime("cudaStreamSynchronize", host + 5.5, 6.0)
                host += 12 + (4 if name == "aten::nonzero" and where else 0)
        t.step(step, start, host - start)
        host += 5
    return t.write(tmp_path / "trace.json")


@pytest.mark.parametrize("where", [False, True])
def test_a_group_loop_that_adds_its_results_back_is_one(tmp_path: Path, where: bool) -> None:
    a = diagnose_path(_groups_loop(tmp_path, "aten::index_add_", where=where)).analysis
    loops, groups = per_sample_loop._dispatch_loops(a, step_ops(a))
    assert groups == 12 and len(loops) == len(a.steps)
    assert {period for _s, _f, _e, period in loops} == {7}
    anchors = per_sample_loop.dispatch_anchors(a, step_ops(a))
    names = {a.trace.strings[a.trace.host.name[at[0]]] for at in anchors}
    assert names == {"aten::where" if where else "aten::nonzero"}
    edit = per_sample_loop.edit(a, None)
    assert edit.unwait.size > 0 and edit.device_removed.size == 3 * 11 * 7


@pytest.mark.parametrize("groups", [12, 4])
def test_a_mask_read_in_a_loop_that_adds_nothing_back_or_too_few_is_not(
    tmp_path: Path, groups: int
) -> None:
    """A metric per class (``pred[labels == c]``) reads masks in a loop but writes nothing back into
    place; four groups a step are below MIN_DISPATCHES_PER_STEP."""
    scatter = None if groups == 12 else "aten::index_add_"
    a = diagnose_path(_groups_loop(tmp_path, scatter, groups)).analysis
    assert per_sample_loop._dispatch_loops(a, step_ops(a)) == ([], 0.0)
    assert per_sample_loop.edit(a, None) is None


def test_a_trace_without_mask_reads_has_no_dispatch_anchors() -> None:
    a = diagnose_path(MOE.parent / "tiny_mlp_launch").analysis
    assert per_sample_loop.dispatch_anchors(a, step_ops(a)) == []
    assert per_sample_loop.edit(a, None) is None
