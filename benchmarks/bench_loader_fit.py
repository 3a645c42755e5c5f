"""The observer's fit on a loader-fed lab trap, run by run: the fitted scale, the step the loader's
fix leaves, and the prediction beside the measurement (benchmarks/BENCHMARKS-replay.md "The
loader's own spread").

    PYTHONPATH=src python3 benchmarks/bench_loader_fit.py LAB_DIR [LAB_DIR ...] [--trap input_pipeline]

Each LAB_DIR is a lab run kept by benchmarks/lab_pricing_check.py; a run that timed the sick twin's
DataLoader fetch (``sick_fetch_ms``) is priced with it, and also without it, side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gpudoctor.pipeline import diagnose_loaded
from gpudoctor.rules.whatif import edit_for, step_model
from gpudoctor.trace.load import load


def priced(trace, sick_ms: float, fetch_ms: float | None, rule: str) -> tuple[float, float, float]:
    """(fitted scale, step after the planted fix, predicted speedup)."""
    found = diagnose_loaded(trace, unprofiled_step_ms=sick_ms, unprofiled_fetch_ms=fetch_ms)
    model = step_model(found.analysis)
    finding = found.report.finding(rule)
    if isinstance(model, str) or finding is None:
        return float("nan"), float("nan"), float("nan")
    edit, _ = edit_for(found.analysis, finding)
    after = model.after_ms(edit, takes_unseen=True, takes_loader=True)
    return model.base.scale, after, finding.predicted_speedup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--trap", default="input_pipeline")
    parser.add_argument("--rule", default="input-pipeline")
    args = parser.parse_args()
    print(f"{'run':<16} {'sick':>7} {'fixed':>7} {'fetch':>7} {'scale':>6} {'after':>7} "
          f"{'pred':>6} {'scale*':>6} {'after*':>7} {'pred*':>6} {'meas':>6}   (*: with the fetch)")
    for folder in args.dirs:
        verdicts = json.loads((folder / "lab_pricing.json").read_text())["verdicts"]
        v = next((x for x in verdicts if x.get("trap") == args.trap), None)
        if v is None or not v.get("fixed_ms"):
            continue
        trace = load(folder / f"{args.trap}.trace.json.gz")
        fetch = v.get("sick_fetch_ms")
        plain = priced(trace, v["sick_ms"], None, args.rule)
        timed = priced(trace, v["sick_ms"], fetch, args.rule) if fetch else (float("nan"),) * 3
        print(f"{str(folder)[-16:]:<16} {v['sick_ms']:7.2f} {v['fixed_ms']:7.2f} "
              f"{fetch or float('nan'):7.2f} {plain[0]:6.2f} {plain[1]:7.2f} "
              f"{plain[2]:6.2f} {timed[0]:6.2f} {timed[1]:7.2f} {timed[2]:6.2f} "
              f"{v['sick_ms'] / v['fixed_ms']:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
