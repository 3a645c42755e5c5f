"""Pipeline parallelism (ranks/stages.py, ranks/pipeline_bubble.py, ranks/stage_imbalance.py): the
stages read from the ranks' send/recv pattern, each stage's wait in recv, the bubble priced against
the schedule's formula and the slow stage named, on CPU traces recorded from
tests/programs/multigpu/pp_two_stage.py and on hand-built stages with known timings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.ranks.combine import combine
from gpudoctor.ranks.sections import PipelineFacts
from gpudoctor.ranks.stages import read_stages
from gpudoctor.ranks.summary import Collective, RankSummary, _p2p_device

DATA = Path(__file__).parent / "data" / "pp_gloo"
PROGRAM = Path(__file__).parent / "programs" / "multigpu" / "pp_two_stage.py"
SRC = Path(__file__).parent.parent / "src"


def _analyze(case: str):  # type: ignore[no-untyped-def]
    return analyze_ranks_dir(DATA / case)


def analyze_ranks_dir(path: Path):  # type: ignore[no-untyped-def]
    from gpudoctor.pipeline import analyze_ranks

    return analyze_ranks([path], jobs=1)


# -- recorded on the CPU: `gpudoctor run --nproc 2 --skip 4 --steps 3 --calibrate 2 pp_two_stage.py
#    --steps 12 --microbatches 4 [--imbalance]` (gloo, torch 2.13 CPU, 2 shared cores, 2026-11-25) ----


def test_balanced_two_stages_bubble_against_the_formula() -> None:
    """2 stages, 4 micro-batches, GPipe: the formula's bubble is (p-1)/(m+p-1) = 20% of the step;
    the stage with the most compute (the last) waits 16.51 ms of its 65.36 ms step in recv, 25%."""
    report = _analyze("balanced")
    bubble = next(f for f in report.findings if f.id == "pipeline-bubble")
    n = bubble.evidence.numbers
    assert (n["stages"], n["microbatches"], n["measured_on_rank"]) == (2, 4, 1)
    assert n["bubble_ms_per_step"] == pytest.approx(16.5063, abs=1e-4)
    assert n["bubble_share_of_step"] == pytest.approx(0.2526, abs=1e-4)
    assert n["expected_share_of_step"] == 0.2
    assert n["expected_bubble_ms"] == pytest.approx(
        8.7874, abs=1e-4
    )  # (p-1)/m x its 35.15 ms of compute
    assert bubble.saving_ms == pytest.approx(16.5063 / 2, abs=1e-4)  # 8 micro-batches halve it
    assert n["saving_2x_microbatches_ms"] == n["saving_interleaved_v2_ms"]
    assert n["recv_wait_ms_by_rank"] == "0: 28.79, 1: 16.51"
    assert n["bubble_ms_by_step"] == "15.88, 9.27, 24.36"  # shared CPU cores: the steps vary
    # the last stage computed 35.15 ms a step against 25.86: with the same 2 layers it also runs the
    # loss and the input gradient of its first layer (rank 0's first layer has none), 4 backward GEMMs
    # to 3. stage-imbalance fires, priced by the schedule at (m-1)(max - mean) per micro-batch,
    # 3 x (8.787 - 7.626) = 3.48 ms, 4.5% of the 78.16 ms unprofiled step: minor, not the 12.28 ms
    # that rank 0 waited beyond the bubble in the profiled window
    imb = next(f for f in report.findings if f.id == "stage-imbalance")
    n = imb.evidence.numbers
    assert n["slowest_rank"] == 1 and n["ms_per_microbatch_by_rank"] == "0: 6.465, 1: 8.787"
    assert imb.saving_ms == pytest.approx(3 * (35.1498 - 30.5047) / 4, abs=1e-4)
    assert (imb.saving_ms, imb.severity) == (pytest.approx(3.4838, abs=1e-4), "minor")
    assert n["others_wait_for_it_ms"] == pytest.approx(12.2812, abs=1e-4)
    assert [r.recv_wait_ms for r in report.ranks] == [28.7875, 16.5063]
    assert report.distributed.pipeline == PipelineFacts(
        stages=2,
        microbatches=4,
        stage_ranks=(0, 1),
        slowest_rank=1,
        bubble_ms=16.5063,
        expected_share_of_step=0.2,
    )
    assert any("(2 stages, 4 micro-batches per step)" in w for w in report.warnings)
    from gpudoctor.report.ranks_section import ranks_summary

    assert ranks_summary(report).plain.endswith(
        "; pipeline of 2 stages, 4 micro-batches: bubble 16.51 ms per step on rank 1 (formula: 20% of the step)"
    )


def test_imbalanced_stage_named_and_priced_by_the_schedule() -> None:
    """--imbalance: rank 1 runs twice the layers. It computes 122.36 ms a step against rank 0's
    52.46: 30.590 and 13.116 ms per micro-batch. The schedule's step is sum(t) + (m-1) max(t) =
    43.706 + 3 x 30.590 = 135.48 ms of stage time; balanced, (m+p-1) mean(t) = 5 x 21.853 = 109.27:
    26.21 ms saved, 21.5% of the 121.64 ms unprofiled step (major). Removing rank 1's extra work
    instead (its time down to rank 0's) would save m (t1 - t0) = 69.90 ms, the compute difference
    rank 0 waits for in recv beyond the bubble (74.28 ms, the cap)."""
    report = _analyze("imbalanced")
    by_id = {f.id: f for f in report.findings}
    imb = by_id["stage-imbalance"]
    n = imb.evidence.numbers
    assert n["slowest_rank"] == 1
    assert (n["slowest_compute_ms"], n["compute_ms_by_rank"]) == (
        pytest.approx(122.3613, abs=1e-4),
        "0: 52.46, 1: 122.36",
    )
    assert (n["stages"], n["microbatches"], n["ms_per_microbatch_by_rank"]) == (
        2,
        4,
        "0: 13.116, 1: 30.590",
    )
    assert (n["model_step_ms"], n["balanced_step_ms"]) == (
        pytest.approx(135.4772, abs=1e-4),
        pytest.approx(109.2656, abs=1e-4),
    )
    assert (imb.saving_ms, n["balance_saving_ms"]) == (pytest.approx(26.2116, abs=1e-4), 26.2116)
    assert imb.saving_ms == pytest.approx(3 * (122.3613 - 87.4125) / 4, abs=1e-4)
    assert (imb.severity, report.unprofiled_step_ms) == ("major", pytest.approx(121.6445, abs=1e-4))
    assert n["extra_work_cost_ms"] == pytest.approx(122.3613 - 52.4637, abs=1e-4)
    assert n["others_wait_for_it_ms"] == pytest.approx(74.2796, abs=1e-4)
    bubble = by_id["pipeline-bubble"].evidence.numbers
    assert bubble["measured_on_rank"] == 1 and bubble["bubble_ms_per_step"] == pytest.approx(
        32.0707, abs=1e-4
    )
    assert bubble["bubble_share_of_step"] == pytest.approx(0.1912, abs=1e-4)  # 20% by the formula


def test_four_stages_1f1b_middle_stages_receive_twice() -> None:
    """4 stages, 1F1B, 4 micro-batches (`gpudoctor run --nproc 4 --skip 4 --steps 2 ... --schedule
    1f1b`): the middle ranks receive 8 a step (activations and gradients), the ends 4; the formula's
    bubble is 3/7 of the step, the stage with the most compute (rank 1) waits 35% of its step; the
    stages' compute is within 10% of the median, so no stage is called slow."""
    report = _analyze("four_1f1b")
    assert [f.id for f in report.findings] == ["pipeline-bubble"]
    n = report.findings[0].evidence.numbers
    assert (n["stages"], n["microbatches"], n["measured_on_rank"]) == (4, 4, 1)
    assert (n["bubble_ms_per_step"], n["bubble_share_of_step"]) == (
        pytest.approx(38.8737, abs=1e-4),
        0.3548,
    )
    assert n["expected_share_of_step"] == pytest.approx(3 / 7, abs=1e-4)
    assert n["recv_wait_ms_by_rank"] == "0: 63.44, 1: 38.87, 2: 53.39, 3: 36.43"


def test_gloo_summary_counts_sends_receives_and_waits() -> None:
    """Each step every rank sends 4 and receives 4 (the first stage gradients, the last activations);
    the c10d send/recv operators are not compute."""
    from gpudoctor.pipeline import _summarize_rank
    from gpudoctor.ranks.sources import rank_sources

    s0, s1 = (_summarize_rank(src, None, None)[0] for src in rank_sources([DATA / "balanced"]))
    assert (s0.p2p_recvs, s0.p2p_sends, s1.p2p_recvs, s1.p2p_sends) == (12, 12, 12, 12)
    assert s0.recv_wait_ms == pytest.approx((18.6604, 23.2225, 44.4796), abs=1e-4)
    assert s1.recv_wait_ms == pytest.approx((15.8833, 9.2739, 24.3618), abs=1e-4)
    assert (s0.compute_ms, s1.compute_ms) == (
        pytest.approx(25.8595, abs=1e-4),
        pytest.approx(35.1498, abs=1e-4),
    )


# -- recorded on 2x H200 (NCCL, torch 2.11, 2026-11-26, scripts/validate_multigpu.py): `gpudoctor run
#    --nproc 2 --skip 10 --steps 5 --calibrate 5 pp_two_stage.py --steps 30 --microbatches 4 --imbalance` --


def test_h200_imbalanced_stage_priced_by_the_schedule() -> None:
    """Rank 1 runs 4 layers to rank 0's 2 (64 x 4096 fp32 activations): 4.35 ms of kernels a step
    against 1.93, 1.087 and 0.482 ms per micro-batch. By the schedule the step is 0.482 + 4 x 1.087 =
    4.83 ms of stage time, balanced 5 x 0.785 = 3.92: 0.91 ms saved, kernel time, not scaled by the
    profiled step's stretch (9.52 ms profiled, 5.13 unprofiled): 17.7% of the unprofiled step, major.
    The others' wait in the profiled window (7.39 ms, the former price) is only the cap. The twin
    with 2 layers on each stage removes the extra work instead: measured 2.14 ms (5.13 -> 3.00 ms
    unprofiled); this run's figure for that, rank 1 at rank 0's pace, is m (1.087 - 0.482) = 2.42."""
    report = analyze_ranks_dir(DATA.parent / "pp2_h200_imbalance")
    multi = [f for f in report.findings if f.id in ("stage-imbalance", "pipeline-bubble")]
    assert [f.id for f in multi] == [
        "stage-imbalance"
    ]  # rank 1 waits 0.06 ms a step: no bubble to price
    imb = multi[0]
    n = imb.evidence.numbers
    assert (n["slowest_rank"], n["stages"], n["microbatches"]) == (1, 2, 4)
    assert (n["compute_ms_by_rank"], n["ms_per_microbatch_by_rank"]) == (
        "0: 1.93, 1: 4.35",
        "0: 0.482, 1: 1.087",
    )
    assert (n["model_step_ms"], n["balanced_step_ms"]) == (4.8299, 3.9225)
    assert (imb.saving_ms, n["balance_saving_ms"]) == (pytest.approx(0.9074, abs=1e-4), 0.9074)
    assert (report.step_ms, report.unprofiled_step_ms) == (
        pytest.approx(9.5231, abs=1e-4),
        pytest.approx(5.1345, abs=1e-4),
    )
    assert (imb.severity, imb.predicted_speedup) == (
        "major",
        pytest.approx(5.1345 / (5.1345 - 0.9074), abs=1e-3),
    )
    assert (n["extra_work_cost_ms"], n["others_wait_for_it_ms"]) == (2.4196, 7.3891)


def test_h200_twin_stage_times_call_no_stage_slow() -> None:
    """The equal-layers twin of that run (its traces were not kept; its report's kernel time by kind
    without NCCL: rank 0 1.9306 ms a step, rank 1 2.2037): rank 1, with the loss and its first
    layer's input gradient, computes 0.137 ms above the median, under 10% of it: no stage-imbalance."""
    result = combine(stages(per_mb=[1.9306 / 4, 2.2037 / 4]))
    assert [f.id for f in result.findings if f.id == "stage-imbalance"] == []


# -- hand-built stages: p = 4, m = 4, 1 ms of compute per micro-batch, stage 2 twice as slow ---------


def stages(
    slow: int = -1, p: int = 4, m: int = 4, steps: int = 2, per_mb: list[float] | None = None
) -> list[RankSummary]:
    """The pipeline's timings by its model: the pace is the slowest stage's time per micro-batch t;
    the step is (m+p-1) t; each stage waits the step minus its own compute. ``per_mb``: each stage's
    ms per micro-batch (default 1, 2 for ``slow``)."""
    per_mb = per_mb or [2.0 if r == slow else 1.0 for r in range(p)]
    p = len(per_mb)
    t = max(per_mb)
    step_ms = (m + p - 1) * t
    out = []
    for r in range(p):
        recvs = m * (1 if r in (0, p - 1) else 2)
        colls = tuple(
            Collective("p2p", i, 1 << 20, i * 1000, i * 1000 + 500, 7, "", 0, (), "recv")
            for i in range(recvs * steps)
        )
        out.append(
            RankSummary(
                rank=r,
                source=f"rank{r}",
                gpu="",
                step_start=tuple(int(k * step_ms * 1e6) for k in range(steps)),
                step_end=tuple(int((k + 1) * step_ms * 1e6) for k in range(steps)),
                busy_ms=m * per_mb[r],
                compute_ms=m * per_mb[r],
                idle_ms=step_ms - m * per_mb[r],
                idle_by_cause={},
                collectives=colls,
                kernel_ms={},
                kernels_per_step=0.0,
                recv_wait_ms=(step_ms - m * per_mb[r],) * steps,
                p2p_sends=recvs * steps,
                p2p_recvs=recvs * steps,
            )
        )
    return out


def test_four_balanced_stages_bubble_is_the_formula() -> None:
    """Balanced: each stage waits (p-1) t = 3 ms of a 7 ms step, (p-1)/(m+p-1) = 3/7; no imbalance."""
    result = combine(stages())
    assert [f.id for f in result.findings] == ["pipeline-bubble"]
    n = result.findings[0].evidence.numbers
    assert (n["bubble_ms_per_step"], n["bubble_share_of_step"], n["expected_share_of_step"]) == (
        3.0,
        0.4286,
        0.4286,
    )
    assert n["expected_bubble_ms"] == 3.0 and result.findings[0].saving_ms == pytest.approx(1.5)


def test_four_stages_one_slow_both_findings() -> None:
    """Stage 2 at 2 ms per micro-batch: step 14 ms; it waits the bubble (p-1) x 2 = 6 ms, the others
    14 - 4 = 10 ms: 4 ms each of waiting for it. Balancing (1.25 ms each) saves (m-1)(max - mean)
    = 3 x 0.75 = 2.25 ms by the schedule (sum(t) + (m-1) max(t): 11 ms, balanced 7 x 1.25 = 8.75);
    bringing stage 2 down to 1 ms instead would save 4 ms, the others' wait."""
    result = combine(stages(slow=2))
    by_id = {f.id: f for f in result.findings}
    n = by_id["stage-imbalance"].evidence.numbers
    assert n["slowest_rank"] == 2
    assert by_id["stage-imbalance"].saving_ms == pytest.approx(2.25)
    assert (
        n["model_step_ms"],
        n["balanced_step_ms"],
        n["extra_work_cost_ms"],
        n["others_wait_for_it_ms"],
    ) == (11.0, 8.75, 4.0, 4.0)
    bubble = by_id["pipeline-bubble"].evidence.numbers
    assert (
        bubble["measured_on_rank"],
        bubble["bubble_ms_per_step"],
        bubble["expected_bubble_ms"],
    ) == (2, 6.0, 6.0)


def test_one_microbatch_balancing_saves_nothing() -> None:
    """m = 1: no two stages ever compute at once, the step is the sum of the stages' times whatever
    the split; the slow stage is named (2 ms against 1) at no saving, (m-1)(max - mean) = 0."""
    result = combine(stages(m=1, per_mb=[1.0, 2.0]))
    imb = next(f for f in result.findings if f.id == "stage-imbalance")
    assert imb.evidence.numbers["slowest_rank"] == 1
    assert (imb.saving_ms, imb.severity, imb.evidence.numbers["model_step_ms"]) == (
        0.0,
        "info",
        3.0,
    )


def test_saving_capped_at_the_others_wait() -> None:
    """The model prices 3 x (2 - 1.5) = 1.5 ms for stages of 1 and 2 ms per micro-batch, but the
    recorded waits say rank 0 waited only 0.4 ms a step beyond rank 1's own: the saving is 0.4."""
    s = stages(per_mb=[1.0, 2.0])
    s[0] = RankSummary(**{**s[0].__dict__, "recv_wait_ms": (s[1].recv_wait_ms[0] + 0.4,) * 2})
    imb = next(f for f in combine(s).findings if f.id == "stage-imbalance")
    assert imb.evidence.numbers["balance_saving_ms"] == 1.5
    assert imb.saving_ms == pytest.approx(0.4)


def test_severity_against_the_unprofiled_step_saving_kept() -> None:
    """Kernel time is not stretched by the profiler: re-priced for a 5 ms unprofiled step the
    saving stays 2.25 ms (45%: critical, x1.82); against a 1 ms step it is capped at 99% of it;
    other findings pass unchanged."""
    from gpudoctor.ranks.stage_imbalance import priced_unprofiled

    imb = next(f for f in combine(stages(slow=2)).findings if f.id == "stage-imbalance")
    assert imb.severity == "major"  # 2.25 of the 14 ms hand-built step
    again = priced_unprofiled(imb, 5.0)
    assert (again.saving_ms, again.severity, again.predicted_speedup) == (
        2.25,
        "critical",
        pytest.approx(5 / 2.75),
    )
    assert priced_unprofiled(imb, 1.0).saving_ms == pytest.approx(0.99)
    assert priced_unprofiled(imb, None) is imb
    bubble = next(f for f in combine(stages(slow=2)).findings if f.id == "pipeline-bubble")
    assert priced_unprofiled(bubble, 5.0) is bubble


def test_counts_that_break_the_pattern_are_not_one_pipeline() -> None:
    """A middle stage receiving m, not 2m (another parallelism mixed in): no stages, no bubble; the
    imbalance falls back to the compute above the mean."""
    s = stages(slow=2)
    s[1] = RankSummary(**{**s[1].__dict__, "p2p_recvs": s[0].p2p_recvs})
    assert read_stages(s) is None
    result = combine(s)
    assert [f.id for f in result.findings] == ["stage-imbalance"]
    assert result.findings[0].saving_ms == pytest.approx(8.0 - 5.0)
    assert result.distributed.pipeline is None
    assert any("no pipeline pattern" in w for w in result.warnings)
    assert read_stages(stages()[:1]) is None


def test_gpu_recv_wait_is_the_recv_kernel_not_beside_compute() -> None:
    """On a GPU the recv kernel's time with no compute kernel beside it is the stage's wait; sends
    are counted, not waited on."""
    colls = (
        Collective("p2p", 0, 4, 0, 2_000_000, 7, "", 0, ((500_000, 1_500_000),), "recv"),
        Collective("p2p", 1, 4, 3_000_000, 3_400_000, 7, "", 1, (), "recv"),
        Collective("p2p", 2, 4, 4_000_000, 9_000_000, 7, "", 1, (), "send"),
        Collective("p2p", 3, 4, 9_000_000, 9_100_000, 7, "", -1, (), "recv"),
    )
    assert _p2p_device(colls, 2) == {"recv_wait_ms": (1.0, 0.4), "p2p_recvs": 2, "p2p_sends": 1}
    assert _p2p_device(colls[2:3], 2) == {"recv_wait_ms": (), "p2p_recvs": 0, "p2p_sends": 1}


# -- the whole path on the CPU: `gpudoctor run --nproc 2` on the program -----------------------------


@pytest.mark.e2e
def test_run_on_the_program_reports_the_bubble(tmp_path: Path) -> None:
    """2 micro-batches: the formula's bubble is a third of the step; the combined report reads the
    job as 2 stages of 2 micro-batches and prices the bubble (its size on shared CPU cores varies)."""
    # no port chosen here: --nproc starts torchrun --standalone, whose store binds a free one itself
    env = dict(os.environ, PYTHONPATH=str(SRC), OMP_NUM_THREADS="1")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpudoctor",
            "run",
            "--nproc",
            "2",
            "--out",
            str(tmp_path / "runs"),
            "--skip",
            "3",
            "--steps",
            "2",
            "--calibrate",
            "1",
            "--rank-timeout",
            "120",
            str(PROGRAM),
            "--steps",
            "8",
            "--microbatches",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    (run,) = (tmp_path / "runs").iterdir()
    text = (run / "report.json").read_text()
    assert re.search(r'"stages":\s*2', text) and re.search(r'"microbatches":\s*2', text)
    assert re.search(r'"expected_share_of_step":\s*0\.3333', text)


def test_cpu_rank_set_renders_its_ranks_and_findings() -> None:
    """A CPU job's report has no GPU sections, but its ranks table, the pipeline line and the
    multi-rank findings are shown, in the terminal and in the HTML page."""
    from gpudoctor.report.console import render_text
    from gpudoctor.report.html import render_html

    report = _analyze("imbalanced")
    text = render_text(report, width=140)
    assert "No GPU findings" not in text and "ranks (ms per step" in text
    assert "1. [major] stage-imbalance  save ~26.212 ms/step (x1.27)" in text
    assert "2. [major] pipeline-bubble  save ~16.035 ms/step" in text
    html = render_html(report)
    assert "<h2>Ranks</h2>" in html and "pipeline of 2 stages, 4 micro-batches" in html
    assert html.count('<article class="finding') == 2 and "No GPU findings" not in html
