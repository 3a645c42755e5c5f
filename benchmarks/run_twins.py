"""Check the doctor's PRICING on twin programs it never saw (tests/programs/twins/manifest.json).

Each twin is an ordinary script with one planted cause and a ``--fixed`` flag that applies the
standard fix and nothing else. For each twin:

1. ``python PROG ARGS`` and ``python PROG ARGS --fixed``, plainly: the program's own ms lines (its
   ``timing_regex``, first log line dropped as warm-up, median) x iterations_per_step give the TRUE
   sick and fixed step times; measured speedup = sick / fixed;
2. ``python -m gpudoctor run --skip S --steps N --out RUNS/NAME --json PROG ARGS`` on the sick one
   (PYTHONPATH=src); the run directory's report.json (else the JSON gpudoctor printed);
3. the expected finding = the best-ranked finding whose id is in ``expected_top_finding``; its
   ``predicted_speedup`` (taken against the unprofiled step) against the measured speedup:
   ratio = predicted / measured. Verdict: ``pass`` when the expected finding is the top finding
   (the first one whose severity is not info) and 0.67 <= ratio <= 1.5; ``diagnosed`` when it is
   the top finding but the ratio is outside that band (or not measured); ``missed`` otherwise;
   ``error`` when gpudoctor wrote no report.

Also recorded: the prediction for the fix as a whole (every finding whose id is expected or in
``fix_also_removes``: unprofiled step / (unprofiled step - their summed savings), the savings capped
as the doctor caps one, MAX_SAVING_SHARE of the step), the doctor's unprofiled step next to the true one, and
the top five findings. Writes twins.json after every program (a run cut short keeps what it
measured) and twins.md at the end; prints the table last. Failures are recorded, never fatal.

    python benchmarks/run_twins.py                                   # CPU args, all twins
    python benchmarks/run_twins.py --only tf32_gpt,pageable_h2d      # a few
    python benchmarks/run_twins.py --gpu-args --out $OUT/twins --deadline 500

On a lent GPU machine msgspec is not installed: carry .whl (its cp312 wheel) and run
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:src
    python3 benchmarks/run_twins.py --gpu-args --out $OUT/twins --runs /tmp/twin-runs --bundle --timeout 90 --deadline 540
(a twin takes ~25-45 s: three Python start-ups, the plain runs and the profiled one).

``--doctor-fixed`` also runs ``gpudoctor run`` on the fixed twin and records sick / fixed as the
doctor timed both without the profiler (``measured_speedup_doctor``, in the Details): the
programs' prints and the doctor's unprofiled steps were 18-94% apart on some twins, and two
processes of one program drift apart on the lent hosts
(benchmarks/BENCHMARKS-twins.md "Three new twins, then two more, and the twins again").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoctor.core.finding import MAX_SAVING_SHARE  # the doctor's own cap on one saving

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_gallery import (  # the gallery runner's helpers, imported from beside this file
    add_common_arguments,
    bundle_runs,
    failure_message,
    fmt,
    importable,
    newest_run_dir,
    parse_ms,
    read_json,
    run_command,
)

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "tests" / "programs" / "twins" / "manifest.json"
RATIO_BAND = (0.67, 1.5)  # predicted / measured counted as right (the lab's band)


def plain_run(
    script: str,
    args: list[str],
    regex: str | None,
    per_step: float,
    opts: argparse.Namespace,
    env: dict[str, str],
) -> dict[str, Any]:
    res = run_command([opts.python, script, *args], ROOT, env, opts.timeout)
    ms, values = parse_ms(res["stdout"] + res["stderr"], regex)
    return {
        "rc": res["rc"],
        "wall_s": res["wall_s"],
        "timed_out": res["timed_out"],
        "printed_ms": values,
        "true_step_ms": None if ms is None else round(ms * per_step, 4),
        "message": failure_message(res) if res["rc"] != 0 or ms is None else "",
        "stderr_tail": res["stderr"][-800:] if res["rc"] != 0 else "",
    }


def alternating_runs(
    run: Callable[[bool], dict[str, Any]], repeat: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``repeat`` plain runs of each twin, in the order sick, fixed, fixed, sick, sick, ... (ABBA):
    a host whose speed drifts through the minutes of a session (a lent machine's host-bound step
    moved by up to 1.5x from one process to the next: benchmarks/BENCHMARKS-twins.md "Eight more
    twins") then weighs on both twins alike. Each side is its first run's record with
    ``true_step_ms`` the median of its runs' and ``runs_ms`` every run's."""
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for k in range(max(repeat, 1)):
        for fixed in (False, True) if k % 2 == 0 else (True, False):
            runs[fixed].append(run(fixed))
    sides = []
    for fixed in (False, True):
        first = dict(runs[fixed][0])
        timed = [r["true_step_ms"] for r in runs[fixed] if r["true_step_ms"] is not None]
        first["runs_ms"] = [r["true_step_ms"] for r in runs[fixed]]
        first["true_step_ms"] = round(statistics.median(timed), 4) if timed else None
        sides.append(first)
    return sides[0], sides[1]


def load_report(run_dir: Path | None, stdout: str) -> dict[str, Any] | None:
    """report.json from the run directory, else the JSON report gpudoctor printed with --json."""
    if run_dir is not None:
        report = read_json(run_dir / "report.json")
        if report is not None:
            return report
    start = stdout.find("{")
    if start < 0:
        return None
    try:
        report = json.loads(stdout[start:])
    except ValueError:
        return None
    return report if isinstance(report, dict) else None


def speedup(step_ms: float, saving_ms: float) -> float:
    saving = min(max(saving_ms, 0.0), MAX_SAVING_SHARE * step_ms)
    return step_ms / (step_ms - saving) if step_ms > 0 else 1.0


def judge(row: dict[str, Any], report: dict[str, Any], entry: dict[str, Any]) -> None:
    """Fill the finding columns and the verdict of one twin from its report."""
    findings = report.get("findings") or []
    expected = entry.get("expected_top_finding") or []
    actionable = [f for f in findings if f.get("severity") != "info"]
    row["top_finding"] = actionable[0].get("id") if actionable else None
    row["findings"] = [
        {
            "id": f.get("id"),
            "severity": f.get("severity"),
            "saving_ms": f.get("saving_ms"),
            "predicted_speedup": f.get("predicted_speedup"),
        }
        for f in findings[:5]
    ]
    row["profiled_step_ms"] = report.get("step_ms")
    row["unprofiled_step_ms"] = report.get("unprofiled_step_ms")
    row["step_source"] = (report.get("steps") or {}).get("source")
    match = next(((i, f) for i, f in enumerate(findings) if f.get("id") in expected), None)
    if match is not None:
        i, f = match
        row["expected_id"] = f.get("id")
        row["rank"] = i + 1
        row["severity"] = f.get("severity")
        row["predicted_speedup"] = f.get("predicted_speedup")
        row["saving_ms"] = f.get("saving_ms")
    # the fix priced as a whole: every finding whose cost it removes
    removed = set(expected) | set(entry.get("fix_also_removes") or [])
    step = row["unprofiled_step_ms"] or row["profiled_step_ms"] or 0.0
    savings = [float(f.get("saving_ms") or 0.0) for f in findings if f.get("id") in removed]
    row["predicted_speedup_fix"] = (
        round(speedup(step, sum(savings)), 4) if savings and step else None
    )
    measured, predicted = row.get("measured_speedup"), row.get("predicted_speedup")
    row["ratio"] = round(predicted / measured, 3) if predicted and measured else None
    row["ratio_fix"] = (
        round(row["predicted_speedup_fix"] / measured, 3)
        if row["predicted_speedup_fix"] and measured
        else None
    )
    top_ok = match is not None and row["top_finding"] == row.get("expected_id")
    if not top_ok:
        row["verdict"] = "missed"
    elif row["ratio"] is not None and RATIO_BAND[0] <= row["ratio"] <= RATIO_BAND[1]:
        row["verdict"] = "pass"
    else:
        row["verdict"] = "diagnosed"


def run_one(entry: dict[str, Any], opts: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    name = entry["name"]
    row: dict[str, Any] = {
        "program": name,
        "file": entry["file"],
        "fix": entry.get("fix", ""),
        "expected_top_finding": entry.get("expected_top_finding", []),
        "expected_measured_speedup": entry.get("expected_measured_speedup"),
        "iterations_per_step": entry.get("iterations_per_step", 1),
    }
    args = entry.get("args_gpu") if opts.gpu_args else entry.get("args_cpu")
    if args is None:
        row["status"] = "skipped: no args for this machine"
        return row
    missing = [r for r in entry.get("requires", []) if not importable(r)]
    if missing:
        row["status"] = f"skipped: missing {', '.join(missing)}"
        return row
    script = str(MANIFEST.parent / entry["file"])
    row["args"] = args
    regex, per_step = entry.get("timing_regex"), row["iterations_per_step"]

    row["sick"], row["fixed"] = alternating_runs(
        lambda fixed: plain_run(script, [*args, *(["--fixed"] if fixed else [])], regex, per_step,
                                opts, env),
        opts.repeat,
    )
    sick_ms, fixed_ms = row["sick"]["true_step_ms"], row["fixed"]["true_step_ms"]
    row["sick_step_ms"], row["fixed_step_ms"] = sick_ms, fixed_ms
    row["measured_speedup"] = round(sick_ms / fixed_ms, 4) if sick_ms and fixed_ms else None

    run_base = opts.runs / name
    run_base.mkdir(parents=True, exist_ok=True)
    cmd = [
        opts.python,
        "-m",
        "gpudoctor",
        "run",
        "--skip",
        str(opts.skip),
        "--steps",
        str(opts.steps),
        "--out",
        str(run_base),
        "--json",
        script,
        *args,
    ]
    doc = run_command(cmd, ROOT, env, opts.timeout)
    run_dir = newest_run_dir(run_base)
    if opts.doctor_fixed:  # the fixed twin timed the doctor's way too, in a run of its own
        fixed_base = run_base / "fixed"
        fixed_base.mkdir(parents=True, exist_ok=True)
        fixed_cmd = [
            *cmd[: cmd.index("--out") + 1],
            str(fixed_base),
            "--json",
            script,
            *args,
            "--fixed",
        ]
        run_command(fixed_cmd, ROOT, env, opts.timeout)
        fixed_dir = newest_run_dir(fixed_base)
        fixed_cap = ((read_json(fixed_dir / "env.json") if fixed_dir else None) or {}).get(
            "capture"
        ) or {}
        row["fixed_unprofiled_step_ms"] = fixed_cap.get("unprofiled_step_ms")
    row["doctor"] = {
        "rc": doc["rc"],
        "wall_s": doc["wall_s"],
        "timed_out": doc["timed_out"],
        "message": failure_message(doc),
        "run_dir": str(run_dir) if run_dir else None,
        "stderr_tail": doc["stderr"][-1500:],
    }
    env_json = read_json(run_dir / "env.json") if run_dir else None
    cap = (env_json or {}).get("capture") or {}
    row["env_unprofiled_step_ms"] = cap.get("unprofiled_step_ms")
    # the step timings the calibration chose from, kept to study the unprofiled-step estimate
    row["env_unprofiled_before_window_ms"] = cap.get("unprofiled_before_window_ms")
    row["env_unprofiled_after_window_ms"] = cap.get("unprofiled_after_window_ms")
    row["env_step_source"] = cap.get("step_source")
    row["measured_speedup_doctor"] = doctor_measured(
        row["env_unprofiled_step_ms"], row.get("fixed_unprofiled_step_ms")
    )
    report = load_report(run_dir, doc["stdout"])
    row["report_written"] = report is not None
    if report is None:
        row["verdict"] = "error"
    else:
        judge(row, report, entry)
    row["status"] = "ran"
    return row


def doctor_measured(sick_ms: Any, fixed_ms: Any) -> float | None:
    """sick / fixed as ``gpudoctor run`` timed both without the profiler (``--doctor-fixed``): the
    two sides by the same estimator, where the programs' prints may time the host instead of the
    step (TIMINGS_DISAGREE); None where either is missing."""
    ok = all(isinstance(v, (int, float)) and v > 0 for v in (sick_ms, fixed_ms))
    return round(float(sick_ms) / float(fixed_ms), 4) if ok else None


# the program's printed step and gpudoctor's unprofiled one further apart than this: one of them
# does not time what the other does (a print that reads the clock before its sync timed the host)
TIMINGS_DISAGREE = 0.15


def _x(v: Any) -> str:
    return "-" if v is None else f"x{v:.2f}"


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    head = (
        f"# twins: {meta.get('device')} ({'GPU' if meta.get('gpu_args') else 'CPU'} args), "
        f"gpudoctor run --skip {meta['skip']} --steps {meta['steps']}, torch {meta.get('torch')}\n\n"
        "predicted = the expected finding's predicted_speedup (against the unprofiled step); fix predicted = "
        "the expected and fix_also_removes findings' savings together; measured = sick / fixed true step "
        "(plain runs, median of the printed ms after the first log line); ratio = predicted / measured "
        f"(pass: expected finding on top and ratio in {RATIO_BAND[0]}-{RATIO_BAND[1]}).\n\n"
    )
    header = (
        "| twin | expected | top finding | rank | predicted | fix predicted | sick ms | fixed ms | measured "
        "| estimate (before running) | ratio | fix ratio | doctor unprofiled ms (step source) | verdict |"
    )
    lines = [header, "|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|"]
    notes = []
    for r in rows:
        expected = ", ".join(r.get("expected_top_finding") or [])
        if r.get("status") != "ran":
            lines.append(
                f"| {r['program']} | {expected} | {r.get('status')} | | | | | | | | | | | |"
            )
            continue
        est = r.get("expected_measured_speedup")
        est_s = f"x{est[0]:g}-{est[1]:g}" if est else "-"
        top = r.get("top_finding") if r.get("report_written") else "no report"
        doc_ms = f"{fmt(r.get('unprofiled_step_ms'))} ({r.get('step_source') or r.get('env_step_source') or '-'})"
        lines.append(
            f"| {r['program']} | {expected} | {top or 'none'} | {fmt(r.get('rank'))} | {_x(r.get('predicted_speedup'))} "
            f"| {_x(r.get('predicted_speedup_fix'))} | {fmt(r.get('sick_step_ms'))} | {fmt(r.get('fixed_step_ms'))} "
            f"| {_x(r.get('measured_speedup'))} | {est_s} | {fmt(r.get('ratio'))} | {fmt(r.get('ratio_fix'))} "
            f"| {doc_ms} | **{r.get('verdict')}** |"
        )
        repeated = [(label, (r.get(label) or {}).get("runs_ms") or []) for label in ("sick", "fixed")]
        if any(len(ms) > 1 for _, ms in repeated):
            notes.append(f"- {r['program']}: plain runs (ms a step, in run order per side) "
                         + "; ".join(f"{label} {', '.join(fmt(v) for v in ms)}"
                                     for label, ms in repeated))
        for label in ("sick", "fixed"):
            if (r.get(label) or {}).get("message"):
                notes.append(f"- **{r['program']}** ({label}, plain): {r[label]['message']}")
        plain, doctor = r.get("sick_step_ms"), r.get("unprofiled_step_ms")
        if plain and doctor and abs(doctor / plain - 1) > TIMINGS_DISAGREE:
            notes.append(
                f"- **{r['program']}**: its own print ({fmt(plain)} ms) and gpudoctor's unprofiled "
                f"step ({fmt(doctor)} ms) differ by {abs(doctor / plain - 1):.0%}: check that the "
                "print waits for the GPU (a value read before the clock) before trusting 'measured'"
            )
        by_doctor = r.get("measured_speedup_doctor")
        if by_doctor:
            predicted = r.get("predicted_speedup")
            notes.append(
                f"- {r['program']}: timed by gpudoctor both ways, {fmt(r.get('env_unprofiled_step_ms'))}"
                f" / {fmt(r.get('fixed_unprofiled_step_ms'))} ms = {_x(by_doctor)}"
                + (f" (predicted / that: {predicted / by_doctor:.2f})" if predicted else "")
            )
        if r["doctor"].get("message") or not r.get("report_written"):
            notes.append(
                f"- **{r['program']}** (gpudoctor): {r['doctor'].get('message') or '(no message)'}"
            )
        if r.get("findings"):
            found = ", ".join(
                f"{f['id']} {f['severity']} {fmt(f['saving_ms'])} ms {_x(f['predicted_speedup'])}"
                for f in r["findings"]
            )
            notes.append(f"- {r['program']} findings: {found}")
    text = head + "\n".join(lines) + "\n"
    counts = {
        v: sum(1 for r in rows if r.get("verdict") == v)
        for v in ("pass", "diagnosed", "missed", "error")
    }
    text += "\n" + ", ".join(f"{k}: {n}" for k, n in counts.items()) + f" (of {len(rows)})\n"
    if notes:
        text += "\nDetails:\n\n" + "\n".join(notes) + "\n"
    return text


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(ap, "twin", "twins")
    ap.add_argument(
        "--runs", type=Path, default=None, help="where the run directories go (default OUT/runs)"
    )
    ap.add_argument(
        "--bundle",
        action="store_true",
        help="also write OUT/runs.tar.gz with every run's env.json and report.json (no traces)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="plain runs of each twin, sick and fixed alternating (ABBA); each side's median",
    )
    ap.add_argument(
        "--doctor-fixed",
        action="store_true",
        help="also run gpudoctor on the fixed twin: the measured speedup as the doctor times both",
    )
    opts = ap.parse_args()

    manifest = json.loads(MANIFEST.read_text())
    entries = manifest["programs"]
    # in the order given: a --deadline cuts the last ones
    wanted = list(
        dict.fromkeys(n.strip() for item in opts.only for n in item.split(",") if n.strip())
    )
    if wanted:
        by_name = {e["name"]: e for e in entries}
        unknown = [n for n in wanted if n not in by_name]
        if unknown:
            ap.error(f"unknown twin(s): {', '.join(sorted(unknown))}")
        entries = [by_name[n] for n in wanted]

    out = opts.out or ROOT / "benchmarks" / "results" / f"twins-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    opts.runs = (opts.runs or out / "runs").resolve()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(opts.src.resolve())] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env["PYTHONUNBUFFERED"] = "1"
    if not opts.gpu_args:
        # CPU args are a plumbing check: on a small shared host, OpenMP threads spinning against other
        # processes turn 1 ms iterations into 190 ms ones at random
        env.setdefault("OMP_NUM_THREADS", "1")
    meta: dict[str, Any] = {
        "gpu_args": opts.gpu_args,
        "skip": opts.skip,
        "steps": opts.steps,
        "src": str(opts.src),
        "ratio_band": RATIO_BAND,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        import torch

        meta["torch"] = torch.__version__
        meta["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception as exc:  # noqa: BLE001 - the table still gets written
        meta["device"] = f"unknown ({exc})"
    rows: list[dict[str, Any]] = []

    def write() -> None:
        (out / "twins.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        (out / "twins.md").write_text(markdown(rows, meta))

    pre = run_command(
        [opts.python, "-c", "import msgspec, gpudoctor.cli, gpudoctor.live, gpudoctor.pipeline"],
        ROOT,
        env,
        120,
    )
    if pre["rc"] != 0:
        meta["preflight_error"] = failure_message(pre) or pre["stderr"][-400:]
        write()
        print(f"[twins] gpudoctor does not import here: {meta['preflight_error']}", file=sys.stderr)
        return 2
    t_start = time.perf_counter()
    for entry in entries:
        if opts.deadline and time.perf_counter() - t_start > opts.deadline:
            rows.append(
                {
                    "program": entry["name"],
                    "status": "skipped: deadline",
                    "expected_top_finding": entry.get("expected_top_finding", []),
                }
            )
            continue
        print(f"[twins] {entry['name']} ...", file=sys.stderr, flush=True)
        try:
            row = run_one(entry, opts, env)
        except Exception as exc:  # noqa: BLE001 - one twin's breakage must not stop the table
            row = {
                "program": entry["name"],
                "status": f"runner error: {type(exc).__name__}: {exc}",
                "expected_top_finding": entry.get("expected_top_finding", []),
            }
        rows.append(row)
        summary = {
            k: row.get(k)
            for k in (
                "status",
                "top_finding",
                "rank",
                "predicted_speedup",
                "measured_speedup",
                "ratio",
                "verdict",
            )
        }
        print(f"[twins] {entry['name']}: {summary}", file=sys.stderr, flush=True)
        meta["elapsed_s"] = round(time.perf_counter() - t_start, 1)
        write()
    write()
    if opts.bundle:
        bundle_runs(opts.runs, out / "runs.tar.gz")
    print(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
