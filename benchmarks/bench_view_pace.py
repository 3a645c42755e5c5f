"""The profiler's per-event cost, fitted on runs that timed their step, against what the trace
itself shows of the host's pace: the median recorded time of its view operators.

For each run directory given (env.json with the unprofiled step), the scale replay/observer.py
fits on DEFAULT_COST_NS where the step tells it (source FROM_STEP, within the range), beside the
median recorded time of the window's view operators (analysis/observer.py ``view_operator_ns``).
Prints each run and, over them, how often the prior scale (replay/observer.py ``prior_scale``) and
the fixed PRIOR_SCALE come within 1.25x and 1.5x of the fitted one, and the log correlation.

    python benchmarks/bench_view_pace.py RUN_DIR [RUN_DIR ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpudoctor.analysis.observer import view_operator_ns  # noqa: E402
from gpudoctor.errors import GpuDoctorError  # noqa: E402
from gpudoctor.pipeline import _run_model  # noqa: E402
from gpudoctor.replay.observer import (  # noqa: E402
    FROM_STEP,
    PRIOR_SCALE,
    SCALE_RANGE,
    prior_scale,
)


def row(folder: Path) -> dict | None:
    a, model = _run_model(folder)
    base = model.base
    if base.source != FROM_STEP or not SCALE_RANGE[0] < base.scale < SCALE_RANGE[1]:
        return None
    view_ns = view_operator_ns(a.trace, *model.graph.window)
    if view_ns is None:
        return None
    return {"run": str(folder), "fitted_scale": round(base.scale, 4),
            "view_operator_us": round(view_ns / 1e3, 4),
            "prior_scale": round(prior_scale(view_ns), 4)}


def share_within(pred: np.ndarray, fitted: np.ndarray, band: float) -> float:
    q = pred / fitted
    return float(np.mean((q >= 1 / band) & (q <= band)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows, seen = [], set()
    for folder in opts.runs:
        try:
            r = row(folder)
        except GpuDoctorError as exc:  # a folder that is no run: named, not fatal
            print(f"{folder}: skipped ({type(exc).__name__}: {str(exc)[:80]})", file=sys.stderr)
            continue
        if r is None or (r["fitted_scale"], r["view_operator_us"]) in seen:
            continue  # the same run kept in two places counts once
        seen.add((r["fitted_scale"], r["view_operator_us"]))
        rows.append(r)
        print(f"{r['run'][-60:]:60} fitted {r['fitted_scale']:5.2f} view {r['view_operator_us']:5.2f}"
              f" us prior {r['prior_scale']:5.2f}", flush=True)
    fitted = np.array([r["fitted_scale"] for r in rows])
    view = np.array([r["view_operator_us"] for r in rows])
    prior = np.array([r["prior_scale"] for r in rows])
    fixed = np.full(fitted.size, PRIOR_SCALE)
    summary = {
        "runs": len(rows),
        "log_correlation": round(float(np.corrcoef(np.log(view), np.log(fitted))[0, 1]), 3),
        "median_scale_per_view_us": round(float(np.exp(np.median(np.log(fitted / view)))), 3),
        "view_prior_within_1.25x": round(share_within(prior, fitted, 1.25), 3),
        "view_prior_within_1.5x": round(share_within(prior, fitted, 1.5), 3),
        "fixed_prior_within_1.25x": round(share_within(fixed, fitted, 1.25), 3),
        "fixed_prior_within_1.5x": round(share_within(fixed, fitted, 1.5), 3),
    }
    print(json.dumps(summary, indent=1))
    if opts.json:
        opts.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
