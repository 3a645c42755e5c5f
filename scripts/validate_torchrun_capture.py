"""Validate `gpudoctor run --nproc N` on a GPU machine: every rank records the same steps of a DDP
job into one run directory, each rank's env.json names its own GPU, rank 0 writes the combined
report.

    PYTHONPATH=src python3 scripts/validate_torchrun_capture.py --out DIR [--nproc N] [--cpu]

N defaults to the number of GPUs (at least 2). With as many GPUs as ranks the job uses NCCL, one
GPU per rank; with fewer (one H100) it uses gloo on CUDA tensors, the ranks sharing the GPU. The
last rank sleeps 20 ms before each backward (a planted straggler). ``--cpu``: the same on the CPU
(gloo), to try the script without a GPU.

Writes into DIR (3 files): ``console.txt`` (the job's stdout and stderr), ``run.tar.gz`` (the run
directory) and ``summary.json`` (per-rank facts and the checks); prints a table last.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from pathlib import Path
from typing import Any

PROGRAM = """
import os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

backend, use_cuda = sys.argv[2], sys.argv[3] == "cuda"
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ["LOCAL_RANK"])
if use_cuda:
    torch.cuda.set_device(local % torch.cuda.device_count())
device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")
torch.manual_seed(0)
width = 2048 if use_cuda else 64
net = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)]).to(device)
model = DDP(net, device_ids=[device.index] if use_cuda and backend == "nccl" else None)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(64, width, device=device)
for step in range(int(sys.argv[1])):
    loss = model(x).square().mean()
    if rank == world - 1:
        time.sleep(0.02)  # the planted straggler: host work before the gradients' all-reduce
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
dist.destroy_process_group()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--nproc", type=int, default=None)
    parser.add_argument(
        "--cpu", action="store_true", help="gloo on the CPU: try the script without a GPU"
    )
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--skip", type=int, default=10)
    args = parser.parse_args()
    import torch

    gpus = 0 if args.cpu else torch.cuda.device_count()
    if not args.cpu and gpus == 0:
        print("no CUDA GPU here: pass --cpu to try the script on the CPU", file=sys.stderr)
        return 2
    nproc = args.nproc or max(2, gpus)
    backend = "nccl" if gpus >= nproc else "gloo"
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpudoctor-torchrun-") as work_dir:
        work = Path(work_dir)
        (work / "train.py").write_text(textwrap.dedent(PROGRAM))
        src = Path(__file__).resolve().parent.parent / "src"
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])),
        )
        command = [
            sys.executable,
            "-m",
            "gpudoctor",
            "run",
            "--nproc",
            str(nproc),
            "--out",
            str(work / "runs"),
            "--skip",
            str(args.skip),
            "--steps",
            str(args.steps),
            "--calibrate",
            "3",
            "--rank-timeout",
            "120",
            "train.py",
            "200",
            backend,
            "cpu" if args.cpu else "cuda",
        ]
        done = subprocess.run(
            command, cwd=work, env=env, capture_output=True, text=True, timeout=540, check=False
        )
        (args.out / "console.txt").write_text(
            f"$ {' '.join(command)}\n# exit {done.returncode}\n"
            f"## stdout\n{done.stdout}\n## stderr\n{done.stderr}"
        )
        runs = sorted((work / "runs").iterdir()) if (work / "runs").is_dir() else []
        if len(runs) != 1:
            print(
                f"expected one run directory, found {len(runs)}; see {args.out / 'console.txt'}",
                file=sys.stderr,
            )
            return 1
        run = runs[0]
        with tarfile.open(args.out / "run.tar.gz", "w:gz") as tar:
            tar.add(run, arcname=run.name)
        summary = summarize(run, nproc, backend, done.returncode, gpu=not args.cpu)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print_table(summary)
    return 0 if all(summary["checks"].values()) else 1


def summarize(run: Path, nproc: int, backend: str, code: int, gpu: bool) -> dict[str, Any]:
    ranks = []
    for r in range(nproc):
        folder = run / f"rank{r}"
        if not (folder / "env.json").is_file():
            ranks.append({"rank": r, "present": False})
            continue
        env = json.loads((folder / "env.json").read_text())
        with gzip.open(folder / "trace.json.gz", "rt") as fh:
            trace = json.load(fh)
        events = trace["traceEvents"]
        report = json.loads((folder / "report.json").read_text())
        nvml = env["capture"].get("nvml") or {}
        ranks.append(
            {
                "rank": r,
                "present": True,
                "hostname": env.get("hostname"),
                "local_rank": env.get("local_rank"),
                "gpu": (env.get("gpu") or {}).get("name"),
                "window": env.get("window"),
                "window_agreed": env.get("window_agreed"),
                "trace_window": trace.get("gpudoctor_window"),
                "profiler_steps": sorted(
                    {
                        e["name"]
                        for e in events
                        if str(e.get("name", "")).startswith("ProfilerStep#")
                    }
                ),
                "kernels": sum(1 for e in events if e.get("cat") == "kernel"),
                "nccl_kernels": sum(
                    1
                    for e in events
                    if e.get("cat") == "kernel" and "nccl" in str(e.get("name")).lower()
                ),
                "step_ms": report.get("step_ms"),
                "nvml_samples": nvml.get("samples"),
                "nvml_sm_clock_mhz": nvml.get("sm_clock_mhz_mean"),
                "notes": env["capture"].get("notes"),
            }
        )
    present = [r for r in ranks if r["present"]]
    windows = {json.dumps(r["window"], sort_keys=True) for r in present}
    checks = {
        "exit code 0": code == 0,
        "every rank wrote its bundle": len(present) == nproc,
        "one window on every rank": len(windows) == 1 and all(r["window_agreed"] for r in present),
        "traces name the same steps": len(
            {json.dumps(r["trace_window"].get("first_step")) for r in present if r["trace_window"]}
        )
        == 1,
        "combined report and ranks.json": (run / "report.json").is_file()
        and (run / "ranks.json").is_file(),
    }
    if gpu:
        checks["GPU kernels in every trace"] = bool(present) and all(
            r["kernels"] > 0 for r in present
        )
    if backend == "nccl":
        checks["NCCL kernels in every trace"] = bool(present) and all(
            r["nccl_kernels"] > 0 for r in present
        )
    return {
        "run": run.name,
        "nproc": nproc,
        "backend": backend,
        "exit_code": code,
        "ranks": ranks,
        "ranks_json": json.loads((run / "ranks.json").read_text())
        if (run / "ranks.json").is_file()
        else None,
        "checks": checks,
    }


def print_table(summary: dict[str, Any]) -> None:
    print(
        f"run {summary['run']}: {summary['nproc']} ranks, {summary['backend']}, exit {summary['exit_code']}"
    )
    print(
        f"{'rank':>4} {'gpu':<28} {'window':<14} {'steps':>5} {'kernels':>7} {'step ms':>8} {'nvml':>4}"
    )
    for r in summary["ranks"]:
        if not r["present"]:
            print(f"{r['rank']:>4} (no bundle)")
            continue
        window = f"{r['window']['first_step']}..+{r['window']['steps']}" if r["window"] else "-"
        step = f"{r['step_ms']:.2f}" if isinstance(r["step_ms"], (int, float)) else "-"
        print(
            f"{r['rank']:>4} {str(r['gpu'])[:28]:<28} {window:<14} {len(r['profiler_steps']):>5} {r['kernels']:>7} "
            f"{step:>8} {r['nvml_samples'] or 0!s:>4}"
        )
    for name, ok in summary["checks"].items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")


if __name__ == "__main__":
    sys.exit(main())
