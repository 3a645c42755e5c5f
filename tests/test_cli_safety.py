"""Issue 16: outputs never replace inputs, bad paths and widths are one-line errors, --debug works
after the command, trace strings cannot drive the terminal, Kineto's chatter stays off stderr."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import stat
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from rich.text import Text
from synth import H100, TraceBuilder
from test_cli import DATA, gd

TRACE = DATA / "host_sync" / "trace.json.gz"


def _one_line_error(out, code: int = 2) -> str:  # type: ignore[no-untyped-def]
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    return lines[0]


def _refused_as_input(out, target: Path, source: Path) -> None:  # type: ignore[no-untyped-def]
    """``--html target`` refused, naming the input it would destroy (``source``, resolved)."""
    line = _one_line_error(out)
    assert line == (
        f"error: --html {target} is an input of this command ({source.resolve()}): writing there would "
        "destroy it; give another file path such as report.html"
    ), line


# -- 3: no output over an input, nor into a directory; atomic writes -----------------------------


def test_html_over_the_input_trace_is_refused_and_the_trace_kept(tmp_path: Path) -> None:
    trace = tmp_path / "v.json"
    shutil.copy(TRACE, trace)
    before = trace.read_bytes()
    line = _one_line_error(gd("analyze", str(trace), "--html", str(trace)))
    assert "input" in line and "another file path" in line
    assert trace.read_bytes() == before
    (tmp_path / "link.html").symlink_to(trace)  # the same file under another name
    _refused_as_input(
        gd("analyze", str(trace), "--html", str(tmp_path / "link.html")),
        tmp_path / "link.html",
        trace,
    )
    os.link(trace, tmp_path / "hard.html")
    _refused_as_input(
        gd("analyze", str(trace), "--html", str(tmp_path / "hard.html")),
        tmp_path / "hard.html",
        trace,
    )
    assert trace.read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))


def test_html_over_a_run_directorys_trace_or_the_ceilings_file_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(TRACE, run / "trace.json.gz")
    before = (run / "trace.json.gz").read_bytes()
    _refused_as_input(
        gd("analyze", str(run), "--html", str(run / "trace.json.gz")),
        run / "trace.json.gz",
        run / "trace.json.gz",
    )
    assert (run / "trace.json.gz").read_bytes() == before
    ceilings = tmp_path / "c.json"
    ceilings.write_text(json.dumps({"matrix_flops": {"bf16": 1e15}, "hbm_bytes_per_s": 3e12}))
    _refused_as_input(
        gd("analyze", str(TRACE), "--ceilings", str(ceilings), "--html", str(ceilings)),
        ceilings,
        ceilings,
    )
    assert json.loads(ceilings.read_text())["hbm_bytes_per_s"] == 3e12


def test_html_into_a_directory_or_under_a_file_is_refused(tmp_path: Path) -> None:
    line = _one_line_error(gd("analyze", str(TRACE), "--html", str(tmp_path)))
    assert "is a directory" in line
    keep = tmp_path / "f.txt"
    keep.write_text("keep")
    line = _one_line_error(gd("analyze", str(TRACE), "--html", str(keep / "r.html")))
    assert "not a folder" in line and keep.read_text() == "keep"


def test_demo_html_over_the_bundled_sample_is_refused() -> None:
    from importlib import resources

    sample = resources.files("gpudoctor") / "data" / "sample_trace.json.gz"
    before = sample.read_bytes()
    _refused_as_input(gd("demo", "--html", str(sample)), Path(str(sample)), Path(str(sample)))
    assert sample.read_bytes() == before


def test_bench_html_into_a_directory_is_refused_before_measuring(tmp_path: Path) -> None:
    line = _one_line_error(gd("bench", "--quick", "--no-save", "--html", str(tmp_path)))
    assert "is a directory" in line


def test_run_and_lab_out_must_be_a_folder(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    line = _one_line_error(gd("run", "--out", str(script), str(script)))
    assert "not a folder" in line and script.read_text() == "print('hi')\n"
    line = _one_line_error(gd("lab", "run", "host_sync", "--device", "cpu", "--out", str(script)))
    assert "not a folder" in line


# -- 16: files respect the umask ------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_html_mode_respects_the_umask(tmp_path: Path, mask: int) -> None:
    from gpudoctor.outputs import write_text_atomic

    old = os.umask(mask)
    try:
        write_text_atomic(tmp_path / "r.html", "<p>x</p>", "--html")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.html").stat().st_mode) == 0o666 & ~mask


def test_cli_html_is_0644_under_umask_022(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        out = gd("analyze", str(TRACE), "--html", str(tmp_path / "r.html"))
    finally:
        os.umask(old)
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE((tmp_path / "r.html").stat().st_mode) == 0o644


def test_replacing_a_file_keeps_its_mode(tmp_path: Path) -> None:
    from gpudoctor.outputs import write_text_atomic

    target = tmp_path / "r.html"
    target.write_text("old")
    target.chmod(0o640)
    write_text_atomic(target, "new", "--html")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640


# -- 9: --width ------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", ["-5", "0", "3", "100000"])
def test_a_width_no_terminal_has_is_one_line(width: str) -> None:
    said = (
        f"error: --width {width}: give a terminal width from 40 to 1000 columns (e.g. --width 100), or leave it "
        "out to use the terminal's"
    )
    assert _one_line_error(gd("analyze", str(TRACE), "--width", width)) == said
    assert (
        _one_line_error(gd("explain", str(DATA / "explain" / "nvidia_smi_q.txt"), "--width", width))
        == said
    )
    assert _one_line_error(gd("demo", "--width", width)) == said


# -- 10: --debug before or after the command ------------------------------------------------------


def test_debug_works_after_the_command(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text("")
    for args in (
        ("analyze", str(f), "--debug"),
        ("analyze", "--debug", str(f)),
        ("--debug", "analyze", str(f)),
    ):
        out = gd(*args)
        assert (
            out.returncode == 2 and "Traceback" in out.stderr and "No such option" not in out.stderr
        ), args
    out = gd("analyze", str(TRACE), "--debug", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["findings"]


@pytest.mark.parametrize(
    ("argv", "kept", "debug"),
    [
        (["analyze", "x", "--debug"], ["analyze", "x"], True),
        (["--debug", "analyze", "x"], ["analyze", "x"], True),
        (["analyze", "--", "--debug"], ["analyze", "--", "--debug"], False),  # a file named --debug
        # what follows SCRIPT (or -m MODULE) is the program's own
        (["run", "train.py", "--debug"], ["run", "train.py", "--debug"], False),
        (
            ["run", "--debug", "--steps", "3", "train.py", "--debug"],
            ["run", "--steps", "3", "train.py", "--debug"],
            True,
        ),
        (
            ["run", "--out", "--debug", "train.py"],
            ["run", "--out", "--debug", "train.py"],
            False,
        ),  # a value
        (["run", "-m", "pkg.train", "--debug"], ["run", "-m", "pkg.train", "--debug"], False),
        (
            ["--debug", "run", "--json", "t.py", "--debug"],
            ["run", "--json", "t.py", "--debug"],
            True,
        ),
    ],
)
def test_debug_is_taken_from_gpudoctors_arguments_only(
    argv: list[str], kept: list[str], debug: bool
) -> None:
    from gpudoctor.cli import _pop_debug

    assert _pop_debug(argv) == (kept, debug)


# -- 11: special files ------------------------------------------------------------------------------


def test_special_files_are_one_line_errors(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert "FIFO" in _one_line_error(gd("analyze", str(fifo)))  # and no wait for a writer
    assert "device" in _one_line_error(gd("analyze", os.devnull))
    sock_path = tmp_path / "s.json"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(sock_path))
        assert "socket" in _one_line_error(gd("analyze", str(sock_path)))
    finally:
        sock.close()
    (tmp_path / "empty").mkdir()
    assert "holds no trace" in _one_line_error(gd("analyze", str(tmp_path / "empty")))
    (tmp_path / "e.json").write_bytes(b"")
    assert "is empty" in _one_line_error(gd("analyze", str(tmp_path / "e.json")))
    assert "not a regular file" in _one_line_error(
        gd("analyze", str(TRACE), "--ceilings", os.devnull)
    )
    assert "not a regular file" in _one_line_error(
        gd("analyze", str(TRACE), "--ceilings", str(fifo))
    )


def test_unreadable_files_and_folders_are_one_line_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Permission errors (the tests may run as root, who reads everything: the errors are simulated)."""
    from gpudoctor.errors import InputError
    from gpudoctor.trace.load import load

    def denied(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "Permission denied", str(self))

    trace = tmp_path / "t.json.gz"
    shutil.copy(TRACE, trace)
    monkeypatch.setattr(Path, "open", denied)  # the loader reads the file through Path.open
    with pytest.raises(
        InputError, match=r"cannot read .*Permission denied; check the path and its permissions"
    ):
        load(trace)
    monkeypatch.undo()
    monkeypatch.setattr(Path, "iterdir", denied)
    with pytest.raises(InputError, match=r"cannot read .*Permission denied"):
        load(tmp_path)


# -- 14: the demo without a GPU --------------------------------------------------------------------


def test_demo_says_it_shows_the_bundled_h100_sample() -> None:
    out = gd("demo")
    assert out.returncode == 0, out.stderr
    assert (
        "no CUDA GPU here, so this diagnoses the sample trace bundled with gpudoctor, recorded on an NVIDIA H100"
        in " ".join(out.stderr.split())
    )
    assert "sample_trace.json.gz" in out.stdout.replace("│", "").replace("\n", "").replace(" ", "")


def test_a_long_trace_path_folds_rather_than_being_cut(tmp_path: Path) -> None:
    from gpudoctor.pipeline import analyze_path
    from gpudoctor.report.console import render_text

    deep = (
        tmp_path
        / "home"
        / "someone"
        / ".local"
        / "share"
        / "virtualenvs"
        / "project-x8Yq2a"
        / "lib"
    )
    deep = deep / "python3.12" / "site-packages" / "gpudoctor" / "data"
    deep.mkdir(parents=True)
    shutil.copy(TRACE, deep / "sample_trace.json.gz")
    text = render_text(analyze_path(deep / "sample_trace.json.gz"), width=80)
    header = text.split("╰")[0]
    assert "…" not in header
    rows = header.splitlines()[1:]
    rows = rows[: next(i for i, row in enumerate(rows) if "GPU" in row)]  # the trace row, folded
    joined = "".join(row.strip("│ ").strip() for row in rows).removeprefix("trace").strip()
    assert str(deep / "sample_trace.json.gz") in joined


# -- 15: the lab at 80 columns, and without Kineto's chatter ---------------------------------------


def test_the_lab_table_fits_80_columns_without_cutting_a_cell() -> None:
    from gpudoctor.lab.console import render_lab
    from gpudoctor.lab.verify import TrapVerdict

    verdicts = [
        TrapVerdict(
            "unfused_elementwise",
            "unfused-elementwise",
            "unfused-elementwise",
            1,
            1.21,
            1.18,
            1234.56,
            1000.12,
            1240.0,
            "pass",
            (),
        ),
        TrapVerdict(
            "host_blocking_work",
            "host-blocking-work",
            "input-pipeline",
            3,
            1.21,
            0.04,
            18.24,
            413.5,
            20.0,
            "missed",
            (),
        ),
        TrapVerdict(
            "host_sync", "host-sync", None, None, None, 1.01, 3.04, 3.01, 3.0, "ran-on-cpu", ()
        ),
        TrapVerdict(
            "healthy_closure", None, None, None, None, None, 18.24, None, 20.0, "healthy", ()
        ),
    ]
    buffer = io.StringIO()
    render_lab(verdicts, Console(file=buffer, width=80, color_system=None))
    text = buffer.getvalue()
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    for cell in (
        "unfused_elementwise",
        "host-blocking-work",
        "input-pipeline",
        "expected #3",
        "1234.56",
        "1000.12",
        "413.50",
        "x1.21",
        "x0.04",
        "30.25",
        "ran-on-cpu",
        "healthy_closure",
        "(healthy)",
        "missed",
    ):
        assert cell in text, cell


def test_kinetos_start_stop_lines_are_dropped_and_everything_else_kept(
    capfd: pytest.CaptureFixture[str],
) -> None:
    from gpudoctor.capture.quiet import kineto_chatter_filtered

    with kineto_chatter_filtered():
        os.write(
            2,
            b"USDT:2026-11-25 16:42:19 26766:26766 SyncActivityProfilerHandler.cpp:52] profiler_start\n",
        )
        os.write(
            2, b"ERROR:2026-11-25 16:42:19 26766:26766 CuptiActivityProfiler.cpp:1] a real error\n"
        )
        sys.stderr.write("python's own stderr\n")
        os.write(
            2,
            b"USDT:2026-11-25 16:42:20 26766:26766 SyncActivityProfilerHandler.cpp:59] profiler_stop\n",
        )
    err = capfd.readouterr().err
    assert "USDT" not in err
    assert "a real error" in err and "python's own stderr" in err


def test_a_profiled_window_leaves_no_kineto_chatter(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    from gpudoctor.capture.session import CaptureConfig, CaptureSession

    session = CaptureSession(CaptureConfig(steps=2, skip=1, nvml_interval_s=0), tmp_path)
    session.start(hook_optimizers=False)
    try:
        while not session.done:
            torch.ones(64, 64) @ torch.ones(64, 64)
            session.step()
    finally:
        session.close()
    assert session.result.trace_path is not None
    assert "USDT" not in capfd.readouterr().err


# -- 17: control characters from the trace -------------------------------------------------------

ESC = "\x1b]0;pwned\x07\x1b[2J\x9b31m\x7f"


def _hostile_trace(path: Path) -> Path:
    t = TraceBuilder(gpus=[dict(H100, name="NVIDIA H100 80GB HBM3" + ESC)])
    for step in range(3):
        base = step * 1000.0
        t.step(step, base, 1000)
        t.python("train.py(32): step" + ESC, base + 1, 900)
        for i in range(20):
            t.launch(
                "gemm_kernel" + ESC,
                base + 10 + i * 40,
                base + 12 + i * 40,
                30,
                op="aten::mm" + ESC,
                dims=[[64, 64], [64, 64]],
            )
        t.runtime("cudaStreamSynchronize", base + 850, 100)
    return t.write(path)


def test_trace_names_reach_no_terminal_with_their_control_characters(tmp_path: Path) -> None:
    trace = _hostile_trace(tmp_path / "t.json")
    out = gd("analyze", str(trace))
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout and "\x9b" not in out.stdout
    assert "NVIDIA H100 80GB HBM3␛]0;pwned␇" in out.stdout  # shown, not obeyed
    assert "step␛]0;pwned" in out.stdout  # the source line


def test_the_loader_makes_every_name_printable(tmp_path: Path) -> None:
    from gpudoctor.trace import load

    trace = load(_hostile_trace(tmp_path / "t.json"))
    names = [*trace.strings, *(g.name for g in trace.gpus)]
    assert not any(ch in name for name in names for ch in "\x1b\x07\x9b\x7f")
    for expected in (
        "gemm_kernel␛]0;pwned␇␛[2J\ufffd31m␡",
        "aten::mm␛]0;pwned",
        "train.py(32): step␛]0;pwned",
    ):
        assert any(expected in name for name in names), expected


def test_the_console_itself_never_prints_a_control_character() -> None:
    """Strings that do not come through the loader (a path, an error) are made printable when printed;
    rich's own styles still reach a terminal."""
    from gpudoctor.report.safe import SafeConsole

    buffer = io.StringIO()
    console = SafeConsole(file=buffer, width=80, force_terminal=True, color_system="standard")
    console.print(Text("kernel" + ESC, style="bold"), Text("aten::op\x1b[31m"))
    text = buffer.getvalue()
    assert (
        "kernel␛]0;pwned" in text and "␛[2J\ufffd31m␡" in text and "aten::op␛[31m" in text
    )  # rich drops BEL
    assert "\x1b[1m" in text  # bold, from rich
    assert "\x1b]" not in text and "\x07" not in text and "\x9b" not in text


def test_the_html_page_holds_no_control_character(tmp_path: Path) -> None:
    import re

    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.report.escape import esc
    from gpudoctor.report.html import render_html
    from gpudoctor.trace import load

    page = render_html(analyze_loaded(load(_hostile_trace(tmp_path / "t.json"))))
    assert re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", page) is None
    assert "␛]0;pwned" in page
    assert esc("a\x1b[31m<b>\x9b") == "a␛[31m&lt;b&gt;\ufffd"


def test_an_error_line_never_carries_a_control_character(tmp_path: Path) -> None:
    bad = tmp_path / "bad\x1b]0;pwned\x07.json"
    bad.write_text("{")
    out = gd("analyze", str(bad))
    assert out.returncode == 2 and "\x1b" not in out.stderr and "bad␛]0;pwned␇.json" in out.stderr


# -- numpy warnings never reach the user -------------------------------------------------------------

ALL_TRACES = sorted(DATA.glob("**/trace*.json.gz")) + [
    Path(__file__).parent.parent / "src" / "gpudoctor" / "data" / "sample_trace.json.gz"
]


@pytest.mark.parametrize("trace", ALL_TRACES, ids=lambda p: str(p.parent.name))
def test_every_fixture_analyzes_without_a_single_warning(trace: Path) -> None:
    """No Python warning is issued and no numpy floating-point error happens (raised here, where
    gpudoctor would otherwise have carried on), and what is rendered is this analysis: every
    renderer shows its step and each of its findings."""
    import re

    from gpudoctor.pipeline import analyze_path
    from gpudoctor.report.console import render_text
    from gpudoctor.report.html import render_html
    from gpudoctor.report.json_report import to_json

    with warnings.catch_warnings(record=True) as caught, np.errstate(all="raise"):
        warnings.simplefilter("always")
        report = analyze_path(trace)
        text, page, data = render_text(report), render_html(report), json.loads(to_json(report))
    assert [f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}" for w in caught] == []
    steps = report.steps.count
    assert steps >= 1 and report.step_ms > 0
    assert f"{report.step_ms:.3f} ms mean over {steps} steps" in text
    assert data["steps"]["count"] == steps and data["step_ms"] == pytest.approx(
        report.step_ms, abs=5e-5
    )
    assert [f["id"] for f in data["findings"]] == [f.id for f in report.findings]
    if report.findings:
        assert f"Findings, ranked by time saved per step ({len(report.findings)})" in text
    from gpudoctor.report.console import MAX_FINDINGS

    for finding in report.findings[:MAX_FINDINGS]:
        assert re.search(rf"\[{finding.severity}\] {re.escape(finding.id)} ", text), finding.id
    if len(report.findings) > MAX_FINDINGS:  # the console lists the first ones, the page all
        assert f"... {len(report.findings) - MAX_FINDINGS} more in --json / --html" in text
        assert finding.id in page


def test_a_warning_reaches_the_user_as_one_plain_line(tmp_path: Path) -> None:
    """Should a numpy warning still happen, the CLI says it in one line (Python's form with --debug)."""
    # a numpy warning, as if raised at a line of gpudoctor's analysis; then one of a program's own
    script = (
        "import sys, warnings, gpudoctor.cli as c, gpudoctor.pipeline as r\n"
        "sys.argv = ['gpudoctor'] + sys.argv[1:]\n"
        "def warn():\n"
        "    warnings.warn_explicit('divide by zero encountered in divide', RuntimeWarning, r.__file__, 7)\n"
        "    warnings.warn_explicit('the program warns', UserWarning, 'train.py', 3)\n"
        "c.app.command('warn')(warn)\n"
        "c.main()\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent / "src"))
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", script, "warn"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    line, *program = out.stderr.strip().splitlines()
    assert (
        line.startswith("gpudoctor: warning: RuntimeWarning: divide by zero") and "--debug" in line
    )
    assert "gpudoctor/pipeline.py:7" in line
    assert (
        "train.py:3: UserWarning: the program warns" in program[0]
    )  # not gpudoctor's: as Python shows it
    out = subprocess.run(
        [sys.executable, "-c", script, "--debug", "warn"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert "RuntimeWarning: divide by zero" in out.stderr and not out.stderr.startswith(
        "gpudoctor:"
    )
