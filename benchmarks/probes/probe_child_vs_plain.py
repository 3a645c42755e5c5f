"""Is a try-fixes trial's process itself faster or slower than the same program run plainly?

A knob's measured speedup is compared with the same change made by hand (issue 19's third target),
and the two measurements come from different processes minutes apart: on the lent H100 machines a
host-bound program's step moves by up to 37% between processes (benchmarks/probes/probe_process_speed.py).
This probe runs the variants of one program in rounds, interleaved (A B C A B C ...), so that a
difference between variants that holds in every round is not the host's drift:

- ``plain[ENV]|ARGS``: ``python PROG BASE_ARGS ARGS`` with the variables ENV (``NAME=VALUE,...``);
- ``child[KNOBS]|ARGS``: ``python -m gpudoctor.tryfix.child SPEC``, the trial process try-fixes starts,
  with the knobs KNOBS (comma-separated, empty for a control) on ``BASE_ARGS ARGS``.

For each run: the median of the program's own ms lines (its first line dropped, a warm-up), and for
a child the mean of its timed samples (what try-fixes compares); before each run, a pure-Python loop's
time in this process (the host's speed at that moment). Prints one line per run and, last, a table:
variant | median ms of the program's lines in each round | the child's sample means.

    PYTHONPATH=src python3 benchmarks/probes/probe_child_vs_plain.py tests/programs/byhand/audio_loader.py \\
        --args "--iters 300 --log-every 20" --rounds 3 --out $OUT/probe \\
        "plain|" "child|" "plain|--num-workers 4 --pin-memory" "child[loader-workers]|" \\
        "plain[OPENBLAS_NUM_THREADS=1]|"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_cpu_map import loop_ms  # the host's speed: a pure-Python loop of 1M additions

from gpudoctor.tryfix.trial import TRIAL_MIN_SKIP, child_spec

# as a trial of `gpudoctor run --try-fixes` would get them: at least TRIAL_MIN_SKIP steps first, then
# the window's steps
CHILD_SKIP, CHILD_STEPS = TRIAL_MIN_SKIP, 3

TIMING = re.compile(r"([0-9]+(?:\.[0-9]+)?) ms/(?:iter|step)")
VARIANT = re.compile(r"^(plain|child)(?:\[([^\]]*)\])?\|(.*)$")


def busy() -> dict:
    """The host's load before a run: the 1-minute load average and the processes using most CPU
    (a process left behind by an earlier run, spinning, would show here)."""
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").is_file() else "?"
    try:
        ps = subprocess.run(
            ["ps", "-eo", "pcpu,etimes,comm", "--sort=-pcpu", "--no-headers"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.splitlines()[:3]
    except (OSError, subprocess.SubprocessError):
        ps = []
    return {"load1": load, "top": [" ".join(line.split()) for line in ps]}


def run_variant(
    kind: str, extra: str, args: list[str], prog: str, out: Path, tag: str, timeout: float
) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if kind == "plain":
        for item in filter(None, extra.split(",")):
            name, _, value = item.partition("=")
            env[name] = value
        cmd = [sys.executable, prog, *args]
    else:
        run_dir = out / tag
        run_dir.mkdir(parents=True, exist_ok=True)
        spec = child_spec(
            str(Path(prog).resolve()),
            args,
            False,
            [k for k in extra.split(",") if k],
            CHILD_SKIP,
            CHILD_STEPS,
            run_dir,
        )
        (run_dir / "spec.json").write_text(json.dumps(spec))
        cmd = [sys.executable, "-m", "gpudoctor.tryfix.child", str(run_dir / "spec.json")]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        text, rc = (
            (exc.stdout or b"").decode(errors="replace")
            if isinstance(exc.stdout, bytes)
            else (exc.stdout or ""),
            -9,
        )
    lines = [float(m.group(1)) for m in TIMING.finditer(text)]
    row = {
        "rc": rc,
        "wall_s": round(time.perf_counter() - start, 1),
        "lines_ms": lines,
        "median_ms": round(statistics.median(lines[1:]), 3) if len(lines) > 1 else None,
    }
    if kind == "child":
        trial = (
            json.loads((out / tag / "trial.json").read_text())
            if (out / tag / "trial.json").is_file()
            else {}
        )
        samples = trial.get("samples_ms") or []
        row.update(
            samples_mean_ms=round(statistics.fmean(samples), 3) if samples else None,
            samples=len(samples),
            effects=trial.get("effects"),
            error=trial.get("error"),
        )
    if rc not in (0, None) and not row["median_ms"]:
        row["tail"] = text[-600:]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("program")
    ap.add_argument("variants", nargs="+", help='"plain[ENV]|ARGS" or "child[KNOBS]|ARGS"')
    ap.add_argument("--args", default="", help="the program's arguments, common to every variant")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--out", type=Path, default=Path("probe-child-vs-plain"))
    opts = ap.parse_args()
    parsed = []
    for v in opts.variants:
        m = VARIANT.match(v)
        if not m:
            ap.error(f"variant {v!r}: write plain[ENV]|ARGS or child[KNOBS]|ARGS")
        parsed.append(
            (v, m.group(1), m.group(2) or "", shlex.split(opts.args) + shlex.split(m.group(3)))
        )
    opts.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {v: [] for v, *_ in parsed}
    for r in range(opts.rounds):
        for i, (v, kind, extra, args) in enumerate(parsed):
            ref, load = round(loop_ms(), 1), busy()
            row = run_variant(kind, extra, args, opts.program, opts.out, f"r{r}-v{i}", opts.timeout)
            row["host_loop_ms"], row["host"] = ref, load
            results[v].append(row)
            print(
                f"round {r} {v}: {json.dumps({k: x for k, x in row.items() if k != 'lines_ms'})}",
                flush=True,
            )
            (opts.out / "probe.json").write_text(json.dumps(results, indent=1))
    print(
        "\n| variant | program's median ms per round | child's sample mean ms per round | host loop ms |"
    )
    print("|---|---|---|---|")
    for v, rows in results.items():
        med = ", ".join(str(r["median_ms"]) for r in rows)
        smp = ", ".join(str(r.get("samples_mean_ms", "-")) for r in rows)
        print(f"| {v} | {med} | {smp} | {', '.join(str(r['host_loop_ms']) for r in rows)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
