"""Timing tables -> hypotheses: stragglers and step-time changes (seed 004 scenario 2), the all-reduce
cliff (scenario 6) and the pipeline bubble (scenario 8)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpudoctor.core.layout import bubble_fraction
from gpudoctor.errors import InputError
from gpudoctor.explain import timings
from gpudoctor.explain.allreduce_scaling import FITTED


def ranks_csv(
    ranks: int = 64,
    steps: int = 2000,
    slow: dict[int, float] | None = None,
    change: int = 1000,
    everyone: float = 0.0,
    header: str = "rank,step,step_ms",
) -> str:
    """100 ms steps with a deterministic +-1 ms jitter; ``slow``: rank -> ms from step ``change`` on;
    ``everyone``: ms every rank gains from step ``change``."""
    lines = [header]
    for s in range(steps):
        for r in range(ranks):
            jitter = 0.5 * (
                (r * 7 + s * 13) % 5 - 2
            )  # -1, -0.5, 0, 0.5, 1: median 0 per rank and per step
            ms = (slow or {}).get(r, 100.0) if s >= change else 100.0
            lines.append(f"{r},{s},{ms + jitter + (everyone if s >= change else 0.0)}")
    return "\n".join(lines) + "\n"


def ids(found) -> list[str]:
    return [f.id for f in found]


# -- scenario 2: MFU collapse mid-training ----------------------------------------------------------------


def test_scenario_2_one_rank_slow_after_step_1000():
    found = timings.rank_hypotheses(ranks_csv(slow={37: 210.0}))
    assert ids(found) == ["straggler", "step-time-change"]
    top = found[0]
    assert (top.subject, top.confidence, top.partial) == ("rank 37", 0.9, False)
    n = top.evidence.numbers
    # 63 ranks at 100 ms, rank 37 at 210: MAD = 0, so the spread is the jitter floor, 0.5% of 100 ms
    assert n["robust_z"] == 110 / 0.5 == 220.0
    assert (n["rank_median_step_ms"], n["ranks_median_step_ms"], n["cost_ms_per_step"]) == (
        210.0,
        100.0,
        110.0,
    )
    assert n["cost_pct_of_step"] == 52.4 and n["change_step"] == 1000
    assert (n["rank_before_ms"], n["rank_rise_ms"], n["others_rise_ms"]) == (100.0, 110.0, 0.0)
    assert "costs 110.0 ms every step" in top.summary and "started the drop" in top.summary
    assert "nvidia-smi -q -d PERFORMANCE,CLOCK,ECC,PCIE" in top.check_next[0]
    assert top.fixes[0].title.startswith("Drain the node")
    assert "nothing in the code changed" in top.wrong_fix

    change = found[1]
    c = change.evidence.numbers
    assert (c["change_step"], c["before_ms"], c["after_ms"], c["ratio"]) == (
        1000,
        101.0,
        210.0,
        2.079,
    )
    assert (c["median_rank_before_ms"], c["median_rank_after_ms"], c["slow_rank"]) == (
        100.0,
        100.0,
        37,
    )
    assert change.confidence == pytest.approx(0.85)
    assert "Rank 37 started it" in change.summary
    # hardware first: node health, then data loader, then checkpoint, then fabric
    assert [x.split(":")[0] for x in change.check_next] == [
        "Straggler / node health",
        "Data loader",
        "Checkpoint activity at that time",
        "Network fabric",
    ]
    assert [f.title.split(":")[0] for f in change.fixes] == [
        "Find the degraded node from per-rank timing histograms; drain it and reschedule",
        "Data loader",
        "Checkpoints",
        "Fabric",
    ]
    assert "sharding, recompute" in change.wrong_fix


def test_everyone_slower_ranks_node_health_first_then_the_other_causes():
    found = timings.rank_hypotheses(ranks_csv(ranks=16, steps=400, change=250, everyone=60.0))
    assert ids(found) == [
        "step-time-change",
        "dataloader-stall",
        "network-fabric",
        "checkpoint-stall",
    ]
    top = found[0]
    assert top.evidence.numbers["change_step"] == 250
    assert top.evidence.numbers["ratio"] == pytest.approx(161.0 / 101.0, abs=1e-3)
    assert top.confidence == pytest.approx(0.5 + 0.3 * min(1.0, (161 / 101 - 1.1) / 0.9))
    assert "The median rank slowed too (100.0 -> 160.0 ms)" in top.summary
    assert top.check_next[0].startswith("Straggler / node health")


def test_a_rank_within_the_ranks_spread_is_not_a_straggler():
    lines = ["step , rank , extra, step_ms, time"]  # any column order, whitespace, extra columns
    for s in range(200):
        for r in range(32):
            base = (
                104.0 if r == 5 else 100.0 + (r % 4 - 1.5)
            )  # the others spread over 98.5-101.5 ms
            lines.append(f"{s}, {r}, x, {base}, 2026-11-22T03:{s // 60:02d}:{s % 60:02d}")
    (f,) = timings.rank_hypotheses("\n".join(lines))
    # medians: 8 x 98.5, 7 x 99.5, 8 x 100.5, 8 x 101.5 and 104: median 100.5, MAD 1.0, z = 3.5 / 1.4826 = 2.4
    assert f.id == "step-time-steady"
    assert f.evidence.numbers["median_step_ms"] == 104.0


def test_moderate_straggler_confidence_scales_with_z():
    lines = ["rank,step,step_ms"]
    for s in range(100):
        for r in range(32):
            base = 108.0 if r == 9 else 100.0 + (r % 4 - 1.5)
            lines.append(f"{r},{s},{base}")
    (f,) = timings.rank_hypotheses("\n".join(lines))
    # medians: 8 x 98.5, 7 x 99.5, 8 x 100.5, 8 x 101.5 and 108: median 100.5, MAD 1.0
    z = (108.0 - 100.5) / 1.4826
    assert f.evidence.numbers["robust_z"] == round(z, 1) == 5.1
    assert f.confidence == pytest.approx(0.5 + 0.4 * (z - 3.5) / 16.5)
    assert 0.5 < f.confidence < 0.6


def test_node_of_stragglers_is_one_finding():
    found = timings.rank_hypotheses(
        ranks_csv(ranks=32, steps=300, change=0, slow=dict.fromkeys(range(8, 16), 150.0))
    )
    (f,) = [x for x in found if x.id == "straggler"]
    assert f.subject == "ranks 8-15"
    assert f.evidence.numbers["slow_ranks"] == list(range(8, 16))


def test_periodic_spikes_are_checkpoint_like():
    lines = ["rank,step,step_ms"]
    for s in range(1000):
        for r in range(8):
            lines.append(f"{r},{s},{400.0 if s % 100 == 50 else 100.0 + 0.5 * ((r + s) % 3 - 1)}")
    (f,) = timings.rank_hypotheses("\n".join(lines))
    assert (f.id, f.subject, f.confidence) == ("checkpoint-stall", "every 100 steps", 0.5)
    n = f.evidence.numbers
    assert (n["spikes"], n["period_steps"], n["first_spike_step"]) == (10, 100.0, 50)
    assert n["median_spike_ms"] == pytest.approx(299.5, abs=0.51)


def test_steady_run_and_time_column():
    text = ranks_csv(ranks=4, steps=100, header="timestamp,rank,step,step_ms,loss")
    text = "\n".join(
        [text.splitlines()[0]]
        + [f"t{i}," + line + ",2.3" for i, line in enumerate(text.splitlines()[1:])]
    )
    (f,) = timings.rank_hypotheses(text)
    assert (f.id, f.severity) == ("step-time-steady", "info")
    assert f.evidence.numbers == {"ranks": 4, "steps": 100, "median_step_ms": 101.0}


def test_missing_cells_make_it_partial():
    text = ranks_csv(ranks=16, steps=300, slow={3: 180.0}, change=150)
    lines = text.splitlines()
    lines[5] = "4,0,"  # an empty step_ms
    lines[6] = "5,0,nan"
    found = timings.rank_hypotheses("\n".join(lines))
    assert found[0].id == "straggler" and found[0].partial
    assert (
        "Partial data: 2 row(s) with empty or NaN cells dropped, 2 of 4800 (rank, step) values missing."
        in found[0].summary
    )
    assert found[0].confidence == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty rank timings"),
        ("rank,step\n0,1\n", "no 'step_ms' column"),
        ("rank,step,step_ms\n0,1,abc\n1,1,2\n", "line 2: step_ms 'abc' is not a number"),
        ("rank,step,step_ms\n0,1,10\n0,2,11\n", "only rank 0"),
        ("rank,step,step_ms\n", "no data rows"),
        ("rank,step,step_ms\n0,1,-3\n1,1,3\n", "step_ms must be between 1e-06 and 1e+09"),
        ("rank,step,step_ms\n0.5,1,3\n1,1,3\n", "whole numbers"),
        ("rank,step,step_ms\n0,1,3\n1,2,3\n2,3,3\n", "every rank to report the same steps"),
    ],
)
def test_bad_rank_tables(text, needle):
    with pytest.raises(InputError) as err:
        timings.rank_hypotheses(text)
    assert needle in str(err.value) and "\n" not in str(err.value)


# -- scenario 6: all-reduce latency cliff ---------------------------------------------------------------


SEED_6 = "gpus,allreduce_ms\n64,45\n128,52\n256,61\n512,340\n"


def test_scenario_6_cliff_at_512():
    (f,) = timings.collective_hypotheses(SEED_6)
    assert (f.id, f.subject) == ("topology-cliff", "all-reduce at 512 GPUs")
    n = f.evidence.numbers
    # a + b x 2(N-1)/N with a, b >= 0 on 64-256: a < 0 unconstrained, so a = 0, b = sum(f t) / sum(f^2)
    fx = np.array([2 * 63 / 64, 2 * 127 / 128, 2 * 255 / 256])
    b = float(fx @ [45, 52, 61] / (fx @ fx))
    assert n["expected_ms"] == round(b * 2 * 511 / 512, 3) == 53.077
    assert (n["cliff_gpus"], n["measured_ms"], n["ratio"], n["fitted_on_gpus"]) == (
        512,
        340.0,
        6.41,
        [64, 128, 256],
    )
    assert (n["expected_with_hop_latency_ms"], n["ratio_with_hop_latency"]) == (81.651, 4.16)
    assert f.confidence == pytest.approx(0.85)
    assert "pod / rack / spine" in f.summary and "NVLink/NVSwitch to InfiniBand" in f.summary
    assert "latency x hops does not explain it" in f.summary
    titles = [x.title for x in f.fixes]
    assert titles[0].startswith("Tree or hierarchical all-reduce")
    assert "double binary tree" in titles[1] and "NCCL_ALGO=Tree" in f.fixes[1].code
    assert titles[2].startswith("Overlap the all-reduce with the backward pass")
    assert "gradient accumulation" in titles[3]
    assert "ZeRO / FSDP" in f.wrong_fix
    assert any("all_reduce_perf" in c for c in f.check_next)


def test_no_hardware_named_uses_the_fitted_ring_and_says_so():
    (f,) = timings.collective_hypotheses(SEED_6)
    assert f.evidence.numbers["expected_from"] == FITTED
    assert (
        "Expected curve: the ring model fitted on this table (no gpu, fabric or gpus_per_node given)."
        in f.summary
    )
    assert "model_ms" not in f.evidence.numbers


# -- all-reduce against plan.collective_cost' model of the machine ------------------------------------------

GIB = 2**30
NVLINK4 = 450e9 * 0.80  # H100 SXM datasheet NVLink 900 GB/s both ways x plan's NVLINK_EFFICIENCY
HDR = 25e9 * 0.85  # ConnectX-6 HDR 200 Gb/s per GPU x plan's IB_EFFICIENCY


def ring_ms(n: int, s: float = GIB) -> float:
    """plan.collective_cost' ring all-reduce inside one node: t0 + 2(N-1)/N S/B + 2(N-1) alpha_NVLink."""
    return 1e3 * (8.4e-6 + 2 * (n - 1) / n * s / NVLINK4 + 2 * (n - 1) * 3.4e-6)


# hierarchical on two 8-GPU nodes: NVLink reduce-scatter + all-gather (2 x (7/8 S/B + 7 alpha)), then an
# all-reduce of S/8 over one HDR rail per GPU across the 2 nodes (2 x 1/2 x S/8 / B_rail + 2 x 14 us)
HIER16_MS = 1e3 * (8.4e-6 + 2 * (7 / 8 * GIB / NVLINK4 + 7 * 3.4e-6) + GIB / 8 / HDR + 2 * 14e-6)


def machine_table(points: dict[int, float]) -> str:
    return "gpus,allreduce_ms,bytes,gpu,fabric,gpus_per_node\n" + "".join(
        f"{n},{ms},{GIB},h100-sxm,ib-hdr,8\n" for n, ms in points.items()
    )


def test_the_jump_at_the_node_boundary_is_what_the_hierarchical_model_predicts():
    # measured ~1.1x the model everywhere: 2.2x from 8 to 16 GPUs is NVLink -> HDR, expected
    (f,) = timings.collective_hypotheses(machine_table({2: 3.3, 4: 4.95, 8: 5.8, 16: 12.8}))
    assert (f.id, f.severity, f.subject) == ("collective-scaling-ok", "info", "all-reduce")
    n = f.evidence.numbers
    assert n["model_ms"] == [
        round(ring_ms(2), 3),
        round(ring_ms(4), 3),
        round(ring_ms(8), 3),
        round(HIER16_MS, 3),
    ]
    assert n["model_ms"] == [2.998, 4.503, 5.276, 11.62]
    assert n["model_algorithm"] == ["ring", "ring", "ring", "hierarchical"]
    assert n["measured_over_model"] == [
        round(3.3 / ring_ms(2), 3),
        1.099,
        1.099,
        round(12.8 / HIER16_MS, 3),
    ]
    assert (
        (
            n["node_boundary_gpus"],
            n["model_jump_at_node_boundary"],
            n["measured_jump_at_node_boundary"],
        )
        == (16, round(HIER16_MS / ring_ms(8), 3), round(12.8 / 5.8, 3))
        == (16, 2.203, 2.207)
    )
    assert (n["gpu"], n["fabric"], n["gpus_per_node"], n["message_bytes"], n["assumed"]) == (
        "h100-sxm",
        "ib-hdr",
        8,
        GIB,
        [],
    )
    assert n["expected_from"].startswith(
        "plan.collective_cost: NVIDIA H100 SXM5 80GB, NVLink 4 (H100/H200) x 0.80 "
        "inside 8-GPU nodes, InfiniBand HDR 200 Gb/s per GPU x 0.85 across; "
        "1 GiB per rank"
    )
    assert (
        "Crossing the node boundary (8 -> 16 GPUs) the model predicts 2.20x (hierarchical onto the fabric) and "
        "the measurement rose 2.21x: expected behaviour, not a fault."
    ) in f.summary
    assert (
        "Measured vs model per GPU count (ms): 2: 3.3 vs 3; 4: 4.95 vs 4.5; 8: 5.8 vs 5.28; 16: 12.8 vs 11.6."
        in f.summary
    )
    # without the machine, the fitted ring calls the same 16 a cliff
    (fitted,) = timings.collective_hypotheses("gpus,allreduce_ms\n2,3.3\n4,4.95\n8,5.8\n16,12.8\n")
    assert (fitted.id, fitted.evidence.numbers["cliff_gpus"]) == ("topology-cliff", 16)


def test_a_jump_inside_a_node_is_the_finding():
    (f,) = timings.collective_hypotheses(machine_table({2: 3.3, 4: 13.5, 8: 15.8, 16: 34.9}))
    assert (f.id, f.subject, f.title) == (
        "topology-cliff",
        "all-reduce at 4 GPUs",
        "All-reduce falls off a cliff at 4 GPUs (inside a node)",
    )
    n = f.evidence.numbers
    base = 3.3 / ring_ms(2)  # measured / model at 2 GPUs scales the curve
    assert (n["cliff_gpus"], n["where"], n["scaled_on_gpus"]) == (4, "inside a node", [2])
    assert n["measured_over_model_before"] == round(base, 3) == 1.101
    assert n["expected_ms"] == round(ring_ms(4) * base, 3) == 4.957
    assert n["ratio"] == round(13.5 / (ring_ms(4) * base), 2) == 2.72
    assert (
        (n["model_jump"], n["measured_jump"])
        == (round(ring_ms(4) / ring_ms(2), 3), round(13.5 / 3.3, 3))
        == (1.502, 4.091)
    )
    assert f.confidence == pytest.approx(0.3 + 0.55 * (13.5 / (ring_ms(4) * base) - 1.5) / 2.5)
    assert "From 2 to 4 GPUs the model predicts 1.50x and the measurement rose 4.09x" in f.summary
    assert "Inside one 8-GPU node" in f.summary and "nvidia-smi topo -m" in f.summary
    assert (
        f.fixes[0].title.startswith("Find the slow pair") and "nvlink --status" in f.fixes[0].code
    )
    assert "NCCL_ALGO" in f.wrong_fix
    assert "node_boundary_gpus" not in n  # after the cliff: not judged


def test_a_size_not_given_is_inferred_and_the_unpredicted_boundary_jump_is_a_cliff():
    # gpus_per_node alone names the machine: H100 SXM and NDR assumed; the size is the one at which the
    # 8-GPU ring takes the measured 5.3 ms: (5.3 ms - 8.4 us - 14 x 3.4 us) x 360 GB/s / 1.75
    (f,) = timings.collective_hypotheses(
        "gpus,allreduce_ms,gpus_per_node\n8,5.3,8\n16,30,8\n32,32,8\n"
    )
    n = f.evidence.numbers
    size = (5.3e-3 - 8.4e-6 - 14 * 3.4e-6) * NVLINK4 / 1.75
    assert (
        n["message_bytes"] == pytest.approx(size, rel=1e-6) and n["message_bytes_inferred"] is True
    )
    assert n["assumed"] == ["gpu not given: assumed h100-sxm", "fabric not given: assumed ib-ndr"]
    # 16 GPUs, ring across 2 nodes: B = min(NVLink, 8 rails x NDR 42.5 GB/s) = 340 GB/s; 2 of the 30 steps cross
    ring16 = 1e3 * (8.4e-6 + 2 * 15 / 16 * size / 340e9 + 28 * 3.4e-6 + 2 * 14e-6)
    assert n["model_ms"][1] == round(ring16, 3) == 6.081 and n["model_algorithm"] == [
        "ring",
        "ring",
        "ring",
    ]
    assert (f.id, n["cliff_gpus"], n["where"], n["ratio"]) == (
        "topology-cliff",
        16,
        "at the node boundary",
        4.93,
    )
    assert "the model predicts 1.15x and the measurement rose 5.66x" in f.summary
    assert (
        "(inferred: the size at which the model gives the measured 5.3 ms at 8 GPUs)" in f.summary
    )
    assert f.fixes[0].title.startswith("Tree or hierarchical") and "ZeRO" in f.wrong_fix


def test_a_cliff_beyond_the_node_boundary_after_the_expected_one():
    # ib-hdr: the 8 -> 16 jump is expected; 32 -> 64 (both multi-node) is a topology boundary the model lacks
    model = {2: ring_ms(2), 8: ring_ms(8), 16: HIER16_MS}
    points = {n: round(1.1 * ms, 3) for n, ms in model.items()}
    table = (
        machine_table(points).rstrip("\n")
        + f"\n32,14,{GIB},h100-sxm,ib-hdr,8\n64,60,{GIB},h100-sxm,ib-hdr,8\n"
    )
    (f,) = timings.collective_hypotheses(table)
    n = f.evidence.numbers
    assert (f.id, n["cliff_gpus"], n["where"]) == ("topology-cliff", 64, "beyond the node boundary")
    assert n["node_boundary_gpus"] == 16 and "expected behaviour, not a fault" in f.summary
    assert "pod / rack / spine" in f.summary


def test_the_algo_column_picks_the_model_algorithm():
    text = "algo,gpus,allreduce_ms,bytes,gpus_per_node,fabric\n" + "".join(
        f"ring,{n},{ms},{GIB},8,ib-hdr\n" for n, ms in ((8, 5.8), (16, 13.9))
    )
    (f,) = timings.collective_hypotheses(text)
    n = f.evidence.numbers
    # a ring across 2 nodes of 8 HDR rails: B = min(360, 8 x 21.25 = 170 GB/s)
    ring16 = 1e3 * (8.4e-6 + 2 * 15 / 16 * GIB / 170e9 + 28 * 3.4e-6 + 2 * 14e-6)
    assert n["model_algorithm"] == ["ring", "ring"] and n["model_ms"] == [
        round(ring_ms(8), 3),
        round(ring16, 3),
    ]
    assert (f.id, f.subject) == ("collective-scaling-ok", "all-reduce (ring)")


def test_a_scenario_names_the_machine(tmp_path):
    import json

    from gpudoctor.explain import explain_paths

    path = tmp_path / "ar.json"
    path.write_text(
        json.dumps(
            {
                "scenario": "allreduce-scaling",
                "gpu": "h100-sxm",
                "fabric": "ib-hdr",
                "gpus_per_node": 8,
                "bytes": GIB,
                "points": [
                    {"gpus": n, "allreduce_ms": ms}
                    for n, ms in ((2, 3.3), (4, 13.5), (8, 15.8), (16, 34.9))
                ],
            }
        )
    )
    h = explain_paths([path]).hypotheses[0][1]
    assert (h.id, h.evidence.numbers["cliff_gpus"], h.evidence.numbers["expected_ms"]) == (
        "topology-cliff",
        4,
        4.957,
    )


@pytest.mark.parametrize(
    ("text", "kwargs", "needle"),
    [
        (
            "gpus,allreduce_ms,gpus_per_node\n8,5,8\n12,9,8\n",
            {},
            "line 3: 12 GPUs is not a whole number of 8-GPU nodes: the rows should be 8 or 16 GPUs",
        ),
        ("gpus,allreduce_ms,gpu\n8,5,h100-sxm\n16,9,a100-sxm-80gb\n", {}, "one gpu per table"),
        ("gpus,allreduce_ms,gpu\n8,5,tpu-v9\n16,9,tpu-v9\n", {}, "unknown GPU 'tpu-v9'"),
        (
            "gpus,allreduce_ms\n8,5\n16,9\n",
            {"fabric": "carrier-pigeon"},
            "unknown fabric 'carrier-pigeon'",
        ),
        (
            "gpus,allreduce_ms,gpus_per_node\n8,5,x\n16,9,x\n",
            {},
            "gpus_per_node 'x': expected a number",
        ),
        (
            "gpus,allreduce_ms\n8,5\n16,9\n",
            {"gpus_per_node": 0},
            "gpus_per_node 0: expected a whole number",
        ),
        (
            "gpus,allreduce_ms\n8,5\n16,9\n",
            {"gpu": "h100-sxm", "nbytes": "lots"},
            "bytes 'lots': expected the message",
        ),
        ("gpus,allreduce_ms,gpu\n8,5,h100-sxm\n", {}, "the interconnect model needs at least 2"),
    ],
)
def test_bad_machine_tables(text, kwargs, needle):
    with pytest.raises(InputError) as err:
        timings.collective_hypotheses(text, **kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_bus_bandwidth_from_bytes_and_repeats():
    text = (
        "algo, gpus, bytes, allreduce_ms\nring, 64, 1e9, 45\nring, 64, 1e9, 47\nring, 128, 1e9, 52\n"
        "ring, 256, 1e9, 61\nring, 512, 1e9, 340\n"
    )
    (f,) = timings.collective_hypotheses(text)
    assert f.subject == "all-reduce (ring) at 512 GPUs"
    bw = f.evidence.numbers["bus_bandwidth_gbps"]
    # busbw = S x 2(N-1)/N / t: 1 GB x 1.969 / 46 ms at 64 (median of 45 and 47)
    assert bw == [
        round(1e9 * 2 * 63 / 64 / 0.046 / 1e9, 2),
        round(1e9 * 2 * 127 / 128 / 0.052 / 1e9, 2),
        round(1e9 * 2 * 255 / 256 / 0.061 / 1e9, 2),
        round(1e9 * 2 * 511 / 512 / 0.340 / 1e9, 2),
    ]
    assert bw[-1] == 5.87
    assert "Bus bandwidth falls from 32.7 GB/s at 256 GPUs to 5.9 GB/s at 512" in f.summary


def test_smooth_scaling_is_ok():
    (f,) = timings.collective_hypotheses("gpus,allreduce_ms\n8,30\n16,31\n32,32\n64,33\n")
    assert (f.id, f.severity) == ("collective-scaling-ok", "info")


def test_latency_growth_lowers_the_cliff_confidence():
    # t grows with the hop count 2(N-1) all along: the last point is far from the flat ring model,
    # but the hop-latency fit expects it
    text = "gpus,allreduce_ms\n" + "".join(
        f"{n},{10 + 0.2 * 2 * (n - 1)}\n" for n in (8, 16, 32, 64, 128)
    )
    (f,) = timings.collective_hypotheses(text)
    assert (f.id, f.subject) == ("ring-latency-growth", "all-reduce at 64 GPUs")
    n = f.evidence.numbers
    assert (n["cliff_gpus"], n["ratio_with_hop_latency"], n["expected_with_hop_latency_ms"]) == (
        64,
        1.0,
        35.2,
    )
    assert f.confidence == pytest.approx(
        0.3 + 0.55 * (n["measured_ms"] / n["expected_ms"] - 1.5) / 2.5, abs=1e-4
    )
    assert "latency x hops explains much of it" in f.summary
    assert f.fixes[0].title.startswith("Tree or hierarchical")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gpus,allreduce_ms\n64,45\n128,52\n", "needs at least 3"),
        ("gpus,foo\n64,45\n128,52\n256,3\n", "no all-reduce time column"),
        ("nodes,allreduce_ms\n64,45\n", "no 'gpus' column"),
        ("gpus,allreduce_ms\n64,x\n128,52\n256,3\n", "line 2: allreduce_ms 'x' is not a number"),
        ("gpus,allreduce_ms\n1,4\n128,52\n256,3\n", "whole number >= 2"),
        ("  \n", "empty collective timings"),
    ],
)
def test_bad_collective_tables(text, needle):
    with pytest.raises(InputError) as err:
        timings.collective_hypotheses(text)
    assert needle in str(err.value) and "\n" not in str(err.value)


# -- scenario 8: pipeline bubble ------------------------------------------------------------------------


def test_scenario_8_imbalance_first_with_the_seed_fix_order():
    found = timings.pipeline_hypotheses(
        pp=8, microbatches=32, measured_bubble=0.41, virtual_stages=2
    )
    assert ids(found) == [
        "pipeline-imbalance",
        "recompute-imbalance",
        "pipeline-p2p-overhead",
        "virtual-stages",
    ]
    top = found[0]
    n = top.evidence.numbers
    assert (n["expected_1f1b"], n["expected_interleaved"], n["expected"]) == (
        0.2188,
        0.1094,
        0.1094,
    )
    assert n["excess_points"] == 30.1 and top.confidence == 0.7
    assert "7/32 = 21.9%" in top.summary and "7/64 = 10.9%" in top.summary
    assert [x.title.split(":")[0].split(" (")[0] for x in top.fixes] == [
        "Rebalance the partition",
        "Tune the virtual stages",
        "More micro-batches",
        "A zero-bubble schedule",
    ]
    assert "m=64 gives (pp-1)/(m v) = 5.5%" in top.fixes[2].title
    assert "face value" in top.wrong_fix


def test_stage_times_quantify_the_imbalance():
    found = timings.pipeline_hypotheses(
        8, 32, 41, 2, stage_ms=[13, 10, 10, 10, 10, 10, 10, 13], recompute="none"
    )
    top = found[0]
    n = top.evidence.numbers
    pred = (32 + 7 / 2) * 13 / (32 * 10.75) - 1  # the slowest stage sets the pace
    assert n["predicted_bubble_with_imbalance"] == round(pred, 4) == 0.3416
    assert n["share_of_excess_explained"] == round((pred - 7 / 64) / (0.41 - 7 / 64), 3)
    assert top.confidence == pytest.approx(0.2 + 0.7 * (pred - 7 / 64) / (0.41 - 7 / 64))
    assert (n["slowest_stage"], n["imbalance"]) == (0, 1.209)
    assert ids(found)[-1] == "recompute-imbalance" and found[-1].confidence == 0.05


def test_p2p_cost_can_make_interleaving_worse():
    found = timings.pipeline_hypotheses(
        8, 8, 0.6, virtual_stages=4, stage_ms=[10.0] * 8, p2p_ms=1.0
    )
    vs = next(f for f in found if f.id == "virtual-stages")
    # v=4: (8 + 7/4) x (10 + 8) / (8 x 10) - 1 = 1.194; v=1: (8 + 7) x 12 / 80 - 1 = 1.25 -> not worse
    assert vs.evidence.numbers["predicted_bubble_v"] == round((8 + 7 / 4) * 18 / 80 - 1, 4)
    assert vs.evidence.numbers["predicted_bubble_v1"] == round(15 * 12 / 80 - 1, 4)
    assert vs.confidence == 0.2
    worse = timings.pipeline_hypotheses(
        8, 32, 0.6, virtual_stages=4, stage_ms=[10.0] * 8, p2p_ms=1.0
    )
    vs = next(f for f in worse if f.id == "virtual-stages")
    assert vs.confidence == 0.6 and "interleaving costs more than it saves" in vs.summary
    p2p = next(f for f in worse if f.id == "pipeline-p2p-overhead")
    assert p2p.evidence.numbers["p2p_share_of_stage"] == 0.8


def test_bubble_as_expected_and_partial_stage_times():
    (ok,) = timings.pipeline_hypotheses(4, 16, 0.2)
    assert (ok.id, ok.severity) == ("pipeline-bubble-ok", "info")
    found = timings.pipeline_hypotheses(4, 16, 0.5, stage_ms=[12, None, 10, 14])
    assert all(f.partial for f in found) and "1 of 4 stage times missing" in found[0].summary


def test_the_formulas_are_plan_trains():
    (ok,) = timings.pipeline_hypotheses(4, 16, 0.2)
    n = ok.evidence.numbers
    assert (
        (n["schedule"], n["expected"])
        == ("1f1b", round(bubble_fraction(4, 16, "1f1b"), 4))
        == ("1f1b", 0.1875)
    )
    assert n["expected_zb_h1"] == round(bubble_fraction(4, 16, "zb-h1"), 4) == 0.0625  # 3/48
    found = timings.pipeline_hypotheses(8, 32, 0.41, 2, schedule="interleaved-1f1b")
    assert (
        found[0].evidence.numbers["expected"]
        == round(bubble_fraction(8, 32, "interleaved", 2), 4)
        == 0.1094
    )
    assert "ZB-H1 leaves about (pp-1)/(3m) = 7.3%" in found[0].fixes[3].title  # 7/96


def test_zb_h1_is_measured_against_a_third_of_1f1b():
    found = timings.pipeline_hypotheses(
        8, 32, 0.3, stage_ms=[13, 10, 10, 10, 10, 10, 10, 13], schedule="zb-h1"
    )
    assert ids(found) == [
        "pipeline-imbalance",
        "recompute-imbalance",
        "pipeline-p2p-overhead",
    ]  # no virtual stages
    n = found[0].evidence.numbers
    assert (n["schedule"], n["expected"], n["excess_points"]) == ("zb-h1", 0.0729, 22.7)
    pred = (
        1 + 7 / 96
    ) * 13 / 10.75 - 1  # the slowest stage paces a schedule (1 + 7/96) x m slots long
    assert n["predicted_bubble_with_imbalance"] == round(pred, 4) == 0.2975
    assert "ZB-H1: about (pp-1)/(3m) = 7/96 = 7.3%" in found[0].summary


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"schedule": "gpipe"}, "schedule 'gpipe': expected one of 1f1b, interleaved, zb-h1"),
        (
            {"schedule": "1f1b", "virtual_stages": 2},
            "only the interleaved schedule has virtual stages",
        ),
    ],
)
def test_bad_schedules(kwargs, needle):
    with pytest.raises(InputError) as err:
        timings.pipeline_hypotheses(8, 32, 0.4, **kwargs)
    assert needle in str(err.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pp": 1, "microbatches": 8, "measured_bubble": 0.3},
        {"pp": 4, "microbatches": 0, "measured_bubble": 0.3},
        {"pp": 4, "microbatches": 8, "measured_bubble": 140},
        {"pp": 4, "microbatches": 8, "measured_bubble": "lots"},
        {"pp": True, "microbatches": 8, "measured_bubble": 0.3},
        {"pp": 4, "microbatches": 8, "measured_bubble": 0.3, "stage_ms": [1, 2]},
        {"pp": 4, "microbatches": 8, "measured_bubble": 0.3, "p2p_ms": -1},
        {"pp": 4.5, "microbatches": 8, "measured_bubble": 0.3},
    ],
)
def test_bad_pipeline_config(kwargs):
    with pytest.raises(InputError) as err:
        timings.pipeline_hypotheses(**kwargs)
    assert "\n" not in str(err.value)


# -- fuzz -----------------------------------------------------------------------------------------------

_CELLS = st.one_of(
    st.integers(-3, 40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["", " ", "nan", "1e400", "x", "0", "-0", "1_0", "0x10", '"3"']),
)
_ROWS = st.lists(st.lists(_CELLS, min_size=0, max_size=5).map(",".join), max_size=60)


def _tables(head: str):
    return st.one_of(st.text(max_size=300), _ROWS.map(lambda rows: "\n".join([head, *rows])))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tables("rank,step,step_ms,time"))
def test_random_rank_tables_parse_or_raise_input_error(text):
    try:
        found = timings.rank_hypotheses(text)
    except InputError:
        return
    assert found and all(0 <= (f.confidence or 0) <= 1 for f in found)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tables("gpus,allreduce_ms,bytes,algo"))
def test_random_collective_tables_parse_or_raise_input_error(text):
    try:
        found = timings.collective_hypotheses(text)
    except InputError:
        return
    assert found and all(0 <= (f.confidence or 0) <= 1 for f in found)


_MACHINE_ROWS = st.lists(
    st.tuples(
        st.sampled_from([2, 3, 4, 8, 16, 24, 32, 64, 512]),
        st.floats(1e-6, 1e9, allow_nan=False),
        st.sampled_from(["", "1", "4096", "1e12"]),
    ),
    max_size=8,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _MACHINE_ROWS,
    st.sampled_from(["h100-sxm", "a100-pcie-80gb", "h200"]),
    st.sampled_from(["ib-hdr", "roce", ""]),
    st.sampled_from(["1", "2", "8", ""]),
)
def test_random_machine_tables_parse_or_raise_input_error(rows, gpu, fabric, per_node):
    text = "gpus,allreduce_ms,bytes,gpu,fabric,gpus_per_node\n" + "".join(
        f"{n},{ms!r},{size},{gpu},{fabric},{per_node}\n" for n, ms, size in rows
    )
    try:
        found = timings.collective_hypotheses(text)
    except InputError:
        return
    assert found and all(0 <= (f.confidence or 0) <= 1 for f in found)


_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 200),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.lists(st.one_of(st.none(), st.floats(-1, 100)), max_size=17),
)


@settings(max_examples=200, deadline=None)
@given(_ANY, _ANY, _ANY, _ANY, _ANY, _ANY, _ANY)
def test_random_pipeline_configs_raise_only_input_error(pp, m, bubble, v, stage_ms, p2p, recompute):
    try:
        found = timings.pipeline_hypotheses(
            pp, m, bubble, v, stage_ms=stage_ms, p2p_ms=p2p, recompute=recompute
        )
    except InputError as exc:
        assert str(exc) and "\n" not in str(exc), str(exc)  # one line, as the CLI prints it
        return
    _check_pipeline(found, pp, m, bubble, v)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(2, 64),
    st.integers(1, 256),
    st.floats(0, 0.99),
    st.integers(1, 4),
    st.one_of(st.none(), st.floats(0.1, 100)),
    st.one_of(st.none(), st.lists(st.floats(0.1, 100), min_size=64, max_size=64)),
)
# 1F1B, pp 4, m 16: (pp-1)/m = 0.1875; 1.25 points over it is as predicted, 4 points over is not
@example(4, 16, 0.2, 1, None, None)
@example(4, 16, 0.2275, 1, None, None)
@example(4, 16, 0.2275, 1, 0.5, [10.0] * 64)
def test_random_valid_pipeline_configs_follow_the_formula(pp, m, bubble, v, p2p, stages):
    """The same contract on configurations that are all accepted (the fuzz above rarely draws one);
    ``stages``: the first pp are the per-stage times."""
    stage_ms = None if stages is None else stages[:pp]
    found = timings.pipeline_hypotheses(pp, m, bubble, v, stage_ms=stage_ms, p2p_ms=p2p)
    _check_pipeline(found, pp, m, bubble, v)


def _check_pipeline(found, pp, m, bubble, v) -> None:  # type: ignore[no-untyped-def]
    assert found and all(0 <= (f.confidence or 0) <= 1 for f in found)
    n = found[0].evidence.numbers
    # the inputs as read (a fraction, or a percent over 1), priced by core.layout's formula
    assert (n["pp"], n["microbatches"], n["virtual_stages"]) == (float(pp), float(m), float(v))
    assert n["schedule"] == ("interleaved" if n["virtual_stages"] > 1 else "1f1b")
    measured = float(bubble) / 100 if float(bubble) > 1 else float(bubble)
    expected = bubble_fraction(n["pp"], n["microbatches"], n["schedule"], n["virtual_stages"])
    assert n["measured_bubble"] == round(measured, 4) and n["expected"] == round(expected, 4)
    assert n["excess_points"] == round(100 * (measured - expected), 1)
    # within 3 points of the formula: the one "as predicted" note, else the causes (never that note)
    ids = [f.id for f in found]
    if measured - expected <= 0.03:
        assert ids == ["pipeline-bubble-ok"] and found[0].severity == "info"
    else:
        assert "pipeline-bubble-ok" not in ids
        assert [f.confidence for f in found] == sorted((f.confidence for f in found), reverse=True)
