"""Validate `pipeline-bubble` and `stage-imbalance` on a GPU pipeline: tests/programs/multigpu/
pp_two_stage.py (one stage per GPU, NCCL send/recv, 64 x 4096 activations) recorded by
`gpudoctor run --nproc N` in three cases: GPipe with 4 micro-batches, with 8, and with 4 and the
last stage twice as heavy (--imbalance).

    PYTHONPATH=src python3 scripts/validate_pipeline_capture.py --out DIR [--nproc N] [--cpu]

N defaults to the number of GPUs; it needs at least 2 (NCCL cannot put two ranks on one GPU).
``--cpu``: the same on the CPU (gloo), to try the script without a GPU.

Writes into DIR (5 files): ``console.txt`` (every job's stdout and stderr), ``<case>.tar.gz`` for
the three run directories, ``summary.json`` (per case: the findings' numbers); prints a table last:
the measured bubble share against (p-1)/(m+p-1), and the stage named slow.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "multigpu" / "pp_two_stage.py"
CASES = {
    "gpipe_m4": ["--microbatches", "4"],
    "gpipe_m8": ["--microbatches", "8"],
    "imbalanced_m4": ["--microbatches", "4", "--imbalance"],
}


def run_case(
    name: str, extra: list[str], nproc: int, work: Path, console: list[str], cpu: bool
) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    if cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    out_dir = work / name
    cmd = [
        sys.executable,
        "-m",
        "gpudoctor",
        "run",
        "--nproc",
        str(nproc),
        "--out",
        str(out_dir),
        "--skip",
        "10",
        "--steps",
        "5",
        "--calibrate",
        "5",
        "--rank-timeout",
        "300",
        str(PROGRAM),
        "--steps",
        "30",
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    console.append(f"$ {' '.join(cmd)}\n[rc {proc.returncode}]\n{proc.stdout}\n{proc.stderr}\n")
    runs = sorted(out_dir.iterdir()) if out_dir.exists() else []
    if proc.returncode != 0 or not runs or not (runs[-1] / "report.json").exists():
        return {"error": f"rc {proc.returncode}, no combined report"}
    report = json.loads((runs[-1] / "report.json").read_text())
    found = {
        f["id"]: f
        for f in report.get("findings", [])
        if f["id"] in ("pipeline-bubble", "stage-imbalance")
    }
    return {
        "run": str(runs[-1]),
        "step_ms": report.get("step_ms"),
        **{
            k: {"saving_ms": f.get("saving_ms"), **f.get("evidence", {}).get("numbers", {})}
            for k, f in found.items()
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--nproc", type=int, default=0)
    ap.add_argument("--cpu", action="store_true")
    args = ap.parse_args()
    import torch

    nproc = args.nproc or (2 if args.cpu else torch.cuda.device_count())
    if nproc < 2 or (not args.cpu and torch.cuda.device_count() < nproc):
        print(
            f"error: needs at least 2 GPUs, one per stage ({torch.cuda.device_count()} visible); "
            "use --cpu to try it on the CPU",
            file=sys.stderr,
        )
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    console: list[str] = []
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in CASES.items():
            results[name] = res = run_case(name, extra, nproc, Path(tmp), console, args.cpu)
            if "run" in res:
                with tarfile.open(args.out / f"{name}.tar.gz", "w:gz") as tar:
                    tar.add(res["run"], arcname=name)
    (args.out / "console.txt").write_text("".join(console))
    (args.out / "summary.json").write_text(json.dumps({"nproc": nproc, "cases": results}, indent=1))
    print(
        f"{'case':<14} {'step ms':>8} {'bubble ms':>9} {'share':>6} {'formula':>7} {'slow rank':>9} "
        f"{'imbalance ms':>12}"
    )
    for name, r in results.items():
        b, i = r.get("pipeline-bubble", {}), r.get("stage-imbalance", {})
        print(
            f"{name:<14} {r.get('step_ms') or 0:>8.2f} {b.get('bubble_ms_per_step', 0):>9.2f} "
            f"{b.get('bubble_share_of_step', 0):>6.3f} {b.get('expected_share_of_step', 0):>7.3f} "
            f"{i.get('slowest_rank', '-')!s:>9} {i.get('saving_ms') or 0:>12.2f}"
            + (f"  {r['error']}" if "error" in r else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
