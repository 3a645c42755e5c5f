"""Command line: parse options, call the library, render. No analysis happens here."""

from __future__ import annotations

import contextlib
import inspect
import json
import sys
import warnings
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from gpudoctor import failures
from gpudoctor.controls import visible_controls
from gpudoctor.errors import GpuDoctorError, InputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Diagnose slow or out-of-memory PyTorch GPU workloads from their profiler traces.",
    # every command's context inherits them
    context_settings={"help_option_names": ["-h", "--help"]},
)
# `run`: the program ended normally before any window: no report (as `plan`'s "nothing fits")
NO_REPORT_EXIT = 3
MIN_WIDTH, MAX_WIDTH = 40, 1000


def _check_width(value: int | None) -> int | None:
    """--width of every report command: a width rich can lay out (a negative one printed nothing)."""
    if value is not None and not MIN_WIDTH <= value <= MAX_WIDTH:
        raise InputError(f"--width {value}: give a terminal width from {MIN_WIDTH} to {MAX_WIDTH} "
                         "columns (e.g. --width 100), or leave it out to use the terminal's")
    return value


def _print_version(value: bool) -> None:
    if value:
        from gpudoctor.core.version import __version__

        sys.stdout.write(f"gpudoctor {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug",
                               help="Show tracebacks on errors (before or after the command)."),
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print gpudoctor's version and exit."),
) -> None:
    failures.debug["on"] = failures.debug["on"] or debug


@app.command()
def analyze(
    paths: list[Path] = typer.Argument(
        ...,
        help="torch.profiler trace (.json / .json.gz) or a run directory; a run directory "
        "with rank*/ bundles, or several traces (one per rank), for a multi-GPU analysis. Several "
        "traces are one job's ranks when each records the same world size and backend and its "
        "own rank (Kineto's distributedInfo; without it, when each records collectives or "
        "send/recv); otherwise each is diagnosed on its own, one report per trace headed by its "
        "file (--json: {\"separate_traces\": why, \"reports\": [...]})."),
    json_out: bool = typer.Option(False, "--json", help="Print the JSON report to stdout."),
    html: Path | None = typer.Option(None, "--html",
                                     help="Write a self-contained HTML report here."),
    gpu: str | None = typer.Option(None, "--gpu",
                                   help="Datasheet row to use (e.g. h100-sxm, a100-sxm-80gb)."),
    ceilings: Path | None = typer.Option(None, "--ceilings",
                                         help="Ceilings JSON file (overrides --gpu)."),
    width: int | None = typer.Option(None, "--width", callback=_check_width,
                                     help="Terminal width for the report."),
    jobs: int | None = typer.Option(None, "--jobs", "-j",
                                    help="Worker processes for many ranks (default: one per core)."),
    perfetto: Path | None = typer.Option(
        None, "--perfetto",
        help="Write the trace with the diagnosis drawn on it here (steps, GPU idle by cause, "
        "each finding, arrows from each sync to its idle), for ui.perfetto.dev or "
        "chrome://tracing; gzipped when the name ends in .gz. A distributed run: one file per "
        "rank, .rank<R> before .json."),
) -> None:
    """Diagnose one trace, or every rank of a distributed run: ranked findings with the time each
    would save per step (multi-GPU: stragglers, exposed communication, slow collectives)."""
    from gpudoctor.pipeline import analyze_inputs

    inputs: list[Path | str | None] = []
    if html is not None or perfetto is not None:
        for p in paths:
            inputs += _inputs_of(p, ceilings)
            if p.is_dir():  # a run directory: every rank's trace and env.json is an input
                inputs += [f for f in p.rglob("*.json*") if f.name.startswith(("trace", "env"))]
    _check_outputs(html, perfetto, inputs)  # before the analysis: a bad output path fails at once
    report = analyze_inputs(paths, jobs=jobs, ceilings=ceilings, gpu=gpu, annotate=perfetto,
                            inputs=inputs)
    # traces diagnosed one by one: one page holds one report
    if html is not None and hasattr(report, "reports"):
        raise InputError(f"--html writes one report, and these {len(paths)} traces are not the "
                         f"ranks of one job ({report.why}); write one page per trace: gpudoctor "
                         "analyze TRACE --html PAGE.html")
    _emit(report, json_out, html, width, inputs)
    if perfetto is not None and not json_out:
        _say_annotated(report, perfetto)


def _check_outputs(html: Path | None, perfetto: Path | None,
                   inputs: Sequence[Path | str | None]) -> None:
    """--html and --perfetto: each a file that can be written, neither over an input nor the other."""
    from gpudoctor.outputs import check_output_file, same_file

    if html is not None:
        check_output_file(html, "--html", inputs)
    if perfetto is not None:
        check_output_file(perfetto, "--perfetto", inputs, example="annotated.trace.json.gz")
        if html is not None and same_file(html, perfetto):
            raise InputError(f"--perfetto {perfetto} is also the --html page: give the annotated "
                             "trace its own file, such as annotated.trace.json.gz")


def _say_annotated(report, target: Path) -> None:  # type: ignore[no-untyped-def]
    """Where the annotated trace went (each rank's file, for a distributed run), on stderr."""
    from gpudoctor.pipeline import rank_file
    from gpudoctor.report.safe import SafeConsole

    ranks = [row.rank for row in report.ranks or ()]
    files = [f for f in (rank_file(target, r) for r in ranks) if f.is_file()] if ranks else [target]
    merged = f"; every rank's on rank 0's clock in {target}" if ranks and target.is_file() else ""
    said = (f"annotated trace{'s' * (len(files) > 1)} written to "
            f"{', '.join(map(str, files))}{merged} (open at ui.perfetto.dev or in chrome://tracing)"
            if files else
            "no annotated trace written: no rank recorded GPU work")
    SafeConsole(stderr=True).print(said, markup=False, highlight=False, soft_wrap=True)


@app.command()
def demo(
    json_out: bool = typer.Option(False, "--json", help="Print the JSON report to stdout."),
    html: Path | None = typer.Option(None, "--html",
                                     help="Write a self-contained HTML report here."),
    width: int | None = typer.Option(None, "--width", callback=_check_width,
                                     help="Terminal width for the report."),
) -> None:
    """On a GPU: run one lab trap live, diagnose it and verify the predicted speedup on its fixed
    twin. Without a GPU: diagnose the sample trace shipped with gpudoctor (recorded on an H100)."""
    from gpudoctor.pipeline import analyze_path

    if _has_cuda():
        _live_demo(json_out, html, width)
        return
    sample = resources.files("gpudoctor") / "data" / "sample_trace.json.gz"
    with resources.as_file(sample) as path:
        if html is not None:
            from gpudoctor.outputs import check_output_file

            check_output_file(html, "--html", [path])
        from gpudoctor.report.safe import SafeConsole

        SafeConsole(stderr=True, highlight=False).print(
            "gpudoctor demo: no CUDA GPU here, so this diagnoses the sample trace bundled with "
            f"gpudoctor, recorded on an NVIDIA H100 ({path}); on a GPU, the demo runs a trap live "
            "instead.", markup=False)
        report = analyze_path(path)
        _emit(report, json_out, html, width, [path])


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                      "allow_interspersed_args": False}
)
def run(
    ctx: typer.Context,
    script: str | None = typer.Argument(None, help="The Python script to run (or use -m MODULE)."),
    module: str | None = typer.Option(None, "-m", help="Run a module, as python -m MODULE does."),
    steps: int = typer.Option(5, "--steps", help="Steps to record."),
    skip: int = typer.Option(10, "--skip",
                             help="Warm-up steps to leave out (compilation, autotuning)."),
    stack: bool = typer.Option(False, "--stack",
                               help="Record Python stacks: findings point at file:line."),
    exit_after: bool = typer.Option(
        True, "--exit-after/--continue",
        help="Stop the program once the window is recorded, or let it run on."
    ),
    out: Path = typer.Option(Path("gpudoctor-runs"), "--out",
                             help="Where run directories are written."),
    wait: float = typer.Option(30.0, "--wait",
                               help="Seconds without any step before a time window is used."),
    window: float = typer.Option(3.0, "--window", help="Length of that time window, in seconds."),
    calibrate: int = typer.Option(
        8, "--calibrate",
        help="Unprofiled steps timed after the window (the observer-effect calibration)."
    ),
    json_out: bool = typer.Option(
        False, "--json",
        help="Print only the JSON report on stdout; the program's own stdout goes to stderr."
    ),
    width: int | None = typer.Option(None, "--width", callback=_check_width,
                                     help="Terminal width for the report."),
    try_fixes: bool = typer.Option(
        False, "--try-fixes",
        help="Then rerun the program once per knob-fixable finding, the knob applied, and "
        "measure the speedup."
    ),
    fixes: str | None = typer.Option(
        None, "--fixes",
        help="The knobs to try, comma-separated (implies --try-fixes; default: those the "
        "findings call for)."
    ),
    sandbox: Path | None = typer.Option(
        None, "--sandbox",
        help="Run each trial in DIR/<knob>/, the files it writes land there (implies --try-fixes)."
    ),
    trial_timeout: float = typer.Option(300.0, "--trial-timeout",
                                        help="Seconds one trial may run."),
    trial_repeats: int = typer.Option(
        1, "--trial-repeats",
        help="With --try-fixes: run the control and each knob this many times, alternating, "
        "and measure each knob over its processes (for programs whose speed moves between "
        "processes)."
    ),
    trial_trace: bool = typer.Option(
        True, "--trial-trace/--no-trial-trace",
        help="With --try-fixes: each trial also records the profiled "
        "window after its timed steps, so gpudoctor diff can compare trials (--no-trial-trace: "
        "faster)."
    ),
    nproc: int | None = typer.Option(
        None, "--nproc",
        help="Launch N processes on this host through torchrun, each profiling the same steps; "
        "rank 0 writes the combined report."
    ),
    rank_timeout: float = typer.Option(
        120.0, "--rank-timeout",
        help="In a distributed job: seconds a rank waits for the others (the window "
        "agreement, the bundles) before going on without them."
    ),
) -> None:
    """Run a program as python would, profile a window of its steps, and diagnose it.

    gpudoctor run [OPTIONS] SCRIPT [ARGS]...  or  gpudoctor run [OPTIONS] -m MODULE [ARGS]...

    Exit code: 0 with a report; the program's own code when it fails; 3 when it ended normally (exit
    code 0) before anything could be recorded (no report; the reason is printed); 2 on bad input;
    130 on Ctrl-C.
    """
    from gpudoctor.capture.runner import Target, program_stdout_to_stderr
    from gpudoctor.capture.session import CaptureConfig
    from gpudoctor.live import RunStatus, run_and_diagnose

    args = list(ctx.args)
    if module is not None:
        if script is not None:
            args.insert(0, script)
        target = Target(module, tuple(args), is_module=True)
    elif script is not None:
        target = Target(script, tuple(args))
    else:
        what = "--try-fixes needs a program: " if try_fixes or fixes is not None else ""
        raise InputError(f"{what}give a script to run (gpudoctor run train.py ARGS) or a module "
                         "(gpudoctor run -m pkg.train)")
    try_fixes = try_fixes or fixes is not None or sandbox is not None or trial_repeats != 1
    fix_ids = _check_try_fixes(fixes, sandbox, trial_timeout, trial_repeats) if try_fixes else None
    if wait < 0 or window <= 0:
        raise InputError(
            f"--wait must be >= 0 and --window > 0 seconds, got --wait {wait:g} --window {window:g}")
    from gpudoctor.outputs import check_output_dir

    check_output_dir(out, "--out")
    config = CaptureConfig(steps=steps, skip=skip, stack=stack, calibration_steps=calibrate)
    if not rank_timeout > 0:
        raise InputError(
            f"--rank-timeout must be a positive number of seconds, got {rank_timeout:g}")
    if nproc is not None:
        _launch_ranks(nproc, target, try_fixes, steps=steps, skip=skip, stack=stack,
                      exit_after=exit_after, out=out, wait=wait, window=window, calibrate=calibrate,
                      json_out=json_out, width=width, rank_timeout=rank_timeout)
    from gpudoctor.capture.rank_window import rank_info

    ranked = rank_info()  # torchrun's variables: each rank prints one line, rank 0 the report
    quiet = program_stdout_to_stderr() if json_out else contextlib.nullcontext()
    with quiet, _baseline_numerics(try_fixes) as numerics:
        run = run_and_diagnose(
            target, config, base=out, exit_after=exit_after, wait_s=wait, window_s=window,
            rank_timeout_s=rank_timeout
        )
    outcome, run_dir, report, note = run.outcome, run.run_dir, run.report, run.note
    cpu_only = run.status is RunStatus.NO_GPU_ACTIVITY
    if ranked is not None and ranked.rank != 0:
        _end_rank(ranked.rank, outcome.exit_code, run_dir, note)
    if report is not None and not (try_fixes and json_out):
        _emit(report, json_out, None, width)
    if report is not None:
        sys.stderr.write(f"run directory: {run_dir}\n")
    if note:
        sys.stderr.write(f"gpudoctor: {note}\n")
    if try_fixes and (report is not None or cpu_only):
        _run_trials(target, config, outcome, run_dir, report, numerics, fix_ids, sandbox,
                    trial_timeout, trial_trace, json_out, width, trial_repeats)
    code = outcome.exit_code
    if run.status is RunStatus.NOT_DIAGNOSED and ranked is None:
        # the program succeeded, but gpudoctor made no report: not the program's error, not bad
        # input (in a distributed job a rank's non-zero exit would make torchrun stop the others)
        code = code or NO_REPORT_EXIT
    if ranked is not None:
        from gpudoctor.capture.launch import record_exit_code

        record_exit_code(ranked.rank, code)
    raise typer.Exit(code)


def _end_rank(rank: int, code: int, bundle: Path, note: str) -> None:
    """A rank other than 0: one line, no report (rank 0 prints the combined one)."""
    from gpudoctor.capture.launch import record_exit_code

    where = f"bundle in {bundle}" if (bundle / "env.json").is_file() else "no bundle"
    sys.stderr.write(
        visible_controls(f"gpudoctor (rank {rank}): {where}" + (f"; {note}" if note else "")) + "\n")
    record_exit_code(rank, code)
    raise typer.Exit(code)


def _launch_ranks(nproc: int, target: Any, try_fixes: bool, **options: Any) -> None:
    """--nproc N: the same command under torchrun, N ranks on this host; exits with the worst code."""
    from gpudoctor.capture.launch import launch
    from gpudoctor.capture.rank_window import rank_info

    if nproc < 1:
        raise InputError(f"--nproc must be 1 or more processes, got {nproc}")
    if try_fixes:
        raise InputError("--try-fixes reruns one process per knob and does not run with --nproc: "
                         "try the knobs on a single-process run")
    if rank_info() is not None:
        raise InputError("--nproc launches torchrun, and this process already is one rank of a "
                         "distributed job: leave --nproc out under torchrun")
    target.check()  # once here, not once per rank
    raise typer.Exit(launch(nproc, _run_args(target, **options)))


def _run_args(target: Any, *, steps: int, skip: int, stack: bool, exit_after: bool, out: Path,
              wait: float, window: float, calibrate: int, json_out: bool, width: int | None,
              rank_timeout: float) -> list[str]:
    """The options of this `gpudoctor run`, spelled out again for every rank (--nproc left out)."""
    args = ["--steps", str(steps), "--skip", str(skip), "--out", str(out), "--wait",
            repr(wait), "--window", repr(window), "--calibrate", str(calibrate), "--rank-timeout",
            repr(rank_timeout), "--exit-after" if exit_after else "--continue"]
    if stack:
        args.append("--stack")
    if json_out:
        args.append("--json")
    if width is not None:
        args += ["--width", str(width)]
    program = ["-m", target.path_or_module] if target.is_module else [target.path_or_module]
    return [*args, *program, *target.args]


def _check_try_fixes(fixes: str | None, sandbox: Path | None, timeout: float,
                     repeats: int) -> list[str] | None:
    """--fixes, --sandbox, --trial-timeout and --trial-repeats, checked before the program runs."""
    from gpudoctor.tryfix.trial import MAX_REPEATS, parse_fixes

    if not timeout > 0:
        raise InputError(f"--trial-timeout must be a positive number of seconds, got {timeout:g}")
    if not 1 <= repeats <= MAX_REPEATS:
        raise InputError(f"--trial-repeats must be a whole number from 1 to {MAX_REPEATS}, got "
                         f"{repeats}; each repeat runs the control and every knob once more")
    if sandbox is not None:
        from gpudoctor.outputs import check_output_dir

        check_output_dir(sandbox, "--sandbox")
    return parse_fixes(fixes)


@contextlib.contextmanager
def _baseline_numerics(on: bool):  # type: ignore[no-untyped-def]
    """With --try-fixes, the diagnosed run is the baseline: seeded as the trials are, its first
    losses and peak memory recorded (capture/numerics.py)."""
    state: dict = {"losses": [], "peak": None}
    if not on:
        yield state
        return
    from gpudoctor.capture.numerics import peak_memory_bytes, record_losses, seed_all

    seed_all()
    with record_losses() as losses:
        state["losses"] = losses
        yield state
    state["peak"] = peak_memory_bytes()


def _run_trials(target, config, outcome, run_dir, report, numerics, fix_ids, sandbox, timeout,  # type: ignore[no-untyped-def]
                trace: bool, json_out: bool, width: int | None, repeats: int = 1) -> None:
    from gpudoctor.capture.bundle import global_rank, rank_suffix
    from gpudoctor.report.safe import SafeConsole
    from gpudoctor.tryfix.attach import attach
    from gpudoctor.tryfix.render import render_console
    from gpudoctor.tryfix.session import try_fixes

    err = SafeConsole(stderr=True)
    done = try_fixes(target, config, outcome.result.unprofiled_before_ms, run_dir, report,
                     numerics, fix_ids,
                     sandbox=sandbox, timeout_s=timeout, trace=trace, repeats=repeats,
                     progress=lambda name: err.print(f"gpudoctor: trying {name}...", markup=False,
                                                     highlight=False),
                     step_source=outcome.result.step_source)
    attach(run_dir, done, rank_suffix(global_rank()))
    if json_out:
        suffix = rank_suffix(global_rank())
        path = run_dir / f"report{suffix}.json"
        sys.stdout.write(path.read_text() if path.is_file()
                         else (run_dir / "trials.json").read_text())
        return
    render_console(done, SafeConsole(width=width) if width else SafeConsole())


@app.command()
def bench(
    quick: bool = typer.Option(False, "--quick", help="Fewer repeats and sizes (about 20 s)."),
    json_out: bool = typer.Option(False, "--json", help="Print the results as JSON."),
    html: Path | None = typer.Option(None, "--html", help="Write the measured roofline page here."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would be measured, and stop."),
    save: bool = typer.Option(True, "--save/--no-save",
                              help="Save the machine profile for analyze and run."),
    collectives: bool | None = typer.Option(
        None, "--collectives/--no-collectives",
        help="NCCL curves across GPUs (default: with 2+ GPUs, full runs)."
    ),
    max_bytes: str = typer.Option("4GiB", "--max-bytes",
                                  help="Largest collective message (1 KiB up to this)."),
    shapes: bool = typer.Option(
        True, "--shapes/--no-shapes",
        help="bf16 GEMM (M, N, K) and attention grids, for plan train --bench."
    ),
) -> None:
    """Measure this GPU's real ceilings (memory, matrix FLOP/s per dtype, launches, host copies, GEMM
    and attention throughput by shape) and its health; analyze, run and plan train --bench use them."""
    from gpudoctor.bench import plan_lines, run_bench
    from gpudoctor.hardware.probe import PROBE_GROUPS

    if dry_run:
        sys.stdout.write("\n".join(plan_lines(quick)) + "\n")
        return
    from gpudoctor.outputs import check_output_file, write_text_atomic

    if html is not None:  # before minutes of measuring
        check_output_file(html, "--html")
    from rich.progress import Progress

    with Progress(transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task("bench", total=len(PROBE_GROUPS) + 5)  # + 2 grids, 2 kinds, collectives

        def step(label: str) -> None:
            bar.update(task, description=f"measuring {label}", advance=1)

        result = run_bench(quick=quick, save=save, progress=step, collectives=collectives,
                           max_bytes=max_bytes, shapes=shapes)
    if html is not None:
        from gpudoctor.report.bench import render_html

        write_text_atomic(html, render_html(result), "--html")
    if json_out:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2, default=str) + "\n")
        return
    from gpudoctor.report.bench import render_console
    from gpudoctor.report.safe import SafeConsole

    render_console(result, SafeConsole())


lab_app = typer.Typer(
    help="The trap lab: workloads that plant each finding, run next to their fixed twins.")
app.add_typer(lab_app, name="lab")


@lab_app.command("list")
def lab_list(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Every trap with the finding it plants, and the healthy baselines."""
    from gpudoctor.lab.catalog import catalog

    entries = catalog()
    if json_out:
        sys.stdout.write(json.dumps(entries, indent=2) + "\n")
        return
    console = Console()
    for e in entries:
        console.print(f"[bold]{e['name']:22}[/bold] {e['expected_finding'] or '(healthy)':22} "
                      f"{e['title']}",
                      markup=True, highlight=False, soft_wrap=True)


@lab_app.command("run")
def lab_run(
    names: list[str] | None = typer.Argument(None, help="Traps to run (see gpudoctor lab list)."),
    all_traps: bool = typer.Option(False, "--all", help="Every trap and baseline."),
    json_out: bool = typer.Option(False, "--json", help="Print the results as JSON."),
    device: str = typer.Option("cuda", "--device",
                               help="cuda, or cpu for a smoke run (timings mean nothing)."),
    steps: int = typer.Option(5, "--steps", help="Profiled steps per trap."),
    out: Path = typer.Option(Path("gpudoctor-runs"), "--out",
                             help="Where the lab's traces and reports go."),
) -> None:
    """Run traps and their fixed twins, diagnose the sick ones, compare predicted and measured speedups."""
    from gpudoctor.capture.bundle import new_run_dir, write_json
    from gpudoctor.lab.catalog import resolve_names
    from gpudoctor.lab.console import render_lab
    from gpudoctor.lab.verify import verify_all
    from gpudoctor.outputs import check_output_dir
    from gpudoctor.report.safe import SafeConsole

    chosen = resolve_names(names or [], all_traps)
    _require_device(device)
    check_output_dir(out, "--out")
    run_dir = new_run_dir(out, "lab")
    from rich.progress import Progress

    with Progress(transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task("lab", total=len(chosen))

        def advance(name: str) -> None:
            bar.update(task, description=f"running {name} (sick, then fixed)", advance=0)

        verdicts = []
        for name in chosen:
            advance(name)
            verdicts += verify_all([name], device, run_dir, steps)
            bar.advance(task)
    write_json(run_dir / "lab.json", {"device": device, "results": [v.to_dict() for v in verdicts]})
    if json_out:
        sys.stdout.write(json.dumps([v.to_dict() for v in verdicts], indent=2) + "\n")
    else:
        render_lab(verdicts, SafeConsole())
        sys.stderr.write(f"lab directory: {run_dir}\n")
    if any(v.verdict == "error" for v in verdicts):
        raise typer.Exit(1)


def _require_device(device: str) -> None:
    if device not in ("cuda", "cpu") and not device.startswith("cuda:"):
        raise InputError(f"--device {device!r}: use cuda, cuda:N or cpu")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InputError("the lab runs its workloads on a CUDA GPU and none is visible here; "
                             "use --device cpu for a smoke run")


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


DEMO_TRAP = "fp32_matmul"


def _live_demo(json_out: bool, html: Path | None, width: int | None) -> None:
    from gpudoctor.capture.bundle import new_run_dir
    from gpudoctor.lab.registry import load_trap
    from gpudoctor.lab.verify import verify_trap

    trap = load_trap(DEMO_TRAP)
    err = Console(stderr=True, highlight=False)
    with err.status(f"running the {DEMO_TRAP} trap and its fixed twin on {torch_device_name()}..."):
        verdict = verify_trap(trap, "cuda", new_run_dir(Path("gpudoctor-runs"), "demo"))
    if verdict.report is None:
        raise InputError(
            f"the live demo failed ({verdict.error}); `gpudoctor analyze` still works on traces")
    _emit(verdict.report, json_out, html, width)
    if not json_out:
        err.print(
            f"verified on this GPU: {trap.title}. The doctor predicted "
            f"x{verdict.predicted_speedup:.2f} from the {verdict.expected} fix; the fixed twin ran "
            f"x{verdict.measured_speedup:.2f} faster ({verdict.sick_ms:.2f} -> "
            f"{verdict.fixed_ms:.2f} ms per step).",
            markup=False,
        )


def torch_device_name() -> str:
    import torch

    return torch.cuda.get_device_name()


plan_app = typer.Typer(no_args_is_help=True,
                       help="Predict collectives and training layouts (DP/TP/PP/ZeRO).")
app.add_typer(plan_app, name="plan")


@plan_app.command("comm")
def plan_comm(
    op: str = typer.Argument(...,
                             help="all-reduce, all-gather, reduce-scatter, all-to-all, "
                                  "broadcast or p2p."),
    nbytes: str = typer.Argument(..., help="Message size per rank, e.g. 256MiB, 1GB, 4096."),
    gpus: int = typer.Option(..., "--gpus", help="Ranks taking part."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per node (NVLink domain)."),
    gpu: str = typer.Option("h100-sxm", "--gpu", help="GPU datasheet row."),
    fabric: str | None = typer.Option(None, "--fabric",
                                      help="Inter-node fabric: ib-ndr, ib-xdr, ib-hdr, roce, "
                                      "pcie4, pcie5."),
    busbw_table: Path
    | None = typer.Option(None, "--busbw-table", help="A gpudoctor bench JSON with measured "
                          "collectives."),
    nvls: bool = typer.Option(False, "--nvls",
                              help="NVLink SHARP on (all-reduce in one NVSwitch node)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Predicted time and bus bandwidth of one collective."""
    from gpudoctor.plan.collective_cost import parse_bytes, predict
    from gpudoctor.report.plan import render_comm
    from gpudoctor.report.safe import SafeConsole

    pred = predict(op, parse_bytes(nbytes), gpus=gpus, gpus_per_node=gpus_per_node, gpu=gpu,
                   fabric=fabric, busbw_table=str(busbw_table) if busbw_table else None, nvls=nvls)
    if json_out:
        sys.stdout.write(json.dumps(pred.to_dict(), indent=1) + "\n")
        return
    render_comm(pred, SafeConsole())


@plan_app.command("train")
def plan_train(
    spec: str = typer.Argument(...,
                               help="A config.json, a preset or module:factory (as gpudoctor "
                                    "memory)."),
    gpus: int = typer.Option(..., "--gpus", help="GPUs in total."),
    gpu: str = typer.Option("h100-sxm", "--gpu", help="GPU datasheet row."),
    global_batch: int = typer.Option(..., "--global-batch", help="Sequences per optimizer step."),
    seq: int = typer.Option(4096, "--seq", help="Sequence length."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per node (NVLink domain)."),
    fabric: str | None = typer.Option(None, "--fabric", help="Inter-node fabric (ib-ndr, ...)."),
    top: int = typer.Option(5, "--top", help="Plans to show."),
    bench_file: Path | None = typer.Option(
        None, "--bench",
        help="A `gpudoctor bench --json` file of this GPU: GEMMs and attention at measured rates."
    ),
    sp: bool = typer.Option(True, "--sp/--no-sp",
                            help="Sequence parallelism on layouts with TP > 1."),
    impl: str = typer.Option("eager-hf", "--impl",
                             help="What runs the step: eager-hf (HF eager, AdamW foreach), fused "
                                  "(Megatron-style kernels, flash attention) or fused-noflash (the "
                                  "same, attention scores materialized)."),
    schedule: str = typer.Option("1f1b", "--schedule",
                                 help="Pipeline schedule: 1f1b, interleaved or zb-h1."),
    dp: int | None = typer.Option(None, "--dp", help="Fix the data-parallel degree."),
    tp: int | None = typer.Option(None, "--tp", help="Fix the tensor-parallel degree."),
    pp: int | None = typer.Option(None, "--pp", help="Fix the pipeline-parallel degree."),
    cp: int | None = typer.Option(None, "--cp", help="Fix the context-parallel degree."),
    zero: int | None = typer.Option(None, "--zero", help="Fix the ZeRO stage (0-3; 3 = FSDP)."),
    microbatch: int | None = typer.Option(None, "--microbatch",
                                          help="Fix the micro-batch (sequences)."),
    checkpointing: str | None = typer.Option(None, "--checkpointing",
                                             help="Fix it: none, selective or full."),
    nvls: bool = typer.Option(False, "--nvls",
                              help="NVLink SHARP on (all-reduces inside one NVSwitch node)."),
    params_dtype: str
    | None = typer.Option(None, "--params-dtype", help="bf16 (default), fp16 or fp32, as "
                          "gpudoctor memory."),
    autocast: str | None = typer.Option(None, "--autocast",
                                        help="none (default), bf16 or fp16, as gpudoctor memory."),
    optimizer: str | None = typer.Option(
        None, "--optimizer",
        help="adamw (default), adamw8bit, sgd, sgd-momentum, adafactor, as gpudoctor memory."),
    master_weights: bool | None = typer.Option(
        None, "--master-weights",
        help="fp32 master weights and optimizer states (default off), as gpudoctor memory."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    width: int | None = typer.Option(None, "--width", help="Terminal width."),
) -> None:
    """Layouts (DP x TP x PP x CP x ZeRO x micro-batch x checkpointing) that fit, ranked by step time.
    Fix any of them (--tp 4 --pp 2 ...) to price your own layout; the rest is enumerated.
    Exit code 3 when no layout fits (why is printed), 2 on bad input."""
    from gpudoctor.plan.limits import NO_FIT_EXIT_CODE
    from gpudoctor.plan.pins import Pins
    from gpudoctor.plan.train_search import plan_training
    from gpudoctor.report.plan import render_train
    from gpudoctor.report.safe import SafeConsole

    pins = Pins(dp=dp, tp=tp, pp=pp, cp=cp, zero=zero, microbatch=microbatch,
                checkpointing=checkpointing)
    result = plan_training(spec, gpus=gpus, gpu=gpu, global_batch=global_batch, seq=seq,
                           gpus_per_node=gpus_per_node, fabric=fabric, top=top, schedule=schedule,
                           calibration=bench_file, sp=sp, impl=impl, pins=pins, nvls=nvls,
                           precision={"params_dtype": params_dtype, "autocast": autocast,
                                      "optimizer": optimizer, "master_weights": master_weights})
    if json_out:
        sys.stdout.write(json.dumps(result.to_dict(), indent=1) + "\n")
        if not result.plans:
            sys.stderr.write(f"no layout fits: {result.infeasible}\n")
    else:
        render_train(result, SafeConsole(width=width) if width else SafeConsole())
    if not result.plans:
        raise typer.Exit(NO_FIT_EXIT_CODE)


@plan_app.command("infer")
def plan_infer(
    spec: str = typer.Argument(..., help="A config.json or a preset (as gpudoctor memory)."),
    gpu: str = typer.Option("h100-sxm", "--gpu", help="GPU datasheet row."),
    qps: float = typer.Option(..., "--qps", help="Requests per second to serve."),
    prompt: int = typer.Option(1024, "--prompt", help="Prompt tokens per request."),
    new: int = typer.Option(256, "--new", help="Generated tokens per request."),
    weights_dtype: str = typer.Option("bf16", "--weights-dtype",
                                      help="bf16, fp16, fp8, int8 or int4."),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype", help="bf16, fp16, fp8 or int8."),
    allow_long_context: bool = typer.Option(
        False, "--allow-long-context",
        help="Accept --prompt + --new beyond the model's maximum context (served with a longer "
             "RoPE scaling)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    width: int | None = typer.Option(None, "--width", callback=_check_width,
                                     help="Terminal width."),
) -> None:
    """Serving sizing: TP degree, sequences the KV budget holds, decode speed, the QPS that saturates.
    Exit code 3 when no TP degree can hold the weights and one request (why is printed), 2 on bad input."""
    from gpudoctor.plan.infer import plan_serving
    from gpudoctor.plan.limits import NO_FIT_EXIT_CODE
    from gpudoctor.report.plan import render_serving
    from gpudoctor.report.safe import SafeConsole

    result = plan_serving(spec, gpu=gpu, qps=qps, prompt=prompt, new=new,
                          weights_dtype=weights_dtype,
                          kv_dtype=kv_dtype, allow_long_context=allow_long_context)
    if json_out:
        sys.stdout.write(json.dumps(result.to_dict(), indent=1) + "\n")
        if not result.feasible:
            sys.stderr.write(f"nothing fits: {result.explanation}\n")
    else:
        render_serving(result, SafeConsole(width=width) if width else SafeConsole())
    if not result.feasible:
        raise typer.Exit(NO_FIT_EXIT_CODE)


@app.command("explain")
def explain_cmd(
    files: list[Path] = typer.Argument(...,
                                       help="ncu CSV/.ncu-rep, nvidia-smi output, timing CSVs or "
                                       "scenario files."),
    json_out: bool = typer.Option(False, "--json", help="Print the ranked hypotheses as JSON."),
    width: int | None = typer.Option(None, "--width", callback=_check_width,
                                     help="Terminal width."),
) -> None:
    """Diagnose from artifacts you already have: Nsight Compute, nvidia-smi, timing tables, scenarios."""
    from gpudoctor.explain import explain_paths
    from gpudoctor.report.explain import render_console, to_json
    from gpudoctor.report.safe import SafeConsole

    result = explain_paths([str(f) for f in files])
    if json_out:
        sys.stdout.write(to_json(result) + "\n")
        return
    render_console(result, SafeConsole(width=width) if width else SafeConsole())


# core/presets.py's names, listed here so the help needs no import (tests/test_memory_cli.py keeps
# them in step)
_PRESET_NAMES = ("deepseek-v2-lite", "deepseek-v3", "gemma-2b", "gemma-7b", "gpt2", "gpt2-xl",
                 "llama-3.1-405b", "llama-3.1-70b", "llama-3.1-8b", "llama-3.2-1b", "llama-3.2-3b",
                 "mistral-7b", "mixtral-8x7b",
                 "pythia-1b", "qwen2.5-0.5b", "qwen2.5-72b", "qwen2.5-7b")


@app.command("memory")
def memory_cmd(
    spec: str = typer.Argument(...,
                               help="A config.json (or its folder), a preset name, or "
                                         f"module:factory. Presets: {', '.join(_PRESET_NAMES)}."),
    infer: bool = typer.Option(False, "--infer", help="Generation instead of a training step."),
    batch: int | None = typer.Option(None, "--batch",
                                     help="Micro-batch per GPU (training) or sequences "
                                     "(generation)."),
    seq: int | None = typer.Option(None, "--seq", help="Sequence length (training; default 2048)."),
    params_dtype: str | None = typer.Option(None, "--params-dtype", help="bf16, fp16 or fp32."),
    autocast: str | None = typer.Option(None, "--autocast", help="none, bf16 or fp16."),
    optimizer: str | None = typer.Option(None, "--optimizer",
                                         help="adamw, adamw8bit, sgd, sgd-momentum, adafactor."),
    master_weights: bool | None = typer.Option(
        None, "--master-weights",
        help="fp32 master weights and optimizer states beside 16-bit weights; ignored (with a "
             "note) under --params-dtype fp32, whose weights are their own master copy."),
    checkpointing: str | None = typer.Option(None, "--checkpointing",
                                             help="none, selective or full."),
    attention: str | None = typer.Option(
        None, "--attention",
        help="sdpa (default), flash or eager: the attention transformers runs, priced as "
                                  "given (Gemma 2: eager on transformers >= 5.21, which refuses "
                                  "SDPA for it)."),
    loss: str | None = typer.Option(None, "--loss",
                                    help="standard, or chunked (fused linear cross-entropy)."),
    dp: int | None = typer.Option(None, "--dp", help="Data-parallel ranks."),
    zero: int | None = typer.Option(None, "--zero",
                                    help="ZeRO stage 0-3 over the data-parallel ranks."),
    fsdp: bool | None = typer.Option(None, "--fsdp", help="FSDP full sharding (ZeRO-3 semantics)."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel ranks."),
    sp: bool | None = typer.Option(None, "--sp", help="Sequence parallelism (with --tp)."),
    pp: int | None = typer.Option(None, "--pp", help="Pipeline stages (1F1B)."),
    virtual_stages: int | None = typer.Option(None, "--virtual-stages",
                                              help="Interleaved 1F1B: chunks per stage."),
    cp: int | None = typer.Option(None, "--cp", help="Context-parallel ranks (sequence split)."),
    microbatches: int | None = typer.Option(None, "--microbatches",
                                            help="Gradient-accumulation steps (PP micro-batches)."),
    prompt: int | None = typer.Option(None, "--prompt", help="Prompt tokens (generation)."),
    new: int | None = typer.Option(None, "--new", help="New tokens generated (generation)."),
    weights_dtype: str | None = typer.Option(None, "--weights-dtype",
                                             help="bf16, fp16, fp8, int8 or int4 (generation)."),
    kv_dtype: str | None = typer.Option(None, "--kv-dtype",
                                        help="bf16, fp16, fp8 or int8 (generation)."),
    group_size: int | None = typer.Option(None, "--group-size",
                                          help="int4 quantization group (default 128)."),
    paged_block: int
    | None = typer.Option(None, "--paged-block", help="Paged KV cache block in tokens (0: HF "
                          "DynamicCache)."),
    prefill_chunk: int | None = typer.Option(None, "--prefill-chunk",
                                             help="Chunked prefill size in tokens."),
    gpu: str | None = typer.Option(None, "--gpu",
                                   help="Check the fit on this GPU (e.g. h100-sxm, a100-sxm-80gb)."),
    allow_long_context: bool = typer.Option(
        False, "--allow-long-context",
        help="Price a sequence beyond a RoPE model's max positions (a longer RoPE scaling than its "
             "config says)."),
    json_out: bool = typer.Option(False, "--json", help="Print the estimate as JSON."),
    width: int | None = typer.Option(None, "--width", callback=_check_width,
                                     help="Terminal width."),
) -> None:
    """Predict the GPU memory of training or generation before launch, and what to change when it does not fit."""
    from gpudoctor.memory import estimate_from_options
    from gpudoctor.report.memory import render_console, to_json
    from gpudoctor.report.safe import SafeConsole

    opts = {
        "batch": batch, "seq": seq, "params_dtype": params_dtype, "autocast": autocast,
        "optimizer": optimizer, "master_weights": master_weights, "checkpointing": checkpointing,
        "attention": attention, "loss": loss,
        "dp": dp, "zero": zero, "fsdp": fsdp, "tp": tp, "sp": sp, "pp": pp,
        "virtual_stages": virtual_stages, "cp": cp, "microbatches": microbatches, "prompt": prompt,
        "new": new, "weights_dtype": weights_dtype,
        "kv_dtype": kv_dtype, "group_size": group_size, "paged_block": paged_block,
        "prefill_chunk": prefill_chunk,
    }
    est = estimate_from_options(spec, infer=infer, gpu=gpu,
                                context="extend" if allow_long_context else "refuse", **opts)
    if json_out:
        sys.stdout.write(to_json(est) + "\n")
        return
    render_console(est, SafeConsole(width=width) if width else SafeConsole())


@app.command("diff")
def diff_cmd(
    before: Path
    | None = typer.Argument(None,
                            help="BEFORE: a trace, a run directory, or a directory of rank traces."),
    after: Path | None = typer.Argument(None, help="AFTER: the same kinds as BEFORE."),
    last: bool = typer.Option(False, "--last",
                              help="Compare the two most recent runs of the program run last."),
    runs: Path = typer.Option(Path("gpudoctor-runs"), "--runs",
                              help="Where --last looks for run directories."),
    json_out: bool = typer.Option(False, "--json",
                                  help="Print the diff as JSON (schema: docs/diff.md)."),
    html: Path | None = typer.Option(None, "--html", help="Write a self-contained HTML page here."),
    fail_if_slower: str | None = typer.Option(
        None, "--fail-if-slower",
        help="CI gate: exit with code 4 when AFTER is slower by more than PCT (5% or 5) "
                                       "beyond noise (the 95% interval's lower end is above PCT)."),
    floor: float = typer.Option(1.0, "--noise-floor",
                                help="Run-to-run floor in percent: smaller changes are noise."),
    width: int | None = typer.Option(None, "--width", callback=_check_width,
                                     help="Terminal width."),
) -> None:
    """Compare two runs: the step-time change with its confidence interval and a verdict (faster,
    slower, no difference beyond noise), the change per category, idle cause and kernel, and the
    findings resolved (predicted vs measured saving), new and persisting.
    Exit code 4 when --fail-if-slower fails, 2 on bad input."""
    from gpudoctor.diff import diff_paths
    from gpudoctor.diff.gate import SLOWER_EXIT_CODE, explain, failed, parse_percent
    from gpudoctor.report.safe import SafeConsole

    threshold = parse_percent(fail_if_slower) if fail_if_slower is not None else None
    if not 0 <= floor < 100:
        raise InputError(f"--noise-floor {floor:g}: give a percentage from 0 to 100 (default 1)")
    before, after = _diff_inputs(before, after, last, runs)
    inputs = [before, after, *_inputs_of(before), *_inputs_of(after)]
    if html is not None:
        from gpudoctor.outputs import check_output_file

        check_output_file(html, "--html", inputs, example="diff.html")
    result = diff_paths(before, after, floor)
    if html is not None:
        from gpudoctor.diff.html import render_html
        from gpudoctor.outputs import write_text_atomic

        write_text_atomic(html, render_html(result), "--html", inputs)
    if json_out:
        from gpudoctor.diff.serialize import diff_to_dict

        data = diff_to_dict(result)
        if threshold is not None:
            data["gate"] = {"fail_if_slower_pct": threshold, "failed": failed(result, threshold),
                            "exit_code": SLOWER_EXIT_CODE if failed(result, threshold) else 0}
        sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")
    else:
        from gpudoctor.diff.console import render_console

        render_console(result, SafeConsole(width=width) if width else SafeConsole())
        if html is not None:
            SafeConsole(stderr=True).print(f"HTML diff written to {html}", markup=False,
                                           highlight=False)
    if threshold is not None:
        sys.stderr.write(visible_controls(explain(result, threshold)) + "\n")
        if failed(result, threshold):
            raise typer.Exit(SLOWER_EXIT_CODE)


def _diff_inputs(before: Path | None, after: Path | None, last: bool,
                 runs: Path) -> tuple[Path, Path]:
    """BEFORE and AFTER as given, or the last two runs of one program (--last)."""
    if last:
        if before is not None or after is not None:
            raise InputError(
                "--last picks BEFORE and AFTER itself: give either --last or two paths, not both")
        from gpudoctor.diff.history import last_pair

        older, newer = last_pair(runs)
        sys.stderr.write(
            visible_controls(f"gpudoctor diff --last: {older.path} -> {newer.path}") + "\n")
        return Path(older.path), Path(newer.path)
    if before is None or after is None:
        raise InputError("give BEFORE and AFTER (traces or run directories): gpudoctor diff runs/a "
                         "runs/b; or --last for the two most recent runs of one program")
    return before, after


@app.command("history")
def history_cmd(
    folder: Path = typer.Argument(Path("gpudoctor-runs"),
                                  help="The folder gpudoctor run wrote to (its --out)."),
    json_out: bool = typer.Option(False, "--json", help="Print the runs as JSON."),
    predictions: bool = typer.Option(False, "--predictions",
                                     help="The --try-fixes trials' predicted vs measured speedups, "
                                     "and how far off."),
    width: int | None = typer.Option(None, "--width", callback=_check_width,
                                     help="Terminal width."),
) -> None:
    """The runs under a folder, newest first: program, arguments, git commit, GPU, step time, top finding."""
    from gpudoctor.diff.history import list_runs, prediction_errors
    from gpudoctor.diff.history_console import render_history, render_predictions
    from gpudoctor.report.safe import SafeConsole

    entries = list_runs(folder)
    if json_out:
        data: object = [e.to_dict() for e in entries]
        if predictions:
            data = {"runs": data, "prediction_errors": prediction_errors(entries),
                    "left_out_unreadable": [e.path for e in entries
                                            if e.report_unreadable or e.trials_unreadable]}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    console = SafeConsole(width=width) if width else SafeConsole()
    if predictions:
        render_predictions(entries, folder, console)
        return
    render_history(entries, folder, console)


@app.command("rules")
def list_rules() -> None:
    """List the finding ids the doctor knows: each GPU's rules, then the multi-GPU ones (analyze
    with several ranks' traces, run --nproc)."""
    from gpudoctor.ranks.combine import RULE_TITLES
    from gpudoctor.rules.registry import RULES

    console = Console()
    for rule in RULES.values():
        console.print(f"[bold]{rule.id:22}[/bold] {rule.title}")
    for rule_id, title in RULE_TITLES.items():
        console.print(f"[bold]{rule_id:22}[/bold] multi-GPU: {title}")


def _emit(report, json_out: bool, html: Path | None, width: int | None,  # type: ignore[no-untyped-def]
          inputs: Sequence[Path | str | None] = ()) -> None:
    from gpudoctor.report.safe import (
        SafeConsole,  # trace names print with their control characters made visible
    )

    if html is not None:
        _write_html(report, html, inputs)
    if json_out:
        from gpudoctor.report.json_report import to_json

        sys.stdout.write(to_json(report) + "\n")
        return
    from gpudoctor.report.console import render_console

    render_console(report, SafeConsole(width=width) if width else SafeConsole())
    if html is not None:
        SafeConsole(stderr=True).print(f"HTML report written to {html}", markup=False,
                                       highlight=False)


def _write_html(report, target: Path, inputs: Sequence[Path | str | None] = ()) -> None:  # type: ignore[no-untyped-def]
    """Never over an input (the trace itself included), never a half-written file (outputs.py)."""
    from gpudoctor.outputs import check_output_file, write_text_atomic
    from gpudoctor.report.html import render_html

    check_output_file(target, "--html", inputs)
    write_text_atomic(target, render_html(report), "--html", inputs)


def _inputs_of(path: Path, *others: Path | None) -> list[Path | str | None]:
    """The files a command reads from PATH (a trace, or a run directory's trace and env.json) and
    its other input options: no output may be written over one of them."""
    from gpudoctor.capture.bundle import env_file_of
    from gpudoctor.trace.load import resolve_trace_path

    inputs: list[Path | str | None] = [path, *others]
    # analyze itself says what is wrong with PATH
    with contextlib.suppress(GpuDoctorError, OSError):
        inputs += [resolve_trace_path(path), env_file_of(path)]
    return inputs


def _pop_debug(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without its ``--debug`` flags, wherever they stand among gpudoctor's own arguments
    (``gpudoctor --debug analyze X`` and ``gpudoctor analyze X --debug``), and whether there was one.
    What belongs to another program stays: the arguments after ``--``, and those of ``gpudoctor run``
    from its SCRIPT (or -m MODULE) on."""
    out: list[str] = []
    debug = False
    run_values: set[str] = set()
    in_run = passthrough = take_value = False
    for i, arg in enumerate(argv):
        if passthrough:
            out.append(arg)
            continue
        if take_value:  # the value of a run option (--out DIR, -m MODULE)
            take_value = False
            passthrough = in_run and argv[i - 1] == "-m"
            out.append(arg)
            continue
        if arg == "--debug":
            debug = True
            continue
        if arg == "--":
            passthrough = True
        elif in_run:
            if arg in run_values:
                take_value = True
            elif not arg.startswith("-"):
                passthrough = True  # the script: what follows is its own
        elif arg == "run" and all(a.startswith("-") for a in out):
            in_run, run_values = True, _run_value_options()
        out.append(arg)
    return out, debug


def _run_value_options() -> set[str]:
    """The options of ``gpudoctor run`` that take a value (read from the command, not listed twice)."""
    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    return {opt for p in command.params if p.param_type_name == "option"
            and not getattr(p, "is_flag", False)
            for opt in p.opts}


def _one_line_summaries(typer_app: typer.Typer) -> None:
    """The command list shows each command's first paragraph; typer's rich mode keeps the
    docstring's line breaks there, cutting sentences mid-line. Joined, rich wraps them to the terminal."""
    for info in typer_app.registered_commands:
        doc = inspect.cleandoc(info.help
                               or (info.callback.__doc__ if info.callback else None) or "")
        if info.short_help is None and doc:
            info.short_help = " ".join(doc.split("\n\n")[0].split())
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _one_line_summaries(group.typer_instance)


def main() -> None:
    argv, debug = _pop_debug(sys.argv[1:])
    failures.debug["on"] = failures.debug["on"] or debug
    warnings.showwarning = failures.show_warning
    try:
        code = app(args=argv, standalone_mode=False)  # returns the code of a typer.Exit
        sys.exit(code if isinstance(code, int) else 0)
    except GpuDoctorError as exc:
        failures.fail_on(exc)
    except (typer.Exit, SystemExit) as exc:
        code = getattr(exc, "exit_code", getattr(exc, "code", 0))
        sys.exit(code if isinstance(code, int) else 1)
    except typer.Abort:
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the last resort: one line, never a traceback
        # usage errors (click's, or the copy typer vendors) show themselves and carry their code
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        failures.fail_on(exc)


_one_line_summaries(app)  # every command is registered by now

if __name__ == "__main__":
    main()
