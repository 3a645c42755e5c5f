"""How well the replay (replay/) reproduces the GPU traces under tests/data, profiled and unprofiled.

For every trace with GPU work: the profiled mean step (analysis/steps.py, GPU-aligned) beside
the replayed timeline's over the same window (and the steady state's step the prices start from,
which the host's own time a step bounds too: they differ where the host's lead shrank in the
window), and where the unprofiled step was timed on the GPU (tests/data/manifest.json
for the lab's traps and their fixed twins, env.json for the gallery and the twins), the replayed
unprofiled step at the default per-event costs beside it, and with the costs' scale fitted to the
measured step (what ``gpudoctor run`` does; where env.json holds the DataLoader's timed fetch, the
fit leaves it to the loader, rules/whatif.py ``step_model``). Also the time the graph and the replay
take. Writes JSON with ``--json PATH``; prints a table.

    python benchmarks/bench_replay.py [--json benchmarks/results/replay-<date>.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpudoctor.analysis.steps import segment  # noqa: E402
from gpudoctor.capture.bundle import read_run  # noqa: E402
from gpudoctor.pipeline import diagnose_loaded  # noqa: E402
from gpudoctor.replay.graph import build  # noqa: E402
from gpudoctor.replay.observer import unprofiled  # noqa: E402
from gpudoctor.replay.simulate import replay  # noqa: E402
from gpudoctor.rules.whatif import step_model  # noqa: E402
from gpudoctor.trace import load  # noqa: E402

DATA = ROOT / "tests" / "data"


def measured_unprofiled() -> dict[str, float]:
    """trace path (relative to tests/data) -> its unprofiled step (ms) as timed on the GPU."""
    out: dict[str, float] = {}
    manifest = json.loads((DATA / "manifest.json").read_text())
    for entry in manifest["scenarios"].values():
        if entry.get("trace") and entry.get("sick_median_ms"):
            out[entry["trace"]] = entry["sick_median_ms"]
        if entry.get("fixed_trace") and entry.get("fixed_median_ms"):
            out[entry["fixed_trace"]] = entry["fixed_median_ms"]
    for folder in _bundles():
        run = read_run(folder)
        if run.unprofiled_step_ms:
            out[str((folder / "trace.json.gz").relative_to(DATA))] = run.unprofiled_step_ms
    return out


def _bundles() -> list[Path]:
    """The run bundles under tests/data whose env.json timed the step without the profiler."""
    return sorted(
        folder
        for pattern in ("gallery_h100/*", "twins_h100/*", "knobs_h100/*", "knobs_h200/*")
        for folder in DATA.glob(pattern)
    )


def measured_lead() -> dict[str, float]:
    """trace path -> the host's lead over the GPU timed with its unprofiled step (ms; env.json),
    where the capture timed it."""
    out: dict[str, float] = {}
    for folder in _bundles():
        run = read_run(folder)
        if run.unprofiled_step_ms and run.unprofiled_lead_ms is not None:
            out[str((folder / "trace.json.gz").relative_to(DATA))] = run.unprofiled_lead_ms
    return out


def measured_fetch() -> dict[str, float]:
    """trace path -> the DataLoader fetch timed with its unprofiled step (ms; env.json), where the
    capture timed it."""
    out: dict[str, float] = {}
    for folder in _bundles():
        run = read_run(folder)
        if run.unprofiled_step_ms and run.unprofiled_fetch_ms:
            out[str((folder / "trace.json.gz").relative_to(DATA))] = run.unprofiled_fetch_ms
    return out


def one(
    path: Path, unprof_ms: float | None, fetch_ms: float | None = None, lead_ms: float | None = None
) -> dict | None:
    trace = load(path)
    if len(trace.device) == 0:
        return None
    steps = segment(trace)
    t0 = time.perf_counter()
    graph = build(trace, steps)
    t1 = time.perf_counter()
    replayed = replay(graph)
    t2 = time.perf_counter()
    row = {
        "trace": str(path.relative_to(DATA)),
        "steps": graph.steps,
        "calls": graph.calls,
        "device_events": int(graph.dev_dur_ns.size),
        "coverage": graph.coverage,
        "profiled_ms": round(graph.profiled_ns / 1e6, 4),
        # the timeline over the window, as the trace measures it; and the steady state's step the
        # prices start from (bounded by the host's own time a step: replay/simulate.py)
        "replayed_ms": round(replayed.window_step_ns / 1e6, 4),
        "replayed_steady_ms": round(replayed.step_ns / 1e6, 4),
        "build_s": round(t1 - t0, 4),
        "replay_s": round(t2 - t1, 4),
    }
    row["profiled_error_pct"] = (
        round(100 * (replayed.window_step_ns / graph.profiled_ns - 1), 2) if graph.profiled_ns else None
    )
    row["steady_error_pct"] = (
        round(100 * (replayed.step_ns / graph.profiled_ns - 1), 2) if graph.profiled_ns else None
    )
    if unprof_ms:
        free = unprofiled(graph)
        row["measured_unprofiled_ms"] = unprof_ms
        row["replayed_unprofiled_ms"] = round(free.replayed.step_ns / 1e6, 4)
        row["unprofiled_error_pct"] = round(100 * (free.replayed.step_ns / 1e6 / unprof_ms - 1), 2)
        if fetch_ms or lead_ms is not None:
            # as `gpudoctor run` fits it: the loader keeps its timed fetch, and where the GPU's
            # work sets the step the host's lead sets the profiler's cost
            model = step_model(
                diagnose_loaded(
                    trace,
                    unprofiled_step_ms=unprof_ms,
                    unprofiled_fetch_ms=fetch_ms,
                    unprofiled_lead_ms=lead_ms,
                ).analysis
            )
            fit, fitted_ms = model.base, model.base.replayed.step_ns / 1e6 + model.fetch_unseen_ms
            row["fetch_ms"], row["lead_ms"] = fetch_ms, lead_ms
        else:  # the per-event costs scaled to this run's measured step
            fit = unprofiled(graph, unprof_ms * 1e6)
            fitted_ms = fit.replayed.step_ns / 1e6
        row["fitted_scale"] = round(fit.scale, 4)
        row["fitted_unprofiled_error_pct"] = round(100 * (fitted_ms / unprof_ms - 1), 2)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    measured, fetched, leads = measured_unprofiled(), measured_fetch(), measured_lead()
    rows = []
    for path in sorted(DATA.rglob("trace*.json.gz")):
        key = str(path.relative_to(DATA))
        row = one(path, measured.get(key), fetched.get(key), leads.get(key))
        if row:
            rows.append(row)
    print(
        f"{'trace':48} {'prof ms':>9} {'replay':>9} {'err%':>6} | {'unprof':>9} {'replay':>9} {'err%':>6}"
        f" {'fitted':>6} {'err%':>6}"
    )
    for r in rows:
        u = (
            f"{r['measured_unprofiled_ms']:9.3f} {r['replayed_unprofiled_ms']:9.3f} {r['unprofiled_error_pct']:+6.1f}"
            f" {r['fitted_scale']:6.2f} {r['fitted_unprofiled_error_pct']:+6.1f}"
            if "measured_unprofiled_ms" in r
            else ""
        )
        print(
            f"{r['trace'][:48]:48} {r['profiled_ms']:9.3f} {r['replayed_ms']:9.3f} {r['profiled_error_pct']:+6.1f} | {u}"
        )
    within3 = sum(abs(r["profiled_error_pct"]) <= 3 for r in rows)
    steady3 = sum(abs(r["steady_error_pct"]) <= 3 for r in rows)
    unp = [r for r in rows if "unprofiled_error_pct" in r]
    within10 = sum(abs(r["unprofiled_error_pct"]) <= 10 for r in unp)
    fitted10 = sum(abs(r["fitted_unprofiled_error_pct"]) <= 10 for r in unp)
    print(
        f"profiled step within 3%: {within3} of {len(rows)} (the steady state's step: {steady3});"
        f" unprofiled within 10%: {within10} of {len(unp)} "
        f"at the default per-event costs, {fitted10} with them fitted to the measured step"
    )
    if opts.json:
        opts.json.write_text(
            json.dumps(
                {
                    "rows": rows,
                    "within_3pct": within3,
                    "steady_within_3pct": steady3,
                    "unprofiled_within_10pct": within10,
                    "fitted_unprofiled_within_10pct": fitted10,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
