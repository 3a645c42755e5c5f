"""Validate the multi-GPU findings on planted causes: each case of tests/programs/multigpu/ runs sick
(captured and diagnosed by `gpudoctor run --nproc N`) and fixed (its twin, the same command with
``--fixed``, the pipeline's with ``--balanced``; its unprofiled step read from env.json), and the
top multi-GPU finding's predicted saving is set against the measured one (sick unprofiled step -
fixed unprofiled step).

    PYTHONPATH=src python3 scripts/validate_multigpu.py --out DIR [--nproc N] [--only CASE ...] [--cpu]

N defaults to the number of GPUs (NCCL, one GPU per rank); ``--cpu``: gloo on the CPU with tiny
models, to try the whole path without a GPU. The healthy DDP and FSDP2 runs are the fixed twins of
``ddp_huge_bucket`` and ``fsdp2_no_prefetch`` (the same programs with good settings): their
multi-GPU findings are listed under the table. Runs stop being started once ``--budget-s`` would be
passed (default 420 s), so the script ends inside 9 minutes; skipped runs are named.

Writes into DIR (at most 8 files): ``console.txt`` (every job's command, exit code, stderr tail),
``summary.json`` (per case: the finding, numbers, wall times), ``reports.tar.gz`` (every run
directory without its traces), ``traces-1.tar.gz`` ... (the sick runs' traces, at most 4 archives
of 14 MB); prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs" / "multigpu"
MULTI_IDS = ("straggler", "exposed-comm", "slow-collective", "stage-imbalance", "pipeline-bubble")
MAJOR = ("major", "critical")
# gpudoctor run --skip 10 --steps 5 --calibrate 5: one warm-up step more, so 21 program steps are
# needed; the program is stopped after the calibration, so a few more cost nothing
CAPTURE = ("--skip", "10", "--steps", "5", "--calibrate", "5", "--rank-timeout", "180")
PROGRAM_STEPS = ("--steps", "30")
RUN_TIMEOUT_S = 240
TAR_LIMIT = 14 << 20  # bytes per traces archive: under the 16 MiB a returned file may hold
MAX_TRACE_TARS = 4
LAST = "{last}"  # the planted rank: the last one, so rank 0 (which writes the report) is a waiter


@dataclass(frozen=True)
class Case:
    name: str
    program: str
    sick: tuple[str, ...]
    fixed: tuple[str, ...]
    expected: str  # the finding id expected first among the multi-GPU ones
    detail: str = ""  # what else is expected: the rank, the cause, the part of exposed-comm
    cause: str = ""  # the straggler's expected cause, or exposed-comm's overlap_not_taken_cause ("": not checked)


CASES = (
    Case(
        "straggler_sleep",
        "ddp_gpt_straggler.py",
        ("--slow-rank", LAST, "--delay-ms", "20"),
        ("--fixed",),
        "straggler",
        "rank last, host-work",
        "host-work",
    ),
    Case(
        "straggler_loader",
        "ddp_gpt_straggler.py",
        ("--slow-loader", LAST, "--delay-ms", "20"),
        ("--fixed",),
        "straggler",
        "rank last, input-pipeline",
        "input-pipeline",
    ),
    # GPU-bound batches: at the default 8 rows the step is bound by launches and a rank's extra GPU
    # work hides behind them (2x H200: 0.04 ms measured); a sync costs the GPU work queued behind it
    Case(
        "straggler_batch",
        "ddp_gpt_straggler.py",
        ("--bigger-batch-rank", LAST, "--batch", "32"),
        ("--batch", "32", "--fixed"),
        "straggler",
        "rank last, more-work",
        "more-work",
    ),
    Case(
        "straggler_sync",
        "ddp_gpt_straggler.py",
        ("--sync-rank", LAST, "--batch", "32"),
        ("--batch", "32", "--fixed"),
        "straggler",
        "rank last, host-sync",
        "host-sync",
    ),
    # 16 rows: a backward longer than the gradients' all-reduce, so that good buckets can hide it
    Case(
        "ddp_huge_bucket",
        "ddp_gpt_overlap.py",
        ("--huge-bucket", "--batch", "16"),
        ("--huge-bucket", "--batch", "16", "--fixed"),
        "exposed-comm",
        "overlap not taken, bucket",
        "bucket",
    ),
    Case(
        "ddp_accum_no_sync",
        "ddp_gpt_overlap.py",
        ("--accum", "4"),
        ("--accum", "4", "--fixed"),
        "exposed-comm",
        "overlap not taken, accumulation",
        "accumulation",
    ),
    Case(
        "fsdp2_no_prefetch", "fsdp2_gpt.py", (), ("--fixed",), "exposed-comm", "overlap not taken"
    ),
    # the twin is the finding's fix, the same layers moved between the stages (--balanced); --fixed
    # would remove the extra layers, a larger saving than balancing (pp_two_stage.py's docstring)
    Case(
        "pipeline_imbalance",
        "pp_two_stage.py",
        ("--microbatches", "4", "--imbalance"),
        ("--microbatches", "4", "--balanced"),
        "stage-imbalance",
        "rank last",
    ),
)
HEALTHY = {
    "ddp": ("ddp_gpt_overlap.py", ("--huge-bucket", "--batch", "16", "--fixed")),
    "fsdp2": ("fsdp2_gpt.py", ("--fixed",)),
}


def concrete(args: tuple[str, ...], nproc: int, delay_ms: float | None = None) -> tuple[str, ...]:
    """A case's arguments for ``nproc`` ranks; ``delay_ms`` replaces a planted delay's length."""
    out = [str(nproc - 1) if a == LAST else a for a in args]
    if delay_ms is not None and "--delay-ms" in out:
        out[out.index("--delay-ms") + 1] = f"{delay_ms:g}"
    return tuple(out)


def top_multi(report: dict[str, Any]) -> dict[str, Any] | None:
    """The first multi-GPU finding of a combined report (findings come ranked) that is not an info
    note ("No straggler: ... within noise" is one, saving nothing)."""
    return next(
        (
            f
            for f in report.get("findings", [])
            if f.get("id") in MULTI_IDS and f.get("severity") != "info"
        ),
        None,
    )


def describe(finding: dict[str, Any] | None) -> str:
    """``id`` plus what says which rank and why: ``straggler r1 input-pipeline``."""
    if finding is None:
        return "none"
    n = finding.get("evidence", {}).get("numbers", {})
    if finding["id"] == "straggler":
        return f"straggler r{n.get('rank')} {n.get('cause', '')}".rstrip()
    if finding["id"] == "stage-imbalance" and "slowest_rank" in n:
        return f"stage-imbalance r{n['slowest_rank']}"
    if finding["id"] == "exposed-comm":
        parts = {
            "wait": n.get("wait_for_slowest_ms", 0.0),
            "not-overlapped": n.get("overlap_not_taken_ms", 0.0),
            "transfer": n.get("transfer_ms", 0.0),
        }
        most = max(parts, key=lambda k: parts[k])
        cause = n.get("overlap_not_taken_cause") if most == "not-overlapped" else ""
        return f"exposed-comm, most {most}" + (f" ({cause})" if cause else "")
    return finding["id"]


def judge(
    case: Case,
    report: dict[str, Any] | None,
    sick_ms: float | None,
    fixed_ms: float | None,
    nproc: int,
) -> dict[str, Any]:
    """One table row: the expected finding against the top multi-GPU one, predicted vs measured."""
    top = top_multi(report) if report is not None else None
    numbers = (top or {}).get("evidence", {}).get("numbers", {})
    hit = top is not None and top["id"] == case.expected
    if hit and case.expected in ("straggler", "stage-imbalance"):
        hit = numbers.get("rank", numbers.get("slowest_rank")) == nproc - 1
    predicted = top.get("saving_ms") if top else None
    found_cause = numbers.get("cause", numbers.get("overlap_not_taken_cause"))
    measured = None if sick_ms is None or fixed_ms is None else round(sick_ms - fixed_ms, 4)
    ratio = (
        round(predicted / measured, 3)
        if predicted is not None and measured and measured > 0
        else None
    )
    return {
        "case": case.name,
        "expected": f"{case.expected} ({case.detail.replace('last', str(nproc - 1))})",
        "found": "no report" if report is None else describe(top),
        "hit": hit,
        "cause": found_cause,
        "cause_ok": bool(case.cause) and hit and found_cause == case.cause,
        "predicted_ms": predicted,
        "measured_ms": measured,
        "ratio": ratio,
        "sick_step_ms": sick_ms,
        "fixed_step_ms": fixed_ms,
        "within_1_5x": ratio is not None and 1 / 1.5 <= ratio <= 1.5,
    }


def healthy_row(name: str, report: dict[str, Any] | None) -> dict[str, Any]:
    """A healthy run's multi-GPU findings; ``ok`` when none is major or critical."""
    found = [f for f in (report or {}).get("findings", []) if f.get("id") in MULTI_IDS]
    return {
        "run": name,
        "ok": report is not None and not any(f.get("severity") in MAJOR for f in found),
        "findings": [
            f"{describe(f)} {f.get('severity')} {f.get('saving_ms', 0.0):.2f} ms" for f in found
        ],
    }


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def format_table(
    rows: list[dict[str, Any]], healthy: list[dict[str, Any]], walls: dict[str, float]
) -> str:
    head = (
        f"{'case':<19} {'hit':<4} {'top multi-GPU finding':<34} {'pred ms':>8} {'meas ms':>8} {'ratio':>6} "
        f"{'sick':>7} {'fixed':>7} {'wall s':>6}"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['case']:<19} {'yes' if r['hit'] else 'NO':<4} {r['found'][:34]:<34} "
            f"{_ms(r['predicted_ms']):>8} {_ms(r['measured_ms']):>8} "
            f"{'-' if r['ratio'] is None else format(r['ratio'], '.2f'):>6} {_ms(r['sick_step_ms']):>7} "
            f"{_ms(r['fixed_step_ms']):>7} {walls.get(r['case'], 0.0):>6.0f}"
        )
    for h in healthy:
        lines.append(
            f"healthy {h['run']}: {'ok' if h['ok'] else 'MAJOR FINDING'}; "
            f"{'; '.join(h['findings']) or 'no multi-GPU finding'}"
        )
    return "\n".join(lines)


def unprofiled_ms(run: Path) -> float | None:
    """The job's unprofiled step: the slowest rank's (env.json), as every rank waits for it."""
    steps = []
    for env in sorted(run.glob("rank*/env.json")):
        value = json.loads(env.read_text()).get("capture", {}).get("unprofiled_step_ms")
        if isinstance(value, (int, float)):
            steps.append(float(value))
    return round(max(steps), 4) if steps else None


class Runner:
    """Runs `gpudoctor run --nproc N` jobs once each (twins shared by cases are run once), within a
    budget of wall time."""

    def __init__(self, nproc: int, cpu: bool, work: Path, budget_s: float) -> None:
        self.nproc, self.cpu, self.work, self.budget_s = nproc, cpu, work, budget_s
        self.start = time.monotonic()
        self.done: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}
        self.console: list[str] = []

    def run(self, label: str, program: str, args: tuple[str, ...]) -> dict[str, Any]:
        key = (program, args)
        if key in self.done:
            return self.done[key]
        spent = time.monotonic() - self.start
        walls = [r["wall_s"] for r in self.done.values() if "wall_s" in r]
        expected = max(walls) if walls else 60.0
        if spent + expected > self.budget_s:
            self.done[key] = res = {
                "skipped": f"budget: {spent:.0f} s spent, a run takes ~{expected:.0f} s"
            }
            return res
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
            ),
            OMP_NUM_THREADS="1",
        )
        if self.cpu:
            env["CUDA_VISIBLE_DEVICES"] = ""
        out = self.work / label
        cmd = [
            sys.executable,
            "-m",
            "gpudoctor",
            "run",
            "--nproc",
            str(self.nproc),
            "--out",
            str(out),
            *CAPTURE,
            str(PROGRAMS / program),
            *PROGRAM_STEPS,
            *args,
        ]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S, check=False
            )
            code, tail = proc.returncode, proc.stderr[-3000:]
        except subprocess.TimeoutExpired as e:
            code, tail = 124, f"timed out after {RUN_TIMEOUT_S} s\n{(e.stderr or b'')[-3000:]!r}"
        wall = round(time.monotonic() - t0, 1)
        self.console.append(f"$ {' '.join(cmd)}\n[exit {code}, {wall} s]\n{tail}\n")
        runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.is_dir() else []
        run = runs[-1] if runs else None
        report = (
            json.loads((run / "report.json").read_text())
            if run and (run / "report.json").is_file()
            else None
        )
        self.done[key] = res = {
            "label": label,
            "exit": code,
            "wall_s": wall,
            "run": str(run) if run else None,
            "report": report,
            "unprofiled_ms": unprofiled_ms(run) if run else None,
        }
        print(f"{label}: exit {code}, {wall} s", file=sys.stderr, flush=True)
        return res


def pack(out: Path, results: list[dict[str, Any]], sick_labels: set[str]) -> list[str]:
    """reports.tar.gz (every run without traces), then the sick runs' traces in archives of at most
    TAR_LIMIT bytes; returns the traces that did not fit."""
    runs = [(r["label"], Path(r["run"])) for r in results if r.get("run")]
    with tarfile.open(out / "reports.tar.gz", "w:gz") as tar:
        for label, run in runs:
            for f in sorted(run.rglob("*")):
                if f.is_file() and not f.name.startswith("trace"):
                    tar.add(f, arcname=f"{label}/{f.relative_to(run)}")
    traces = [
        (label, f)
        for label, run in runs
        if label in sick_labels
        for f in sorted(run.rglob("trace*.json.gz"))
    ]
    left, bins, size = [], [[]], 0
    for label, f in traces:
        n = f.stat().st_size
        if size + n > TAR_LIMIT and bins[-1]:
            if len(bins) == MAX_TRACE_TARS:
                left.append(f"{label}/{f.parent.name}/{f.name}")
                continue
            bins.append([])
            size = 0
        bins[-1].append((label, f))
        size += n
    for i, items in enumerate(b for b in bins if b):
        with tarfile.open(out / f"traces-{i + 1}.tar.gz", "w") as tar:  # already gzipped inside
            for label, f in items:
                tar.add(f, arcname=f"{label}/{f.parent.name}/{f.name}")
    return left


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--nproc", type=int, default=0)
    ap.add_argument(
        "--only", nargs="+", default=None, choices=[c.name for c in CASES], metavar="CASE"
    )
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU, tiny models")
    ap.add_argument(
        "--budget-s", type=float, default=420.0, help="start no run that would end past this"
    )
    ap.add_argument(
        "--delay-ms",
        type=float,
        default=None,
        help="the planted delay of the straggler cases (default 20 ms); on a shared CPU a longer one "
        "stands out of the ranks' own noise",
    )
    args = ap.parse_args()
    import torch

    gpus = 0 if args.cpu else torch.cuda.device_count()
    nproc = args.nproc or (2 if args.cpu else gpus)
    if nproc < 2 or (not args.cpu and gpus < nproc):
        print(
            f"error: needs at least 2 GPUs, one per rank ({gpus} visible, --nproc {nproc}); "
            "--cpu tries it on the CPU",
            file=sys.stderr,
        )
        return 2
    cases = [c for c in CASES if args.only is None or c.name in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    rows, walls, healthy = [], {}, []
    with tempfile.TemporaryDirectory(prefix="gpudoctor-multigpu-") as tmp:
        runner = Runner(nproc, args.cpu, Path(tmp), args.budget_s)
        for case in cases:
            sick = runner.run(
                f"{case.name}-sick", case.program, concrete(case.sick, nproc, args.delay_ms)
            )
            fixed = runner.run(f"{case.name}-fixed", case.program, concrete(case.fixed, nproc))
            row = judge(
                case,
                sick.get("report"),
                sick.get("unprofiled_ms"),
                fixed.get("unprofiled_ms"),
                nproc,
            )
            row["skipped"] = [r["skipped"] for r in (sick, fixed) if "skipped" in r]
            if row["skipped"]:
                row["found"] = "skipped: time budget"
            rows.append(row)
            walls[case.name] = sick.get("wall_s", 0.0) + (
                fixed.get("wall_s", 0.0) if fixed.get("label") == f"{case.name}-fixed" else 0.0
            )
        for name, (program, extra) in HEALTHY.items():
            done = runner.done.get((program, extra))
            if done is not None and "report" in done:
                healthy.append(healthy_row(name, done["report"]))
        results = [r for r in runner.done.values() if "label" in r]
        left = pack(args.out, results, {f"{c.name}-sick" for c in cases})
        (args.out / "console.txt").write_text("".join(runner.console))
    total = round(time.monotonic() - runner.start, 1)
    summary = {
        "nproc": nproc,
        "backend": "gloo" if args.cpu else "nccl",
        "torch": torch.__version__,
        "gpu": None if args.cpu else torch.cuda.get_device_name(0),
        "total_wall_s": total,
        "rows": rows,
        "healthy": healthy,
        "traces_left_out": left,
        "runs": [{k: v for k, v in r.items() if k != "report"} for r in runner.done.values()],
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(
        f"{nproc} ranks, {summary['backend']}, {summary['gpu'] or 'CPU'}, torch {torch.__version__}, "
        f"{total:.0f} s in all"
    )
    print(format_table(rows, healthy, walls))
    return 0 if all(r["hit"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
