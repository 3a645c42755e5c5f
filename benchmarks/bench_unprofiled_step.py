"""The unprofiled step against the program's own step time: plain runs interleaved with runs under
``gpudoctor run``, repeated, for the short-step gallery programs (tests/programs/).

    PYTHONPATH=src python benchmarks/bench_unprofiled_step.py --rounds 6 --out DIR
    python benchmarks/bench_unprofiled_step.py --src /path/to/old/src --src src   # two versions, same rounds
    PYTHONPATH=src python3 benchmarks/bench_unprofiled_step.py --gpu-args --rounds 3 --out $OUT/unprofiled

Each round runs every program plainly (its printed ms per iteration after the first log line: the
TRUE step of that round, as benchmarks/run_gallery.py defines it) and under
``python -m gpudoctor run --skip 5 --steps 5`` once per ``--src`` tree, the order rotated from round
to round so that a drift of the shared machine falls on every variant alike. The ratio
unprofiled / true is taken within a round; the table gives its median over the rounds, its range,
and how many rounds' reports called their timing trustworthy (env.json ``capture.unprofiled``).
With ``--same-run`` the program also runs on after the session (``--continue``) and the unprofiled
step is compared with the program's own last printed times in the same process ("own"): on a
shared machine whose load moves from one run to the next, the cleaner measure of the estimate.
On the CPU (default) the five short-step programs run with longer CPU arguments; with
``--gpu-args`` the eight the H200 gallery missed (benchmarks/BENCHMARKS-gallery.md, "Runs 5-8") with the manifest's GPU
arguments. Writes DIR/unprofiled.json (every run's samples) and DIR/unprofiled.md (the table, also
printed last); the run directories go to ``--runs`` (a temporary folder by default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_gallery import ROOT, newest_run_dir, parse_ms, read_json, run_command

MANIFEST = {
    e["name"]: e
    for e in json.loads((ROOT / "tests" / "programs" / "manifest.json").read_text())["programs"]
}
# CPU arguments: long enough for a steady state after the first log line (one thread: the machine's
# other load makes two threads' barrier waits last a scheduler tick); the GPU ones are the manifest's
CPU_ARGS: dict[str, list[str]] = {
    "cpu_only": ["--iters", "120", "--log-every", "10", "--threads", "1"],
    "early_exit": ["--exit-at", "9", "--log-every", "3"],
    "crash_at_12": ["--crash-at", "9", "--log-every", "2"],
    "manual_sgd": ["--iters", "120", "--log-every", "10"],
    "dataloader_workers": ["--iters", "90", "--log-every", "10"],
}
GPU_MISSES = [
    "cpu_only",
    "early_exit",
    "crash_at_12",
    "manual_sgd",
    "dataloader_workers",
    "compiled_step",
    "hf_trainer_llama",
    "launch_bound_rnn",
]


def own_steady_ms(printed: list[float]) -> float | None:
    """The program's own step in the same run, long after the window: the mean of its last third
    of printed lines (at least 2; the session has ended by then, its hooks are gone)."""
    tail = printed[len(printed) - len(printed) // 3 :]
    return statistics.fmean(tail) if len(tail) >= 2 else None


def doctor_run(
    python: str,
    src: Path,
    script: str,
    args: list[str],
    out: Path,
    timeout: float,
    regex: str,
    same_run: bool,
) -> dict[str, Any]:
    """One ``gpudoctor run``; with ``same_run`` the program goes on after the session (--continue)
    and its own printed times at the end are kept beside the unprofiled step."""
    paths = [
        str(src.resolve()),
        *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []),
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1")
    res = run_command(
        [
            python,
            "-m",
            "gpudoctor",
            "run",
            "--skip",
            "5",
            "--steps",
            "5",
            "--out",
            str(out),
            *(["--continue"] if same_run else []),
            script,
            *args,
        ],
        ROOT,
        env,
        timeout,
    )
    own = own_steady_ms(parse_ms(res["stdout"] + res["stderr"], regex)[1]) if same_run else None
    run_dir = newest_run_dir(out)
    cap = ((read_json(run_dir / "env.json") if run_dir else None) or {}).get("capture") or {}
    return {
        "rc": res["rc"],
        "unprofiled_step_ms": cap.get("unprofiled_step_ms"),
        "own_ms": own,
        "unprofiled": cap.get("unprofiled"),
        "notes": cap.get("notes"),
        "before": cap.get("unprofiled_before_window_ms"),
        "after": cap.get("unprofiled_after_window_ms"),
        "stderr_tail": res["stderr"][-300:] if cap == {} else "",
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--only", default="", help="comma-separated program names")
    ap.add_argument(
        "--src", type=Path, action="append", default=[], help="gpudoctor source tree (repeatable)"
    )
    ap.add_argument("--gpu-args", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("unprofiled-bench"))
    ap.add_argument(
        "--runs",
        type=Path,
        default=None,
        help="where the run directories go (default: a temp folder)",
    )
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument(
        "--same-run",
        action="store_true",
        help="let the program run on after the session (--continue) and compare with its own last "
        "printed times too: free of the drift between runs",
    )
    opts = ap.parse_args()
    srcs = opts.src or [ROOT / "src"]
    names = [n for n in opts.only.split(",") if n] or (
        GPU_MISSES if opts.gpu_args else list(CPU_ARGS)
    )
    unknown = [n for n in names if n not in MANIFEST or (not opts.gpu_args and n not in CPU_ARGS)]
    if unknown:
        ap.error(f"no {'GPU' if opts.gpu_args else 'CPU'} arguments for {', '.join(unknown)}")
    opts.out.mkdir(parents=True, exist_ok=True)
    runs_dir = opts.runs or Path(tempfile.mkdtemp(prefix="unprofiled-runs-"))
    plain_env = dict(os.environ, PYTHONUNBUFFERED="1")
    runs: list[dict[str, Any]] = []
    for r in range(opts.rounds):
        for name in names:
            entry = MANIFEST[name]
            script = str(ROOT / "tests" / "programs" / entry["file"])
            args = entry["args_gpu"] if opts.gpu_args else CPU_ARGS[name]
            order = ["plain", *range(len(srcs))]
            order = order[r % len(order) :] + order[: r % len(order)]
            row: dict[str, Any] = {"round": r, "program": name}
            for kind in order:
                if kind == "plain":
                    res = run_command([opts.python, script, *args], ROOT, plain_env, opts.timeout)
                    row["true_ms"], row["printed_ms"] = parse_ms(
                        res["stdout"] + res["stderr"], entry["timing_regex"]
                    )
                else:
                    out = runs_dir / f"{name}-r{r}-v{kind}"
                    row[f"v{kind}"] = doctor_run(
                        opts.python,
                        srcs[kind],
                        script,
                        args,
                        out,
                        opts.timeout,
                        entry["timing_regex"],
                        opts.same_run,
                    )
            runs.append(row)
            print(
                f"[unprofiled] round {r} {name}: true {row['true_ms']}, "
                + ", ".join(f"v{i} {row[f'v{i}']['unprofiled_step_ms']}" for i in range(len(srcs))),
                file=sys.stderr,
                flush=True,
            )
            (opts.out / "unprofiled.json").write_text(
                json.dumps(
                    {"srcs": [str(s) for s in srcs], "gpu_args": opts.gpu_args, "runs": runs},
                    indent=1,
                )
                + "\n"
            )
    text = table(runs, names, srcs)
    (opts.out / "unprofiled.md").write_text(text + "\n")
    print(text)
    return 0


def table(runs: list[dict[str, Any]], names: list[str], srcs: list[Path]) -> str:
    lines = [
        f"# unprofiled step / true step, {time.strftime('%Y-%m-%d %H:%M')}; "
        + "; ".join(f"v{i} = {s}" for i, s in enumerate(srcs)),
        "",
        "| program | rounds | true ms (median) | "
        + " | ".join(
            f"v{i} / true: median [min, max] | v{i} within 10% | v{i} / own, same run | v{i} trusted"
            for i in range(len(srcs))
        )
        + " |",
        "|---|---:|---:|" + "---:|---:|---:|---:|" * len(srcs),
    ]
    for name in names:
        rows = [r for r in runs if r["program"] == name and r.get("true_ms")]
        cells = [
            name,
            str(len(rows)),
            f"{statistics.median(r['true_ms'] for r in rows):.3f}" if rows else "-",
        ]
        for i in range(len(srcs)):
            ratios = [
                r[f"v{i}"]["unprofiled_step_ms"] / r["true_ms"]
                for r in rows
                if r[f"v{i}"].get("unprofiled_step_ms")
            ]
            trusted = [bool((r[f"v{i}"].get("unprofiled") or {}).get("trusted")) for r in rows]
            own = [
                r[f"v{i}"]["unprofiled_step_ms"] / r[f"v{i}"]["own_ms"]
                for r in rows
                if r[f"v{i}"].get("unprofiled_step_ms") and r[f"v{i}"].get("own_ms")
            ]
            if ratios:
                cells += [
                    f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]",
                    f"{sum(abs(x - 1) <= 0.10 for x in ratios)}/{len(ratios)}",
                    f"{statistics.median(own):.2f} [{min(own):.2f}, {max(own):.2f}]"
                    if own
                    else "-",
                    f"{sum(trusted)}/{len(trusted)}",
                ]
            else:
                cells += ["-", "-", "-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
