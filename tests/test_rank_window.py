"""The window agreement of a distributed job (capture/rank_window.py), each rank a thread sharing one
in-process store: the window opens at the latest rank's ready step, every wait is bounded, and
each rank left out is named. The real thing, under torchrun, is tests/test_torchrun.py."""

from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from gpudoctor.capture.rank_window import POLL_S, RankInfo, RankSync, Window
from gpudoctor.capture.session import CaptureConfig, CaptureSession
from gpudoctor.core.clock import SYSTEM_CLOCK, Clock, ManualClock

# a wait that must end because another rank came: far beyond any machine's delay, never reached
NEVER_S = 120.0


@pytest.fixture(autouse=True)
def _fresh_capture_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each process of a job holds one rank; here one process plays them all, so every test
    starts each rank's capture count afresh (the keys' prefix holds it)."""
    import gpudoctor.capture.rank_window as rank_window

    monkeypatch.setattr(rank_window, "_CAPTURES", {})


def _sync(
    tmp: Path,
    store: Any,
    rank: int,
    world: int,
    timeout: float = NEVER_S,
    clock: Clock = SYSTEM_CLOCK,
) -> RankSync:
    return RankSync(
        RankInfo(rank, world, rank, "host"),
        tmp / "runs",
        "train",
        3,
        timeout,
        store=store,
        clock=clock,
    )


def _agree_all(syncs: list[RankSync], ready: list[int | None]) -> dict[int, Window]:
    """Each rank agrees from its own thread (a None ready step: that rank never comes). Over a given
    store, rank 0 decides once the others that come have said they are ready, so that its deadline
    (on a manual clock, reached at once) only ever cuts the ranks that never come; a store rank 0
    hosts itself (None) must exist before the others can say anything, so then all start at once."""
    windows: dict[int, Window] = {}

    def one(sync: RankSync, at: int) -> None:
        windows[sync.info.rank] = sync.agree(at)

    store = syncs[0].store
    first = [] if store is None else [s.info.rank for s in syncs if s.info.rank != 0]
    others = [
        (s, at)
        for s, at in zip(syncs, ready, strict=True)
        if at is not None and s.info.rank in first
    ]
    threads = [threading.Thread(target=one, args=pair) for pair in others]
    for t in threads:
        t.start()
    if store is not None:
        keys = [syncs[0]._key(f"ready/{s.info.rank}") for s, _ in others]
        _wait_for(lambda: store.check(keys))
    later = [
        threading.Thread(target=one, args=(s, at))
        for s, at in zip(syncs, ready, strict=True)
        if at is not None and s.info.rank not in first
    ]
    for t in later:
        t.start()
    threads += later
    for t in threads:
        t.join(NEVER_S)
    return windows


def _wait_for(condition: Any) -> None:
    """Poll the real clock until ``condition()``; a test failure (never a hang) past NEVER_S."""
    deadline = time.monotonic() + NEVER_S
    while not condition():
        assert time.monotonic() < deadline, "the other ranks never said they were ready"
        time.sleep(0.005)


class _SleepingManualClock(ManualClock):
    """A manual clock whose sleep also passes as much real time: a wait for another thread ends when
    that thread comes, and the waiting shows on this clock only where the code reads it."""

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        super().sleep(seconds)


def test_the_window_opens_at_the_latest_ready_step(tmp_path: Path) -> None:
    store = dist.HashStore()
    syncs = [_sync(tmp_path, store, r, 3) for r in range(3)]
    windows = _agree_all(syncs, [5, 7, 6])
    assert {w.open_at for w in windows.values()} == {7}
    assert {w.first_step for w in windows.values()} == {8}  # the warm-up step 7 comes first
    assert {w.run_name for w in windows.values()} == {windows[0].run_name}
    assert (
        windows[0].run_name.startswith("train-") and not (tmp_path / "runs").exists()
    )  # named, not yet made
    assert all(w.agreed and w.ranks == (0, 1, 2) and w.notes == () for w in windows.values())
    assert syncs[2].bundle_dir() == tmp_path / "runs" / windows[0].run_name / "rank2"
    assert syncs[1].env_facts() == {
        "rank": 1,
        "world_size": 3,
        "local_rank": 1,
        "hostname": "host",
        "window": {"first_step": 8, "steps": 3},
        "window_agreed": True,
    }


def test_a_rank_that_never_comes_costs_rank_0_its_timeout_and_is_named(tmp_path: Path) -> None:
    store, clock = dist.HashStore(), ManualClock()
    rank0 = _sync(tmp_path, store, 0, 2, timeout=0.3, clock=clock)
    start = clock.now()
    window = rank0.agree(4)
    assert (
        0.3 <= clock.now() - start <= 0.3 + POLL_S
    )  # polled until its deadline, not a poll longer
    assert (window.open_at, window.ranks, window.agreed) == (4, (0,), True)
    assert window.notes == (
        (
            "rank 1 was not ready within 0.3 s (it ran fewer steps, hung or died): the window was "
            "agreed without it"
        ),
    )
    # it comes after all: it records from its own step, later than the others, and says so
    late = _sync(tmp_path, store, 1, 2, timeout=0.3, clock=clock).agree(9)
    assert (late.open_at, late.agreed, late.run_name) == (9, False, window.run_name)
    assert late.notes[-1] == (
        "rank 1 was ready at step 9, after the other ranks agreed on step 4: its window "
        "starts 5 steps later than theirs"
    )


def test_a_rank_whose_program_ended_early_is_not_waited_for(tmp_path: Path) -> None:
    store = dist.HashStore()
    _sync(tmp_path, store, 1, 2).leave(3)
    clock = ManualClock()
    window = _sync(tmp_path, store, 0, 2, timeout=30.0, clock=clock).agree(5)
    assert (
        clock.now() == ManualClock().now()
    )  # decided at the first look: not one poll of the 30 s bound
    assert (window.open_at, window.ranks) == (5, (0,))
    assert window.notes == (
        "rank 1 ended after 3 steps, before the window (--skip): it has no bundle",
    )


def test_without_rank_0_a_rank_records_alone_in_its_own_directory(tmp_path: Path) -> None:
    store = dist.HashStore()
    _sync(tmp_path, store, 0, 2).leave(2)  # rank 0's program ended before its window
    rank1 = _sync(tmp_path, store, 1, 2)
    window = rank1.agree(6)
    assert (window.open_at, window.agreed, window.ranks) == (6, False, (1,))
    assert window.run_name.startswith("train-rank1-")
    assert window.notes == (
        (
            "rank 1 could not agree its window with the other ranks (rank 0 ended after 2 steps, "
            "before the window): it recorded from its own step 7, which may not be the other ranks' "
            "steps"
        ),
    )
    clock = ManualClock()
    silent = _sync(
        tmp_path, dist.HashStore(), 1, 2, timeout=0.1, clock=clock
    )  # rank 0 never decides
    assert (
        silent.agree(6)
        .notes[0]
        .startswith(
            "rank 1 could not agree its window with the other ranks (rank 0 published no window within 0.2 s)"
        )
    )
    assert (
        0.2 <= clock.now() - ManualClock().now() <= 0.2 + POLL_S
    )  # 2 x its timeout, as rank 0 waits one


def test_rank_0_waits_for_each_bundle_and_names_those_left_out(tmp_path: Path) -> None:
    store, clock = dist.HashStore(), ManualClock()
    syncs = [
        _sync(tmp_path, store, r, 4, timeout=0.5, clock=clock if r == 0 else SYSTEM_CLOCK)
        for r in range(4)
    ]
    _agree_all(syncs, [2, 2, 2, None])  # rank 3 never joins
    run = syncs[0].run_dir()
    (run / "rank0").mkdir(parents=True)
    (run / "rank0" / "env.json").write_text("{}")
    syncs[1].bundle_done(True)  # written, but on a file system rank 0 does not see
    syncs[2].bundle_done(False)  # recorded nothing
    before = clock.now()
    state, notes = syncs[0].wait_bundles()
    assert state == {0: "ok", 1: "elsewhere", 2: "none", 3: "missing"}
    assert clock.now() - before == pytest.approx(
        0.0
    )  # ranks 0-2 answered at once; 3 never joined: not waited for
    assert notes == [
        (
            f"rank 1 wrote its bundle on another file system ({run / 'rank1'} is not here): copy it here "
            "and run gpudoctor analyze on the run directory"
        ),
        "rank 2 recorded no window: the combined report leaves it out",
    ]


def test_the_session_opens_at_the_agreed_step_and_leaves_the_wait_untimed(tmp_path: Path) -> None:
    """Rank 0 is ready at step 5; rank 1 (a thread) says 0.4 s later that it is ready at step 8:
    rank 0 records steps 9.. and none of its unprofiled steps holds the wait. Rank 0's session and
    its waits share one clock: each step is 10 ms on it, and the wait shows there as polls."""
    store, clock = dist.HashStore(), _SleepingManualClock()
    sync = _sync(tmp_path, store, 0, 2, clock=clock)
    other = _sync(tmp_path, store, 1, 2)
    threading.Thread(target=lambda: (time.sleep(0.4), other.agree(8))).start()
    session = CaptureSession(
        CaptureConfig(steps=2, skip=5, calibration_steps=2, nvml_interval_s=0),
        sync.bundle_dir(),
        sync=sync,
        clock=clock,
    )
    model = torch.nn.Linear(8, 8)
    session.start(hook_optimizers=False)
    for _ in range(20):
        model(torch.randn(4, 8)).sum().backward()
        clock.advance(0.010)
        session.step()
        if session.done:
            break
    session.close()
    result = session.result
    assert result.window_opened_at_step == 8 and result.steps_recorded == 2
    assert result.trace_path == sync.bundle_dir() / "trace.json.gz"
    assert result.unprofiled_before_ms == pytest.approx([10.0] * 4)
    assert (
        clock.now() - ManualClock().now() > 0.010 * 10 + POLL_S
    )  # the wait did pass on the session's clock
    with gzip.open(result.trace_path, "rt") as fh:
        trace = json.load(fh)
    assert trace["gpudoctor_window"] == {"first_step": 9, "steps": 2, "rank": 0, "world_size": 2}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0"}, (2, 4, 0)),
        ({"RANK": "0", "WORLD_SIZE": "1"}, None),  # torchrun with one process: not distributed
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}, (5, 8, 1)),
    ],
)
def test_rank_info_from_the_launcher(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: tuple[int, int, int] | None
) -> None:
    from gpudoctor.capture.rank_window import rank_info

    for var in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_LOCALID",
    ):
        monkeypatch.delenv(var, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    info = rank_info()
    assert (None if info is None else (info.rank, info.world_size, info.local_rank)) == expected


def test_nvml_reads_the_ranks_own_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 sees its GPU as cuda:0 (CUDA_VISIBLE_DEVICES=5): NVML must read the machine's GPU 5,
    found by UUID, not NVML's GPU 0; without a UUID, torch's index is the best guess."""
    from types import SimpleNamespace

    from gpudoctor.capture.nvml import current_device_handle

    class Nvml:
        def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
            return f"by-uuid {uuid}"

        def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
            return f"by-index {index}"

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: SimpleNamespace(uuid="5e1f-77")
    )
    assert current_device_handle(Nvml()) == "by-uuid GPU-5e1f-77"
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace())
    assert current_device_handle(Nvml()) == "by-index 0"


def _two_bundles(tmp: Path) -> RankSync:
    """Rank 0's sync after agreeing with rank 1, both bundles on disk."""
    store = dist.HashStore()
    syncs = [_sync(tmp, store, r, 2) for r in range(2)]
    _agree_all(syncs, [3, 3])
    for sync in syncs:
        sync.bundle_dir().mkdir(parents=True)
        (sync.bundle_dir() / "env.json").write_text("{}")
    return syncs[0]


def test_rank_0_writes_the_combined_report_of_analyze_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpudoctor
    import gpudoctor.pipeline
    from gpudoctor.live import combine_ranks

    combined = gpudoctor.analyze(Path(__file__).parent / "data" / "cpu_only" / "trace.json.gz")
    asked: list[Any] = []
    monkeypatch.setattr(
        gpudoctor.pipeline,
        "analyze_ranks",
        lambda sources: asked.append(sources) or combined,
        raising=False,
    )
    sync = _two_bundles(tmp_path)
    report, note = combine_ranks(sync, None)
    run = sync.run_dir()
    assert asked == [[run]] and report is not None and note == ""
    assert (
        report.warnings == combined.warnings
    )  # nothing to add: every rank joined and wrote its bundle
    assert json.loads((run / "report.json").read_text())["steps"]["count"] == 3
    assert (run / "report.html").is_file()
    assert json.loads((run / "ranks.json").read_text()) == {
        "world_size": 2,
        "window": {"first_step": 4, "steps": 3},
        "ranks": [
            {"rank": 0, "path": "rank0", "state": "ok"},
            {"rank": 1, "path": "rank1", "state": "ok"},
        ],
    }


@pytest.mark.parametrize(
    ("analysis", "why"),
    [
        (None, "this gpudoctor has no multi-rank analysis (pipeline.analyze_ranks)"),
        (ValueError("boom"), "the multi-rank analysis failed (ValueError: boom)"),
    ],
)
def test_without_a_combined_analysis_rank_0s_own_report_stands_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, analysis: Exception | None, why: str
) -> None:
    import gpudoctor
    import gpudoctor.pipeline
    from gpudoctor.live import combine_ranks

    own = gpudoctor.analyze(Path(__file__).parent / "data" / "cpu_only" / "trace.json.gz")
    if analysis is None:
        monkeypatch.delattr(gpudoctor.pipeline, "analyze_ranks", raising=False)
    else:

        def broken(sources: Any) -> Any:
            raise analysis

        monkeypatch.setattr(gpudoctor.pipeline, "analyze_ranks", broken, raising=False)
    sync = _two_bundles(tmp_path)
    report, _ = combine_ranks(sync, own)
    run = sync.run_dir()
    assert report is not None and report.warnings[-1] == (
        f"this is rank 0's report, not a combined one ({why}); each rank's own is in {run}/rank<R>/report.json"
    )
    assert json.loads((run / "report.json").read_text())["warnings"][-1] == report.warnings[-1]


def test_without_a_process_group_or_torchrun_rank_0_hosts_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launcher that only sets RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, and a program
    that never initializes a process group: rank 0 hosts a store at MASTER_PORT + 1."""
    import socket

    for _ in range(
        5
    ):  # the port found free may be taken before the store binds it: another one then
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(port - 1))  # the store goes one above: the free port
        monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
        syncs = [_sync(tmp_path, None, r, 2, timeout=20.0) for r in range(2)]
        windows = _agree_all(syncs, [4, 6])
        if all(w.agreed for w in windows.values()):
            break
    assert [(w.open_at, w.agreed) for w in (windows[0], windows[1])] == [(6, True), (6, True)]
    assert isinstance(syncs[0].store, dist.TCPStore) and syncs[0].store.port == port
