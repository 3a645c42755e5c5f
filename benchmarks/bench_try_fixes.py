"""Check ``gpudoctor run --try-fixes`` against the twins' own fixes (issue 19's first target).

For each twin in tests/programs/twins whose fix is a knob (TWIN_KNOBS below), or with ``--lab`` for each
of the lab's traps whose fix is a knob (LAB_KNOBS: the trap run as a plain program by
``python -m gpudoctor.lab.program TRAP``, its fixed twin by the same with ``--fixed``):

1. ``python PROG ARGS`` and ``python PROG ARGS --fixed``, plainly: the program's own ms lines (its
   ``timing_regex``; the first log line dropped as warm-up, median; benchmarks/run_twins.py's
   ``plain_run``) give the true sick and fixed step times; twin speedup = sick / fixed;
2. ``python -m gpudoctor run --try-fixes --fixes KNOB --no-trial-trace --json --skip S --steps 3
   --calibrate 0 --out RUNS/NAME PROG ARGS`` on the sick one; the trial of KNOB in the JSON's
   ``trials[]``: its measured speedup with the 95% interval, verdict, predicted speedup (when the
   finding was diagnosed), numerics, status;
3. ratio = knob's measured speedup / twin's speedup; ``match`` when 0.9 <= ratio <= 1.1 (the issue's
   "within 10%"), ``differs`` otherwise (the EXPECTED column says where a difference is expected:
   the knob is not the twin's whole fix), ``error`` when no trial came back.

With ``--by-hand``, the programs of tests/programs/byhand (the issue's third target: knob speedups
against measurements made by hand): each program's manifest entry lists, per knob, the flags that make
the knob's change by hand; step 1 runs the program with those flags instead of ``--fixed`` (the plain
run is shared by a program's knobs), and "twin" in the table reads "made by hand". ``--hand-rounds N``
runs the plain and the fixed program N times each, alternating, and takes each side's geometric mean.

    python benchmarks/bench_try_fixes.py                     # CPU smoke run: the mechanics, not the timings
    python benchmarks/bench_try_fixes.py --gpu-args --out $OUT/try_fixes --deadline 330

On an H100 with torch 2.11 a twin takes an estimated 50-90 s (two plain runs, the diagnosis, the
control before and after, and the knob's trial: six Python start-ups; the compile twins longest,
so they run last): --deadline 330 keeps one device command under 6 minutes, and the twins not
started by then are listed as skipped: run them in a second command with --only. On a lent GPU machine msgspec is not installed: carry .whl (its cp312 wheel):

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:src
    python3 benchmarks/bench_try_fixes.py --gpu-args --out $OUT/try_fixes --deadline 330

Writes try_fixes.json after every twin (a run cut short keeps what it measured) and try_fixes.md at
the end; prints the table last. Failures are recorded, never fatal.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_gallery import (
    add_common_arguments,
    failure_message,
    fmt,
    newest_run_dir,
    read_json,
    run_command,
)
from run_twins import MANIFEST, ROOT, plain_run

BY_HAND_MANIFEST = ROOT / "tests" / "programs" / "byhand" / "manifest.json"
BY_HAND_SKIP = 20

MATCH_BAND = (0.9, 1.1)

# twin -> (knob, --skip, what may make the knob's speedup differ from the twin's --fixed)
TWIN_KNOBS: dict[str, tuple[str, int, str]] = {
    "loader_no_workers": (
        "loader-workers",
        20,
        "the twin uses 6 workers and non_blocking copies; the knob min(8, CPUs)",
    ),
    "tf32_gpt": (
        "bf16-autocast",
        20,
        "the twin's autocast also covers the loss; the knob the outermost module",
    ),
    "optimizer_foreach_off": ("optimizer-fused", 20, "same fix: Adam(fused=True)"),
    "pageable_h2d": (
        "pin-memory",
        20,
        (
            "the twin pins its dataset tensors, no DataLoader: the knob finds nothing "
            "(expected: not applied)"
        ),
    ),
    "empty_cache_varlen": (
        "no-empty-cache",
        30,
        "the twin also buckets its shapes; the knob only skips empty_cache",
    ),
    "unfused_gelu_norm": (
        "compile",
        20,
        "the twin calls the fused F.gelu / F.layer_norm; the knob compiles",
    ),
    "tiny_mlp_launch": (
        "compile-reduce-overhead",
        60,
        (
            "the twin graphs the whole step (optimizer too); the knob "
            "the model's forward and backward"
        ),
    ),
}

# --lab: the lab's traps run as plain programs (python -m gpudoctor.lab.program TRAP [--fixed]), each
# against its fixed twin: trap -> (knob, --skip, what may make the knob's speedup differ from the twin's)
LAB_PROGRAM = ("-m", "gpudoctor.lab.program")
LAB_STEPS = 300
LAB_STEPS_FOR = {
    "memory_pressure": 150
}  # 112 ms a step sick on an H100 (the lab's table): 300 would take 34 s
LAB_TIMING_REGEX = r"step \d+: ([0-9.]+) ms/step"
LAB_KNOBS: dict[str, tuple[str, int, str]] = {
    "input_pipeline": (
        "loader-workers",
        20,
        "the twin uses 12 workers and non_blocking copies; the knob min(8, CPUs)",
    ),
    "pageable_copy": (
        "pin-memory",
        20,
        (
            "the trap copies its own pageable tensor, no DataLoader: the knob finds "
            "nothing (expected: not applied)"
        ),
    ),
    "fp32_matmul": ("bf16-autocast", 20, "same fix: bf16 autocast around the model"),
    "optimizer_loop": ("optimizer-fused", 20, "same fix: AdamW(fused=True)"),
    "launch_bound": (
        "compile-reduce-overhead",
        40,
        (
            "the twin replays one CUDA graph of the eager forward; the knob "
            "Inductor's compiled forward under CUDA graphs"
        ),
    ),
    "unfused_elementwise": (
        "compile",
        20,
        "the twin calls the built-in fused operators; the knob compiles",
    ),
    "allocator_churn": (
        "no-empty-cache",
        20,
        (
            "the twin preallocates one workspace; the knob makes empty_cache() a "
            "no-op under expandable segments"
        ),
    ),
    "memory_pressure": (
        "expandable-segments",
        10,
        (
            "the twin splits the work into equal micro-batches; the knob "
            "lets the allocator grow segments instead"
        ),
    ),
}


def target_of(entry: dict[str, Any]) -> list[str]:
    """How the program is named on a command line: its script, or ``-m gpudoctor.lab.program TRAP``."""
    if entry.get("lab"):
        return [*LAB_PROGRAM, entry["name"]]
    return [str((BY_HAND_MANIFEST if entry.get("hand") else MANIFEST).parent / entry["file"])]


def by_hand_cases() -> dict[str, tuple[dict[str, Any], str, int, str, list[str]]]:
    """program:knob -> (entry, knob, --skip, how the hand-made change differs, the flags that make it)."""
    cases = {}
    for entry in json.loads(BY_HAND_MANIFEST.read_text())["programs"]:
        for hand in entry["hand"]:
            cases[f"{entry['name']}:{hand['knob']}"] = (
                entry,
                hand["knob"],
                BY_HAND_SKIP,
                hand["differs"],
                hand["args"],
            )
    return cases


def lab_entry(trap: str) -> dict[str, Any]:
    """A lab trap as the twins' manifest would describe it."""
    return {
        "name": trap,
        "lab": True,
        "args_gpu": ["--steps", str(LAB_STEPS_FOR.get(trap, LAB_STEPS))],
        "args_cpu": ["--steps", "40"],
        "timing_regex": LAB_TIMING_REGEX,
        "fix": "--fixed",
    }


def try_fixes_run(
    entry: dict[str, Any],
    knob: str,
    skip: int,
    args: list[str],
    opts: argparse.Namespace,
    env: dict[str, str],
    runs: Path,
) -> dict[str, Any]:
    out_dir = runs / entry["name"]
    cmd = [
        opts.python,
        "-m",
        "gpudoctor",
        "run",
        "--try-fixes",
        "--fixes",
        knob,
        "--no-trial-trace",
        "--json",
        "--skip",
        str(skip),
        "--steps",
        str(opts.steps),
        "--calibrate",
        "0",
        "--trial-timeout",
        str(opts.timeout),
        "--out",
        str(out_dir),
        *target_of(entry),
        *args,
    ]
    res = run_command(cmd, ROOT, env, 3 * opts.timeout)
    run_dir = newest_run_dir(out_dir)
    report = read_json(run_dir / "report.json") if run_dir is not None else None
    if report is None or not isinstance(report.get("trials"), list):
        trials_file = read_json(run_dir / "trials.json") if run_dir is not None else None
        report = trials_file or report
    trial = next((t for t in (report or {}).get("trials", []) if t.get("knob") == knob), None)
    findings = [f.get("id") for f in (report or {}).get("findings", [])][:5]
    return {
        "rc": res["rc"],
        "wall_s": res["wall_s"],
        "trial": trial,
        "findings": findings,
        "run_dir": str(run_dir) if run_dir else None,
        "message": "" if trial is not None else failure_message(res) or "no trial in the report",
    }


def run_one(
    entry: dict[str, Any],
    knob: str,
    skip: int,
    expected: str,
    fix_args: list[str],
    opts: argparse.Namespace,
    env: dict[str, str],
    runs: Path,
    plain_runs: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """One knob on one program: its plain and fixed runs (``fix_args``), then gpudoctor's trial.

    ``plain_runs`` keeps each program's plain run: the knobs of one program share it."""
    args = entry.get("args_gpu") if opts.gpu_args else entry.get("args_cpu")
    row: dict[str, Any] = {
        "twin": entry["name"],
        "knob": knob,
        "expected_difference": expected,
        "twin_fix": entry.get("fix") or " ".join(fix_args),
    }
    target = target_of(entry)
    per_step = float(entry.get("iterations_per_step", 1))
    regex = entry.get("timing_regex")
    if opts.hand_rounds > 1:
        # plain and fixed alternate, each round a fresh pair of processes: a host-bound program's
        # speed moves between processes (the GRU tagger unchanged: 19.5-27.8 ms in four, H100
        # 2026-11-26), and one plain run against one fixed run measures that as much as the fix
        sicks, fixeds = [], []
        for _ in range(opts.hand_rounds):
            sicks.append(
                plain_run(target[0], [*target[1:], *args], regex, per_step, opts, env)[
                    "true_step_ms"
                ]
            )
            fixeds.append(
                plain_run(target[0], [*target[1:], *args, *fix_args], regex, per_step, opts, env)[
                    "true_step_ms"
                ]
            )
        row["sick_rounds_ms"], row["fixed_rounds_ms"] = sicks, fixeds
        row["sick_ms"], row["fixed_ms"] = geometric_mean(sicks), geometric_mean(fixeds)
    else:
        if entry["name"] not in plain_runs:
            plain_runs[entry["name"]] = plain_run(
                target[0], [*target[1:], *args], regex, per_step, opts, env
            )
        sick = plain_runs[entry["name"]]
        fixed = plain_run(target[0], [*target[1:], *args, *fix_args], regex, per_step, opts, env)
        row["sick_ms"], row["fixed_ms"] = sick["true_step_ms"], fixed["true_step_ms"]
    row["twin_speedup"] = (
        round(row["sick_ms"] / row["fixed_ms"], 4) if row["sick_ms"] and row["fixed_ms"] else None
    )
    if "--iters" in args:  # the window (1 warm-up + --steps) must fit in the program's iterations
        iters = int(args[args.index("--iters") + 1])
        skip = max(2, min(skip, iters - opts.steps - 3))
    row["skip"] = skip
    tried = try_fixes_run(
        entry, knob, skip, list(args), opts, env, runs / knob if entry.get("hand") else runs
    )
    trial = tried["trial"] or {}
    row.update(
        findings=tried["findings"],
        run_dir=tried["run_dir"],
        wall_s=tried["wall_s"],
        status=trial.get("status"),
        verdict=trial.get("verdict"),
        reason=trial.get("reason"),
        predicted_speedup=trial.get("predicted_speedup"),
        measured_speedup=trial.get("measured_speedup"),
        speedup_ci95=trial.get("speedup_ci95"),
        floor_pct=trial.get("floor_pct"),
        baseline_ms=trial.get("baseline_ms"),
        trial_ms=trial.get("trial_ms"),
        effects=trial.get("effects"),
        numerics=trial.get("numerics"),
        peak_memory_bytes=trial.get("peak_memory_bytes"),
        message=tried["message"],
    )
    measured, twin = row["measured_speedup"], row["twin_speedup"]
    row["ratio"] = round(measured / twin, 3) if measured and twin else None
    if not tried["trial"]:
        row["result"] = "error"
    elif row["ratio"] is None:
        row["result"] = "not measured"
    else:
        row["result"] = "match" if MATCH_BAND[0] <= row["ratio"] <= MATCH_BAND[1] else "differs"
    return row


def geometric_mean(values: list[float | None]) -> float | None:
    """Of the runs that printed a step time; None when none did."""
    kept = [v for v in values if v]
    return round(statistics.geometric_mean(kept), 4) if kept else None


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| twin | knob | twin x | knob x [95%] | ratio | predicted | floor % | verdict | result | numerics "
        "| sick / fixed plainly, ms | control / knob trial, ms | ratio against the plain sick run |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        if r.get("result") == "skipped":
            lines.append(f"| {r['twin']} | {r['knob']} | | | | | | | skipped | | | | |")
            continue
        ci = r.get("speedup_ci95")
        knob_x = f"{fmt(r.get('measured_speedup'))}" + (
            f" [{fmt(ci[0])}-{fmt(ci[1])}]" if ci else ""
        )
        num = r.get("numerics") or {}
        numerics = (
            "-"
            if not num.get("checked")
            else ("DIVERGED" if num.get("diverged") else f"ok ({fmt(num.get('max_rel_diff'), 4)})")
        )
        verdict = r.get("verdict") or (
            f"{r['status']}: {r.get('reason')}" if r.get("status") else r.get("message")
        )
        # the knob's trial against the plain sick run instead of gpudoctor's control: where the two
        # differ, the reference moved, not the knob (the lab's input_pipeline, H100 2026-11-26: a
        # control at 42.8 ms against 32.2 plainly)
        sick, trial_ms, twin = r.get("sick_ms"), r.get("trial_ms"), r.get("twin_speedup")
        plain_ratio = fmt(sick / trial_ms / twin, 3) if sick and trial_ms and twin else "-"
        lines.append(
            f"| {r['twin']} | {r['knob']} | {fmt(r.get('twin_speedup'))} | {knob_x} | {fmt(r.get('ratio'))} "
            f"| {fmt(r.get('predicted_speedup'))} | {fmt(r.get('floor_pct'), 1)} | {verdict} | {r['result']} "
            f"| {numerics} | {fmt(sick)} / {fmt(r.get('fixed_ms'))} | {fmt(r.get('baseline_ms'))} / "
            f"{fmt(trial_ms)} | {plain_ratio} |"
        )
    notes = "\n".join(f"- {r['twin']}: {r['expected_difference']}" for r in rows)
    return head + "\n".join(lines) + "\n\nWhere a difference is expected:\n" + notes + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(ap, "twin", "try_fixes")
    ap.add_argument(
        "--lab",
        action="store_true",
        help="the lab's traps (python -m gpudoctor.lab.program TRAP) against their fixed twins",
    )
    ap.add_argument(
        "--hand-rounds",
        type=int,
        default=1,
        help="run the program plainly and fixed this many times each, alternating (geometric means)",
    )
    ap.add_argument(
        "--by-hand",
        action="store_true",
        help="the programs of tests/programs/byhand against their changes made by hand",
    )
    opts = ap.parse_args()
    if opts.steps == 5:
        opts.steps = 3  # the trials need no long window: their samples come before it
    if opts.lab and opts.by_hand:
        ap.error("--lab and --by-hand are two different sets of programs: choose one")
    if opts.by_hand:
        cases = by_hand_cases()
    else:
        entries = (
            {name: lab_entry(name) for name in LAB_KNOBS}
            if opts.lab
            else {e["name"]: e for e in json.loads(MANIFEST.read_text())["programs"]}
        )
        cases = {
            name: (entries[name], *knob_skip_expected, ["--fixed"])
            for name, knob_skip_expected in (LAB_KNOBS if opts.lab else TWIN_KNOBS).items()
            if name in entries
        }
    wanted = [n.strip() for item in opts.only for n in item.split(",") if n.strip()]
    # a by-hand program's name picks all its knobs
    wanted = [
        c
        for n in wanted
        for c in ([n] if n in cases else [k for k in cases if k.split(":")[0] == n] or [n])
    ]
    wanted = wanted or list(cases)
    unknown = [n for n in wanted if n not in cases]
    if unknown:
        noun = "trap" if opts.lab else "program" if opts.by_hand else "twin"
        ap.error(f"no knob {noun} named {', '.join(unknown)}; choose from {', '.join(cases)}")
    out = (
        opts.out or ROOT / "benchmarks" / "results" / f"try_fixes-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "runs"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            p for p in [str(opts.src), os.environ.get("PYTHONPATH", "")] if p
        ),
    )
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    meta = {
        "gpu_args": opts.gpu_args,
        "lab": opts.lab,
        "by_hand": opts.by_hand,
        "python": opts.python,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    plain_runs: dict[str, dict[str, Any]] = {}
    for name in wanted:
        entry, knob, skip, expected, fix_args = cases[name]
        if opts.deadline and time.perf_counter() - start > opts.deadline:
            rows.append(
                {
                    "twin": entry["name"],
                    "knob": knob,
                    "result": "skipped",
                    "expected_difference": expected,
                }
            )
            continue
        print(
            f"[{time.perf_counter() - start:5.0f} s] {entry['name']}: {knob}",
            file=sys.stderr,
            flush=True,
        )
        try:
            rows.append(run_one(entry, knob, skip, expected, fix_args, opts, env, runs, plain_runs))
        except Exception as exc:  # noqa: BLE001 - recorded, the next twin runs
            rows.append(
                {
                    "twin": entry["name"],
                    "knob": knob,
                    "result": "error",
                    "message": repr(exc),
                    "expected_difference": expected,
                }
            )
        (out / "try_fixes.json").write_text(
            json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
        )
    meta["wall_s"] = round(time.perf_counter() - start, 1)
    (out / "try_fixes.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    text = table(rows)
    (out / "try_fixes.md").write_text(
        f"# gpudoctor run --try-fixes vs the twins' --fixed\n\n{json.dumps(meta)}\n\n" + text
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
