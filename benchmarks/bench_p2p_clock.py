"""Clock offsets from send/recv on the recorded pipelines: how tight the two-way bounds are, whether
the truth lies inside them, and what reading the messages and bounding the clocks costs.

    PYTHONPATH=src python benchmarks/bench_p2p_clock.py [--sweep 200] [--reps 200]

The recordings (tests/data/pp_gloo: gloo, one host, 2 shared CPU cores) put every rank on the same
host clock, so each rank's true offset is 0: the estimate's distance from 0 is its error. Then
``--sweep`` random offsets (uniform in +-10 s, per rank but rank 0) are planted on the summaries'
transfer times, as moving every timestamp of a rank's trace would (tests/test_ranks_p2p_clock.py
shows the two agree), and each is checked to lie within the stated uncertainty. Timings: the
message extraction (``_host_transfers``) per rank, median of ``--reps``, and ``estimate`` on the
summaries, median of ``--reps``. The 2-GPU DDP recording (collectives, no messages) is shown for
its collectives' uncertainty beside them. The table is printed last.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
from pathlib import Path

import numpy as np

from gpudoctor.analysis.steps import segment
from gpudoctor.pipeline import _summarize_rank
from gpudoctor.ranks.align import estimate, match
from gpudoctor.ranks.sources import rank_sources
from gpudoctor.ranks.summary import RankSummary, _host_transfers, _step_thread
from gpudoctor.trace import load

ROOT = Path(__file__).resolve().parent.parent
CASES = (
    "pp_gloo/balanced",
    "pp_gloo/imbalanced",
    "pp_gloo/four_1f1b",
    "ddp2_h100/healthy",
    "ddp2_h100/slow",
)


def _median_s(fn, reps: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _shifted(s: RankSummary, ns: int) -> RankSummary:
    return dataclasses.replace(
        s, transfers=tuple(dataclasses.replace(t, time=t.time + ns) for t in s.transfers)
    )


def _sweep(summaries: list[RankSummary], n: int, rng: random.Random) -> tuple[int, float]:
    """(plants recovered within their uncertainty, worst error / uncertainty)."""
    ok, worst = 0, 0.0
    none = np.empty((0, len(summaries)), np.int64)
    for _ in range(n):
        plant = [0] + [rng.randint(-(10**10), 10**10) for _ in summaries[1:]]
        clock = estimate([_shifted(s, p) for s, p in zip(summaries, plant)], none)
        ratios = [
            abs(int(o) - p) / u
            for o, p, u in zip(clock.offsets[1:], plant[1:], clock.uncertainty[1:])
        ]
        ok += all(r <= 1 for r in ratios)
        worst = max(worst, *ratios)
    return ok, worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=int, default=200)
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    rng = random.Random(0)
    rows = []
    for case in CASES:
        sources = rank_sources([ROOT / "tests" / "data" / case])
        summaries = [_summarize_rank(src, None, None)[0] for src in sources]
        m = match(summaries)
        clock = estimate(summaries, m)
        est_s = _median_s(lambda: estimate(summaries, match(summaries)), args.reps)
        extract_s = 0.0
        if case.startswith("pp_gloo"):
            for src in sources:
                trace = load(src.trace)
                steps = segment(trace)
                main_t = _step_thread(trace, steps)
                extract_s = max(
                    extract_s, _median_s(lambda: _host_transfers(trace, steps, main_t), 20)
                )
        ok, worst = _sweep(summaries, args.sweep, rng) if case.startswith("pp_gloo") else (0, 0.0)
        for i, s in enumerate(summaries[1:], start=1):
            unc = clock.uncertainty[i]
            rows.append(
                (
                    case,
                    s.rank,
                    clock.methods[i],
                    int(clock.offsets[i]) / 1e3,
                    None if unc is None else unc / 1e3,
                    sum(t.kind == "send" for t in s.transfers),
                )
            )
        rows.append(
            (
                case,
                "-",
                f"estimate {1e6 * est_s:.0f} us, extract {1e3 * extract_s:.2f} ms/rank",
                None,
                None,
                f"sweep {ok}/{args.sweep} within, worst {worst:.3f} of the uncertainty"
                if case.startswith("pp_gloo")
                else "",
            )
        )
    print(f"{'case':20} {'rank':>4} {'method':48} {'offset us':>10} {'+- us':>9}  sends / sweep")
    for case, rank, method, off, unc, extra in rows:
        o = "" if off is None else f"{off:10.3f}"
        u = "" if unc is None else f"{unc:9.3f}"
        print(f"{case:20} {rank!s:>4} {method:48} {o:>10} {u:>9}  {extra}")


if __name__ == "__main__":
    main()
