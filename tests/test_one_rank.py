"""One rank of a distributed job read alone (analysis/collectives.py): its collectives are said in
a note with the numbers, and how to get the findings that compare every rank. Read with the
other ranks, the note is not there: the multi-GPU findings say it."""

from __future__ import annotations

import json
from pathlib import Path

from gpudoctor.pipeline import analyze_inputs, analyze_path
from gpudoctor.report.json_report import to_json

DATA = Path(__file__).parent / "data" / "pp2_h200_imbalance"
NOTE = "this trace is one rank of a distributed job"


def test_a_rank_alone_says_what_its_collectives_take() -> None:
    report = analyze_path(DATA / "rank0" / "trace.json.gz")
    assert report.warnings[0] == (
        "this trace is one rank of a distributed job: its collectives take 7.50 ms a step (79% "
        "of it), 7.46 ms of that with no compute beside it (78%); the findings on collectives "
        "(exposed-comm, straggler, slow-collective) compare every rank: pass every rank's trace, "
        "`gpudoctor analyze rank0.json rank1.json ...`"
    )


def test_a_rank_alone_whose_collectives_run_exposed_is_not_called_healthy() -> None:
    """Rank 0 of the pipeline pair: no finding is major, and its collectives run with no compute
    beside them for 78% of its step. The verdict says so instead of "healthy"; a DDP rank whose
    collectives run exposed 3% of its step keeps its findings' verdict."""
    report = analyze_path(DATA / "rank0" / "trace.json.gz")
    verdict = report.verdict()
    assert verdict.status == "collectives" and verdict.top_finding is None
    assert verdict.text == (
        "no finding on this rank is major, but its collectives run with no compute beside them "
        "for 78% of its step: analyze every rank's trace for the findings on them"
    )
    assert json.loads(to_json(report))["exposed_collectives_share"] == 0.7837
    ddp = analyze_path(DATA.parent / "ddp2_h200_sync" / "rank0" / "trace.json.gz")
    assert ddp.verdict().status == "findings"
    assert round(ddp.exposed_collectives_share, 4) == 0.0276


def test_the_ranks_read_together_need_no_such_note() -> None:
    report = analyze_inputs([DATA / "rank0" / "trace.json.gz", DATA / "rank1" / "trace.json.gz"])
    text = to_json(report)
    assert NOTE not in text and "exposed_collectives_share" not in text
    assert json.loads(text)["findings"]


def test_a_single_gpu_trace_has_no_collectives_note() -> None:
    report = analyze_path(Path(__file__).parent / "data" / "healthy_train" / "trace.json.gz")
    assert not any(NOTE in w for w in report.warnings)


def _held_rank(steps: int = 4) -> bytes:
    """A pipeline stage read alone, 9.1 ms steps: the host launches a 1 ms kernel, a receive
    (NCCL, 1 ms on its own stream), then the compute that needs it (four 0.5 ms kernels), and
    waits for the GPU in a synchronize. The receive starts 6 ms into the step (its peer's pace):
    from 1.06 ms to 6 ms the GPU sits idle with it queued, held by nothing the trace shows."""
    from synth import TraceBuilder

    t = TraceBuilder()
    for k in range(steps):
        base = k * 9_100
        t.step(k, base, 9_100)
        t.launch("void gemm_bf16(float*)", base + 50, base + 60, 1_000)
        recv = t.runtime("cudaLaunchKernel", base + 100, 5)
        t.kernel(
            "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
            base + 6_000,
            1_000,
            recv,
            stream=20,
        )
        for i in range(4):
            t.launch("void gemm_bf16(float*)", base + 200 + 50 * i, base + 7_000 + 500 * i, 500)
        t.runtime("cudaDeviceSynchronize", base + 400, 8_605)
    return t.to_bytes()


def test_a_rank_alone_whose_gpu_is_held_behind_a_receive_says_so() -> None:
    """gpu-wait is no host cause: neither a finding nor "healthy" covers it. The note gives its ms
    and share, and with the collectives' exposed time it sets the verdict (11% + 54%). The replay
    cannot tell when the peer sends (the same fix on every rank may move it too), so it misses the
    step and the one finding keeps its formula: the sync's own 0.16 ms, not the GPU's wait."""
    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.trace import parse

    report = analyze_loaded(parse(_held_rank()), gpu="h100-sxm")
    assert report.warnings[0].startswith(
        "this trace is one rank of a distributed job: its collectives take 1.00 ms a step (11% "
        "of it), 1.00 ms of that with no compute beside it (11%), and its GPU sits idle with work "
        "queued, held behind another stream (a receive, a collective's peers), 4.94 ms a step "
        "(54%); "
    )
    verdict = report.verdict()
    assert verdict.status == "collectives"
    assert verdict.text == (
        "no finding on this rank is major, but its collectives run with no compute beside them "
        "for 11% of its step, and its GPU sits idle with work queued behind another stream (a "
        "receive, a collective's peers) for 54%: analyze every rank's trace for the findings on "
        "them"
    )
    out = json.loads(to_json(report))
    assert (out["exposed_collectives_share"], out["held_share"]) == (0.1099, 0.5429)
    sync = report.finding("host-sync")
    assert sync is not None and sync.evidence.numbers["priced_by"] == "formula"
    assert round(sync.saving_ms, 3) == 0.16
    assert [f.id for f in report.findings] == ["host-sync"]
