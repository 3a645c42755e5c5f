"""The straggler's cause and the noise floor, on hand-built rank summaries (ranks/straggler.py):
a slower GPU (same kernels slower, lower SM clock in its NVML samples), more work, an unexplained
lag, and a spread within noise that names no one; from the ranks' host time, a sleep against
dispatch the profiler inflates, and the profiler's own noise between ranks issuing the same ops;
then the recorded 2x H100 DDP runs, slow and healthy."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.ranks.aligned import align
from gpudoctor.ranks.combine import combine
from gpudoctor.ranks.straggler import check, find_straggler
from gpudoctor.ranks.summary import Collective, RankSummary

STEP_NS = 10_000_000  # 10 ms steps
STEPS = 4


def rank(
    r: int,
    late_ns: int = 0,
    kernel_ms: float = 6.0,
    compute_ms: float = 6.0,
    kernels: float = 100,
    idle: dict[str, float] | None = None,
    clock: float = 1980.0,
    offset_ns: int = 0,
    host_ms: dict[str, float] | None = None,
    host_events: dict[str, float] | None = None,
    kernel_ns: int = 200_000,
) -> RankSummary:
    """One collective per step ending 1 ms before the step's end on every rank; a late rank starts
    it ``late_ns`` later (it waits for no one), the others wait inside it."""
    colls = []
    for k in range(STEPS):
        end = k * STEP_NS + 9_000_000
        start = end - kernel_ns + late_ns
        colls.append(
            Collective("all-reduce", k, 1 << 26, start + offset_ns, end + offset_ns, 7, "0", k)
        )
    return RankSummary(
        rank=r,
        source=f"rank{r}",
        gpu="NVIDIA H100 80GB HBM3",
        step_start=tuple(k * STEP_NS + offset_ns for k in range(STEPS)),
        step_end=tuple((k + 1) * STEP_NS + offset_ns for k in range(STEPS)),
        busy_ms=compute_ms + 0.2,
        compute_ms=compute_ms,
        idle_ms=3.8,
        idle_by_cause=idle or {"dispatch": 3.8},
        collectives=tuple(colls),
        kernel_ms={"gemm": kernel_ms, "norm": 1.0},
        kernels_per_step=kernels,
        env={
            "sm_clock_mhz_mean": clock,
            "throttle_reasons_seen": ["hw_slowdown"] if clock < 1900 else [],
        },
        host_ms=host_ms or {},
        host_events=host_events or {},
    )


def test_slower_gpu_named_with_its_clock() -> None:
    ranks = [
        rank(0),
        rank(1, late_ns=150_000, kernel_ms=6.5, compute_ms=6.5, clock=1600.0, offset_ns=777_777),
        rank(2),
    ]
    st = find_straggler(align(ranks))
    assert st is not None and st.rank == 1 and st.cause == "slower-gpu"
    assert st.imposed_ms == pytest.approx(0.15)
    assert st.numbers["kernel_slowdown"] == pytest.approx(7.5 / 7.0, abs=1e-4)
    f = check(align(ranks))
    assert f is not None and "1600 MHz against 1980 MHz" in f.summary
    assert f.evidence.numbers["throttle_reasons"] == "hw_slowdown"


def test_more_work_when_its_kernels_are_not_slower() -> None:
    ranks = [rank(0), rank(1), rank(2, late_ns=300_000, compute_ms=6.4, kernels=120)]
    st = find_straggler(align(ranks))
    assert st is not None and st.rank == 2 and st.cause == "more-work"
    assert st.numbers["compute_excess_ms"] == pytest.approx(0.4)
    assert st.numbers["extra_kernels_per_step"] == 20


def test_host_sync_idle_explains_a_late_rank() -> None:
    ranks = [rank(0, late_ns=500_000, idle={"host-sync": 0.6, "dispatch": 3.2}), rank(1), rank(2)]
    st = find_straggler(align(ranks))
    assert st is not None and (st.rank, st.cause) == (0, "host-sync")
    assert st.imposed_ms == pytest.approx(0.5)


def test_unexplained_lag_says_so() -> None:
    st = find_straggler(align([rank(0), rank(1, late_ns=400_000)]))
    assert st is not None and st.cause == "unexplained"


def test_spread_within_noise_names_no_one() -> None:
    # 40 us late per step: under the 50 us / 1% of a 10 ms step floor
    result = combine([rank(0), rank(1, late_ns=40_000), rank(2)])
    assert all(f.id != "straggler" for f in result.findings)
    assert result.distributed.straggler_rank is None
    assert [r.wait_imposed_ms for r in result.rows] == [0.0, 0.04, 0.0]


# -- the cause from the host's own step -----------------------------------------------------------
# 2,000 recorded events a step: 6 ms of profiler time at 3 us each, so between ranks issuing the
# same ops a dispatch difference must exceed 3 ms (PROFILER_NOISE = 0.5 of it) to count


def _hosts(
    late: dict[str, float], late_events: float = 2000, late_ns: int = 2_000_000
) -> list[RankSummary]:
    normal, long = (
        {"dispatch": 8.0},
        6_000_000,
    )  # all-reduces of 6 ms on the others, the late rank's shorter
    return [
        rank(0, host_ms=normal, host_events={"dispatch": 2000}, kernel_ns=long),
        rank(
            1, late_ns=late_ns, host_ms=late, host_events={"dispatch": late_events}, kernel_ns=long
        ),
        rank(2, host_ms=normal, host_events={"dispatch": 2000}, kernel_ns=long),
    ]


def test_a_sleep_is_priced_at_its_host_time_not_at_the_profiled_wait() -> None:
    # 1.5 ms of op-free host work and 2.9 ms more dispatch of the same ops: the sleep is the cause,
    # the dispatch within the profiler's noise, and the price the sleep (not the 2 ms waited)
    st = find_straggler(align(_hosts({"host-work": 1.5, "dispatch": 10.9})))
    assert st is not None and (st.rank, st.cause) == (1, "host-work")
    assert st.imposed_ms == pytest.approx(2.0) and st.price_ms == pytest.approx(1.5)
    assert (
        st.numbers["dispatch_excess_ms"] == pytest.approx(2.9)
        and st.numbers["dispatch_noise_ms"] == 3.0
    )
    f = check(align(_hosts({"host-work": 1.5, "dispatch": 10.9})))
    assert f is not None and f.saving_ms == pytest.approx(1.5)
    assert f.title == "Rank 1 is the straggler (host-work): it costs the job 1.50 ms per step"
    assert "within the profiler's noise (3.00 ms)" in f.summary


def test_dispatch_of_the_same_ops_counts_only_above_the_profilers_noise() -> None:
    # 2.9 ms slower issuing the same 2,000 events: noise, reported at no cost
    st = find_straggler(align(_hosts({"dispatch": 10.9})))
    assert st is not None and st.cause == "profiler-noise" and st.price_ms == 0.0 and not st.real
    f = check(align(_hosts({"dispatch": 10.9})))
    assert f is not None and (f.severity, f.saving_ms) == ("info", 0.0)
    assert f.title.startswith("No straggler: rank 1")
    result = combine(_hosts({"dispatch": 10.9}))
    assert result.distributed.straggler_rank is None and not any(r.straggler for r in result.rows)
    assert result.chosen == 0
    # the wait is the profiler's: exposed-comm does not price it either, only the overlap not taken
    exposed = next(f for f in result.findings if f.id == "exposed-comm")
    assert exposed.evidence.numbers["wait_for_slowest_ms"] == pytest.approx(1.3333, abs=1e-4)
    n = exposed.evidence.numbers
    assert exposed.saving_ms == pytest.approx(
        n["overlap_not_taken_ms"] - n["overlap_slows_compute_ms"], abs=1e-4
    )
    # 3.1 ms slower: above the noise, dispatch is the cause, priced at the excess
    st = find_straggler(align(_hosts({"dispatch": 11.1})))
    assert (
        st is not None and st.cause == "dispatch" and st.price_ms == pytest.approx(2.0)
    )  # capped at the wait
    st = find_straggler(align(_hosts({"dispatch": 11.1}, late_ns=5_000_000)))
    assert st is not None and st.price_ms == pytest.approx(3.1)


def test_more_ops_are_compared_after_the_profilers_time_is_taken_out() -> None:
    # 3,000 events against 2,000: 12.0 - 9 ms against 8.0 - 6 ms, 1.0 ms more de-inflated dispatch
    # (the profiled 4 ms difference is three quarters profiler); no noise margin when the ops differ
    st = find_straggler(align(_hosts({"dispatch": 12.0}, late_events=3000)))
    assert st is not None and st.cause == "dispatch" and st.price_ms == pytest.approx(1.0)
    assert st.numbers["dispatch_excess_ms"] == pytest.approx(1.0)


def test_a_lateness_the_host_does_not_explain_is_priced_like_the_step() -> None:
    from gpudoctor.ranks.straggler import priced_unprofiled

    # 100 more events (5%: not the same ops) and, de-inflated, no more dispatch: unexplained, its
    # profiled wait scaled by unprofiled / profiled step
    late = _hosts({"dispatch": 8.3}, late_events=2100)
    st = find_straggler(align(late))
    assert st is not None and st.cause == "unexplained" and st.price_ms == pytest.approx(2.0)
    f = check(align(late))
    assert f is not None and priced_unprofiled(f, 5.0, 10.0).saving_ms == pytest.approx(1.0)
    # a host cause is not scaled again
    f = check(align(_hosts({"host-work": 1.5, "dispatch": 8.0})))
    assert f is not None and priced_unprofiled(f, 5.0, 10.0).saving_ms == pytest.approx(1.5)
    # its severity moves to the unprofiled step: 15% of the 10 ms profiled one, 30% of the 5 ms
    assert (f.severity, priced_unprofiled(f, 5.0, 10.0).severity) == ("major", "critical")
    # dispatch is the host's issuing, which the profiler stretches with the step: scaled by U / P
    f = check(align(_hosts({"dispatch": 11.1}, late_ns=5_000_000)))
    assert f is not None and f.evidence.numbers["cause"] == "dispatch"
    priced = priced_unprofiled(f, 5.0, 10.0)
    assert priced.saving_ms == pytest.approx(1.55)
    assert "1.55 ms" in priced.title


def test_own_host_sync_gives_way_to_a_slower_gpu() -> None:
    # a slower GPU keeps its host waiting in syncs: the GPU is named, not the sync
    normal, ev = {"dispatch": 8.0}, {"dispatch": 2000}
    ranks = [
        rank(0, host_ms=normal, host_events=ev),
        rank(
            1,
            late_ns=400_000,
            kernel_ms=6.5,
            compute_ms=6.5,
            clock=1600.0,
            host_ms={"dispatch": 8.0, "host-sync": 0.5},
            host_events=ev,
        ),
    ]
    st = find_straggler(align(ranks))
    assert st is not None and st.cause == "slower-gpu" and st.price_ms == pytest.approx(0.4)
    ranks[1] = rank(1, late_ns=400_000, host_ms={"dispatch": 8.0, "host-sync": 0.5}, host_events=ev)
    st = find_straggler(align(ranks))
    assert (
        st is not None and st.cause == "host-sync" and st.price_ms == pytest.approx(0.4)
    )  # capped at the wait


def test_waits_for_the_collectives_are_not_host_work() -> None:
    # the others spent 1.9 ms blocked while their GPU sat in a collective: left out of the comparison
    ranks = [
        rank(0, host_ms={"dispatch": 8.0, "collective-wait": 1.9}, host_events={"dispatch": 2000}),
        rank(
            1,
            late_ns=2_000_000,
            host_ms={"dispatch": 8.0, "input-pipeline": 2.0},
            host_events={"dispatch": 2000},
        ),
    ]
    st = find_straggler(align(ranks))
    assert st is not None and st.cause == "input-pipeline" and st.price_ms == pytest.approx(2.0)


def test_slow_collective_against_this_machines_measured_curve(tmp_path) -> None:
    import json

    from gpudoctor.hardware.machine import collectives_profile_for

    # two ranks, a 64 MiB all-reduce of 2 ms each step: 64 MiB / 2 ms = 33.6 GB/s bus bandwidth (n=2: x1)
    ranks = [rank(0), rank(1)]
    ranks = [
        RankSummary(
            **{
                **r.__dict__,
                "collectives": tuple(
                    Collective(
                        c.op, c.seq, 1 << 26, c.end - 2_000_000, c.end, c.stream, c.group, c.step
                    )
                    for c in r.collectives
                ),
            }
        )
        for r in ranks
    ]
    flat = [
        {"bytes": b, "time_s": b / 100e9, "algbw_Bps": 100e9, "busbw_Bps": 100e9}
        for b in (1 << 24, 1 << 28)
    ]
    profile = {
        "ceilings": {"gpu": "NVIDIA H100 80GB HBM3"},
        "measured_utc": "2026-11-25T00:00:00Z",
        "collectives": {
            "world_size": 2,
            "gpu": "NVIDIA H100 80GB HBM3",
            "curves": {"all_reduce": flat},
        },
    }
    (tmp_path / "gpu-1.json").write_text(json.dumps(profile))
    (tmp_path / "other.json").write_text(
        json.dumps({**profile, "ceilings": {"gpu": "NVIDIA A100"}})
    )
    table = collectives_profile_for("NVIDIA H100 80GB HBM3", tmp_path)
    assert table == tmp_path / "gpu-1.json"
    result = combine(ranks, str(table))
    c = result.distributed.collectives[0]
    assert (c.achieved_busbw_GBps, c.predicted_busbw_GBps) == (33.55, 100.0)
    assert result.distributed.predicted_from == f"machine profile {table}"
    slow = next(f for f in result.findings if f.id == "slow-collective")
    assert "measured on this machine" in slow.summary
    # every 2 ms transfer runs exposed; the curve says 0.671 ms: 1.329 ms per step above it
    assert slow.saving_ms == pytest.approx(2.0 - (1 << 26) / 100e9 * 1e3, abs=1e-3)


def test_windows_that_differ_are_said() -> None:
    a = RankSummary(**{**rank(0).__dict__, "env": {"window": {"first_step": 10, "steps": 4}}})
    b = RankSummary(**{**rank(1).__dict__, "env": {"window": {"first_step": 11, "steps": 4}}})
    assert any("different profiled windows" in w for w in combine([a, b]).warnings)


def test_an_extra_collective_before_the_window_shifts_nothing() -> None:
    r1 = rank(1, late_ns=300_000, offset_ns=5_000)
    barrier = Collective("all-reduce", 0, 1 << 26, -3_000_000, -2_900_000, 7, "0", -1)
    r1 = RankSummary(**{**r1.__dict__, "collectives": (barrier, *r1.collectives)})
    al = align([rank(0), r1, rank(2)])
    assert len(al.ops) == STEPS
    assert al.offsets.tolist() == [0, 5_000, 0]
    st = find_straggler(al)
    assert st is not None and st.rank == 1 and st.imposed_ms == pytest.approx(0.3)


def test_ranks_without_collectives_and_p2p_only_ranks() -> None:
    bare = [RankSummary(**{**rank(r).__dict__, "collectives": ()}) for r in range(2)]
    result = combine(bare)
    assert result.findings == () and len(result.rows) == 2
    assert any("no collective matched" in w for w in result.warnings)
    p2p = [
        RankSummary(
            **{
                **r.__dict__,
                "collectives": tuple(
                    Collective("p2p", c.seq, 1 << 20, c.start, c.end, 7, "0", c.step)
                    for c in r.collectives
                ),
            }
        )
        for r in (rank(0), rank(1, late_ns=500_000))
    ]
    result = combine(p2p)
    assert result.distributed.matched_collectives == 0 and result.distributed.straggler_rank is None
    assert any("no pipeline pattern" in w for w in result.warnings)  # no recv waits recorded
    assert [f.id for f in result.findings] == []  # equal stages: no stage-imbalance


def test_stage_imbalance_on_a_pipeline() -> None:
    def stage(r: int, compute_ms: float) -> RankSummary:
        s = rank(r, compute_ms=compute_ms)
        return RankSummary(
            **{
                **s.__dict__,
                "collectives": tuple(
                    Collective("p2p", c.seq, 1 << 20, c.start, c.end, 7, "0", c.step)
                    for c in s.collectives
                ),
            }
        )

    result = combine([stage(0, 6.0), stage(1, 6.0), stage(2, 8.0), stage(3, 6.0)])
    f = next(f for f in result.findings if f.id == "stage-imbalance")
    assert f.evidence.numbers["slowest_rank"] == 2
    assert f.saving_ms == pytest.approx(8.0 - 6.5)  # the slowest stage above the mean
    # 6.5 ms against 6.0: under 10% above the median, no finding
    assert all(f.id != "stage-imbalance" for f in combine([stage(0, 6.0), stage(1, 6.5)]).findings)


def test_env_json_facts_read_for_the_cause() -> None:
    from gpudoctor.ranks.summary import _env_facts

    env = {
        "rank": 3,
        "world_size": 8,
        "local_rank": 3,
        "hostname": "n1",
        "window": {"first_step": 12, "steps": 5},
        "capture": {
            "nvml": {
                "samples": 9,
                "sm_clock_mhz_mean": 1410.0,
                "sm_clock_mhz_min": 1200,
                "throttle_reasons_seen": ["sw_thermal"],
                "power_w_mean": "bad",
            }
        },
    }
    assert _env_facts(env) == {
        "hostname": "n1",
        "world_size": 8,
        "local_rank": 3,
        "window": {"first_step": 12, "steps": 5},
        "sm_clock_mhz_mean": 1410.0,
        "sm_clock_mhz_min": 1200.0,
        "throttle_reasons_seen": ["sw_thermal"],
    }


# -- a CPU job: gloo ranks recorded by `gpudoctor run --nproc 2` ----------------------------------


def test_a_gloo_job_names_its_straggler_from_host_ranges() -> None:
    """tests/data/gloo_straggler: tests/programs/multigpu/ddp_gpt_straggler.py on the CPU, 2 gloo
    ranks, rank 1 sleeping 30 ms a step before its forward (`gpudoctor run --nproc 2 --skip 4
    --steps 3`, 2026-11-25). Its collectives are the "gloo:all_reduce" ranges on gloo's threads."""
    from gpudoctor.pipeline import analyze_ranks

    report = analyze_ranks([Path(__file__).parent / "data" / "gloo_straggler"], jobs=1)
    by_id = {f.id: f for f in report.findings}
    straggler = by_id["straggler"]
    assert (
        straggler.evidence.numbers["rank"] == 1
        and straggler.evidence.numbers["cause"] == "host-work"
    )
    assert straggler.saving_ms == pytest.approx(30.5774, abs=1e-4)  # planted: 30 ms a step
    assert straggler.evidence.numbers["idle_excess_ms"] == pytest.approx(34.2428, abs=1e-4)
    assert [(r.rank, r.straggler) for r in report.ranks] == [(0, False), (1, True)]
    assert [r.idle for r in report.ranks] == [{"host-work": 5.4685}, {"host-work": 39.7113}]
    assert report.ranks[1].clock_offset_us == pytest.approx(3180.425, abs=1e-3)
    assert by_id["exposed-comm"].evidence.numbers["wait_for_slowest_ms"] == pytest.approx(
        15.231, abs=1e-3
    )


# -- two H100s: tests/programs/multigpu/ddp_gpt_straggler.py under `gpudoctor run --nproc 2` --------


def _two_gpu(case: str):  # type: ignore[no-untyped-def]
    from gpudoctor.pipeline import analyze_ranks

    return analyze_ranks([Path(__file__).parent / "data" / "ddp2_h100" / case], jobs=1)


def test_two_h100s_name_the_rank_that_sleeps() -> None:
    """Rank 1 sleeps 20 ms a step before its forward (NCCL, 2x H100 NVLink, torch 2.11,
    2026-11-25): the job's step was 35.76 ms unprofiled against the healthy twin's 19.08, so the
    sleep cost 16.68 ms a step. In the profiled trace rank 0 waited 54.09 ms a 61.08 ms step in
    the all-reduces (its wait counted once per all-reduce, and profiler time in it); rank 1's host
    spent 20.29 ms of its step outside any operator, and issued the same ~4,552 dispatch events 3.53 ms
    slower than rank 0, under the 12.61 ms of profiler noise (half the profiler's time for those
    events at the 5.5 us per event these ranks measured: (profiled - unprofiled step) / events). Named for the sleep and priced at
    it: 1.22x the measured cost (the old price, from the GPU's dispatch idle, was 31.66: 1.9x)."""
    report = _two_gpu("slow")
    straggler = report.finding("straggler")
    assert straggler is not None
    n = straggler.evidence.numbers
    assert (n["rank"], n["cause"]) == (1, "host-work")
    assert straggler.saving_ms == pytest.approx(20.2911, abs=1e-4)
    assert 16.68 / 1.25 <= straggler.saving_ms <= 16.68 * 1.25
    assert n["wait_imposed_in_profiled_trace_ms"] == pytest.approx(54.0895, abs=1e-4)
    assert (n["dispatch_excess_ms"], n["dispatch_noise_ms"]) == (
        pytest.approx(3.5346, abs=1e-4),
        pytest.approx(12.6139, abs=1e-4),
    )
    assert straggler.severity == "critical"  # 57% of the 35.76 ms unprofiled step
    # the sleep, seen from the GPU of the same rank, is the other finding at the top: replayed
    # without the sleep, the host left runs at the pace of its smaller work (replay/pace.py, which
    # cannot tell a sleep from the host's own work: 21.33 ms, 20.09 at the sick step's pace)
    assert [(f.id, round(f.saving_ms, 2)) for f in report.findings[:2]] == [
        ("host-blocking-work", 21.33),
        ("straggler", 20.29),
    ]
    assert [(r.rank, r.straggler) for r in report.ranks] == [(0, False), (1, True)]
    assert report.distributed.straggler_cause == "host-work"
    assert report.ranks[1].host == {
        "dispatch": 39.7491,
        "host-work": 20.2911,
        "optimizer": 0.9096,
        "host-sync": 0.0325,
    }
    # the ranks share one host clock: the offset the collectives give is 9 us
    assert report.ranks[1].clock_offset_us == pytest.approx(8.98, abs=0.01)
    assert not any("do not all match" in w for w in report.warnings)


def test_two_h100s_healthy_job_has_no_straggler() -> None:
    """The same job with no rank slowed. In the profiled window rank 1 waited 15.58 ms a step for
    rank 0 in the all-reduces (GPU dispatch idle 29.0 ms against 17.1), but the hosts issued the
    same ~4,552 dispatch events and rank 0's took only 1.45 ms longer, under the 10.35 ms of profiler noise;
    unprofiled the ranks' steps were 19.08 and 19.62 ms. Reported at no cost; launch-bound first.
    Three of rank 0's all-reduces were launched before its window and belong to no step."""
    report = _two_gpu("healthy")
    assert report.findings[0].id == "launch-bound"
    straggler = report.finding("straggler")
    assert straggler is not None and (straggler.severity, straggler.saving_ms) == ("info", 0.0)
    n = straggler.evidence.numbers
    assert (n["rank"], n["cause"]) == (0, "profiler-noise")
    assert n["wait_imposed_ms_per_step"] == pytest.approx(15.5845, abs=1e-4)
    assert (n["dispatch_excess_ms"], n["dispatch_noise_ms"]) == (
        pytest.approx(1.4493, abs=1e-4),
        pytest.approx(10.3545, abs=1e-4),
    )
    assert report.distributed.straggler_rank is None and not any(r.straggler for r in report.ranks)
    assert any("no rank straggles" in w for w in report.warnings)
    # the wait is claimed as the profiler's: exposed-comm prices only the overlap not taken
    # less what overlapping it would slow the compute by (exposed_comm.OVERLAP_COST)
    assert report.finding("exposed-comm").saving_ms == pytest.approx(
        0.7273 * (1 - 0.2357), abs=2e-4
    )
    assert not any("do not all match" in w for w in report.warnings)


def test_a_gloo_jobs_report_shows_its_ranks_and_findings_in_text_and_html() -> None:
    from gpudoctor.pipeline import analyze_ranks
    from gpudoctor.report.console import render_text
    from gpudoctor.report.html import render_html

    report = analyze_ranks([Path(__file__).parent / "data" / "gloo_straggler"], jobs=1)
    text = render_text(report, width=140)
    assert "ranks (ms per step" in text and "1. [critical] straggler  save ~30.577 ms/step" in text
    assert "No GPU findings" not in text
    page = render_html(report)
    assert page.count("<svg") >= 1 and "straggler" in page and "No GPU findings" not in page


def test_gloo_ranks_slow_dataloader_is_input_pipeline_priced_at_its_excess() -> None:
    """tests/data/gloo_loader_straggler: tests/programs/multigpu/ddp_gpt_straggler.py on the CPU, 2
    gloo ranks, rank 1's DataLoader collate sleeping 20 ms a batch (`--slow-loader 1 --delay-ms 20`,
    scripts/validate_multigpu.py --cpu, 2026-11-26; unprofiled step 35.64 ms against its --fixed
    twin's 12.39). The sleep lies inside "enumerate(DataLoader)#...__next__" under no operator: the
    rank's input-pipeline idle, not host-work. Rank 0 waited 33.53 ms a step for it in the profiled
    window (two processes on two shared cores), more than the loader's 20.34 ms excess explains: the
    price is the excess."""
    from gpudoctor.pipeline import analyze_ranks

    report = analyze_ranks([Path(__file__).parent / "data" / "gloo_loader_straggler"], jobs=1)
    numbers = {f.id: f for f in report.findings}["straggler"].evidence.numbers
    assert (numbers["rank"], numbers["cause"]) == (1, "input-pipeline")
    assert numbers["wait_imposed_ms_per_step"] == pytest.approx(33.5341, abs=1e-4)
    assert numbers["idle_excess_ms"] == pytest.approx(20.3361, abs=1e-4)
    assert {f.id: f for f in report.findings}["straggler"].saving_ms == pytest.approx(
        20.3361, abs=1e-4
    )
    assert [r.idle for r in report.ranks] == [
        {"host-work": 5.3388, "input-pipeline": 0.1044},
        {"input-pipeline": 20.4405, "host-work": 9.6078},
    ]


def _two_h200(case: str):  # type: ignore[no-untyped-def]
    from gpudoctor.pipeline import analyze_ranks

    return analyze_ranks([Path(__file__).parent / "data" / f"ddp2_h200_{case}"], jobs=1)


def test_two_h200s_name_the_rank_given_twice_the_batch() -> None:
    """tests/programs/multigpu/ddp_gpt_straggler.py --bigger-batch-rank 1 (NCCL, 2x H200 NV18,
    torch 2.11, 2026-11-26): unprofiled 23.13 ms a step against the fixed twin's 19.45, so the
    plant cost 3.68 ms. In the window rank 0 waited 39.75 ms a step for rank 1 (the profiler's
    host time in it), rank 1's kernels did twice the FLOPs and took 3.97 ms more: named more-work
    and priced at that excess (1.08x the measured cost), not at half the inflated wait."""
    report = _two_h200("batch")
    straggler = report.finding("straggler")
    assert straggler is not None and straggler.severity == "major"
    n = straggler.evidence.numbers
    assert (n["rank"], n["cause"], n["work_ratio"]) == (1, "more-work", 2.0)
    assert straggler.saving_ms == pytest.approx(3.9679, abs=1e-4)
    assert n["wait_imposed_in_profiled_trace_ms"] == pytest.approx(39.7489, abs=1e-4)
    assert 3.68 / 1.5 <= straggler.saving_ms <= 3.68 * 1.5


def test_two_h200s_profiler_time_per_event_is_measured_on_the_ranks() -> None:
    """--sync-rank 1 --batch 32 (the same machine): rank 1 reads a value back after each block,
    which cost 0.44 ms a step against the twin (22.95 vs 22.51 ms unprofiled). In the window rank 0
    issued the same ~4,729 events a step 7.21 ms slower than rank 1; at the 3 us per event of one
    GPU that cleared the noise bar (6.98 ms) and read as a critical 7.19 ms dispatch straggler.
    These ranks' own profiler time per event, (profiled - unprofiled step) / events, is 3.4-3.7 us:
    the bar is 8.24 ms and no rank straggles."""
    report = _two_h200("sync")
    straggler = report.finding("straggler")
    assert straggler is not None and (straggler.severity, straggler.saving_ms) == ("info", 0.0)
    n = straggler.evidence.numbers
    assert (n["rank"], n["cause"]) == (0, "profiler-noise")
    assert (n["dispatch_excess_ms"], n["dispatch_noise_ms"]) == (
        pytest.approx(7.211, abs=1e-3),
        pytest.approx(8.2429, abs=1e-4),
    )


def _four_h200(case: str):  # type: ignore[no-untyped-def]
    from gpudoctor.pipeline import analyze_ranks

    return analyze_ranks([Path(__file__).parent / "data" / f"ddp4_h200_{case}"], jobs=1)


def test_four_h200s_more_work_explains_the_slow_dispatch_of_a_full_queue() -> None:
    """--bigger-batch-rank 3 --batch 32 on 4x H200 (NV18, torch 2.11, 2026-11-26): unprofiled 41.21
    ms a step against the twin's 22.48, the plant cost 18.74 ms. Rank 3's GPU, given twice the rows,
    filled its launch queue, so its host's launches blocked: 7.31 ms more dispatch than the others,
    above the 6.93 ms noise bar, once read as a "dispatch" straggler priced at 7.16 ms. Its 15.82
    ms of extra compute explains the slow dispatch: more-work, 0.84x the measured cost."""
    straggler = _four_h200("batch").finding("straggler")
    assert straggler is not None and straggler.severity == "critical"
    n = straggler.evidence.numbers
    assert (n["rank"], n["cause"], n["work_ratio"]) == (3, "more-work", 2.0)
    assert (n["dispatch_excess_ms"], n["dispatch_noise_ms"]) == (
        pytest.approx(7.3085, abs=1e-4),
        pytest.approx(6.933, abs=1e-4),
    )
    assert straggler.saving_ms == pytest.approx(15.8189, abs=1e-4)
    assert 18.74 / 1.5 <= straggler.saving_ms <= 18.74 * 1.5


def test_four_h200s_syncs_of_one_rank_named_under_the_profilers_noise() -> None:
    """--sync-rank 3 --batch 32 (the same machine): rank 3 reads a value back after each block, 25.4
    sync events a step against the others' 0.2; it cost the job 1.84 ms a step (24.31 vs 22.48 ms
    unprofiled). In the window its dispatch differed by 9.99 ms, under the 10.73 ms noise bar, and
    the rank was called profiler noise. Its own report prices the syncs, replayed without their
    waits and, the rank's step held by its host, without the reads themselves, at 1.55 ms: named
    host-sync at that price, major (0.84x the measured cost; 1.15 ms, 0.62x, with the waits alone;
    the GPU idle after the syncs in the profiled window read 0.68 ms, 0.37x)."""
    report = _four_h200("sync")
    straggler = report.finding("straggler")
    assert straggler is not None and straggler.severity == "major"
    n = straggler.evidence.numbers
    assert (n["rank"], n["cause"]) == (3, "host-sync")
    assert n["own_syncs_per_step_excess"] == pytest.approx(25.2, abs=1e-2)
    assert straggler.saving_ms == pytest.approx(1.5554, abs=1e-4)
    assert "syncs a step that the others do not" in straggler.summary


def test_own_syncs_need_more_events_and_a_saving_of_the_rank() -> None:
    from gpudoctor.ranks.straggler import own_sync_excess

    def syncing(events: float, saving: float) -> RankSummary:
        return RankSummary(
            **{
                **rank(0).__dict__,
                "host_events": {"host-sync": events, "dispatch": 100.0},
                "sync_saving_ms": saving,
            }
        )

    others = [syncing(0.2, 0.0), syncing(0.2, 0.0), syncing(1.0, 0.0)]
    assert own_sync_excess(syncing(25.4, 0.68), others) == (
        pytest.approx(25.2),
        pytest.approx(0.68),
    )
    assert own_sync_excess(syncing(2.1, 0.68), others) is None  # under 2 more a step
    assert own_sync_excess(syncing(25.4, 0.0), others) is None  # no saving of its own
    assert (
        own_sync_excess(syncing(6.0, 0.5), [syncing(3.0, 0.1)] * 3) is None
    )  # 2x theirs, under 3x
