"""Is gpudoctor diff's noise model right on a real GPU? Two targets of issue 18:

(a) two runs of the same healthy program: "no difference beyond noise" in at least 19 of 20 pairs;
(b) a planted 3% slowdown in a GPU-bound step (extra bf16 matmuls appended to the step) is
    detected ("slower") with the default settings, in N of N trials.

    PYTHONPATH=src python3 benchmarks/bench_diff_noise.py --out DIR [--pairs 20] [--trials 8]

Design (about 4-5 minutes on one H100): ``--workers`` processes (4) run one after the other, so
that a pair's two runs come from two processes, as BEFORE and AFTER do (a fresh CUDA context,
allocator and clocks each time). Each worker builds the lab's ``healthy_train`` workload (GPT-like,
bf16 autocast, SDPA, fused AdamW, ~27 ms per step on an H100), then makes captures the way
``gpudoctor run`` does, in-process: a CaptureSession finds the optimizer steps by itself, leaves
``--skip`` steps unprofiled (the last half of them are the unprofiled samples), profiles
``--steps``, times ``--calibrate`` more, and the run directory gets ``trace.json.gz`` and
``env.json`` (no report: ``diff`` analyzes the traces itself). Worker k's base captures are paired
with worker k+1's (noise pairs); its slow captures (the step plus the planted matmuls) with the
base captures of another worker (slowdown trials). The planted cost is calibrated in each worker
against the step time measured there, and measured back (``realized_pct``).

Writes ``DIR/diff-noise.json`` and ``DIR/diff-noise.md`` and prints the table last. ``--device cpu``
is a smoke run of the plumbing (timings mean nothing there).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parent.parent / "src"


# --- worker: captures in one process --------------------------------------------------------------


def _timed_steps(torch: Any, step: Any, n: int, cuda: bool) -> list[float]:
    """ms per step of ``n`` steps, each between two CUDA events (wall clock on the CPU)."""
    out = []
    for _ in range(n):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b))
        else:
            t = time.perf_counter()
            step()
            out.append((time.perf_counter() - t) * 1e3)
    return out


def planted_slowdown(torch: Any, work: Any, device: str, pct: float) -> tuple[Any, dict[str, Any]]:
    """A step that runs ``work.step()`` then bf16 matmuls costing ``pct`` % of the step."""
    cuda = device.startswith("cuda")
    n = 2048 if cuda else 64
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)

    def mm() -> None:
        torch.mm(a, b, out=c)

    _timed_steps(torch, work.step, 5, cuda)
    step_ms = statistics.median(_timed_steps(torch, work.step, 20, cuda))
    mm_ms = statistics.median(_timed_steps(torch, lambda: [mm() for _ in range(20)], 10, cuda)) / 20
    reps = max(1, round(pct / 100 * step_ms / mm_ms))

    def slow_step() -> None:
        work.step()
        for _ in range(reps):
            mm()

    base = statistics.median(_timed_steps(torch, work.step, 20, cuda))
    slow = statistics.median(_timed_steps(torch, slow_step, 20, cuda))
    return slow_step, {
        "matmul_n": n,
        "matmuls_per_step": reps,
        "matmul_ms": round(mm_ms, 5),
        "step_ms": round(step_ms, 4),
        "realized_pct": round(100 * (slow / base - 1), 3),
    }


def capture(torch: Any, step: Any, run_dir: Path, args: argparse.Namespace) -> Path:
    """One ``gpudoctor run``-like capture of ``step``: trace.json.gz and env.json in ``run_dir``."""
    from gpudoctor.capture.bundle import capture_facts, environment, write_json
    from gpudoctor.capture.session import CaptureConfig, CaptureSession

    config = CaptureConfig(
        steps=args.steps, skip=args.skip, calibration_steps=args.calibrate, nvml_interval_s=0
    )
    session = CaptureSession(config, run_dir)
    session.start()
    try:
        for _ in range(args.skip + 1 + args.steps + args.calibrate + 2):
            step()
    finally:
        session.close()
    result = session.result
    if result.trace_path is None:
        raise RuntimeError(f"no window was recorded in {run_dir} ({result.steps_seen} steps seen)")
    env = environment()
    env["program"] = {"target": "healthy_train", "args": [], "is_module": False, "git_commit": None}
    env["capture"] = capture_facts(result, config, None)
    write_json(run_dir / "env.json", env)
    return run_dir


def worker(args: argparse.Namespace) -> None:
    import torch

    from gpudoctor.lab.healthy import build_train

    out = Path(args.worker_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = build_train(args.device)
    slow_step, planted = planted_slowdown(torch, work, args.device, args.slowdown)
    runs: list[dict[str, Any]] = []
    for i in range(max(args.base, args.slow)):  # interleaved: drift hits both kinds alike
        if i < args.base:
            runs.append(
                {"kind": "base", "path": str(capture(torch, work.step, out / f"base-{i}", args))}
            )
        if i < args.slow:
            runs.append(
                {"kind": "slow", "path": str(capture(torch, slow_step, out / f"slow-{i}", args))}
            )
    (out / "worker.json").write_text(json.dumps({"planted": planted, "runs": runs}, indent=1))


# --- driver: workers, pairs, diffs, table ----------------------------------------------------------


def run_worker(k: int, args: argparse.Namespace, base: int, slow: int) -> dict[str, Any]:
    folder = Path(args.out) / "runs" / f"worker{k}"
    cmd = [
        sys.executable,
        __file__,
        "--worker-dir",
        str(folder),
        "--base",
        str(base),
        "--slow",
        str(slow),
        "--device",
        args.device,
        "--skip",
        str(args.skip),
        "--steps",
        str(args.steps),
        "--calibrate",
        str(args.calibrate),
        "--slowdown",
        str(args.slowdown),
        "--out",
        args.out,
    ]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
    )
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"worker {k} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads((folder / "worker.json").read_text())


def diff_pair(pair: tuple[str, str, str]) -> dict[str, Any]:
    from gpudoctor.diff import diff_paths

    kind, before, after = pair
    d = diff_paths(before, after)
    s = d.step
    return {
        "kind": kind,
        "before": before,
        "after": after,
        "verdict": d.verdict,
        "samples": d.samples_kind,
        "n": [s.n_before, s.n_after],
        "change_pct": round(s.change_pct, 3),
        "ci_pct": [
            None if s.ci_low_pct is None else round(s.ci_low_pct, 3),
            None if s.ci_high_pct is None else round(s.ci_high_pct, 3),
        ],
        "method": s.method,
    }


def make_pairs(
    workers: list[dict[str, Any]], pairs: int, trials: int
) -> list[tuple[str, str, str]]:
    """Noise pairs: worker k's base i vs worker k+1's base i (k even); trials: worker k's base i vs
    worker k+1's slow i (k odd, wrapping), so every pair crosses two processes."""
    base = [[r["path"] for r in w["runs"] if r["kind"] == "base"] for w in workers]
    slow = [[r["path"] for r in w["runs"] if r["kind"] == "slow"] for w in workers]
    w = len(workers)
    noise = [
        ("noise", base[k][i], base[k + 1][i])
        for k in range(0, w - 1, 2)
        for i in range(len(base[k]))
    ]
    slows = [
        ("slowdown", base[k][i], slow[(k + 1) % w][i])
        for i in range(max(map(len, slow), default=0))
        for k in range(w)
        if i < len(slow[(k + 1) % w]) and i < len(base[k])
    ]
    return noise[:pairs] + slows[:trials]


def environment_line(device: str) -> dict[str, Any]:
    import torch

    return {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "python": sys.version.split()[0],
    }


def table(result: dict[str, Any]) -> str:
    noise = [p for p in result["pairs"] if p["kind"] == "noise"]
    slow = [p for p in result["pairs"] if p["kind"] == "slowdown"]
    same = sum(p["verdict"] == "no difference beyond noise" for p in noise)
    caught = sum(p["verdict"] == "slower" for p in slow)
    planted = [w["planted"]["realized_pct"] for w in result["workers"]]
    changes = sorted(abs(p["change_pct"]) for p in noise)
    p95 = changes[min(len(changes) - 1, int(0.95 * len(changes)))] if changes else None
    e = result["environment"]
    lines = [
        f"## gpudoctor diff noise: {e['device']}, torch {e['torch']}, {e['date_utc']}",
        "",
        "| test | target | result |",
        "|---|---|---|",
        f"| two runs of healthy_train: no difference beyond noise | >= 19/20 | {same}/{len(noise)} |",
        (
            f"| planted {result['settings']['slowdown']:g}% slowdown (realized {min(planted, default=0):.2f}-"
            f"{max(planted, default=0):.2f}%) detected as slower | N/N | {caught}/{len(slow)} |"
        ),
        (
            f"| noise pairs: median / 95th percentile / max of abs(change) | floor 1% | "
            f"{statistics.median(changes) if changes else 0:.2f}% / {p95 or 0:.2f}% / {max(changes, default=0):.2f}% |"
        ),
        "",
        "| pair | verdict | change | 95% interval | samples |",
        "|---|---|---|---|---|",
    ]
    for i, p in enumerate(result["pairs"]):
        lo, hi = p["ci_pct"]
        ci = "-" if lo is None else f"{lo:+.2f}% .. {hi:+.2f}%"
        lines.append(
            f"| {p['kind']} {i} | {p['verdict']} | {p['change_pct']:+.2f}% | {ci} | "
            f"{p['samples']} {p['n'][0]}/{p['n'][1]} |"
        )
    s = result["settings"]
    lines += [
        "",
        (
            f"settings: {s['workers']} worker processes, --skip {s['skip']} --steps {s['steps']} "
            f"--calibrate {s['calibrate']}; wall {result['wall_s']:.0f} s"
        ),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", required=True, help="Folder for the run directories, the JSON and the table."
    )
    parser.add_argument(
        "--pairs", type=int, default=20, help="Noise pairs (two runs of the same program)."
    )
    parser.add_argument("--trials", type=int, default=8, help="Planted-slowdown trials.")
    parser.add_argument(
        "--workers", type=int, default=4, help="Worker processes (an even number, 2 or more)."
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--skip",
        type=int,
        default=20,
        help="Unprofiled steps before the window (half are samples).",
    )
    parser.add_argument("--steps", type=int, default=3, help="Profiled steps.")
    parser.add_argument(
        "--calibrate", type=int, default=5, help="Unprofiled steps after the window."
    )
    parser.add_argument(
        "--slowdown", type=float, default=3.0, help="The planted slowdown, percent of the step."
    )
    parser.add_argument("--worker-dir", help=argparse.SUPPRESS)
    parser.add_argument("--base", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--slow", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_dir:
        worker(args)
        return
    if args.workers < 2 or args.workers % 2:
        parser.error("--workers must be an even number, 2 or more")
    start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base_each = -(-2 * args.pairs // args.workers)  # ceil: 2 x pairs base captures in all
    slow_each = -(-args.trials // args.workers)
    workers = [run_worker(k, args, base_each, slow_each) for k in range(args.workers)]
    pairs = make_pairs(workers, args.pairs, args.trials)
    with ProcessPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        diffs = list(pool.map(diff_pair, pairs))
    result = {
        "environment": environment_line(args.device),
        "settings": {
            k: getattr(args, k)
            for k in (
                "pairs",
                "trials",
                "workers",
                "device",
                "skip",
                "steps",
                "calibrate",
                "slowdown",
            )
        },
        "workers": workers,
        "pairs": diffs,
        "wall_s": round(time.perf_counter() - start, 1),
    }
    (out / "diff-noise.json").write_text(json.dumps(result, indent=1) + "\n")
    text = table(result)
    (out / "diff-noise.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
