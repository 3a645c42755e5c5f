"""Clock offsets from send/recv (ranks/p2p_clock.py, ranks/align.py ``estimate``): on the recorded
CPU pipelines (tests/data/pp_gloo, gloo, one host: the ranks' true offset is 0) with offsets
planted by moving every timestamp of a rank's trace, and on hand-built messages whose true times
are known."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from ranksynth import offset_run

from gpudoctor.ranks.align import estimate, match
from gpudoctor.ranks.combine import combine
from gpudoctor.ranks.p2p_clock import pair_bounds, reach
from gpudoctor.ranks.sections import RankClock
from gpudoctor.ranks.summary import Collective, RankSummary, Transfer

DATA = Path(__file__).parent / "data" / "pp_gloo"


def _analyze(path: Path):  # type: ignore[no-untyped-def]
    from gpudoctor.pipeline import analyze_ranks

    return analyze_ranks([path], jobs=1)


def _clock(report) -> list[tuple[float, str, float | None]]:  # type: ignore[no-untyped-def]
    return [(r.clock_offset_us, r.clock.method, r.clock.uncertainty_us) for r in report.ranks]


def _findings(report) -> list[tuple[str, float, dict]]:  # type: ignore[no-untyped-def]
    return [(f.id, f.saving_ms, f.evidence.numbers) for f in report.findings]


def test_two_stages_recorded_offset_zero_within_the_bounds() -> None:
    """Without a planted offset the two-way bounds of rank 1 against rank 0 are -175.98..200.30 us
    (gloo on loopback, 2 shared cores: the tightest message still took ~190 us to be picked up);
    their midpoint 12.16 us, the true 0 inside."""
    report = _analyze(DATA / "balanced")
    assert _clock(report) == [(0.0, "reference", 0.0), (12.157, "p2p", 188.139)]
    assert report.ranks[1].clock.bound_us == (-175.982, 200.296)
    assert any("clocks are aligned on send/recv only" in w for w in report.warnings)
    from gpudoctor.report.html import render_html

    assert "<td>12.2 &plusmn; 188.1</td><td>p2p</td>" in render_html(report)


def test_planted_offset_on_two_stages_recovered_and_findings_unchanged(tmp_path: Path) -> None:
    """Rank 1's clock 5 ms ahead: recovered as 5012.157 +- 188.139 us (the recording's 12.157 plus
    the plant, within the stated uncertainty); the stages' waits are durations on their own clocks,
    so stage-imbalance and pipeline-bubble come out the same to the last digit."""
    base = _analyze(DATA / "balanced")
    planted = _analyze(offset_run(DATA / "balanced", tmp_path / "run", {1: 5000.0}))
    (off0, m0, _), (off1, m1, u1) = _clock(planted)
    assert (off0, m0, m1) == (0.0, "reference", "p2p")
    assert off1 == pytest.approx(5012.157, abs=2e-3) and u1 == pytest.approx(188.139, abs=2e-3)
    assert abs(off1 - 5000.0) <= u1
    # ranked by saving: the bubble's 8.25 ms before the stage imbalance's 3.48 (by the schedule)
    assert [f[0] for f in _findings(planted)] == ["pipeline-bubble", "stage-imbalance"]
    assert _findings(planted) == _findings(base)


def test_four_stage_chain_offsets_on_ranks_2_and_3(tmp_path: Path) -> None:
    """4 stages talk only to their neighbours: rank 2 is placed through 0-1-2, rank 3 through
    0-1-2-3, each pair's interval added along the chain (so the uncertainty grows along it).
    Planted +3 ms on rank 2 and -7 ms on rank 3: recovered 2582.02 +- 779.80 and -7412.86 +- 977.33
    us, each within its uncertainty; the bubble finding unchanged."""
    base = _analyze(DATA / "four_1f1b")
    assert _clock(base) == [
        (0.0, "reference", 0.0),
        (14.47, "p2p", 191.504),
        (-417.977, "p2p-chain", 779.797),
        (-412.858, "p2p-chain", 977.331),
    ]
    planted = _analyze(offset_run(DATA / "four_1f1b", tmp_path / "run", {2: 3000.0, 3: -7000.0}))
    got = _clock(planted)
    assert [m for _, m, _ in got] == ["reference", "p2p", "p2p-chain", "p2p-chain"]
    assert np.array([o for o, _, _ in got]) == pytest.approx(
        [0.0, 14.47, 2582.023, -7412.858], abs=2e-3
    )
    assert np.array([u for _, _, u in got]) == pytest.approx(
        [0.0, 191.504, 779.797, 977.331], abs=2e-3
    )
    for (off, _, unc), true in zip(got, (0.0, 0.0, 3000.0, -7000.0)):
        assert abs(off - true) <= unc
    assert [f[0] for f in _findings(planted)] == ["pipeline-bubble"]
    assert _findings(planted) == _findings(base)


def test_recorded_transfers_name_their_peer_and_size() -> None:
    """Each stage's c10d send/recv carry the peer (Concrete Inputs) and the [128, 512] activation;
    per step rank 0 sends 4 activations to rank 1 and receives 4 gradients from it."""
    from gpudoctor.pipeline import _summarize_rank
    from gpudoctor.ranks.sources import rank_sources

    s0, s1 = (_summarize_rank(src, None, None)[0] for src in rank_sources([DATA / "balanced"]))
    inside = [t for t in s0.transfers if t.step == 0]
    assert [(t.kind, t.peer, t.nelems) for t in inside] == [("send", 1, 65536)] * 4 + [
        ("recv", 1, 65536)
    ] * 4
    assert {t.peer for t in s1.transfers} == {0}
    assert pair_bounds([s0, s1])[(0, 1)].messages == 24  # 3 steps x (4 activations + 4 gradients)


def test_recorded_forward_only_is_one_sided() -> None:
    """The balanced recording with the gradients (rank 1 -> rank 0) dropped, as in a forward-only
    pipeline: only the upper bound, 200.296 us, is left; the offset stays 0 (it allows 0) and the
    combined report says the bound is one-sided."""
    import dataclasses

    from gpudoctor.pipeline import _summarize_rank
    from gpudoctor.ranks.sources import rank_sources

    s0, s1 = (_summarize_rank(src, None, None)[0] for src in rank_sources([DATA / "balanced"]))
    s1 = dataclasses.replace(s1, transfers=tuple(t for t in s1.transfers if t.kind == "recv"))
    result = combine([s0, s1])
    row = result.rows[1]
    assert (row.clock_offset_us, row.clock.method, row.clock.uncertainty_us) == (
        0.0,
        "p2p-one-sided",
        None,
    )
    assert row.clock.bound_us == (None, 200.296)
    assert (
        "rank 1: send/recv on its path from rank 0 (0 - 1) go one way only, so its clock offset is bounded on "
        "one side (<= 200.3 us), not estimated"
    ) in result.warnings


# -- hand-built: rank 1's clock reads 1000 ns ahead of rank 0's -------------------------------------


def summary(
    rank: int, transfers: tuple[Transfer, ...], collectives: tuple[Collective, ...] = ()
) -> RankSummary:
    return RankSummary(
        rank=rank,
        source=f"rank{rank}",
        gpu="",
        step_start=(0,),
        step_end=(10**9,),
        busy_ms=0.0,
        compute_ms=0.0,
        idle_ms=0.0,
        idle_by_cause={},
        collectives=collectives,
        kernel_ms={},
        kernels_per_step=0.0,
        transfers=transfers,
    )


def exchange() -> list[RankSummary]:
    """0 -> 1 sent at true 0, received by true 100 (1100 on rank 1's clock): off_1 - off_0 <= 1100.
    1 -> 0 sent at true 500 (1500), received by true 650: off_1 - off_0 >= 850. A third message of
    the wrong size (its recv holds 20 elements, the send 10) is not matched."""
    s0 = summary(
        0,
        (
            Transfer("send", 1, 10, 0, 0),
            Transfer("recv", 1, 10, 650, 0),
            Transfer("send", 1, 10, 700, 0),
        ),
    )
    s1 = summary(
        1,
        (
            Transfer("recv", 0, 10, 1100, 0),
            Transfer("send", 0, 10, 1500, 0),
            Transfer("recv", 0, 20, 1750, 0),
        ),
    )
    return [s0, s1]


def test_two_way_bounds_midpoint_and_half_width() -> None:
    """Bounds 850..1100 ns: estimate 975, uncertainty 125, the true 1000 inside; the mismatched size
    would have bounded it at 1050 and is left out."""
    b = pair_bounds(exchange())[(0, 1)]
    assert (b.lo, b.hi, b.messages) == (850.0, 1100.0, 2)
    clock = estimate(exchange(), np.empty((0, 2), np.int64))
    assert (clock.offsets.tolist(), clock.methods, clock.uncertainty) == (
        [0, 975],
        ("reference", "p2p"),
        (0.0, 125.0),
    )
    assert clock.bounds == ((0.0, 0.0), (850.0, 1100.0)) and clock.notes == ()


def test_one_way_messages_give_a_one_sided_bound_and_say_so() -> None:
    """Only 0 -> 1 traffic (a forward-only pipeline, inference): off_1 - off_0 <= 1100 ns and no lower
    bound. The offset is not estimated: 0 (the bound allows it), no uncertainty, and a warning."""
    s0, s1 = exchange()
    one_way = [summary(0, s0.transfers[:1]), summary(1, s1.transfers[:1])]
    clock = estimate(one_way, np.empty((0, 2), np.int64))
    assert (clock.offsets.tolist(), clock.methods, clock.uncertainty) == (
        [0, 0],
        ("reference", "p2p-one-sided"),
        (0.0, None),
    )
    assert clock.bounds[1] == (None, 1100.0)
    assert clock.notes == (
        (
            "rank 1: send/recv on its path from rank 0 (0 - 1) go one way only, so its clock offset "
            "is bounded on one side (<= 1.1 us), not estimated"
        ),
    )
    # a bound that excludes 0 moves the offset to the nearest value it allows
    late = [
        summary(0, (Transfer("send", 1, 10, 5000, 0),)),
        summary(1, (Transfer("recv", 0, 10, 1100, 0),)),
    ]
    assert estimate(late, np.empty((0, 2), np.int64)).offsets.tolist() == [0, -3900]
    rows = combine(one_way).rows
    assert rows[1].clock == RankClock("p2p-one-sided", None, (None, 1.1))


def test_chain_sums_the_pairs_and_unreached_rank_is_none() -> None:
    """0 <-> 1 bounds 850..1100 and 1 <-> 2 bounds (rank 2 another 2000 ahead) 1900..2200: rank 2
    gets 2750..3300, 3025 +- 275; rank 3 exchanges nothing: offset 0, method none."""
    s0, s1 = exchange()
    # 1 -> 2 sent at rank 1's 2000, received at rank 2's 4200; 2 -> 1 sent at 5000, received at 3100
    s1 = summary(
        1, s1.transfers + (Transfer("send", 2, 0, 2000, 0), Transfer("recv", 2, 0, 3100, 0))
    )
    s2 = summary(2, (Transfer("recv", 1, 0, 4200, 0), Transfer("send", 1, 0, 5000, 0)))
    ss = [s0, s1, s2, summary(3, ())]
    assert [r.path for r in reach(ss).values()] == [(0, 1), (0, 1, 2)]
    clock = estimate(ss, np.empty((0, 4), np.int64))
    assert clock.offsets.tolist() == [0, 975, 3025, 0]
    assert clock.methods == ("reference", "p2p", "p2p-chain", "none")
    assert clock.uncertainty == (0.0, 125.0, 275.0, None)


def collectives(ends: list[int]) -> tuple[Collective, ...]:
    return tuple(Collective("all-reduce", k, 4, e - 100, e, 7, "", 0) for k, e in enumerate(ends))


def test_collectives_and_messages_intersected() -> None:
    """Rank 1's collective ends lead rank 0's by 900, 1000, 1000, 1100 ns: median 1000, interquartile
    range 975..1025. Inside the messages' 850..1100 both hold: 1000 +- 25, method collectives+p2p.
    Messages that allow only 850..960 exclude that interval: causality wins, 905 +- 55, with a note."""
    s0, s1 = exchange()
    base = [0, 10_000, 20_000, 30_000]
    ss = [
        summary(0, s0.transfers, collectives(base)),
        summary(
            1, s1.transfers, collectives([b + d for b, d in zip(base, (900, 1000, 1000, 1100))])
        ),
    ]
    clock = estimate(ss, match(ss))
    assert (clock.offsets.tolist(), clock.methods[1], clock.uncertainty[1]) == (
        [0, 1000],
        "collectives+p2p",
        25.0,
    )
    tight = [
        summary(0, s0.transfers + (Transfer("send", 1, 5, 800, 0),), ss[0].collectives),
        summary(1, s1.transfers + (Transfer("recv", 0, 5, 1760, 0),), ss[1].collectives),
    ]
    clock = estimate(tight, match(tight))
    assert (clock.offsets.tolist(), clock.methods[1], clock.uncertainty[1]) == (
        [0, 905],
        "p2p",
        55.0,
    )
    assert clock.notes == (
        (
            "rank 1: the collectives' offset (1.0 us) lies outside its send/recv bounds "
            "(0.8..1.0 us); the bounds are used"
        ),
    )
    # without messages the collectives alone: the median, half the IQR
    alone = [summary(0, (), ss[0].collectives), summary(1, (), ss[1].collectives)]
    clock = estimate(alone, match(alone))
    assert (clock.offsets.tolist(), clock.methods[1], clock.uncertainty[1]) == (
        [0, 1000],
        "collectives",
        25.0,
    )


def test_crossed_bounds_are_reported() -> None:
    """A recv ending before its send started on the other clock by more than the reverse bound
    allows: lower 850 > upper 600; the midpoint is kept and the report says the bounds cross."""
    s0, s1 = exchange()
    crossed = [s0, summary(1, (Transfer("recv", 0, 10, 600, 0),) + s1.transfers[1:])]
    clock = estimate(crossed, np.empty((0, 2), np.int64))
    assert (clock.offsets.tolist(), clock.uncertainty[1]) == ([0, 725], 125.0)
    assert clock.notes[0].startswith("rank 1: its send/recv bounds cross (0.8 > 0.6 us)")
    assert math.isfinite(clock.uncertainty[1])


def test_ddp_collectives_keep_their_offset_and_state_its_spread() -> None:
    """The 2-GPU DDP recording (no send/recv): rank 1's offset is the collectives' median as before,
    8.98 us, with half its interquartile range, 0.515 us."""
    report = _analyze(Path(__file__).parent / "data" / "ddp2_h100" / "slow")
    assert report.ranks[1].clock_offset_us == pytest.approx(8.98, abs=0.01)
    assert report.ranks[1].clock == RankClock("collectives", 0.515, (None, None))


def test_gpu_send_recv_kernels_read_their_peer_from_record_param_comms() -> None:
    """ProcessGroupNCCL records a send's / recv's peer as the group rank in "Rank" (its own rank for
    a collective): in group [2, 3] peer 1 is global rank 3. A send is known by its kernel's start,
    a recv by its end; an all-reduce and a kernel without its record are not messages."""
    from types import SimpleNamespace

    from gpudoctor.ranks.summary import _device_transfers
    from gpudoctor.trace.kernels import Kind

    def args(name: str, rank: int) -> bytes:
        return (
            b'{"Collective name": "%s", "Rank": %d, "Process Group Ranks": "[2, 3]", "In msg nelems": 64, '
            b'"Out msg nelems": 64}' % (name.encode(), rank)
        )

    device = SimpleNamespace(
        kind=np.array([Kind.NCCL] * 4), ts=np.array([0, 10, 20, 30]), op=np.array([0, 1, 2, -1])
    )
    host = SimpleNamespace(raw_args=[args("send", 1), args("recv", 1), args("allreduce", 0)])
    a = SimpleNamespace(trace=SimpleNamespace(device=device, host=host))
    colls = (
        Collective("p2p", 0, 256, 100, 150, 7, "", 0, (), "send"),
        Collective("p2p", 1, 256, 200, 260, 7, "", 0, (), "recv"),
        Collective("all-reduce", 2, 256, 300, 400, 7, "", 0, (), "allreduce"),
        Collective("p2p", 3, 0, 500, 600, 7, "", 1, (), "recv"),
    )
    assert _device_transfers(a, colls) == (
        Transfer("send", 3, 64, 100, 0),
        Transfer("recv", 3, 64, 260, 0),
    )
