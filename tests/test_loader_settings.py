"""The DataLoader's settings as ``gpudoctor run`` reads them (capture/loader_queue.py), kept in
env.json (capture/bundle.py), and the input-pipeline fix written and priced from them
(rules/input_pipeline.py, core/loader.py)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from synth import TraceBuilder
from torch.utils.data import DataLoader, TensorDataset

from gpudoctor.capture.bundle import facts_of
from gpudoctor.capture.loader_queue import LoaderQueue
from gpudoctor.core.loader import (
    WORKERS_ENV,
    LoaderSettings,
    prescribed_workers,
    workers_to_keep_up,
)
from gpudoctor.pipeline import analyze_loaded
from gpudoctor.trace import parse

NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def test_the_loader_fetched_from_most_is_the_one_kept() -> None:
    data = TensorDataset(torch.arange(256.0).view(64, 4))
    train = iter(DataLoader(data, batch_size=16, shuffle=True))
    evaluate = iter(DataLoader(data, batch_size=32))
    queue = LoaderQueue()
    assert queue.settings is None
    for _ in range(3):
        queue.batch(train)
        next(train)
    queue.batch(evaluate)
    settings = queue.settings
    assert settings is not None
    assert (settings.num_workers, settings.pin_memory, settings.batch_size) == (0, False, 16)
    assert settings.persistent_workers is False
    assert settings.cpus is not None and settings.cpus >= 1


def test_the_loader_fetched_in_most_steps_beats_an_evaluation_of_many_batches() -> None:
    # minGPT's adder evaluates 100 batches (num_workers 0, batch 100) inside its first step, and
    # the capture ended 40 training steps later: the training loader is fetched once a step
    data = TensorDataset(torch.arange(1024.0).view(256, 4))
    train = iter(DataLoader(data, batch_size=4, shuffle=True))
    evaluate = DataLoader(data, batch_size=100)
    queue = LoaderQueue()
    for step in range(5):
        queue.batch(train, step)
        next(train)
        if step == 1:
            for _ in range(20):
                queue.batch(iter(evaluate), step)
    settings = queue.settings
    assert settings is not None and settings.batch_size == 4


def test_settings_go_through_env_json_and_malformed_ones_read_as_absent() -> None:
    kept = LoaderSettings(num_workers=2, pin_memory=True, batch_size=64, cpus=16)
    capture = {"unprofiled_step_ms": 10.0, "dataloader": kept.to_dict()}
    assert facts_of({"capture": capture}).loader == kept
    for bad in (None, [], {"num_workers": -1}, {"num_workers": True}, {"num_workers": "2"}):
        assert facts_of({"capture": {**capture, "dataloader": bad}}).loader is None
    odd = facts_of(
        {
            "capture": {
                **capture,
                "dataloader": {"num_workers": 0, "batch_size": 0, "cpus": -3, "pin_memory": "yes"},
            }
        }
    )
    assert odd.loader == LoaderSettings(num_workers=0, pin_memory=False)


@given(
    st.dictionaries(
        st.sampled_from(
            ["num_workers", "batch_size", "cpus", "pin_memory", "persistent_workers", "other"]
        ),
        st.one_of(
            st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(), st.text(max_size=3)
        ),
    )
)
def test_any_dataloader_field_parses_or_reads_as_absent(value: dict) -> None:
    parsed = LoaderSettings.parse(value)
    if parsed is not None:
        assert parsed.num_workers >= 0
        assert parsed.batch_size is None or parsed.batch_size > 0
        assert parsed.cpus is None or parsed.cpus > 0
        assert prescribed_workers(parsed.num_workers, parsed.cpus) >= 1


def test_prescribed_workers_follow_the_knob() -> None:
    assert [prescribed_workers(0, c) for c in (None, 1, 4, 64)] == [8, 1, 4, 8]
    assert [prescribed_workers(3, c) for c in (None, 4, 64)] == [6, 4, 6]


def test_workers_that_keep_up_with_the_rest_of_the_step() -> None:
    # 2 workers set a step 78% waiting: each takes 2 steps a batch, a batch every 0.22 of the step
    # takes 2 / 0.22 = 9.1 of them
    assert workers_to_keep_up(2, 0.22, 16) == 10
    # nearly keeping up (3% waiting): one more
    assert workers_to_keep_up(4, 0.97, 16) == 5
    # never more than the CPUs less the training process's, never fewer than now
    assert workers_to_keep_up(2, 0.05, 16) == 15
    assert workers_to_keep_up(6, 0.1, 4) == 6
    assert workers_to_keep_up(3, 0.5, 4) == 3


def test_the_knob_takes_the_workers_handed_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpudoctor.tryfix.knobs import _handed_workers

    for value, cpus, got in (
        ("10", 16, 10),
        ("10", 4, 4),
        ("", 16, None),
        ("x", 16, None),
        ("0", 16, None),
    ):
        monkeypatch.setenv(WORKERS_ENV, value)
        assert _handed_workers(cpus) == got


def _loader_steps() -> bytes:
    """Three 10 ms steps: a 1 ms kernel, then 8 ms of the single-process loader's __next__ on the
    training thread (the GPU idles), then a 0.5 ms kernel."""
    t = TraceBuilder()
    for n in range(3):
        base = n * 10_000.0
        t.step(n, base, 10_000)
        t.launch("ampere_bf16_s16816gemm_bf16_128x128", base + 10, base + 20, 1000, op="aten::mm")
        t.annotation(NEXT, base + 1100, 8000)
        t.launch(
            "void at::native::vectorized_elementwise_kernel<4>",
            base + 9200,
            base + 9210,
            500,
            op="aten::add",
        )
    return t.to_bytes()


def _finding(loader: LoaderSettings | None):  # type: ignore[no-untyped-def]
    report = analyze_loaded(parse(_loader_steps()), loader=loader)
    return next(f for f in report.findings if f.id == "input-pipeline")


def test_the_workers_fix_is_written_and_priced_from_the_programs_loader() -> None:
    found = _finding(LoaderSettings(num_workers=0, pin_memory=False, batch_size=64, cpus=4))
    assert found.evidence.numbers["workers_prescribed"] == 4
    assert found.evidence.numbers["step_floor_after_fix_ms"] == 2.0  # 8 ms of fetch / 4 workers
    code = found.fixes[0].code
    assert "batch_size=64, num_workers=4, pin_memory=True" in code
    assert "was num_workers=0, pin_memory=False; 4 CPUs on this host" in code


def test_from_a_bare_trace_the_fix_names_what_it_cannot_know() -> None:
    found = _finding(None)
    assert found.evidence.numbers["workers_prescribed"] == 8
    assert found.evidence.numbers["step_floor_after_fix_ms"] == 1.0
    assert "batch_size=B, num_workers=W" in found.fixes[0].code


def test_a_loader_without_its_batch_size_keeps_the_letter() -> None:
    found = _finding(LoaderSettings(num_workers=0, pin_memory=True, cpus=32))
    assert "batch_size=B, num_workers=8" in found.fixes[0].code
    assert "32 CPUs" in found.fixes[0].code


def test_workers_that_take_every_cpu_are_not_told_to_double() -> None:
    from gpudoctor.rules.input_pipeline import _workers_fix

    full = _workers_fix(LoaderSettings(num_workers=8, pin_memory=True, batch_size=32, cpus=8), True)
    assert full.title.startswith("The workers already take every CPU")
    assert "num_workers=8" in full.code and "8 CPUs on this host" in full.code
    more = _workers_fix(
        LoaderSettings(num_workers=4, pin_memory=False, batch_size=32, cpus=16), True
    )
    assert more.title.startswith("More worker processes")
    assert "batch_size=32, num_workers=8, pin_memory=True" in more.code


class _WorkerIterator:
    """A multi-worker DataLoader iterator as LoaderQueue reads it: one worker, two batches queued."""

    _num_workers, _prefetch_factor, _pin_memory = 1, 2, True

    def __init__(self) -> None:
        self._num_yielded = 0


def test_a_loader_taken_from_once_before_the_loop_serves_its_steps_no_backlog() -> None:
    # forward-forward (pytorch/examples) takes the whole training set as one batch before its
    # loop: its iterator's count stays under the queue's two batches for good, and read as
    # backlog, no step before the window was ever timed
    once = _WorkerIterator()
    queue = LoaderQueue()
    queue.batch(once, step=0)
    once._num_yielded = 1
    assert queue.backlog
    for steps in range(1, 4):  # the steps right after the fetch: the queue may still be serving
        queue.step_ended(steps)
        assert queue.backlog
    queue.step_ended(4)
    assert not queue.backlog


def test_a_loader_fetched_from_every_step_keeps_its_backlog_until_served() -> None:
    it = _WorkerIterator()
    queue = LoaderQueue()
    queue.batch(it, step=0)
    for step in range(1, 6):
        queue.step_ended(step)
        assert queue.backlog  # one batch a step handed out, the count still under the queue
        it._num_yielded = 1
        queue.batch(it, step=step)
    it._num_yielded = 2
    queue.batch(it, step=6)
    assert not queue.backlog
