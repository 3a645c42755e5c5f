"""What the replay adds to ``analyze``: the same trace analysed with and without replay pricing.

Fresh process, imports before the clock, median of N runs each way, alternating. Without replay,
``rules/whatif.reprice`` is replaced by the formulas alone (what ``analyze`` did before). With an
unprofiled step (``--unprofiled-ms``) the replay also fits the profiler's cost (a bisection of
replays). ``python benchmarks/bench_replay_cost.py TRACE [--unprofiled-ms MS] [--runs 5]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpudoctor.pipeline import analyze_loaded  # noqa: E402
from gpudoctor.rules import calibrate, whatif  # noqa: E402
from gpudoctor.trace import load  # noqa: E402


def _formulas_only(raw, priced, a):  # type: ignore[no-untyped-def]
    return whatif.Repriced(priced)


def timed(path: str, unprofiled: float | None, replayed: bool) -> float:
    original = whatif.reprice
    calibrate.reprice = original if replayed else _formulas_only
    try:
        start = time.perf_counter()
        analyze_loaded(load(path), unprofiled_step_ms=unprofiled)
        return time.perf_counter() - start
    finally:
        calibrate.reprice = original


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--unprofiled-ms", type=float)
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    timed(opts.trace, opts.unprofiled_ms, True)  # warm: imports, caches
    with_replay, without = [], []
    for _ in range(opts.runs):
        without.append(timed(opts.trace, opts.unprofiled_ms, False))
        with_replay.append(timed(opts.trace, opts.unprofiled_ms, True))
    a, b = statistics.median(without), statistics.median(with_replay)
    print(
        f"{Path(opts.trace).name}: analyze {a:.3f} s without replay, {b:.3f} s with (+{100 * (b / a - 1):.0f}%)"
        f"{'' if opts.unprofiled_ms is None else f', unprofiled step {opts.unprofiled_ms} ms'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
