"""Run the gallery of ordinary programs (tests/programs/manifest.json) plainly and under ``gpudoctor run``.

For each program (and each public one fetched into .gallery-public/, when present):

1. plainly, ``python PROG ARGS``: the program's own ms-per-iteration lines (its ``timing_regex``, times
   ``timing_scale`` for a program printing seconds) give the TRUE step time = median printed ms (first
   log line dropped: warm-up) x iterations_per_step; a program with no iteration limit its args can set
   (``plain_stop_s``) is stopped with Ctrl-C (SIGINT to its process group) after that many seconds;
2. under ``python -m gpudoctor run --skip S --steps N --out DIR PROG ARGS`` (PYTHONPATH=src);
3. the run directory's env.json (capture.steps_seen, steps_recorded, unprofiled_step_ms, step_source)
   and report.json (steps.method, steps.count, step_ms, unprofiled_step_ms, findings[0].id).

Writes gallery.json (after every program, so a run cut short keeps what it measured) and gallery.md,
a table: program | expected top finding | got | steps recorded | true step ms | unprofiled ms |
profiled ms | exit code | report written? Failures are recorded, never fatal.

    python benchmarks/run_gallery.py                      # CPU args, all programs
    python benchmarks/run_gallery.py --gpu-args --out $OUT/gallery --deadline 380
    python benchmarks/run_gallery.py --only early_exit --only crash_at_12

On a lent GPU machine (torch, transformers, accelerate, lightning there; msgspec is NOT: carry .whl
with its cp312 wheel), a program takes about 30 s (plain + under gpudoctor, mostly start-up), so
the whole gallery needs two calls of about 11 programs each (--only), e.g.:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    python3 benchmarks/run_gallery.py --gpu-args --out $OUT/gallery --runs /tmp/gallery-runs --bundle \\
        --timeout 60 --deadline 285 --only nanogpt_train,hf_trainer_llama,...
(carry .gallery-public for the public programs and .whl for msgspec; scripts/fetch_gallery_public.py
re-creates .gallery-public/ from git snapshots of the manifest's sources).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

# the runner's own interpreter may lack gpudoctor (the programs get --src on their PYTHONPATH): this tree's then
sys.path.append(str(Path(__file__).resolve().parents[1] / "src"))
from gpudoctor.core.subprocesses import default_sigint_in_child

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "tests" / "programs" / "manifest.json"


def importable(requirement: str) -> bool:
    """'a|b' is met when either module can be found."""
    for name in requirement.split("|"):
        try:
            if importlib.util.find_spec(name.strip()) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


INTERRUPT_GRACE_S = (
    20.0  # after Ctrl-C, time for the program (and its DataLoader workers) to unwind
)


def run_command(
    cmd: list[str],
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    interrupt_after: float | None = None,
) -> dict[str, Any]:
    """Run in its own process group; on timeout kill the whole group (DataLoader workers too).

    ``interrupt_after``: for a program with no iteration limit, SIGINT to the group after that many
    seconds, as Ctrl-C in a terminal would (what it printed until then is kept; "interrupted": True)."""
    t0 = time.perf_counter()
    # default SIGINT in the child even when this runner was started with it ignored (a background job)
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        preexec_fn=default_sigint_in_child(),
    )
    timed_out = interrupted = False
    first = timeout if interrupt_after is None else min(timeout, interrupt_after)
    try:
        out, err = proc.communicate(timeout=first)
    except subprocess.TimeoutExpired:
        out = err = None
        if interrupt_after is not None and interrupt_after < timeout:
            interrupted = True
            _signal_group(proc.pid, signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=INTERRUPT_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        if out is None:  # past the timeout, or still running INTERRUPT_GRACE_S after Ctrl-C
            timed_out = True
            _signal_group(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
    return {
        "rc": proc.returncode,
        "timed_out": timed_out,
        "interrupted": interrupted,
        "wall_s": round(time.perf_counter() - t0, 2),
        "stdout": out or "",
        "stderr": err or "",
    }


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def parse_ms(text: str, regex: str | None, scale: float = 1.0) -> tuple[float | None, list[float]]:
    """The mean printed time per iteration in ms (the first line dropped: warm-up) and every value.
    ``scale``: ms per printed unit (the manifest's timing_scale: 1000 for a program printing seconds).
    The mean, not the median: a program that prints each batch's time behind a bursty DataLoader
    (pytorch/examples imagenet --dummy, H200, 2026-11-25: 51-680 ms a batch) runs at its mean, and
    its median (63 ms) is a fast batch; for programs that print averages over their log interval
    the two agree."""
    if not regex:
        return None, []
    values = [round(float(m.group(1)) * scale, 6) for m in re.finditer(regex, text)]
    if not values:
        return None, []
    steady = values[1:] if len(values) > 1 else values
    return statistics.fmean(steady), values


def failure_message(res: dict[str, Any]) -> str:
    """The line that says what went wrong: gpudoctor's own message, else the last traceback line."""
    if res.get("timed_out"):
        return f"timed out after {res['wall_s']} s"
    lines = [
        ln.strip()
        for ln in (res.get("stderr", "") + "\n" + res.get("stdout", "")).splitlines()
        if ln.strip()
    ]
    ours = [
        ln
        for ln in lines
        if ln.startswith(("gpudoctor:", "internal error", "error:")) or "internal error" in ln
    ]
    if ours:
        return ours[-1][:400]
    errs = [
        ln
        for ln in res.get("stderr", "").splitlines()
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Fault)\b", ln)
    ]
    if errs:
        return errs[-1][:400]
    if res.get("rc") not in (0, None):
        tail = [ln for ln in res.get("stderr", "").splitlines() if ln.strip()]
        return (tail[-1] if tail else f"exit code {res['rc']}")[:400]
    return ""


def newest_run_dir(base: Path) -> Path | None:
    dirs = [d for d in base.glob("*") if d.is_dir()] if base.is_dir() else []
    return max(dirs, key=lambda d: d.stat().st_mtime) if dirs else None


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def lightning_shim(prog_dir: Path, file: str) -> str:
    """Public Lightning examples import ``lightning``; where only ``pytorch_lightning`` exists, run a copy
    with the import spelled the old way (the copy lives next to the fetched file, never committed)."""
    if importable("lightning") or not importable("pytorch_lightning"):
        return file
    src = (prog_dir / file).read_text()
    patched = src.replace("from lightning.pytorch import", "from pytorch_lightning import")
    patched = re.sub(
        r"^import lightning as L$", "import pytorch_lightning as L", patched, flags=re.MULTILINE
    )
    target = prog_dir / f"_pl_{file}"
    target.write_text(patched)
    return target.name


def run_plainly(
    entry: dict[str, Any],
    script: str,
    args: list[str],
    cwd: Path,
    env: dict[str, str],
    opts: argparse.Namespace,
) -> tuple[dict[str, Any], float | None, list[float]]:
    """The program without gpudoctor: the run, its mean printed ms per iteration, every value."""
    res = run_command(
        [opts.python, script, *args],
        cwd,
        env,
        opts.timeout,
        interrupt_after=entry.get("plain_stop_s"),
    )
    ms, values = parse_ms(
        res["stdout"] + res["stderr"], entry.get("timing_regex"), entry.get("timing_scale", 1.0)
    )
    return res, ms, values


def run_one(
    entry: dict[str, Any], public: bool, opts: argparse.Namespace, out: Path, env: dict[str, str]
) -> dict[str, Any]:
    name = entry["name"]
    row: dict[str, Any] = {
        "program": name,
        "public": public,
        "file": entry["file"],
        "expected_top_finding": entry.get("expected_top_finding", []),
        "iterations_per_step": entry.get("iterations_per_step", 1),
        "expected_exit_code": entry.get("exit_code", 0),
    }
    args = entry.get("args_gpu") if opts.gpu_args else entry.get("args_cpu")
    if public and not entry.get("enabled", True):
        row["status"] = "skipped: disabled in the manifest (see its notes)"
        return row
    if args is None:
        row["status"] = (
            "skipped: no args for this machine (" + ("GPU" if opts.gpu_args else "CPU") + ")"
        )
        return row
    missing = [r for r in entry.get("requires", []) if not importable(r)]
    if missing:
        row["status"] = f"skipped: missing {', '.join(missing)}"
        return row
    if public:
        prog_dir = ROOT / entry["dir"]
        if not (prog_dir / entry["file"]).is_file():
            row["status"] = f"skipped: {entry['dir']}/{entry['file']} not fetched"
            return row
        file = (
            lightning_shim(prog_dir, entry["file"])
            if "lightning" in entry.get("requires", [])
            else entry["file"]
        )
        cwd, script = prog_dir, file
    else:
        cwd, script = ROOT, str(MANIFEST.parent / entry["file"])
    row["args"] = args

    plain, ms, values = run_plainly(entry, script, args, cwd, env, opts)
    # a plain run stopped by our Ctrl-C (plain_stop_s) ends as Ctrl-C ends it: not a failure
    plain_ok = plain["rc"] == row["expected_exit_code"] or plain["interrupted"]
    row["plain"] = {
        "rc": plain["rc"],
        "wall_s": plain["wall_s"],
        "timed_out": plain["timed_out"],
        "interrupted": plain["interrupted"],
        "printed_ms": values,
        "message": "" if plain_ok else failure_message(plain),
    }
    row["true_step_ms"] = None if ms is None else round(ms * row["iterations_per_step"], 4)

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
        script,
        *args,
    ]
    doc = run_command(cmd, cwd, env, opts.timeout)
    row["doctor"] = {
        "rc": doc["rc"],
        "wall_s": doc["wall_s"],
        "timed_out": doc["timed_out"],
        "message": failure_message(doc),
        "stderr_tail": doc["stderr"][-1500:],
        "stdout_tail": doc["stdout"][-600:],
    }
    run_dir = newest_run_dir(run_base)
    row["run_dir"] = str(run_dir) if run_dir else None
    files = sorted(p.name for p in run_dir.iterdir()) if run_dir else []
    row["files"] = files
    row["trace_written"] = "trace.json.gz" in files or "trace.json" in files
    row["report_written"] = "report.json" in files
    env_json = read_json(run_dir / "env.json") if run_dir else None
    cap = (env_json or {}).get("capture") or {}
    row["steps_seen"] = cap.get("steps_seen")
    row["steps_recorded"] = cap.get("steps_recorded")
    row["env_unprofiled_step_ms"] = cap.get("unprofiled_step_ms")
    # the step timings the calibration chose from, kept to study the unprofiled-step estimate
    row["env_unprofiled_before_window_ms"] = cap.get("unprofiled_before_window_ms")
    row["env_unprofiled_after_window_ms"] = cap.get("unprofiled_after_window_ms")
    row["unprofiled"] = cap.get(
        "unprofiled"
    )  # its standard error, steps, estimator, trusted (capture/timing.py)
    row["step_source"] = cap.get("step_source")
    row["capture_error"] = cap.get("error")
    report = read_json(run_dir / "report.json") if run_dir and row["report_written"] else None
    if report:
        steps = report.get("steps") or {}
        findings = report.get("findings") or []
        row["steps_method"] = steps.get("method")
        row["steps_count"] = steps.get("count")
        row["profiled_step_ms"] = report.get("step_ms")
        row["unprofiled_step_ms"] = report.get("unprofiled_step_ms")
        # the report's own verdict: healthy when no finding is major or critical (report/model.py)
        verdict = report.get("verdict") or {}
        if "top_finding" in verdict:
            row["top_finding"] = verdict["top_finding"]
        else:  # a report from before the verdict existed: the first finding above info
            actionable = [f for f in findings if f.get("severity") != "info"]
            row["top_finding"] = actionable[0].get("id") if actionable else None
        row["step_source"] = (report.get("steps") or {}).get("source")
        row["findings"] = [
            (f.get("id"), f.get("severity"), f.get("saving_ms")) for f in findings[:5]
        ]
    else:
        row["unprofiled_step_ms"] = row["env_unprofiled_step_ms"]
    if opts.plain_after and row["true_step_ms"] is not None:
        # the program run plainly again: how far the host drifted while the doctor ran (the true
        # step is the mean of the two plain runs; the spread is the noise any estimate sits in)
        again, ms2, values2 = run_plainly(entry, script, args, cwd, env, opts)
        row["plain_after"] = {"rc": again["rc"], "wall_s": again["wall_s"], "printed_ms": values2}
        if ms2 is not None:
            before_ms = row["true_step_ms"]
            after_ms = round(ms2 * row["iterations_per_step"], 4)
            row["true_step_before_ms"], row["true_step_after_ms"] = before_ms, after_ms
            row["true_step_ms"] = round((before_ms + after_ms) / 2, 4)
            row["plain_drift"] = round(abs(after_ms - before_ms) / row["true_step_ms"], 4)
    expected = row["expected_top_finding"]
    if report is not None:
        got = row.get("top_finding")
        row["finding_ok"] = (got in expected) or (
            got is None and (not expected or "healthy" in expected)
        )
    row["exit_ok"] = doc["rc"] == row["expected_exit_code"]
    row["status"] = "ran"
    return row


def fmt(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    head = (
        f"# gallery: {meta.get('device')} ({'GPU' if meta.get('gpu_args') else 'CPU'} args), "
        f"gpudoctor run --skip {meta['skip']} --steps {meta['steps']}, torch {meta.get('torch')}\n\n"
    )
    header = (
        "| program | expected top finding | got | steps recorded (what marked them) | iterations per true step "
        "| true step ms | unprofiled ms | unprofiled / true | profiled ms | exit code (got/expected) | report written? |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for r in rows:
        name = r["program"] + (" (public)" if r.get("public") else "")
        expected = ", ".join(r.get("expected_top_finding") or []) or "healthy"
        if r.get("status") != "ran":
            lines.append(f"| {name} | {expected} | {r.get('status')} | | | | | | | | |")
            continue
        got = r.get("top_finding") if r.get("report_written") else "no report"
        if r.get("report_written") and got is None:
            got = "none"
        if r.get("report_written"):
            got = f"{got} {'ok' if r.get('finding_ok') else 'WRONG'}"
        rec = f"{fmt(r.get('steps_recorded'))} ({r.get('step_source') or r.get('steps_method') or '-'})"
        true_ms, unprof = r.get("true_step_ms"), r.get("unprofiled_step_ms")
        ratio = f"{unprof / true_ms:.2f}" if true_ms and unprof else "-"
        u = r.get("unprofiled") or {}
        unprof_text = fmt(unprof) + (
            f" ± {u['spread_ms']:.2f} ({u['steps']}{'' if u.get('trusted') else ', uncertain'})"
            if unprof is not None and u.get("spread_ms") is not None
            else ""
        )
        per_step = r.get("iterations_per_step", "")
        ex = f"{r['doctor']['rc']}/{r['expected_exit_code']}" + (
            "" if r.get("exit_ok") else " WRONG"
        )
        lines.append(
            f"| {name} | {expected} | {got} | {rec} | {per_step} | {fmt(true_ms)} "
            f"| {unprof_text} | {ratio} | {fmt(r.get('profiled_step_ms'))} | {ex} "
            f"| {'yes' if r.get('report_written') else 'no'} |"
        )
        msg = r["doctor"].get("message")
        if msg or not r.get("report_written") or not r.get("exit_ok"):
            notes.append(f"- **{name}**: {msg or '(no message)'}")
        if r["plain"].get("message"):
            notes.append(f"- **{name}** (plain run): {r['plain']['message']}")
    text = head + "\n".join(lines) + "\n"
    if notes:
        text += "\nMessages:\n\n" + "\n".join(notes) + "\n"
    return text


def bundle_runs(runs: Path, tar_path: Path, traces: bool = False) -> None:
    """The run directories' report.json and env.json (and with ``traces`` their traces) in one tar.gz."""
    with tarfile.open(tar_path, "w:gz") as tar:
        for f in sorted(
            [*runs.glob("*/*/*.json"), *(runs.glob("*/*/trace.json.gz") if traces else [])]
        ):
            tar.add(f, arcname=str(f.relative_to(runs)))


def add_common_arguments(ap: argparse.ArgumentParser, noun: str, results_stem: str) -> None:
    """The options the gallery runner and the twins runner (run_twins.py) share."""
    ap.add_argument(
        "--only", action="append", default=[], help=f"{noun} name (repeatable, or comma-separated)"
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"output folder (default benchmarks/results/{results_stem}-STAMP)",
    )
    ap.add_argument("--gpu-args", action="store_true", help="use the manifest's GPU args")
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds per run of one program")
    ap.add_argument(
        "--deadline", type=float, default=0.0, help=f"stop starting {noun}s after this many seconds"
    )
    ap.add_argument(
        "--src",
        type=Path,
        default=ROOT / "src",
        help="the gpudoctor source tree to put on PYTHONPATH",
    )
    ap.add_argument("--python", default=sys.executable)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(ap, "program", "gallery")
    ap.add_argument("--no-public", action="store_true", help="leave out the public programs")
    ap.add_argument(
        "--runs", type=Path, default=None, help="where the run directories go (default OUT/runs)"
    )
    ap.add_argument(
        "--bundle",
        action="store_true",
        help="also write OUT/runs.tar.gz with every run's env.json and report.json (no traces)",
    )
    ap.add_argument(
        "--traces", action="store_true", help="with --bundle: put the traces in runs.tar.gz too"
    )
    ap.add_argument(
        "--plain-after",
        action="store_true",
        help="run each program plainly again after gpudoctor: the true step is the mean of both plain runs",
    )
    opts = ap.parse_args()

    manifest = json.loads(MANIFEST.read_text())
    wanted = {n.strip() for item in opts.only for n in item.split(",") if n.strip()}
    entries = [(e, False) for e in manifest["programs"]]
    if not opts.no_public:
        entries += [(e, True) for e in manifest.get("public", [])]
    if wanted:
        entries = [(e, p) for e, p in entries if e["name"] in wanted]
        unknown = wanted - {e["name"] for e, _ in entries}
        if unknown:
            ap.error(f"unknown program(s): {', '.join(sorted(unknown))}")

    entries.sort(
        key=lambda ep: bool(ep[0].get("slow"))
    )  # torch.compile's warm-up last, after the public ones
    out = opts.out or ROOT / "benchmarks" / "results" / f"gallery-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    opts.runs = (opts.runs or out / "runs").resolve()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(opts.src.resolve())] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env["PYTHONUNBUFFERED"] = "1"
    meta: dict[str, Any] = {
        "gpu_args": opts.gpu_args,
        "skip": opts.skip,
        "steps": opts.steps,
        "src": str(opts.src),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        import torch

        meta["torch"] = torch.__version__
        meta["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception as exc:  # noqa: BLE001 - the table still gets written
        meta["device"] = f"unknown ({exc})"
    rows: list[dict[str, Any]] = []
    # gpudoctor itself must import (on a lent GPU machine msgspec is not installed: carry its wheel)
    pre = run_command(
        [opts.python, "-c", "import msgspec, gpudoctor.cli, gpudoctor.live, gpudoctor.pipeline"],
        ROOT,
        env,
        120,
    )
    if pre["rc"] != 0:
        meta["preflight_error"] = failure_message(pre) or pre["stderr"][-400:]
        (out / "gallery.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        print(
            f"[gallery] gpudoctor does not import here: {meta['preflight_error']}", file=sys.stderr
        )
        return 2
    t_start = time.perf_counter()
    for entry, public in entries:
        if opts.deadline and time.perf_counter() - t_start > opts.deadline:
            rows.append(
                {
                    "program": entry["name"],
                    "public": public,
                    "status": "skipped: deadline",
                    "expected_top_finding": entry.get("expected_top_finding", []),
                }
            )
            continue
        print(f"[gallery] {entry['name']} ...", file=sys.stderr, flush=True)
        try:
            row = run_one(entry, public, opts, out, env)
        except Exception as exc:  # noqa: BLE001 - one program's breakage must not stop the table
            row = {
                "program": entry["name"],
                "public": public,
                "status": f"runner error: {type(exc).__name__}: {exc}",
                "expected_top_finding": entry.get("expected_top_finding", []),
            }
        rows.append(row)
        summary = {
            k: row.get(k)
            for k in (
                "status",
                "top_finding",
                "steps_recorded",
                "true_step_ms",
                "unprofiled_step_ms",
                "profiled_step_ms",
                "report_written",
            )
        }
        print(f"[gallery] {entry['name']}: {summary}", file=sys.stderr, flush=True)
        meta["elapsed_s"] = round(time.perf_counter() - t_start, 1)
        (out / "gallery.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        (out / "gallery.md").write_text(markdown(rows, meta))
    (out / "gallery.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / "gallery.md").write_text(markdown(rows, meta))
    if opts.bundle:
        bundle_runs(opts.runs, out / "runs.tar.gz", traces=opts.traces)
    print(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
