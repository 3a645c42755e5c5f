"""`gpudoctor run` and `gpudoctor.profile` on the CPU: the program runs as python would run it,
faults give clear messages and exit codes, and nothing stays attached afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src"

TRAIN = """
import sys, torch
m = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
print("argv", sys.argv[1:], "name", __name__)
for i in range(int(sys.argv[1])):
    loss = m(torch.randn(16, 32)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("finished")
"""


def run(tmp: Path, *args: str, script: str | None = TRAIN, name: str = "train.py") -> subprocess.CompletedProcess[str]:
    if script is not None:
        (tmp / name).write_text(textwrap.dedent(script))
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run([sys.executable, "-m", "gpudoctor", "run", "--out", str(tmp / "runs"), *args],
                          capture_output=True, text=True, env=env, cwd=tmp, timeout=300, check=False)


def run_dirs(tmp: Path) -> list[Path]:
    return sorted((tmp / "runs").glob("*")) if (tmp / "runs").exists() else []


def test_runs_like_python_and_stops_after_the_window(tmp_path: Path) -> None:
    out = run(tmp_path, "--skip", "3", "--steps", "2", "train.py", "50", "--lr", "3")
    assert "argv ['50', '--lr', '3'] name __main__" in out.stdout
    assert "finished" not in out.stdout  # stopped once the window was recorded
    assert out.returncode == 0, out.stderr
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    # 3 skipped, 1 warm-up, 2 recorded, then 5 calibration intervals (6 more boundaries)
    assert env["capture"]["steps_recorded"] == 2 and env["capture"]["steps_seen"] == 12
    assert env["capture"]["step_source"] == "optimizer-step" and env["capture"]["window_opened_at_step"] == 3
    assert len(env["capture"]["unprofiled_after_window_ms"]) == 5
    assert env["capture"]["unprofiled_step_ms"] > 0
    assert (run_dir / "trace.json.gz").stat().st_size > 0
    # no GPU here: a report all the same, which says so
    assert (run_dir / "report.json").is_file() and (run_dir / "report.html").is_file()
    assert "no GPU work was recorded" in out.stdout


def test_continue_lets_the_program_finish(tmp_path: Path) -> None:
    out = run(tmp_path, "--skip", "2", "--steps", "2", "--continue", "train.py", "12")
    assert "finished" in out.stdout and out.returncode == 0


def test_program_exit_code_passes_through(tmp_path: Path) -> None:
    out = run(tmp_path, "--skip", "50", "t.py", script="import sys\nsys.exit(7)\n", name="t.py")
    assert out.returncode == 7


def test_crash_inside_the_window_keeps_the_capture(tmp_path: Path) -> None:
    crash = TRAIN.replace("    opt.zero_grad()", "    opt.zero_grad()\n    if i == 5: raise ValueError('boom')")
    out = run(tmp_path, "--skip", "2", "--steps", "8", "c.py", "40", script=crash, name="c.py")
    assert out.returncode == 1
    assert "ValueError: boom" in out.stderr and 'File "' in out.stderr and "runpy" not in out.stderr
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    assert env["capture"]["error"] == "ValueError: boom" and env["capture"]["steps_recorded"] == 3


def test_program_that_ends_before_the_window(tmp_path: Path) -> None:
    out = run(tmp_path, "--skip", "10", "train.py", "4")
    assert out.returncode == 2
    assert "ran 4 steps (optimizer-step) and stopped (it ended) before the window" in out.stderr


MANUAL_SGD = """
import time, torch
m = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
end = time.time() + 3
while time.time() < end:
    loss = m(torch.randn(8, 32)).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in m.parameters():
            p -= 0.01 * p.grad
            p.grad = None
    time.sleep(0.02)
print("done")
"""


def test_no_step_source_uses_a_time_window_opened_at_a_module_call(tmp_path: Path) -> None:
    # training-like forwards with no optimizer: no step source within --wait, so a time window
    # opens and closes at module calls, each iteration marked inside it
    out = run(tmp_path, "--wait", "0.3", "--window", "0.5", "sgd.py", script=MANUAL_SGD, name="sgd.py")
    assert out.returncode == 0, out.stderr
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    assert env["capture"]["step_source"] == "time-window" and env["capture"]["root_module"] == "Sequential"
    assert 0.5 <= env["capture"]["window_wall_s"] < 1.5
    import gzip

    trace = json.loads(gzip.decompress((run_dir / "trace.json.gz").read_bytes()))
    marks = [e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("gpudoctor.iteration#")]
    assert len(marks) >= 5


def test_a_loop_of_bare_tensor_ops_is_told_to_mark_its_steps(tmp_path: Path) -> None:
    # no module, optimizer, DataLoader or graph: no safe point to open a window at
    script = "import time, torch\nx = torch.randn(64, 64)\nend = time.time() + 1\nwhile time.time() < end:\n    x = x @ x.T / 64\n"
    out = run(tmp_path, "--wait", "0.3", "--window", "0.5", "busy.py", script=script, name="busy.py")
    assert out.returncode == 2
    assert "ran no step gpudoctor could see" in out.stderr and "gpudoctor.step()" in out.stderr


def test_no_steps_and_a_short_program(tmp_path: Path) -> None:
    out = run(tmp_path, "--wait", "30", "q.py", script="print('hello')\n", name="q.py")
    assert out.returncode == 2 and "ran no step" in out.stderr and "hello" in out.stdout


def test_explicit_steps_and_modules(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "loop.py").write_text(textwrap.dedent("""
        import torch, gpudoctor
        x = torch.randn(32, 32)
        for i in range(30):
            x = torch.tanh(x @ x)
            gpudoctor.step()
        print("loop done")
    """))
    out = run(tmp_path, "--skip", "2", "--steps", "3", "--continue", "-m", "pkg.loop", script=None)
    assert out.returncode == 0, out.stderr
    assert "loop done" in out.stdout
    [run_dir] = run_dirs(tmp_path)
    assert json.loads((run_dir / "env.json").read_text())["capture"]["steps_recorded"] == 3


def test_a_program_with_its_own_profiler(tmp_path: Path) -> None:
    script = TRAIN.replace("for i in", "prof = torch.profiler.profile()\nprof.start()\nfor i in")
    script = script.replace('print("finished")', 'prof.stop()\nprint("finished")')
    out = run(tmp_path, "--skip", "2", "p.py", "20", script=script, name="p.py")
    # gpudoctor steps aside: the program runs to its end with its own profiler
    assert out.returncode == 2 and "already runs torch.profiler" in out.stderr
    assert "finished" in out.stdout


def test_bad_targets(tmp_path: Path) -> None:
    assert run(tmp_path, "missing.py", script=None).returncode == 2
    out = run(tmp_path, "-m", "no_such_module_xyz", script=None)
    assert out.returncode == 2 and "no module named" in out.stderr
    out = run(tmp_path, "--steps", "0", "train.py", "3")
    assert out.returncode == 2 and "--steps must be a positive integer" in out.stderr
    assert run(tmp_path, script=None).returncode == 2


def test_profile_api_detaches_everything(tmp_path: Path) -> None:
    import torch

    import gpudoctor
    from gpudoctor.capture import session as session_module

    m = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with gpudoctor.profile(steps=2, skip=1, out=tmp_path) as doc:
        for _ in range(6):
            m(torch.randn(4, 8)).sum().backward()
            opt.step()
    assert doc.session.result.steps_recorded == 2
    assert session_module._ACTIVE == []
    assert not torch.autograd.profiler._is_profiler_enabled
    report = doc.report()  # a CPU-only window still gets its report: step times, no GPU findings
    assert report.gpu["name"] is None and not report.findings and report.steps["source"] == "optimizer-step"
    # 1 skipped, 1 warm-up, 2 recorded, 2 calibration steps; then the hooks are gone
    assert doc.session.result.steps_seen == 6
    opt.step()
    m(torch.randn(4, 8))
    assert doc.session.result.steps_seen == 6
    from gpudoctor.capture import hooks

    assert hooks._CURRENT == []  # the global module hooks listen to nobody (or are gone)


def test_ctrl_c_inside_the_window(tmp_path: Path) -> None:
    script = TRAIN.replace("    opt.zero_grad()", "    opt.zero_grad()\n    if i == 4: raise KeyboardInterrupt")
    out = run(tmp_path, "--skip", "2", "--steps", "5", "k.py", "30", script=script, name="k.py")
    assert out.returncode == 130
    assert "interrupted by Ctrl-C" in out.stderr
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    assert env["capture"]["error"] == "interrupted by Ctrl-C" and env["capture"]["steps_recorded"] == 2
