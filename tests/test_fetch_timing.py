"""The DataLoader's fetch, timed on the program's thread outside the profiler's window: its share
of the unprofiled step (capture/timing.py ``fetch_in_step``), which the replay's fit leaves to the
loader (rules/whatif.py ``_fetch_timing``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from gpudoctor.capture.bundle import capture_facts, facts_of
from gpudoctor.capture.fetch_clock import timing_fetches
from gpudoctor.capture.session import CaptureConfig, CaptureSession
from gpudoctor.capture.timing import fetch_in_step
from gpudoctor.lab.verify import rounds_fetch

SAMPLE_SLEEP_S = 0.004


class _SlowSamples(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(SAMPLE_SLEEP_S)  # at least this long: a lower bound, never a flaky upper one
        return torch.randn(16)


def test_the_fetch_share_is_the_step_less_the_rest_estimated_alike() -> None:
    # the median step is 11; without their fetches every step is 4: the loader's share is 7
    assert fetch_in_step(11.0, [10.0, 12.0, 11.0], [6.0, 8.0, 7.0]) == pytest.approx(7.0)
    # a fetch timed longer than its step (host clock against GPU events) leaves nothing of the rest
    assert fetch_in_step(5.0, [5.0, 5.0, 5.0], [6.0, 6.0, 6.0]) == pytest.approx(5.0)
    assert fetch_in_step(5.0, [], []) == 0.0
    with pytest.raises(ValueError):
        fetch_in_step(5.0, [5.0, 5.0], [1.0])


def test_the_lab_rounds_share_is_the_median_less_the_rests_median() -> None:
    assert rounds_fetch(43.8, [47.2, 41.1, 43.8], [36.0, 30.0, 33.0]) == pytest.approx(43.8 - 11.1)
    assert rounds_fetch(10.0, [10.0, 11.0], [None, 2.0]) is None  # a round without a loader
    assert rounds_fetch(10.0, [10.0], []) is None


def test_the_fetch_clock_adds_each_fetch_until_taken_and_restores_the_loader() -> None:
    loader = torch.utils.data.DataLoader(_SlowSamples(), batch_size=2)
    it = iter(loader)
    with timing_fetches() as clock:
        assert not clock.fetched and clock.take() == 0.0
        next(it)
        first = clock.take()
        assert clock.fetched and first >= 2 * SAMPLE_SLEEP_S
        assert clock.take() == 0.0  # taken: it starts again from nothing
    original = torch.utils.data.dataloader._BaseDataLoaderIter.__dict__["__next__"]
    assert getattr(original, "__wrapped__", None) is None  # the method is the original again


def _captured(tmp_path: Path, batches: Iterator[torch.Tensor]) -> tuple[CaptureSession, list[str]]:
    """A small model trained on ``batches`` under a session until it is done; with what stayed
    attached while the steps after the window were timed."""
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    s = CaptureSession(
        CaptureConfig(steps=2, skip=4, calibration_steps=3, nvml_interval_s=0), tmp_path
    )
    s.start()
    kept_after: list[str] = []
    for x in batches:
        model(x).sum().backward()
        opt.step()
        if s._hooks is not None and s.phase.value == "after":
            kept_after = s._hooks.installed()
        if s.done:
            break
    s.close()
    return s, kept_after


def test_a_session_times_each_steps_fetch_before_and_after_the_window(tmp_path: Path) -> None:
    loader = torch.utils.data.DataLoader(_SlowSamples(), batch_size=2)
    s, kept_after = _captured(tmp_path, iter(loader))
    r = s.result
    assert "__next__" in kept_after  # the loader's clock stays for the steps after the window
    assert r.unprofiled is not None and len(r.unprofiled_step_ms) >= 3
    assert len(r.unprofiled_fetch_ms) == len(r.unprofiled_step_ms)
    # each step fetched one batch of two samples, inside the step it closed
    assert all(
        2 * SAMPLE_SLEEP_S * 1e3 <= f <= step
        for f, step in zip(r.unprofiled_fetch_ms, r.unprofiled_step_ms, strict=True)
    )
    assert r.unprofiled_fetch is not None
    assert 2 * SAMPLE_SLEEP_S * 1e3 <= r.unprofiled_fetch <= r.unprofiled.ms
    # written to env.json and read back by analyze
    capture = capture_facts(r, s.config, None)
    assert capture["unprofiled_fetch_ms"] == round(r.unprofiled_fetch, 4)
    assert len(capture["unprofiled_fetch_ms_samples"]) == len(r.unprofiled_step_ms)
    assert facts_of({"capture": capture}).unprofiled_fetch_ms == capture["unprofiled_fetch_ms"]
    # and the loader's settings, which the input-pipeline fix is written from
    loader = facts_of({"capture": capture}).loader
    assert loader is not None and loader == r.loader
    assert (loader.num_workers, loader.batch_size, loader.pin_memory) == (0, 2, False)


def test_a_program_without_a_loader_has_no_fetch_share(tmp_path: Path) -> None:
    s, kept_after = _captured(tmp_path, (torch.randn(8, 16) for _ in range(1000)))
    assert "__next__" not in kept_after
    assert s.result.unprofiled_fetch_ms == [] and s.result.unprofiled_fetch is None
    assert s.result.loader is None
    assert (
        facts_of({"capture": capture_facts(s.result, s.config, None)}).unprofiled_fetch_ms is None
    )


@pytest.mark.parametrize(
    ("fetch", "step", "read"),
    [
        (3.0, 10.0, 3.0),
        (0.0, 10.0, 0.0),
        (12.0, 10.0, None),
        (-1.0, 10.0, None),
        ("3", 10.0, None),
        (True, 10.0, None),
        (3.0, None, None),
    ],
)
def test_a_malformed_fetch_in_env_json_reads_as_absent(
    fetch: object, step: object, read: float | None
) -> None:
    env = {"capture": {"unprofiled_step_ms": step, "unprofiled_fetch_ms": fetch}}
    assert facts_of(env).unprofiled_fetch_ms == read


def test_the_fit_leaves_the_loaders_timed_fetch_to_the_loader() -> None:
    """tests/data/input_pipeline (H100): 33.36 ms a step of __next__ recorded in the window's counted
    steps, 32.99 ms of it left once the fit takes the profiler's cost out of the loader's own events;
    timed at 30 ms without the profiler, the fit matches the step less the 2.99 ms the loader ran
    faster than it replays, and only the loader's own fix takes the loader's time with it."""
    from gpudoctor.pipeline import diagnose_loaded
    from gpudoctor.rules.whatif import edit_for, step_model
    from gpudoctor.trace import load

    trace = load(Path(__file__).parent / "data" / "input_pipeline" / "trace.json.gz")
    found = diagnose_loaded(trace, unprofiled_step_ms=40.3533, unprofiled_fetch_ms=30.0)
    model = step_model(found.analysis)
    assert model.fetch_unseen_ms == pytest.approx(-2.9902, abs=1e-4)
    assert model.base.replayed.step_ns / 1e6 == pytest.approx(40.3533 + 2.9902, abs=1e-3)
    loader = found.report.finding("input-pipeline")
    assert loader.predicted_speedup == pytest.approx(3.4263, abs=1e-4)
    assert loader.evidence.numbers["host_time_in_dataloader_unprofiled_ms_per_step"] == 30.0
    # eight workers deliver a batch every eighth of its cost on one core, timed without the
    # profiler (34.81 ms a step in the window)
    assert loader.evidence.numbers["step_floor_after_fix_ms"] == 3.75
    assert "30.00 ms timed without the profiler" in loader.summary
    launch = found.report.finding("launch-bound")
    edit, _ = edit_for(found.analysis, launch)
    # any other fix keeps the loader's measured time: 2.99 ms less than the replay's loader
    assert model.after_ms(edit) == pytest.approx(31.7204, abs=1e-3)
    assert model.after_ms(edit, takes_loader=True) - model.after_ms(edit) == pytest.approx(
        2.9902, abs=1e-3
    )
    # without the timed fetch, the fit reads the loader's spread as the profiler's cost
    plain = diagnose_loaded(trace, unprofiled_step_ms=40.3533).report.finding("input-pipeline")
    assert plain.predicted_speedup == pytest.approx(3.9614, abs=1e-4)
    assert plain.evidence.numbers["step_floor_after_fix_ms"] == 4.352
    assert "without the profiler" not in plain.summary


def test_a_timed_fetch_lets_the_fit_match_a_loader_fed_step() -> None:
    """tests/data/gallery_h100/audio_loader_fetch: the by-hand gallery's audio_loader under
    ``gpudoctor run`` on an H100 (2 DataLoader workers behind numpy spectrograms): 32.47 ms a step
    unprofiled, 25.92 ms of it waiting in ``__next__``, which the five profiled steps saw less of.
    With the fetch timed, the fit matches the rest of the step at a scale near the prior's and the
    replayed step is the measured one; without it, the profiler's cost is held at the prior (from
    the trace's view operators, 1.17) and the replay falls 23.6% short (24.6% at the fixed prior of
    1.3; the gallery's earlier audio_loader run: 30% short)."""
    from gpudoctor.capture.bundle import read_run
    from gpudoctor.pipeline import diagnose_loaded, diagnose_path
    from gpudoctor.replay.observer import FROM_PRIOR
    from gpudoctor.rules.whatif import step_model
    from gpudoctor.trace import load

    folder = Path(__file__).parent / "data" / "gallery_h100" / "audio_loader_fetch"
    run = read_run(folder)
    assert (run.unprofiled_step_ms, run.unprofiled_fetch_ms) == (32.468, 25.9196)
    model = step_model(diagnose_path(folder).analysis)
    assert model.fetch_unseen_ms == pytest.approx(9.1178, abs=1e-4)
    assert model.base.scale == pytest.approx(1.7776, abs=1e-4)  # 1.7290 with the loader recorded
    replayed = model.base.replayed.step_ns / 1e6 + model.fetch_unseen_ms
    assert replayed == pytest.approx(32.468, abs=0.01)
    plain = step_model(
        diagnose_loaded(load(folder / "trace.json.gz"), unprofiled_step_ms=32.468).analysis
    )
    assert plain.base.source == FROM_PRIOR and plain.base.scale == pytest.approx(1.1743, abs=1e-4)
    assert plain.base.replayed.step_ns / 1e6 / 32.468 - 1 == pytest.approx(-0.2364, abs=1e-3)
