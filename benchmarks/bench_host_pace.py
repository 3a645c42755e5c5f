"""How much slower the host runs the same operators in a trap than in its fixed twin.

For each trap kept with its fixed twin's trace (benchmarks/lab_pricing_check.py or
benchmarks/lab_variants.py with ``--fixed``), the top-level operators both traces run the same
number of times a step (the optimizer's step, its multi-tensor operators and zero_grad left
out: their work scales with the parameters a fix merges) are summed in each; their ratio is the sick host's pace against the
fixed one. Both traces were recorded under the same profiler, one after the other, on one GPU.
The evidence for replay/pace.py (benchmarks/BENCHMARKS-replay.md "The host's pace").

    python benchmarks/bench_host_pace.py DIR [DIR ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpudoctor.pipeline import diagnose_loaded  # noqa: E402
from gpudoctor.trace import load  # noqa: E402
from gpudoctor.trace.model import HostCat  # noqa: E402

FIXED = "_fixed.trace.json.gz"


def operators_per_step(path: Path) -> tuple[dict[str, tuple[float, float]], float, float]:
    """Top-level operator -> (calls, host ns) a step; host events a step; the profiled step (ms)."""
    a = diagnose_loaded(load(path)).analysis
    host, names = a.trace.host, a.trace.strings
    lo, hi, n = int(a.steps.start[0]), int(a.steps.end[-1]), len(a.steps.start)
    top = np.flatnonzero(
        (host.top_op < 0) & (host.ts >= lo) & (host.ts < hi) & (host.cat == HostCat.OP)
    )
    calls: Counter[str] = Counter()
    took: Counter[str] = Counter()
    for i in top.tolist():
        calls[names[host.name[i]]] += 1
        took[names[host.name[i]]] += int(host.end[i] - host.ts[i])
    events = int(((host.ts >= lo) & (host.ts < hi)).sum())
    return {k: (calls[k] / n, took[k] / n) for k in calls}, events / n, (hi - lo) / n / 1e6


def shared(sick: dict, fixed: dict) -> list[str]:
    return [
        k
        for k in sick
        if k in fixed
        and abs(sick[k][0] - fixed[k][0]) < 1e-6
        and not k.startswith(("Optimizer", "aten::_foreach", "aten::_fused"))
        and "zero_grad" not in k
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    opts = parser.parse_args()
    print(
        f"{'run':10} {'trap':24} {'events/step':>13} {'step ms':>15} {'shared ops':>10} "
        f"{'host ms sick / fixed':>21} {'pace':>6}"
    )
    paces = []
    for folder in opts.dirs:
        for fixed_path in sorted(folder.glob(f"*{FIXED}")):
            trap = fixed_path.name[: -len(FIXED)]
            sick_path = folder / f"{trap}.trace.json.gz"
            if not sick_path.is_file():
                continue
            sick, sick_events, sick_ms = operators_per_step(sick_path)
            fixed, fixed_events, fixed_ms = operators_per_step(fixed_path)
            ops = shared(sick, fixed)
            sick_ns, fixed_ns = sum(sick[k][1] for k in ops), sum(fixed[k][1] for k in ops)
            pace = sick_ns / fixed_ns if fixed_ns > 0 and len(ops) >= 5 else None
            if pace is not None:
                paces.append(pace)
            print(
                f"{folder.name[:10]:10} {trap[:24]:24} {sick_events:6.0f}>{fixed_events:6.0f} "
                f"{sick_ms:7.2f}>{fixed_ms:7.2f} {len(ops):10d} "
                f"{sick_ns / 1e6:10.2f} / {fixed_ns / 1e6:8.2f} "
                + (f"{pace:6.2f}" if pace is not None else "     -")
            )
    if paces:
        print(
            f"pairs with 5 or more shared operators: {len(paces)}; pace median "
            f"{statistics.median(paces):.2f}, range {min(paces):.2f}-{max(paces):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
