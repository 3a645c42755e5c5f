"""Predicted against measured speedups on the recorded traces: the replay's price beside the formula's.

Offline, on the traces committed under tests/data (no GPU needed): for each lab trap, its sick
trace analysed with the unprofiled step that was timed with it (manifest.json ``sick_median_ms``),
the planted finding's predicted speedup by replay and by formula, beside the measured one
(``sick_median_ms / fixed_median_ms``, both timed in the same recording run). For each recorded
twin (tests/data/twins_h100), its expected finding's prediction beside the measured band its
manifest gives (tests/programs/twins/manifest.json ``expected_measured_speedup``), or the speedup
measured in the same run as the trace where tests/test_twin_traces.py records one.

    python benchmarks/bench_replay_pricing.py [--json PATH] [--lab-dir DIR] [--pace-exponent X]

``--lab-dir`` adds a lab run kept on a GPU by benchmarks/lab_pricing_check.py (its
``lab_pricing.json`` and traces; tests/data/lab_h200 keeps part of one) or by
benchmarks/lab_variants.py (``lab_variants.json``). ``--pace-exponent`` prices at another
replay/pace.py ``PACE_EXPONENT`` (0: the fixed step at the sick step's pace).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpudoctor.pipeline import analyze_loaded, analyze_path  # noqa: E402
from gpudoctor.trace import load  # noqa: E402

DATA = ROOT / "tests" / "data"
BAND = 1.25


def _formula_speedup(finding, step_ms: float) -> float | None:
    saving = finding.evidence.numbers.get("saving_by_formula_ms")
    if saving is None:
        return finding.predicted_speedup
    return step_ms / (step_ms - saving) if step_ms - saving > 0 else None


def lab_rows() -> list[dict]:
    rows = []
    manifest = json.loads((DATA / "manifest.json").read_text())
    for sid, e in manifest["scenarios"].items():
        if not (e.get("expected_finding") and e.get("sick_median_ms") and e.get("fixed_median_ms")):
            continue
        report = analyze_loaded(load(DATA / e["trace"]), unprofiled_step_ms=e["sick_median_ms"])
        rows.append(
            _row(
                "lab",
                sid,
                report,
                e["expected_finding"],
                e["sick_median_ms"],
                e["sick_median_ms"] / e["fixed_median_ms"],
                None,
            )
        )
    return rows


def lab_dir_rows(folder: Path) -> list[dict]:
    """A lab run kept by benchmarks/lab_pricing_check.py (``lab_pricing.json`` and each trap's sick
    trace) or by benchmarks/lab_variants.py (``lab_variants.json``): each planted finding priced
    from its trace and the sick step timed with it."""
    rows = []
    kept = folder / "lab_pricing.json"
    if not kept.is_file():
        kept = folder / "lab_variants.json"
    for v in json.loads(kept.read_text())["verdicts"]:
        trace = folder / (v.get("trace") or f"{v['trap']}.trace.json.gz")
        if (
            not (v.get("expected") and v.get("sick_ms") and v.get("fixed_ms"))
            or not trace.is_file()
        ):
            continue
        # the loader's share of the sick step, where the run timed it (kept since the fetch clock)
        report = analyze_loaded(load(trace), unprofiled_step_ms=v["sick_ms"],
                                unprofiled_fetch_ms=v.get("sick_fetch_ms"))
        row = _row(
            "lab-dir",
            v["trap"],
            report,
            v["expected"],
            v["sick_ms"],
            v["sick_ms"] / v["fixed_ms"],
            None,
        )
        rows.append({**row, "dir": str(folder)})
    return rows


def measured_with_trace() -> dict[str, float]:
    """Twin -> the speedup measured in the run that recorded its trace (tests/test_twin_traces.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_twin_traces import CASES

    return {name: case[3] for name, case in CASES.items()}


def twin_rows() -> list[dict]:
    rows = []
    programs = json.loads((ROOT / "tests/programs/twins/manifest.json").read_text())["programs"]
    for p in programs:
        folder = DATA / "twins_h100" / p["name"]
        if not folder.is_dir():
            continue
        # as `gpudoctor analyze FOLDER` prices it: with the loader's fetch and settings env.json keeps
        report = analyze_path(folder)
        lo, hi = p["expected_measured_speedup"]
        same_run = measured_with_trace().get(p["name"])
        # of the findings stated acceptable before the run, the one the doctor ranks first
        expected = next((f.id for f in report.findings if f.id in p["expected_top_finding"]),
                        p["expected_top_finding"][0])
        rows.append(
            _row(
                "twin",
                p["name"],
                report,
                expected,
                report.unprofiled_step_ms or report.step_ms,
                same_run or (lo * hi) ** 0.5,
                None if same_run else (lo, hi),
            )
        )
    return rows


def _row(
    kind: str, name: str, report, expected: str, step_ms: float, measured: float, band
) -> dict:
    f = report.finding(expected)
    row = {
        "kind": kind,
        "name": name,
        "expected": expected,
        "rank": None,
        "measured": round(measured, 3),
        "band": band,
        "replay": None,
        "formula": None,
        "priced_by": None,
        "top": report.findings[0].id if report.findings else None,
    }
    if f is not None:
        ids = [x.id for x in report.findings]
        row.update(
            rank=ids.index(expected) + 1,
            replay=round(f.predicted_speedup, 3),
            formula=round(_formula_speedup(f, step_ms) or 0.0, 3),
            priced_by=f.evidence.numbers.get("priced_by"),
            why=f.evidence.numbers.get("priced_by_formula_because"),
        )
    if report.all_fixes is not None:
        row["all_fixes"] = report.all_fixes.predicted_speedup
    return row


def within(pred: float | None, measured: float, band=None) -> bool:
    if not pred:
        return False
    if band:
        return band[0] / BAND <= pred <= band[1] * BAND
    return 1 / BAND <= pred / measured <= BAND


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--lab-dir",
        type=Path,
        action="append",
        default=[],
        help="a lab run kept by benchmarks/lab_pricing_check.py (repeatable)",
    )
    parser.add_argument(
        "--dirs-only",
        action="store_true",
        help="price the --lab-dir runs alone, not the traces under tests/data",
    )
    parser.add_argument(
        "--pace-exponent",
        type=float,
        default=None,
        help="replay/pace.py PACE_EXPONENT for this run (0 leaves the host's pace alone)",
    )
    opts = parser.parse_args()
    if opts.pace_exponent is not None:
        from gpudoctor.replay import pace

        pace.PACE_EXPONENT = opts.pace_exponent
    rows = [] if opts.dirs_only else lab_rows() + twin_rows()
    for folder in opts.lab_dir:
        rows += lab_dir_rows(folder)
    print(
        f"{'':5} {'program':26} {'finding':20} {'rank':>4} {'measured':>9} {'replay':>7} {'formula':>7}  priced by"
    )
    for r in rows:
        meas = f"{r['band'][0]}-{r['band'][1]}" if r["band"] else f"{r['measured']:.2f}"
        ok_r = "*" if within(r["replay"], r["measured"], r["band"]) else " "
        ok_f = "*" if within(r["formula"], r["measured"], r["band"]) else " "
        print(
            f"{r['kind']:5} {r['name'][:26]:26} {r['expected'][:20]:20} {r['rank'] or '-':>4} {meas:>9} "
            f"{r['replay'] or 0:6.2f}{ok_r} {r['formula'] or 0:6.2f}{ok_f}  {r['priced_by']} {r.get('why') or ''}"
        )
    for kind in ("lab", "twin", "lab-dir"):
        sub = [r for r in rows if r["kind"] == kind]
        if not sub:
            continue
        print(
            f"{kind}: replay within {BAND}x on {sum(within(r['replay'], r['measured'], r['band']) for r in sub)} "
            f"of {len(sub)}; formula on {sum(within(r['formula'], r['measured'], r['band']) for r in sub)}"
        )
    for folder in opts.lab_dir:  # each run on its own: run-to-run spread is most of the error
        sub = [r for r in rows if r.get("dir") == str(folder)]
        if sub:
            in15 = sum(
                bool(r["replay"]) and 1 / 1.5 <= r["replay"] / r["measured"] <= 1.5 for r in sub
            )
            print(
                f"  {folder}: replay within {BAND}x on {sum(within(r['replay'], r['measured'], None) for r in sub)}"
                f" of {len(sub)}, within 1.5x on {in15}"
            )
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
