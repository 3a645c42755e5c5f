"""Knob trials on the gallery's and the public programs: each knob's predicted speedup (the replay's)
beside the speedup ``gpudoctor run --try-fixes`` measured for it, in the same invocation.

For each program of tests/programs/manifest.json named with --only (gallery or public; the public ones
fetched into .gallery-public/ by scripts/fetch_gallery_public.py):

    python -m gpudoctor run --try-fixes [--fixes K1,K2] --no-trial-trace --json --skip S --out RUNS/NAME PROG ARGS

run in the program's folder, with its GPU args whose iteration count is raised to at least
--min-iters (a trial skips 24 steps, then times 30 or more: tryfix/trial.py TRIAL_MIN_SKIP). The
knobs are those the diagnosis calls for, or the ones FIXES_FOR names (knobs a user would try there
though the diagnosis may not call for them: the measured slowdowns the second target is about).
Every trial of the report's ``trials[]`` becomes a row: knob, predicted speedup and by what
(replay / formula), measured speedup with its 95% interval, verdict.

    python benchmarks/bench_knob_trials.py --out $OUT/knobs --deadline 480 --only accelerate_loop,fp32_mlp_item

Writes knob_trials.json after every program and knob_trials.md at the end, printing the table and two
counts last: trials predicted within 1.25x of measured, and the knobs that measured slower (interval
below 1) with their predictions (the issue's targets: 80% of at least 20 trials; every slower knob
predicted at x1.05 or below).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_gallery import (
    MANIFEST,
    ROOT,
    failure_message,
    fmt,
    importable,
    lightning_shim,
    newest_run_dir,
    read_json,
    run_command,
)

ITER_FLAGS = ("--iters", "--max-steps", "--micro-batches", "--batches")
# the same count spelled key=value (minGPT's and nanoGPT's config overrides)
ITER_KEYS = ("--trainer.max_iters", "--max_iters")
WITHIN = 1.25
SLOWER_PREDICTED_AT_MOST = 1.05

# knobs tried whatever the diagnosis calls for: the ones a user reaches for on such a program
FIXES_FOR: dict[str, str] = {
    "accelerate_loop": "bf16-autocast,tf32,compile",
    "hf_trainer_llama": "bf16-autocast,compile",
    "examples_word_language_model": "compile-reduce-overhead,bf16-autocast,tf32",
    "fabric_language_model": "compile-reduce-overhead,bf16-autocast",
    "manual_sgd": "compile-reduce-overhead,compile",
    "examples_dcgan_fake": "loader-workers,bf16-autocast",
    "unet_ema": "compile-reduce-overhead,compile,bf16-autocast",
    "examples_imagenet_dummy": "loader-workers,bf16-autocast",
    "lightning_transformer_wikitext": "bf16-autocast,tf32,compile",
    "vit_tiny_fp32_accuracy": "bf16-autocast,tf32,compile",
    "csv_tabular_loader": "loader-workers,pin-memory",
    "dataloader_workers": "loader-workers,pin-memory",
    "nanogpt_train": "bf16-autocast,compile",
    "checkpointed_mlp": "bf16-autocast,tf32",
    "contrastive_aug": "loader-workers,pin-memory",
    "vit_eager_attention": "compile",
    "lstm_packed_seq": "compile-reduce-overhead",
    "resnet_amp_scaler": "compile",
    "grad_accum": "bf16-autocast,tf32,compile",
    "gan_two_optimizers": "bf16-autocast,compile",
    "inference_loop": "compile-reduce-overhead,compile",
    "lightning_module": "compile",
    "lbfgs_closure": "compile",
    "own_profiler": "compile",
    "lazy_import_sdpa": "compile",
    "tabular_mlp": "bf16-autocast,compile",
    "periodic_eval": "compile",
    "mingpt_adder": "compile-reduce-overhead,compile,bf16-autocast",
    "examples_mnist": "loader-workers,compile,bf16-autocast",
    "examples_vae": "loader-workers,compile",
    "examples_mnist_rnn": "loader-workers,bf16-autocast",
    "fabric_image_classifier": "loader-workers,pin-memory,compile",
    "nanogpt_train_char": "compile",
    "examples_forward_forward": "tf32,bf16-autocast,compile",
    "lightning_gan_mnist": "compile-reduce-overhead,bf16-autocast,compile,loader-workers",
    "examples_gat": "compile,tf32,bf16-autocast",
    "examples_gcn": "compile,compile-reduce-overhead",
    "karpathy_gpt_lecture": "tf32,bf16-autocast,compile",
    "makemore": "compile-reduce-overhead,compile,bf16-autocast",
    "lightning_autoencoder": "loader-workers,compile,bf16-autocast",
}


def with_iterations(args: list[str], at_least: int) -> list[str]:
    """The program's args with its iteration count raised to ``at_least`` (kept when already higher)."""
    out = list(args)
    for i, a in enumerate(out):
        if i + 1 < len(out) and a in ITER_FLAGS and out[i + 1].isdigit():
            out[i + 1] = str(max(int(out[i + 1]), at_least))
        key, eq, value = a.partition("=")
        if eq and key in ITER_KEYS and value.isdigit():
            out[i] = f"{key}={max(int(value), at_least)}"
    return out


def run_program(
    entry: dict[str, Any], public: bool, opts: argparse.Namespace, env: dict[str, str]
) -> list[dict]:
    name = entry["name"]
    args = with_iterations(list(entry.get("args_gpu") or []), opts.min_iters)
    if public:
        cwd = ROOT / entry["dir"]
        script = (
            lightning_shim(cwd, entry["file"])
            if "lightning" in entry.get("requires", [])
            else entry["file"]
        )
    else:
        cwd, script = ROOT, str(MANIFEST.parent / entry["file"])
    out_dir = opts.runs / name
    cmd = [
        opts.python,
        "-m",
        "gpudoctor",
        "run",
        "--try-fixes",
        *([] if opts.trial_traces else ["--no-trial-trace"]),
        "--json",
        "--skip",
        str(opts.skip),
        "--trial-timeout",
        str(opts.timeout),
        "--out",
        str(out_dir),
    ]
    if name in FIXES_FOR:
        cmd += ["--fixes", FIXES_FOR[name]]
    res = run_command([*cmd, script, *args], cwd, env, opts.timeout * 4)
    run_dir = newest_run_dir(out_dir) if out_dir.is_dir() else None
    report = read_json(run_dir / "report.json") if run_dir is not None else None
    base = {
        "program": name,
        "public": public,
        "args": args,
        "rc": res["rc"],
        "wall_s": res["wall_s"],
        "run_dir": str(run_dir) if run_dir else None,
    }
    if report is None:
        return [{**base, "knob": None, "message": failure_message(res) or "no report"}]
    paces = [
        (f.get("evidence") or {}).get("numbers", {}).get("host_pace_from")
        for f in report.get("findings", [])
    ]
    base.update(
        step_ms=report.get("step_ms"),
        unprofiled_step_ms=report.get("unprofiled_step_ms"),
        # what gave the host's pace to the replayed prices (rules/whatif.py HOST_PACE_FROM)
        host_pace_from=next((p for p in paces if p), None),
        findings=[(f.get("id"), f.get("predicted_speedup")) for f in report.get("findings", [])][
            :5
        ],
    )
    trials = report.get("trials") or []
    if not trials:
        why = [report.get("trials_note") or ""] + [
            f"{n.get('finding')}: {n.get('reason')}"
            for n in report.get("trials_not_tried", []) or []
        ]
        return [
            {**base, "knob": None, "message": "no trial: " + "; ".join(w for w in why if w)[:300]}
        ]
    return [
        {
            **base,
            "knob": t.get("knob"),
            "status": t.get("status"),
            "verdict": t.get("verdict"),
            "predicted_speedup": t.get("predicted_speedup"),
            "predicted_by": t.get("predicted_by"),
            "measured_speedup": t.get("measured_speedup"),
            "speedup_ci95": t.get("speedup_ci95"),
            "finding": t.get("finding"),
            "reason": t.get("reason"),
        }
        for t in trials
    ]


def ratio(row: dict) -> float | None:
    p, m = row.get("predicted_speedup"), row.get("measured_speedup")
    return p / m if p and m else None


def slower(row: dict) -> bool:
    ci = row.get("speedup_ci95") or [None, None]
    return ci[1] is not None and ci[1] < 1.0


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        f"Knob trials, {meta.get('device')}, torch {meta.get('torch')}, {meta.get('started')}",
        "",
        "| program | knob | predicted (by) | measured [95%] | predicted / measured | verdict |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        if r.get("knob") is None:
            lines.append(f"| {r['program']} | - | - | - | - | {r.get('message', '')[:120]} |")
            continue
        ci = r.get("speedup_ci95") or [None, None]
        q = ratio(r)
        star = "*" if q and 1 / WITHIN <= q <= WITHIN else ""
        lines.append(
            f"| {r['program']} | {r['knob']} | {fmt(r.get('predicted_speedup'))} ({r.get('predicted_by') or '-'}) "
            f"| {fmt(r.get('measured_speedup'))} [{fmt(ci[0])}-{fmt(ci[1])}] | {fmt(q)}{star} | {r.get('verdict')} |"
        )
    knobs = [r for r in rows if r.get("knob") and not str(r["knob"]).startswith("control")]
    paired = [r for r in knobs if ratio(r) is not None]
    within = [r for r in paired if 1 / WITHIN <= ratio(r) <= WITHIN]
    slow = [r for r in knobs if slower(r)]
    slow_ok = [r for r in slow if (r.get("predicted_speedup") or 1.0) <= SLOWER_PREDICTED_AT_MOST]
    slow_names = ", ".join(f"{r['program']}:{r['knob']}" for r in slow) or "none"
    lines += [
        "",
        f"within {WITHIN}x: {len(within)} of {len(paired)} trials with a prediction and a measurement",
        (
            f"measured slower (interval below 1): {len(slow)}; predicted at x{SLOWER_PREDICTED_AT_MOST} or below: "
            f"{len(slow_ok)} ({slow_names})"
        ),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--only", action="append", default=[], help="program names (repeatable, comma-separated)"
    )
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--runs", type=Path, default=None, help="run directories (default OUT/runs)")
    ap.add_argument("--skip", type=int, default=10)
    ap.add_argument("--min-iters", type=int, default=150)
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds one trial may run")
    ap.add_argument(
        "--deadline", type=float, default=0.0, help="stop starting programs after this many seconds"
    )
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument(
        "--trial-traces", action="store_true", help="keep each trial's trace (what a knob left)"
    )
    opts = ap.parse_args()
    manifest = json.loads(MANIFEST.read_text())
    wanted = [n.strip() for item in opts.only for n in item.split(",") if n.strip()]
    pool = {e["name"]: (e, False) for e in manifest["programs"]} | {
        e["name"]: (e, True) for e in manifest["public"]
    }
    unknown = [n for n in wanted if n not in pool]
    if unknown or not wanted:
        ap.error(f"name programs with --only (unknown: {', '.join(unknown) or 'none given'})")
    out = (
        opts.out
        or ROOT / "benchmarks" / "results" / f"knob-trials-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    out.mkdir(parents=True, exist_ok=True)
    opts.runs = (opts.runs or out / "runs").resolve()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    meta: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    try:
        import torch

        meta["torch"] = torch.__version__
        meta["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception as exc:  # noqa: BLE001 - the table still gets written
        meta["device"] = f"unknown ({exc})"
    rows: list[dict] = []
    t0 = time.perf_counter()
    for name in wanted:
        if opts.deadline and time.perf_counter() - t0 > opts.deadline:
            rows.append({"program": name, "knob": None, "message": "skipped: deadline"})
            continue
        print(f"[knobs] {name} ...", file=sys.stderr, flush=True)
        entry, public = pool[name]
        missing = [r for r in entry.get("requires", []) if not importable(r)]
        if missing:  # the program would stop at its import: no trial to time
            rows.append({"program": name, "knob": None,
                         "message": f"skipped: not installed here: {', '.join(missing)}"})
            continue
        try:
            got = run_program(entry, public, opts, env)
        except Exception as exc:  # noqa: BLE001 - one program's breakage must not stop the table
            got = [
                {
                    "program": name,
                    "knob": None,
                    "message": f"runner error: {type(exc).__name__}: {exc}",
                }
            ]
        rows += got
        for r in got:
            print(
                f"[knobs] {name}: {r.get('knob')} predicted {r.get('predicted_speedup')} measured "
                f"{r.get('measured_speedup')} {r.get('message', '')}",
                file=sys.stderr,
                flush=True,
            )
        meta["elapsed_s"] = round(time.perf_counter() - t0, 1)
        (out / "knob_trials.json").write_text(
            json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n"
        )
    text = markdown(rows, meta)
    (out / "knob_trials.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
