"""The replay beside HolisticTraceAnalysis' critical-path analysis, on the lab's recorded traces.

For each trap's sick trace (tests/data): HTA's critical path over the same steps (the second
ProfilerStep to the last, as the replay counts them), its length against the profiled steps and
what it says bounds them; the replay's step against the same, and the planted finding's price by
replay beside the measured speedup (manifest.json). HTA runs in its own environment
(``--hta-python``, HolisticTraceAnalysis 0.5.0 with pandas < 2.3: its critical path fails with
pandas 3). ``python benchmarks/bench_replay_vs_hta.py [--hta-python PY] [--json PATH]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpudoctor.analysis.steps import segment  # noqa: E402
from gpudoctor.pipeline import analyze_loaded  # noqa: E402
from gpudoctor.replay.graph import build  # noqa: E402
from gpudoctor.replay.simulate import replay  # noqa: E402
from gpudoctor.trace import load  # noqa: E402

DATA = ROOT / "tests" / "data"


def hta(python: str, trace: Path, first: int, last: int) -> dict:
    out = subprocess.run(
        [
            python,
            str(ROOT / "benchmarks" / "_hta_critical_path.py"),
            str(trace),
            str(first),
            str(last),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    return (
        json.loads(lines[-1])
        if lines
        else {"error": (out.stderr.strip().splitlines() or ["no output"])[-1][:160]}
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hta-python", default="/tmp/htavenv/bin/python")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    manifest = json.loads((DATA / "manifest.json").read_text())["scenarios"]
    rows = []
    for name, e in manifest.items():
        if not (e.get("expected_finding") and e.get("sick_median_ms") and e.get("fixed_median_ms")):
            continue
        trace = load(DATA / e["trace"])
        steps = segment(trace)
        graph = build(trace, steps)
        n = len(steps)
        profiled_ms = graph.profiled_ns / 1e6
        h = hta(opts.hta_python, DATA / e["trace"], 1, n - 1)
        report = analyze_loaded(trace, unprofiled_step_ms=e["sick_median_ms"])
        f = report.finding(e["expected_finding"])
        row = {
            "trap": name,
            "profiled_step_ms": round(profiled_ms, 3),
            "replayed_step_ms": round(replay(graph).step_ns / 1e6, 3),
            "hta_path_ms_per_step": round(h["length_us"] / 1e3 / (n - 1), 3)
            if "length_us" in h
            else None,
            "hta_bound_by": {
                k: round(v / max(h["length_us"], 1e-9), 3) for k, v in h["bound_by_us"].items()
            }
            if "bound_by_us" in h
            else None,
            "hta_error": h.get("error"),
            "hta_s": h.get("seconds"),
            "finding": e["expected_finding"],
            "predicted": round(f.predicted_speedup, 3) if f else None,
            "priced_by": f.evidence.numbers.get("priced_by") if f else None,
            "measured": round(e["sick_median_ms"] / e["fixed_median_ms"], 3),
        }
        rows.append(row)
        print(
            f"{name:20} step {row['profiled_step_ms']:8.3f} ms | replay {row['replayed_step_ms']:8.3f} | HTA path "
            f"{row['hta_path_ms_per_step'] if row['hta_path_ms_per_step'] is not None else '-':>8} "
            f"{row['hta_bound_by'] or row['hta_error']} | {row['finding']} x{row['predicted']} ({row['priced_by']}) "
            f"measured x{row['measured']}",
            flush=True,
        )
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
