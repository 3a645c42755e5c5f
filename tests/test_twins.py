"""The twin programs (tests/programs/twins/, the pricing check) and the by-hand programs
(tests/programs/byhand/, try-fixes' knobs against the same changes made by hand) on the CPU, and their
manifests.

Each twin runs plainly (no gpudoctor) with its ``args_cpu``, sick and with ``--fixed`` (a by-hand
program: plainly and with each of its hand-made changes' flags), and must exit 0 and print the
timing lines its ``args_cpu`` ask for, every mode the same ones (the same work): one line its
``timing_regex`` reads every --log-every iterations of --iters (--max-steps), numbered by the
iteration it ends. The CPU says nothing of a fix's speedup; what the twins exist to show, the planted
cause found on a GPU, is checked on the committed H100 traces of the sick twins
(tests/data/twins_h100): their top finding against the manifest's ``expected_top_finding`` here,
their figures in tests/test_twin_traces.py and tests/test_dynamic_shapes.py. Importing torch and, at the first
optimizer step, torch._dynamo costs ~4 s of CPU per interpreter, so one interpreter per twin runs
both modes one after the other, each as ``python PROG ARGS`` would (``runpy`` as ``__main__``, its
own ``sys.argv``, its exit code read from ``SystemExit``); the twins run concurrently (a pool of at
most 4) as soon as the first test asks: about 30 s on 2 cores. ``torch.compile`` (the --compile,
--reduce-overhead and Trainer ``torch_compile`` flags) runs with the eager backend: dynamo still traces
the program, but Inductor's C++ build on a cold cache took 40 s of the GRU tagger's 50. The manifest must name existing
files and registered rule ids only. ``benchmarks/run_twins.py``'s verdict logic is checked on
made-up reports.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from script_module import load

from gpudoctor.rules.registry import RULES

ROOT = Path(__file__).resolve().parents[1]
TWINS = ROOT / "tests" / "programs" / "twins"
TRACES = ROOT / "tests" / "data" / "twins_h100"
MANIFEST = json.loads((TWINS / "manifest.json").read_text())
ENTRIES = {e["name"]: e for e in MANIFEST["programs"]}
MODES = ("sick", "fixed")
BY_HAND = ROOT / "tests" / "programs" / "byhand"
BY_HAND_MANIFEST = json.loads((BY_HAND / "manifest.json").read_text())
BY_HAND_ENTRIES = {e["name"]: e for e in BY_HAND_MANIFEST["programs"]}
TIMEOUT_S = (
    900.0  # a hang's bound, far above any machine's load (the slowest run takes ~50 s alone)
)
REQUIRED = {
    "name": str,
    "file": str,
    "args_cpu": list,
    "args_gpu": list,
    "expected_top_finding": list,
    "iterations_per_step": (int, float),
    "timing_regex": str,
    "requires": list,
    "notes": str,
    "fix": str,
}


# Runs PROG once per mode in this interpreter, as `python PROG ARGS [--fixed]` would, and prints the
# outcomes as one JSON line after MARK (the programs' own stdout is captured per mode).
MARK = "@@twin-results@@"
DRIVER = f"""
import contextlib, io, json, runpy, sys, traceback
import torch
prog, modes, args = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
_compile = torch.compile
def _compile_eagerly(*a, **k):  # dynamo traces the program as it would; Inductor's C++ codegen is skipped
    k["backend"] = "eager"
    return _compile(*a, **k)
torch.compile = _compile_eagerly
results = {{}}
for mode, extra in modes.items():
    sys.argv = [prog, *args, *extra]
    out, rc, error = io.StringIO(), 0, ""
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(prog, run_name="__main__")
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            rc, error = 1, traceback.format_exc()
    results[mode] = {{"rc": rc, "stdout": out.getvalue(), "error": error}}
print({MARK!r} + json.dumps(results), flush=True)
"""


def _modes(entry: dict[str, Any]) -> dict[str, list[str]]:
    """mode -> the flags it adds: a twin's sick and --fixed, a by-hand program's plain and each knob's."""
    if "hand" in entry:
        return {"plain": [], **{hand["knob"]: hand["args"] for hand in entry["hand"]}}
    return {"sick": [], "fixed": ["--fixed"]}


def _run(entry: dict[str, Any], folder: Path, scratch: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [
        sys.executable,
        "-c",
        DRIVER,
        str(folder / entry["file"]),
        json.dumps(_modes(entry)),
        *entry["args_cpu"],
    ]
    # The programs make scratch folders as users' programs do (a Trainer's output_dir): in the
    # test's own tmp path, not the machine's /tmp.
    env["TMPDIR"] = str(scratch)
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # DataLoader workers too
        stdout, stderr = proc.communicate()
        timed_out = True
    line = next((ln for ln in stdout.splitlines() if ln.startswith(MARK)), None)
    results = json.loads(line[len(MARK) :]) if line else {}
    return {
        "rc": proc.returncode,
        "timed_out": timed_out,
        "stderr": stderr,
        "stdout": stdout,
        "modes": results,
    }


@pytest.fixture(scope="session")
def twin_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Start every selected twin at once; each test waits for its own."""
    selected = {}
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("name") if callspec else None
        if item.originalname == "test_twin_runs_on_cpu" and name in ENTRIES:
            selected[name] = (ENTRIES[name], TWINS)
        elif item.originalname == "test_by_hand_runs_on_cpu" and name in BY_HAND_ENTRIES:
            selected[name] = (BY_HAND_ENTRIES[name], BY_HAND)
    pool = ThreadPoolExecutor(max_workers=max(1, min(4, 2 * (os.cpu_count() or 1))))
    futures: dict[str, Future] = {
        n: pool.submit(_run, *selected[n], tmp_path_factory.mktemp(f"twin-{n}")) for n in selected
    }
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.e2e
@pytest.mark.xdist_group(
    "twin_runs"
)  # one worker runs them all: each worker that asks starts every twin
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_twin_runs_on_cpu(name: str, mode: str, twin_runs: dict[str, Future]) -> None:
    _check_run(ENTRIES[name], mode, twin_runs)


@pytest.mark.e2e
@pytest.mark.xdist_group("twin_runs")
@pytest.mark.parametrize("name", sorted(BY_HAND_ENTRIES))
def test_by_hand_runs_on_cpu(name: str, twin_runs: dict[str, Future]) -> None:
    entry = BY_HAND_ENTRIES[name]
    for mode in _modes(entry):
        _check_run(entry, mode, twin_runs)


def _check_run(entry: dict[str, Any], mode: str, twin_runs: dict[str, Future]) -> None:
    name = entry["name"]
    res = twin_runs[name].result()
    context = f"\n--- stderr ---\n{res['stderr'][-2000:]}\n--- stdout ---\n{res['stdout'][-800:]}"
    assert not res["timed_out"], f"{name} ran past {TIMEOUT_S} s" + context
    assert mode in res["modes"], (
        f"{name}: the driver reported nothing (exit code {res['rc']})" + context
    )
    run = res["modes"][mode]
    context = (
        f"\n--- error ---\n{run['error'][-2000:]}\n--- stdout ---\n{run['stdout'][-800:]}" + context
    )
    assert run["rc"] == 0, f"{name} ({mode}): exit code {run['rc']}" + context
    lines = [ln for ln in run["stdout"].splitlines() if re.search(entry["timing_regex"], ln)]
    times = [float(re.search(entry["timing_regex"], ln).group(1)) for ln in lines]
    assert all(t > 0 for t in times), times
    printed = _numbered(lines)
    assert printed == _expected_prints(entry), f"{name} ({mode}): timing lines {lines}" + context
    # the same work in every mode: the fix changes how a step runs, not how many run
    first = next(iter(_modes(entry)))
    if mode != first and res["modes"].get(first, {}).get("rc") == 0:
        other = [
            ln
            for ln in res["modes"][first]["stdout"].splitlines()
            if re.search(entry["timing_regex"], ln)
        ]
        assert _numbered(other) == printed, f"{name}: {first} printed {other}, {mode} {lines}"


def _expected_prints(entry: dict[str, Any]) -> list[int]:
    """The iterations whose timing line ``args_cpu`` asks for: every --log-every-th of --iters (the
    Trainer programs: of --max-steps), e.g. 4, 8, 12 of 12 by 4."""
    args = dict(zip(entry["args_cpu"][::2], entry["args_cpu"][1::2]))
    total, every = int(args.get("--iters", args.get("--max-steps", 0))), int(args["--log-every"])
    assert total >= every > 0, entry["args_cpu"]
    return list(range(every, total + 1, every))


def _numbered(lines: list[str]) -> list[int]:
    """The iteration each timing line ends ("iter 8: ...", "epoch 8: ...", "step 8: ...", "batch 8: ...")."""
    numbers = [re.match(r"\s*(?:iter|epoch|step|batch) (\d+):", ln) for ln in lines]
    assert all(numbers), lines
    return [int(m.group(1)) for m in numbers if m]


def test_manifest_is_well_formed() -> None:
    assert MANIFEST["programs"], "no twins"
    assert len(ENTRIES) == len(MANIFEST["programs"]), "duplicate names"
    on_disk = {p.name for p in TWINS.glob("*.py")}
    for entry in MANIFEST["programs"]:
        name = entry.get("name")
        for key, kind in REQUIRED.items():
            assert isinstance(entry.get(key), kind), f"{name}: {key} missing or not {kind}"
        assert (TWINS / entry["file"]).is_file(), f"{name}: {entry['file']} does not exist"
        assert entry["expected_top_finding"], (
            f"{name}: a twin plants a cause: it needs an expected finding"
        )
        for rule_id in entry["expected_top_finding"] + entry.get("fix_also_removes", []):
            assert rule_id in RULES, (
                f"{name}: {rule_id!r} is not a registered rule ({', '.join(RULES)})"
            )
        assert entry["iterations_per_step"] > 0
        assert all(isinstance(a, str) for a in entry["args_cpu"] + entry["args_gpu"]), name
        assert "--fixed" not in entry["args_cpu"] + entry["args_gpu"], (
            f"{name}: the runner adds --fixed itself"
        )
        assert re.compile(entry["timing_regex"]).groups >= 1, f"{name}: timing_regex needs a group"
        low, high = entry["expected_measured_speedup"]
        assert 1.0 < low <= high, f"{name}: expected_measured_speedup {low}-{high}"
        # the expected diagnosis is written in the program too, before anything ran
        source = (TWINS / entry["file"]).read_text()
        assert "EXPECTED" in source and entry["expected_top_finding"][0] in source, (
            f"{name}: docstring"
        )
        assert "--fixed" in source, f"{name}: no --fixed flag"
    assert on_disk == {e["file"] for e in MANIFEST["programs"]}, (
        "a twin on disk is missing from the manifest"
    )


# What the committed H100 trace of each sick twin ranks first among its actionable findings; the
# manifest's expected ids were written before the runs. empty_cache_varlen: the allocator churn
# the program plants ranks third (10.3 ms a step) behind dynamic-shapes (187.1 ms) and the whole
# step's graph (launch-bound, 25.2 ms): cuDNN attention
# builds a plan on the host for every new padded length, and the same --fixed pads to multiples of
# 128 (tests/test_dynamic_shapes.py prices it). Fixed twins live in tests/data/twins_h100_fixed.
TRACED = sorted(p.name for p in TRACES.iterdir() if (p / "trace.json.gz").is_file())
# twin: (the top finding, the rank of the first expected one) where the two differ
NOT_FIRST = {"empty_cache_varlen": ("dynamic-shapes", 3),
             # the whole step's graph (launch-bound) saves more than the fused optimizer alone
             "manual_adam_loop": ("launch-bound", 2),
             # the same: 25 optimizers' wrappers (x1.10) beside the whole step's launches
             "per_layer_optimizers": ("launch-bound", 2)}
# twin: the top finding's severity where it is not critical (fp32_resnet's fix saves a quarter of
# its step: major; greedy_decode_eos_check's read a token saves a tenth of it, and comes first as
# it forbids the graph launch-bound prices)
NOT_CRITICAL = {"fp32_resnet": "major", "greedy_decode_eos_check": "major",
                # half the attention kernels' 2.4 ms of a 13 ms step
                "sdpa_float_causal_mask": "major"}


@pytest.mark.parametrize("name", TRACED)
def test_the_sick_twins_h100_trace_shows_its_planted_cause(name: str) -> None:
    from gpudoctor.pipeline import analyze_path

    expected = ENTRIES[name]["expected_top_finding"]
    actionable = [f for f in analyze_path(TRACES / name).findings if f.severity != "info"]
    ids = [f.id for f in actionable]
    ranks = [i + 1 for i, fid in enumerate(ids) if fid in expected]
    top, rank = NOT_FIRST.get(name, (ids[0], 1))  # by default: an expected finding is first
    assert ids[0] == top and ranks[:1] == [rank], f"{name}: {ids}, expected {expected}"
    assert actionable[0].severity == NOT_CRITICAL.get(name, "critical"), actionable[0]


def test_every_committed_twin_trace_is_a_twin() -> None:
    assert set(TRACED) <= set(ENTRIES) and len(TRACED) == 19, TRACED
    assert set(NOT_FIRST) <= set(TRACED)


def _runner():
    return load("run_twins")


@pytest.mark.parametrize(
    ("findings", "measured", "verdict", "rank"),
    [
        ([("fp32-matmul", "critical", 8.0, 1.8)], 2.0, "pass", 1),
        ([("fp32-matmul", "critical", 8.0, 1.8)], 4.0, "diagnosed", 1),
        ([("host-sync", "major", 9.0, 2.0), ("fp32-matmul", "major", 3.0, 1.2)], 1.2, "missed", 2),
        ([("fp32-matmul", "info", 0.1, 1.0)], 1.2, "missed", 1),
        ([], 2.0, "missed", None),
    ],
)
def test_runner_verdict(findings: list, measured: float, verdict: str, rank: int | None) -> None:
    run_twins = _runner()
    report = {
        "step_ms": 22.0,
        "unprofiled_step_ms": 20.0,
        "steps": {"source": "optimizer-step"},
        "findings": [
            {"id": i, "severity": s, "saving_ms": ms, "predicted_speedup": x}
            for i, s, ms, x in findings
        ],
    }
    row: dict[str, Any] = {"measured_speedup": measured}
    run_twins.judge(
        row, report, {"expected_top_finding": ["fp32-matmul"], "fix_also_removes": ["host-sync"]}
    )
    assert row["verdict"] == verdict
    assert row.get("rank") == rank
    if findings:
        saved = sum(ms for i, _, ms, _ in findings if i in ("fp32-matmul", "host-sync"))
        assert row["predicted_speedup_fix"] == pytest.approx(
            20.0 / (20.0 - min(saved, 19.0)), rel=1e-3
        )


def test_repeated_plain_runs_alternate_and_take_each_sides_median() -> None:
    """ABBA order: a drifting host weighs on both twins alike; an untimed run is left out."""
    order: list[bool] = []
    timings = {False: iter([12.0, 15.0, None]), True: iter([6.0, 9.0, 7.0])}

    def run(fixed: bool) -> dict[str, Any]:
        order.append(fixed)
        return {"rc": 0, "true_step_ms": next(timings[fixed])}

    sick, fixed = _runner().alternating_runs(run, 3)
    assert order == [False, True, True, False, False, True]
    assert sick["runs_ms"] == [12.0, 15.0, None] and sick["true_step_ms"] == 13.5
    assert fixed["runs_ms"] == [6.0, 9.0, 7.0] and fixed["true_step_ms"] == 7.0


def test_by_hand_manifest_is_well_formed() -> None:
    from gpudoctor.tryfix.knobs import KNOBS

    knobs = {k.id: k for k in KNOBS}
    assert len(BY_HAND_ENTRIES) == len(BY_HAND_MANIFEST["programs"]) >= 5, (
        "duplicate names, or too few programs"
    )
    assert {p.name for p in BY_HAND.glob("*.py")} == {
        e["file"] for e in BY_HAND_MANIFEST["programs"]
    }
    for entry in BY_HAND_MANIFEST["programs"]:
        name = entry["name"]
        for key, kind in {**REQUIRED, "hand": list}.items():
            if key != "fix":
                assert isinstance(entry.get(key), kind), f"{name}: {key} missing or not {kind}"
        source = (BY_HAND / entry["file"]).read_text()
        assert "EXPECTED" in source and entry["expected_top_finding"][0] in source, (
            f"{name}: docstring"
        )
        assert entry["hand"], f"{name}: no change made by hand"
        for hand in entry["hand"]:
            knob = knobs.get(hand["knob"])
            assert knob is not None, f"{name}: {hand['knob']!r} is not a knob ({', '.join(knobs)})"
            # the knob is the one try-fixes would try for the program's expected finding, or for the
            # finding the entry names
            answered = {
                *entry["expected_top_finding"],
                *([hand["finding"]] if "finding" in hand else []),
            }
            assert set(knob.findings) & answered, f"{name}: {knob.id} fixes {knob.findings}"
            low, high = hand["expected_speedup"]
            assert 1.0 < low <= high, f"{name}: expected_speedup {low}-{high}"
            assert hand["args"] and all(a in source for a in hand["args"] if a.startswith("--")), (
                f"{name}: {hand}"
            )
            assert isinstance(hand["differs"], str) and hand["differs"], name


def test_the_doctor_timed_speedup_needs_both_sides() -> None:
    doctor_measured = _runner().doctor_measured
    assert doctor_measured(13.36, 1.87) == pytest.approx(7.1444, abs=1e-4)
    for sick, fixed in ((13.36, None), (None, 1.87), (13.36, 0.0), ("13", 1.87), (-1.0, 2.0)):
        assert doctor_measured(sick, fixed) is None
