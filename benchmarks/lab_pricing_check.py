"""Check the pricing of the lab's traps on a GPU, keeping their traces for offline tests.

By default four traps that were persistently mispriced (per_sample_loop, dynamic_shapes, host_sync
and small_gemm); ``--only all`` every trap, ``--fixed all`` every fixed twin's trace. For each,
the lab's own protocol (lab/verify.py ``verify_trap``: alternating timing rounds of the sick
workload and its fixed twin, then a profiled window of the sick one, diagnosed with its unprofiled
step) gives the predicted and the measured speedup. The sick traces come back, with the fixed
twins' traces of per_sample_loop and dynamic_shapes (profiled the same way), so the pricing can be
re-checked offline against what the fix removed.

Run on a CUDA machine from the repository root:

    PYTHONPATH=src python3 benchmarks/lab_pricing_check.py --out DIR

Writes ``<trap>.trace.json.gz`` and ``<trap>_fixed.trace.json.gz`` for each trap and
``lab_pricing.json`` (each trap's verdict, timing rounds, top findings, device and versions).
Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
from pathlib import Path

TRAPS = ("per_sample_loop", "dynamic_shapes", "host_sync", "small_gemm")
FIXED_TRACES = ("per_sample_loop", "dynamic_shapes")


def _one_trace(folder: Path) -> Path | None:
    found = sorted(folder.rglob("trace*.json.gz"))
    return found[0] if found else None


def _environment() -> dict[str, object]:
    import torch

    env: dict[str, object] = {"python": platform.python_version(), "torch": torch.__version__}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
    return env


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="output folder (created)")
    p.add_argument("--device", default="cuda", help="cuda (default), or cpu for a smoke run")
    p.add_argument(
        "--only",
        default="",
        help="comma-separated traps, or all (default: " + ", ".join(TRAPS) + ")",
    )
    p.add_argument(
        "--fixed",
        default=",".join(FIXED_TRACES),
        help="comma-separated traps whose fixed twin is profiled too, or all",
    )
    args = p.parse_args()

    from gpudoctor.lab.registry import TRAP_IDS, load_trap
    from gpudoctor.lab.verify import _capture_fresh, verify_trap

    names = (
        list(TRAP_IDS)
        if args.only == "all"
        else [n for n in args.only.split(",") if n] or list(TRAPS)
    )
    fixed_traces = set(TRAP_IDS) if args.fixed == "all" else {n for n in args.fixed.split(",") if n}
    args.out.mkdir(parents=True, exist_ok=True)
    rows, results = [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in names:
            trap = load_trap(name)
            verdict = verify_trap(trap, args.device, work / "sick")
            entry = verdict.to_dict()
            trace = _one_trace(work / "sick" / name)
            if trace is not None:
                shutil.copy(trace, args.out / f"{name}.trace.json.gz")
                entry["trace"] = f"{name}.trace.json.gz"
            if name in fixed_traces:
                try:
                    fixed = _capture_fresh(
                        trap.build_fixed, args.device, work / "fixed" / name, 5, trap.with_stack
                    )
                    shutil.copy(fixed, args.out / f"{name}_fixed.trace.json.gz")
                    entry["fixed_trace"] = f"{name}_fixed.trace.json.gz"
                except Exception as exc:  # noqa: BLE001 - the verdict is worth keeping without it
                    entry["fixed_trace_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            if verdict.report is not None:
                planted = verdict.report.finding(trap.expected_finding)
                entry["planted_evidence"] = dict(planted.evidence.numbers) if planted else {}
            results.append(entry)
            rows.append(verdict)
            # after every trap: a run cut short by its time limit keeps the traps it finished
            (args.out / "lab_pricing.json").write_text(
                json.dumps({"environment": _environment(), "verdicts": results}, indent=1) + "\n"
            )

    print(
        f"{'trap':<16} {'top finding':<20} {'sick ms':>9} {'fixed ms':>9} {'measured':>9} {'predicted':>9} {'ratio':>6}"
    )
    for v in rows:
        fixed = f"{v.fixed_ms:.3f}" if v.fixed_ms else "-"
        measured = f"x{v.measured_speedup:.2f}" if v.measured_speedup else "-"
        predicted = f"x{v.predicted_speedup:.2f}" if v.predicted_speedup else "-"
        ratio = f"{v.ratio:.2f}" if v.ratio else "-"
        print(
            f"{v.trap:<16} {v.top_finding!s:<20} {v.sick_ms:>9.3f} {fixed:>9} {measured:>9} {predicted:>9} {ratio:>6}"
            + (f"  {v.error}" if v.error else "")
        )


if __name__ == "__main__":
    main()
