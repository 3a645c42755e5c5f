"""What each host event is (analysis/host_events.py): the classifiers on hand-built events whose
answer is known, and their counts on recorded traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from synth import TraceBuilder

from gpudoctor.analysis.host_events import (
    allocator_calls,
    bookkeeping_names,
    dataloader_calls,
    launch_thread,
    launch_threads,
    optimizer_steps,
    sync_calls,
)
from gpudoctor.trace import load, parse

DATA = Path(__file__).parent / "data"


def _names(trace, host_mask) -> list[str]:
    return [trace.strings[int(trace.host.name[i])] for i in host_mask.nonzero()[0]]


def test_a_dataloader_fetch_but_not_its_pinning() -> None:
    t = TraceBuilder()
    t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 100)
    t.python("torch/utils/data/dataloader.py(1): _pin_memory_loop", 10, 50)
    t.op("aten::pin_memory", 20, 30)
    trace = parse(t.to_bytes())
    assert _names(trace, dataloader_calls(trace)) == [
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    ]


def test_the_optimizer_step_is_its_annotation_only() -> None:
    t = TraceBuilder()
    t.annotation("Optimizer.step#AdamW.step", 0, 100)
    t.python("Optimizer.step#AdamW.step", 5, 90)
    t.op("aten::_foreach_add_", 10, 20)
    trace = parse(t.to_bytes())
    mask = optimizer_steps(trace)
    assert mask.sum() == 1 and trace.host.cat[mask.nonzero()[0][0]] == 1  # HostCat.ANNOTATION


def test_syncs_and_allocations_by_name_and_category() -> None:
    t = TraceBuilder()
    t.op("aten::item", 0, 10)
    t.runtime("cudaStreamSynchronize", 1, 8)
    t.python("aten::item", 20, 5)  # a Python frame of that name blocks on nothing
    t.runtime("cudaMalloc", 30, 5)
    t.op("cudaMalloc", 40, 5)  # an op is no runtime call
    t.runtime("cudaLaunchKernel", 50, 5)
    trace = parse(t.to_bytes())
    assert _names(trace, sync_calls(trace)) == ["aten::item", "cudaStreamSynchronize"]
    assert _names(trace, allocator_calls(trace)) == ["cudaMalloc"]


def test_a_read_that_makes_no_blocking_call_is_no_sync() -> None:
    # torch.optim's per-parameter step counts are CPU tensors: their .item() calls nothing on the
    # GPU; a read of a GPU value (the second) synchronizes inside its _local_scalar_dense
    t = TraceBuilder()
    t.op("aten::item", 0, 10)
    t.op("aten::_local_scalar_dense", 1, 8)
    t.op("aten::item", 20, 10)
    t.op("aten::_local_scalar_dense", 21, 8)
    t.runtime("cudaMemcpyAsync", 22, 2)
    t.runtime("cudaStreamSynchronize", 25, 3)
    t.op("aten::nonzero", 40, 10)  # a CPU tensor's nonzero
    trace = parse(t.to_bytes())
    assert [int(i) for i in sync_calls(trace).nonzero()[0]] == [2, 3, 5]
    # ROCm's runtime calls are not read: its reads count by their names, as before
    amd = TraceBuilder()
    amd.op("aten::item", 0, 10)
    amd.runtime("hipMemcpyWithStream", 2, 6)
    amd.op("aten::item", 20, 10)
    trace = parse(amd.to_bytes())
    assert _names(trace, sync_calls(trace)) == ["aten::item", "aten::item"]
    # a trace that records no runtime call at all cannot tell: every read counts, by its name
    bare = TraceBuilder()
    bare.op("aten::item", 0, 10)
    bare.op("aten::nonzero", 20, 10)
    trace = parse(bare.to_bytes())
    assert _names(trace, sync_calls(trace)) == ["aten::item", "aten::nonzero"]


def test_bookkeeping_names() -> None:
    t = TraceBuilder()
    for name in (
        "aten::view",
        "aten::viewer",
        "aten::mm",
        "AccumulateGrad",
        "AddmmBackward0",
        "autograd::engine::evaluate_function: AddmmBackward0",
        "aten::t",
    ):
        t.op(name, 0, 1)
    trace = parse(t.to_bytes())
    named = [s for s, keep in zip(trace.strings, bookkeeping_names(trace)) if keep]
    assert sorted(named) == [
        "AccumulateGrad",
        "AddmmBackward0",
        "aten::t",
        "aten::view",
        "autograd::engine::evaluate_function: AddmmBackward0",
    ]


def test_launch_threads_keep_every_thread_with_one_percent() -> None:
    t = TraceBuilder()
    for k in range(150):
        t.launch("k", 10.0 * k, 10.0 * k + 5, 1, tid=1)
    t.launch("k", 2000, 2005, 1, tid=2)  # 1 of 151 launches: 0.7%
    for k in range(2):
        t.launch("k", 3000 + 10.0 * k, 3005 + 10.0 * k, 1, tid=3)  # 2 of 152: 1.3%
    trace = parse(t.to_bytes())
    tids = [trace.threads[i][1] for i in launch_threads(trace).tolist()]
    assert sorted(tids) == ["1", "3"]
    assert trace.threads[launch_thread(trace)][1] == "1"


def test_no_launch_no_launch_thread() -> None:
    t = TraceBuilder()
    t.op("aten::mm", 0, 10)
    trace = parse(t.to_bytes())
    assert launch_thread(trace) == -1
    assert launch_threads(trace).size == 0


@pytest.mark.parametrize(
    ("scenario", "dataloader", "optimizer", "syncs", "allocations"),
    [
        ("input_pipeline", 3, 3, 7, 0),
        ("host_sync", 0, 3, 226, 0),
        ("allocator_churn", 0, 0, 1, 90),
    ],
)
def test_counts_on_recorded_traces(
    scenario: str, dataloader: int, optimizer: int, syncs: int, allocations: int
) -> None:
    trace = load(DATA / scenario / "trace.json.gz")
    assert int(dataloader_calls(trace).sum()) == dataloader
    assert int(optimizer_steps(trace).sum()) == optimizer
    assert int(sync_calls(trace).sum()) == syncs
    assert int(allocator_calls(trace).sum()) == allocations
