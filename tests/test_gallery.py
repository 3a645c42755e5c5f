"""The gallery of ordinary programs (tests/programs/) under ``gpudoctor run`` on the CPU.

Each program whose ``requires`` are importable runs as
``python -m gpudoctor run --skip 3 --steps 3 --out TMP PROG ARGS_CPU`` in a subprocess
(PYTHONPATH=src), and must: end with the program's own exit code, leave a run directory with
trace.json.gz and env.json, and a report.json.

The programs run concurrently (a pool the size of the machine, at most 3) as soon as the first test
asks, so the whole file takes about a minute on 2 cores; each test then checks its own program.
Programs the manifest marks ``cpu_skip`` (torch.compile: ~50 s on 2 cores) or whose requirements
(transformers, lightning, accelerate, torchvision) are missing are skipped.

The public programs (the manifest's "public": pytorch/examples, Lightning) run the same way from
a copy of their folder under .gallery-public/ (what they write, Lightning's logs say, stays out of
it); one that is not fetched there (scripts/fetch_gallery_public.py), is GPU only (args_cpu null)
or disabled is skipped. ``cpu_known_gap`` names a step source gpudoctor is known to get wrong on
the CPU args: that check then xfails, and fails once it passes (the field must go).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "programs"
MANIFEST = json.loads((PROGRAMS / "manifest.json").read_text())
ENTRIES = {e["name"]: e for e in MANIFEST["programs"]}
PUBLIC = {e["name"]: e for e in MANIFEST["public"]}
ALL = {**ENTRIES, **PUBLIC}
TIMEOUT_S = (
    900.0  # a hang's bound, far above any machine's load (the slowest run takes ~10 s alone)
)


def _importable(requirement: str) -> bool:
    for name in requirement.split("|"):
        try:
            if importlib.util.find_spec(name.strip()) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def _why_skip(entry: dict[str, Any]) -> str | None:
    if entry.get("cpu_skip"):
        return entry["cpu_skip"]
    if entry["name"] in PUBLIC:
        if not entry.get("enabled", True):
            return "disabled in the manifest (see its notes)"
        if entry.get("args_cpu") is None:
            return "GPU only (args_cpu is null)"
        if not (ROOT / entry["dir"] / entry["file"]).is_file():
            return f"{entry['dir']}/{entry['file']} not fetched (scripts/fetch_gallery_public.py)"
    missing = [r for r in entry.get("requires", []) if not _importable(r)]
    return f"needs {', '.join(missing)}" if missing else None


def _run(entry: dict[str, Any], out: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    if entry["name"] in PUBLIC:
        # a copy of the fetched folder: the program runs from it (relative paths) and writes into it
        cwd = out.parent / f"{entry['name']}-work"
        shutil.copytree(ROOT / entry["dir"], cwd)
        script = entry["file"]
    else:
        cwd, script = ROOT, str(PROGRAMS / entry["file"])
    cmd = [
        sys.executable,
        "-m",
        "gpudoctor",
        "run",
        "--skip",
        "3",
        "--steps",
        "3",
        "--out",
        str(out),
        script,
        *entry["args_cpu"],
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
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
        os.killpg(proc.pid, signal.SIGKILL)  # the program's DataLoader workers too
        stdout, stderr = proc.communicate()
        timed_out = True
    dirs = sorted(d for d in out.glob("*") if d.is_dir()) if out.is_dir() else []
    return {
        "rc": proc.returncode,
        "timed_out": timed_out,
        "stdout": stdout,
        "stderr": stderr,
        "run_dir": dirs[-1] if dirs else None,
    }


@pytest.fixture(scope="session")
def gallery(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Start every selected, runnable program at once; tests wait for their own."""
    selected = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("name") if callspec else None
        if name in ALL and name not in selected and _why_skip(ALL[name]) is None:
            selected.append(name)
    base = tmp_path_factory.mktemp("gallery")
    pool = ThreadPoolExecutor(max_workers=max(1, min(3, os.cpu_count() or 2)))
    futures: dict[str, Future] = {n: pool.submit(_run, ALL[n], base / n) for n in selected}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def _context(res: dict[str, Any]) -> str:
    return f"\n--- stderr (tail) ---\n{res['stderr'][-2500:]}\n--- stdout (tail) ---\n{res['stdout'][-800:]}"


@pytest.mark.e2e
@pytest.mark.xdist_group(
    "gallery"
)  # one worker runs them all: each worker that asks starts every program
@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_gallery_program(name: str, gallery: dict[str, Future]) -> None:
    _check(ENTRIES[name], gallery)


@pytest.mark.e2e
@pytest.mark.xdist_group("gallery")
@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_gallery_public_program(name: str, gallery: dict[str, Future]) -> None:
    _check(PUBLIC[name], gallery)


def _check(entry: dict[str, Any], gallery: dict[str, Future]) -> None:
    name = entry["name"]
    why = _why_skip(entry)
    if why:
        pytest.skip(why)
    res = gallery[name].result()
    assert not res["timed_out"], f"{name} ran past {TIMEOUT_S} s" + _context(res)
    # the program behaves as without gpudoctor: its own exit code
    assert res["rc"] == entry["exit_code"], (
        f"{name}: exit code {res['rc']}, expected {entry['exit_code']}" + _context(res)
    )
    run_dir = res["run_dir"]
    assert run_dir is not None, f"{name}: no run directory" + _context(res)
    assert (run_dir / "trace.json.gz").is_file(), (
        f"{name}: no trace.json.gz in {run_dir}" + _context(res)
    )
    assert (run_dir / "env.json").is_file(), f"{name}: no env.json in {run_dir}" + _context(res)
    # a report for every run that has a trace, CPU-only windows and partial windows included
    assert (run_dir / "report.json").is_file(), (
        f"{name}: no report.json in {run_dir} (a run that leaves a trace leaves its report too)"
        + _context(res)
    )
    # the steps were found in the program's own loop, by what marks one iteration of it
    env = json.loads((run_dir / "env.json").read_text())
    got = env["capture"]["step_source"]
    gap = entry.get("cpu_known_gap")
    if gap and got != entry["step_source"]:
        pytest.xfail(f"{name}: steps marked by {got}, not {entry['step_source']}: {gap}")
    assert got == entry["step_source"], f"{name}: steps marked by {env['capture']}" + _context(res)
    assert not gap, (
        f"{name}: the known gap is fixed (steps marked by {got}): remove cpu_known_gap from the manifest"
    )
