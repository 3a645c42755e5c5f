"""`gpudoctor run` and `gpudoctor.profile` on the CPU: the program runs as python would run it,
faults give clear messages and exit codes, and nothing stays attached afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sigint import default_sigint, ignore_sigint

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


def run(
    tmp: Path, *args: str, script: str | None = TRAIN, name: str = "train.py"
) -> subprocess.CompletedProcess[str]:
    if script is not None:
        (tmp / name).write_text(textwrap.dedent(script))
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", "run", "--out", str(tmp / "runs"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        timeout=300,
        check=False,
    )


def run_dirs(tmp: Path) -> list[Path]:
    return sorted((tmp / "runs").glob("*")) if (tmp / "runs").exists() else []


@pytest.mark.e2e
def test_runs_like_python_and_stops_after_the_window(tmp_path: Path) -> None:
    out = run(tmp_path, "--skip", "3", "--steps", "2", "train.py", "50", "--lr", "3")
    assert "argv ['50', '--lr', '3'] name __main__" in out.stdout
    assert "finished" not in out.stdout  # stopped once the window was recorded
    assert out.returncode == 0, out.stderr
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    # 3 skipped, 1 warm-up, 2 recorded, 1 to settle, then 8 calibration intervals (9 more boundaries)
    assert env["capture"]["steps_recorded"] == 2 and env["capture"]["steps_seen"] == 16
    assert (
        env["capture"]["step_source"] == "optimizer-step"
        and env["capture"]["window_opened_at_step"] == 3
    )
    assert len(env["capture"]["unprofiled_after_window_ms"]) == 8
    assert env["capture"]["unprofiled_step_ms"] == env["capture"]["unprofiled"]["ms"] > 0
    # what ran, for gpudoctor history and diff --last (tmp_path is no git repository: no commit)
    assert env["program"] == {
        "target": str((tmp_path / "train.py").resolve()),
        "args": ["50", "--lr", "3"],
        "is_module": False,
        "git_commit": None,
        "git_dirty": None,
    }
    assert (run_dir / "trace.json.gz").stat().st_size > 0
    # no GPU here: a report all the same, which says so
    assert (run_dir / "report.json").is_file() and (run_dir / "report.html").is_file()
    assert "no GPU work was recorded" in out.stdout


@pytest.mark.e2e
def test_the_interpreter_collects_our_frozen_objects_at_exit(tmp_path: Path) -> None:
    """The runner freezes the objects alive before the program (gc.freeze); left frozen, triton's
    outlived its bindings and nanobind printed about a hundred "leaked" lines after the report."""
    pytest.importorskip("triton")
    script = (
        "import time, gpudoctor\nfor i in range(12):\n    time.sleep(0.001)\n    gpudoctor.step()\n"
    )
    out = run(tmp_path, "--skip", "3", "--steps", "2", "pure.py", script=script, name="pure.py")
    assert out.returncode == 0, out.stderr
    assert "leaked" not in out.stderr and "nanobind" not in out.stderr


@pytest.mark.e2e
def test_continue_lets_the_program_finish(tmp_path: Path) -> None:
    out = run(tmp_path, "--skip", "2", "--steps", "2", "--continue", "train.py", "12")
    assert "finished" in out.stdout and out.returncode == 0


@pytest.mark.e2e
def test_program_exit_code_passes_through(tmp_path: Path) -> None:
    out = run(tmp_path, "--skip", "50", "t.py", script="import sys\nsys.exit(7)\n", name="t.py")
    assert out.returncode == 7


@pytest.mark.e2e
def test_crash_inside_the_window_keeps_the_capture(tmp_path: Path) -> None:
    crash = TRAIN.replace(
        "    opt.zero_grad()", "    opt.zero_grad()\n    if i == 5: raise ValueError('boom')"
    )
    out = run(tmp_path, "--skip", "2", "--steps", "8", "c.py", "40", script=crash, name="c.py")
    assert out.returncode == 1
    assert "ValueError: boom" in out.stderr and 'File "' in out.stderr and "runpy" not in out.stderr
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    assert env["capture"]["error"] == "ValueError: boom" and env["capture"]["steps_recorded"] == 3


@pytest.mark.e2e
def test_program_that_ends_before_the_window(tmp_path: Path) -> None:
    out = run(tmp_path, "--skip", "10", "train.py", "4")
    assert (
        out.returncode == 3
    )  # the program succeeded; gpudoctor has no report (run --help: "Exit code")
    assert "ran 4 steps (optimizer-step) and ended with exit code 0 before the window" in out.stderr


MANUAL_SGD = """
import time, torch
m = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
end = time.time() + 120  # gpudoctor stops it once its window closed: the loop outlasts any machine's delays
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


@pytest.mark.e2e
def test_no_step_source_uses_a_time_window_opened_at_a_module_call(tmp_path: Path) -> None:
    # training-like forwards with no optimizer: no step source within --wait, so a time window
    # opens and closes at module calls, each iteration marked inside it
    out = run(
        tmp_path, "--wait", "0.3", "--window", "0.5", "sgd.py", script=MANUAL_SGD, name="sgd.py"
    )
    assert out.returncode == 0, out.stderr
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    assert (
        env["capture"]["step_source"] == "time-window"
        and env["capture"]["root_module"] == "Sequential"
    )
    # closed at the first module call past its 0.5 s, not when the program would have ended
    assert 0.5 <= env["capture"]["window_wall_s"] < 60
    import gzip

    trace = json.loads(gzip.decompress((run_dir / "trace.json.gz").read_bytes()))
    marks = [
        e["name"]
        for e in trace["traceEvents"]
        if e.get("name", "").startswith("gpudoctor.iteration#")
    ]
    assert len(marks) >= 5


@pytest.mark.e2e
def test_a_loop_of_bare_tensor_ops_is_told_to_mark_its_steps(tmp_path: Path) -> None:
    # no module, optimizer, DataLoader or graph: no safe point to open a window at
    script = "import time, torch\nx = torch.randn(64, 64)\nend = time.time() + 1\nwhile time.time() < end:\n    x = x @ x.T / 64\n"
    out = run(
        tmp_path, "--wait", "0.3", "--window", "0.5", "busy.py", script=script, name="busy.py"
    )
    assert out.returncode == 3
    # it ran past --wait: the reason is that nothing marks an iteration, not the time window
    assert (
        "(exit code 0) and nothing in it marks an iteration" in out.stderr
        and "gpudoctor.step()" in out.stderr
    )
    assert "ended before the time window" not in out.stderr and "lower --wait" not in out.stderr


@pytest.mark.e2e
def test_no_steps_and_a_short_program(tmp_path: Path) -> None:
    out = run(tmp_path, "--wait", "30", "q.py", script="print('hello')\n", name="q.py")
    assert out.returncode == 3 and "hello" in out.stdout
    assert "the program ended with exit code 0 after" in out.stderr
    assert (
        "before any step and before the time window (--wait 30 s): nothing was recorded"
        in out.stderr
    )


@pytest.mark.e2e
def test_a_program_that_prints_its_help_is_told_apart_from_a_failure(tmp_path: Path) -> None:
    script = "import argparse\nargparse.ArgumentParser().parse_args()\n"
    out = run(tmp_path, "h.py", "--help", script=script, name="h.py")
    assert out.returncode == 3 and "usage: h.py" in out.stdout
    assert (
        "the program ended with exit code 0 after" in out.stderr and "Traceback" not in out.stderr
    )
    bad = run(
        tmp_path, "h.py", "--nope", script=script, name="h.py"
    )  # argparse's own exit 2 passes through
    assert (
        bad.returncode == 2
        and "the program stopped (exit code 2) before its first step" in bad.stderr
    )


@pytest.mark.e2e
def test_explicit_steps_and_modules(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "loop.py").write_text(
        textwrap.dedent("""
        import torch, gpudoctor
        x = torch.randn(32, 32)
        for i in range(30):
            x = torch.tanh(x @ x)
            gpudoctor.step()
        print("loop done")
    """)
    )
    out = run(tmp_path, "--skip", "2", "--steps", "3", "--continue", "-m", "pkg.loop", script=None)
    assert out.returncode == 0, out.stderr
    assert "loop done" in out.stdout
    [run_dir] = run_dirs(tmp_path)
    assert json.loads((run_dir / "env.json").read_text())["capture"]["steps_recorded"] == 3


@pytest.mark.e2e
def test_a_program_with_its_own_profiler(tmp_path: Path) -> None:
    script = TRAIN.replace("for i in", "prof = torch.profiler.profile()\nprof.start()\nfor i in")
    script = script.replace(
        'print("finished")', 'prof.stop()\nprof.export_chrome_trace("own.json")\nprint("finished")'
    )
    out = run(
        tmp_path,
        "--skip",
        "2",
        "--try-fixes",
        "--fixes",
        "tf32",
        "p.py",
        "20",
        script=script,
        name="p.py",
    )
    # gpudoctor steps aside, the program runs to its end with its own profiler and writes its own
    # trace; the report diagnoses the window that profiler recorded
    assert out.returncode == 0, out.stderr
    assert "finished" in out.stdout and (tmp_path / "own.json").is_file()
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    assert (
        env["capture"]["step_source"] == "program-profiler" and (run_dir / "report.json").is_file()
    )
    # its profiler ran from the first step: no step was timed without one, and --skip cannot
    # change that, so neither the note nor the trials say to raise it
    notes = " ".join(env["capture"]["notes"])
    assert "start the program's own profiler later" in notes and "--skip" not in notes
    trials = json.loads((run_dir / "trials.json").read_text())
    assert trials["trials"] == [] and trials["note"].endswith(
        "start its schedule later (a larger wait=) or leave it out to try knobs"
    )


@pytest.mark.e2e
def test_a_program_that_starts_its_profiler_inside_our_window(tmp_path: Path) -> None:
    script = TRAIN.replace(
        "    opt.zero_grad()",
        "    opt.zero_grad()\n    if i == 5:\n"
        "        prof = torch.profiler.profile()\n        prof.start()",
    )
    script = script.replace(
        'print("finished")', 'prof.stop()\nprint("finished", len(prof.events()) > 0)'
    )
    out = run(tmp_path, "--skip", "2", "--steps", "8", "p.py", "20", script=script, name="p.py")
    assert out.returncode == 0, out.stderr
    assert "finished True" in out.stdout  # its profiler started and recorded: ours made way
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    assert env["capture"]["error"] == "the program started its own torch.profiler inside the window"
    assert env["capture"]["steps_recorded"] == 3 and (run_dir / "report.json").is_file()


@pytest.mark.e2e
def test_a_script_with_a_syntax_error_shows_only_its_error(tmp_path: Path) -> None:
    out = run(tmp_path, "bad.py", script="import sys\ndef f(:\n    pass\n", name="bad.py")
    assert out.returncode == 1
    assert 'bad.py", line 2' in out.stderr and "SyntaxError: invalid syntax" in out.stderr
    assert (
        "runner.py" not in out.stderr
        and "runpy" not in out.stderr
        and "Traceback" not in out.stderr
    )


@pytest.mark.e2e
def test_bad_targets(tmp_path: Path) -> None:
    assert run(tmp_path, "missing.py", script=None).returncode == 2
    out = run(tmp_path, "-m", "no_such_module_xyz", script=None)
    assert out.returncode == 2 and "no module named" in out.stderr
    out = run(tmp_path, "--steps", "0", "train.py", "3")
    assert out.returncode == 2 and "--steps must be a positive integer" in out.stderr
    assert run(tmp_path, script=None).returncode == 2


@pytest.mark.parametrize("option", ["--out", "--sandbox"])
@pytest.mark.parametrize("where", ["under-a-file", "proc"])
def test_an_unwritable_output_folder_fails_before_the_program_starts(
    tmp_path: Path, option: str, where: str
) -> None:
    """The first write came when the window closed, inside the program's opt.step(): a
    FileNotFoundError blamed on train.py, and a closing line saying to lower --skip."""
    if where == "proc" and not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    (tmp_path / "train.py").write_text("open('started', 'w').close()\n" + TRAIN)
    target = (
        str(tmp_path / "train.py" / "sub") if where == "under-a-file" else "/proc/gpudoctor-out"
    )
    others = ["--out", str(tmp_path / "runs")] if option == "--sandbox" else []
    env = dict(os.environ, PYTHONPATH=str(SRC))
    out = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "run", *others, option, target, "train.py", "30"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert out.returncode == 2
    [line] = out.stderr.splitlines()
    assert (
        line.startswith(f"error: {option} {target}")
        and "give a folder path you can write to" in line
    )
    assert not (tmp_path / "started").exists() and not (tmp_path / "runs").exists()


def test_a_trace_that_cannot_be_written_never_raises_inside_the_program(
    tmp_path: Path, capsys
) -> None:
    """Written inside the program's opt.step() hook: the failure is reported after the program,
    which runs on to its end untouched."""
    from gpudoctor.capture.runner import Target, run_program
    from gpudoctor.capture.session import CaptureConfig
    from gpudoctor.live import _why_nothing

    (tmp_path / "blocker").write_text("")  # a file where the run directory's parent should be
    (tmp_path / "t.py").write_text(TRAIN)
    config = CaptureConfig(steps=2, skip=2)
    outcome = run_program(
        Target(str(tmp_path / "t.py"), ("12",)), config, tmp_path / "blocker" / "run"
    )
    assert outcome.exit_code == 0 and not outcome.stopped_by_us
    out = capsys.readouterr()
    assert "finished" in out.out and "Traceback" not in out.err
    result = outcome.result
    assert result.trace_path is None and result.internal_error.startswith("NotADirectoryError")
    assert str(tmp_path / "blocker") in result.internal_error
    assert _why_nothing(outcome, config, 30.0).startswith(
        f"gpudoctor failed while recording ({result.internal_error}) and detached, leaving the program to run on"
    )
    from gpudoctor.capture import session as session_module

    assert session_module._ACTIVE == []


def test_why_nothing_names_the_reason_no_window_opened() -> None:
    """A loop of bare tensor ops that ran 6 s under --wait 1 was told it "ended before the time
    window (--wait 1 s) ... lower --wait": nothing marked an iteration, so no window could open."""
    from gpudoctor.capture.runner import Outcome
    from gpudoctor.capture.session import CaptureConfig, CaptureResult
    from gpudoctor.live import _why_nothing

    config = CaptureConfig(skip=10)
    busy = _why_nothing(Outcome(0, CaptureResult(program_s=6.0), False), config, 1.0)
    assert busy.startswith(
        "the program ran 6.0 s (exit code 0) and nothing in it marks an iteration"
    )
    assert (
        busy.endswith("call gpudoctor.step() once per iteration (import gpudoctor)")
        and "--wait 1 s" in busy
    )
    short = _why_nothing(Outcome(0, CaptureResult(program_s=0.4), False), config, 1.0)
    assert short.startswith(
        "the program ended with exit code 0 after 0.4 s, before any step and before the time "
        "window (--wait 1 s)"
    ) and short.endswith("or lower --wait")
    crashed = _why_nothing(Outcome(2, CaptureResult(program_s=0.4), False), config, 1.0)
    assert (
        crashed == "the program stopped (exit code 2) before its first step: nothing was recorded"
    )
    stepped = _why_nothing(
        Outcome(0, CaptureResult(steps_seen=4, step_source="optimizer-step", program_s=2.0), False),
        config,
        1.0,
    )
    assert stepped == (
        "the program ran 4 steps (optimizer-step) and ended with exit code 0 before the window, which "
        "opens after --skip 10: nothing was recorded; lower --skip"
    )


def test_a_module_is_found_in_the_working_directory_as_python_m_finds_it(
    tmp_path: Path, monkeypatch
) -> None:
    """The gpudoctor command's sys.path[0] is its bin folder, not the working directory that
    ``python -m pkg.train`` searches first: ``gpudoctor run -m pkg.train`` said "no module named"."""
    from gpudoctor.capture.runner import Target
    from gpudoctor.errors import InputError

    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "train_here.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    Target("mypkg.train_here", is_module=True).check()  # no InputError
    assert str(tmp_path) not in sys.path  # looked up there, not left there
    with pytest.raises(InputError, match="no module named"):
        Target("mypkg.not_there", is_module=True).check()


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
    assert (
        report.gpu.name is None and not report.findings and report.steps.source == "optimizer-step"
    )
    # 1 skipped, 1 warm-up, 2 recorded, 2 calibration steps; then the hooks are gone
    assert doc.session.result.steps_seen == 6
    opt.step()
    m(torch.randn(4, 8))
    assert doc.session.result.steps_seen == 6
    from gpudoctor.capture import hooks

    assert hooks._CURRENT == []  # the global module hooks listen to nobody (or are gone)


@pytest.mark.e2e
def test_ctrl_c_inside_the_window(tmp_path: Path) -> None:
    script = TRAIN.replace(
        "    opt.zero_grad()", "    opt.zero_grad()\n    if i == 4: raise KeyboardInterrupt"
    )
    out = run(tmp_path, "--skip", "2", "--steps", "5", "k.py", "30", script=script, name="k.py")
    assert out.returncode == 130
    assert "interrupted by Ctrl-C" in out.stderr
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    assert (
        env["capture"]["error"] == "interrupted by Ctrl-C" and env["capture"]["steps_recorded"] == 2
    )


# inside the window (--skip 2: step i == 4), the program says so in its working directory and waits for "go"
WAITS = TRAIN.replace(
    "    opt.zero_grad()",
    """    opt.zero_grad()
    if i == 4:
        import os, time
        open("inside", "w").close()
        deadline = time.time() + 240
        while not os.path.exists("go") and time.time() < deadline:
            time.sleep(0.05)""",
)


def _sigint_inside_the_window(
    tmp: Path, preexec: Callable[[], None], then_go: bool
) -> subprocess.CompletedProcess[str]:
    """``gpudoctor run`` on WAITS, started with SIGINT as ``preexec`` leaves it; a real SIGINT to its
    process once the program waits inside the window (then "go", for a program that is to carry on)."""
    (tmp / "w.py").write_text(textwrap.dedent(WAITS))
    cmd = [
        sys.executable,
        "-m",
        "gpudoctor",
        "run",
        "--out",
        str(tmp / "runs"),
        "--skip",
        "2",
        "--steps",
        "5",
        "w.py",
        "30",
    ]
    with subprocess.Popen(
        cmd,
        cwd=tmp,
        env=dict(os.environ, PYTHONPATH=str(SRC)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
    ) as proc:
        try:
            deadline = time.monotonic() + 240
            while (
                not (tmp / "inside").exists()
                and proc.poll() is None
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            assert (tmp / "inside").exists() and proc.poll() is None, (
                "the program never reached its window"
            )
            proc.send_signal(signal.SIGINT)
            if then_go:
                (tmp / "go").touch()
            out, err = proc.communicate(timeout=300)
        finally:
            proc.kill()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.e2e
def test_a_real_ctrl_c_ends_the_run_with_its_report_and_130(tmp_path: Path) -> None:
    out = _sigint_inside_the_window(tmp_path, default_sigint, then_go=False)
    assert out.returncode == 130, out.stderr
    assert "interrupted by Ctrl-C" in out.stderr and "finished" not in out.stdout
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    assert (
        env["capture"]["error"] == "interrupted by Ctrl-C" and env["capture"]["steps_recorded"] == 2
    )
    assert (run_dir / "report.json").is_file() and (run_dir / "report.html").is_file()


@pytest.mark.e2e
def test_started_with_sigint_ignored_the_run_ignores_it_as_python_would(tmp_path: Path) -> None:
    """A background job (``gpudoctor run ... &`` in a script) inherits SIGINT ignored: the program runs
    in gpudoctor's own process, as under ``python``, so it is left running, and the run ends as usual."""
    out = _sigint_inside_the_window(tmp_path, ignore_sigint, then_go=True)
    assert out.returncode == 0, out.stderr
    assert "interrupted" not in out.stderr
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    assert not env["capture"].get("error") and env["capture"]["steps_recorded"] == 5
    assert (run_dir / "report.json").is_file() and (run_dir / "report.html").is_file()


@pytest.mark.e2e
def test_json_stdout_is_only_the_report(tmp_path: Path) -> None:
    noisy = TRAIN.replace("for i in", "import os\nos.system('echo from a child process')\nfor i in")
    out = run(
        tmp_path, "--json", "--skip", "2", "--steps", "2", "n.py", "30", script=noisy, name="n.py"
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)  # nothing else on stdout
    assert report["steps"]["source"] == "optimizer-step"
    assert "argv ['30'] name __main__" in out.stderr and "from a child process" in out.stderr


@pytest.mark.e2e
def test_no_steps_told_apart_says_what_it_saw(tmp_path: Path) -> None:
    script = MANUAL_SGD.replace("end = time.time() + 120", "end = time.time() + 0.5")
    out = run(tmp_path, "--wait", "30", "sgd.py", script=script, name="sgd.py")
    assert out.returncode == 3
    assert (
        "called Sequential" in out.stderr and "never stepped a torch.optim optimizer" in out.stderr
    )


FAULTS = {
    # a program that forks, then steps: the child inherits the hooks, which stay silent there
    "fork": TRAIN.replace(
        "for i in",
        "import os\npid = os.fork()\nif pid == 0:\n    m(torch.randn(2, 32))\n"
        "    os._exit(0)\nos.waitpid(pid, 0)\nfor i in",
    ),
    # its own SIGALRM handler and timer: untouched
    "alarm": TRAIN.replace(
        "for i in",
        "import signal\nfired = []\nsignal.signal(signal.SIGALRM, lambda *a: "
        "fired.append(1))\nsignal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)\nfor i in",
    ).replace(
        'print("finished")',
        'signal.setitimer(signal.ITIMER_REAL, 0)\nprint("alarms", len(fired) > 0)',
    ),
    "exit-in-window": TRAIN.replace(
        "    opt.zero_grad()", "    opt.zero_grad()\n    if i == 4: sys.exit(3)"
    ),
    "oom-in-window": TRAIN.replace(
        "    opt.zero_grad()",
        "    opt.zero_grad()\n    if i == 4: raise torch.OutOfMemoryError('CUDA out of memory')",
    ),
}


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(FAULTS))
def test_faults_keep_the_program_and_the_capture(tmp_path: Path, name: str) -> None:
    out = run(
        tmp_path,
        "--skip",
        "2",
        "--steps",
        "4",
        "--continue",
        "f.py",
        "12",
        script=FAULTS[name],
        name="f.py",
    )
    want = {"exit-in-window": 3, "oom-in-window": 1}.get(name, 0)
    assert out.returncode == want, out.stderr
    [run_dir] = run_dirs(tmp_path)
    env = json.loads((run_dir / "env.json").read_text())
    assert (run_dir / "report.json").is_file()
    if name in ("fork", "alarm"):
        assert ("alarms True" if name == "alarm" else "finished") in out.stdout
        assert env["capture"]["steps_recorded"] == 4 and not env["capture"]["error"]
    if name == "exit-in-window":
        assert env["capture"]["error"] == "the program exited (sys.exit(3)) inside the window"
    if name == "oom-in-window":
        assert "OutOfMemoryError" in env["capture"]["error"] and "OutOfMemoryError" in out.stderr


@pytest.mark.e2e
def test_under_python_dev_mode(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    env = dict(os.environ, PYTHONPATH=str(SRC))
    out = subprocess.run(
        [
            sys.executable,
            "-X",
            "dev",
            "-W",
            "error::ResourceWarning",
            "-m",
            "gpudoctor",
            "run",
            "--out",
            str(tmp_path / "runs"),
            "--skip",
            "2",
            "--steps",
            "2",
            "train.py",
            "20",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "ResourceWarning" not in out.stderr
    [run_dir] = run_dirs(tmp_path)
    assert (run_dir / "report.json").is_file()
