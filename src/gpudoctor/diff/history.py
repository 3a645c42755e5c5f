"""Run history: the run directories ``gpudoctor run`` wrote, newest first, and the last two runs
of one program for ``gpudoctor diff --last``.

A program is its script path (or ``-m`` module) and its arguments, from env.json's ``program``
section (written since this module exists), else read back from the recorded ``argv``. Runs of
the same program compare; a run with other arguments is another program.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudoctor.capture.bundle import read_json_object
from gpudoctor.core.trial_record import TrialRecord, trial_records
from gpudoctor.diff.samples import MIN_SIDE_SAMPLES, process_mean, unprofiled_samples, usable
from gpudoctor.errors import InputError, TrialRecordError

DEFAULT_RUNS = Path("gpudoctor-runs")
# gpudoctor run's options that take a value (cli.run): skipped when reading a program back from argv
_RUN_VALUE_OPTIONS = {"--steps", "--skip", "--out", "--wait", "--window", "--calibrate", "--width"}


@dataclass(frozen=True)
class Prediction:
    """A ``--try-fixes`` trial both predicted and measured (report.json ``trials``)."""

    knob: str
    finding: str  # "" for a knob named with no finding
    predicted_speedup: float
    measured_speedup: float
    predicted_by: str  # how it was priced: "replay ...", "formula"
    # the trial's host pace over the capture's (TrialRecord.host_pace); None: not told
    host_pace: float | None = None

    @property
    def ratio(self) -> float:
        """Predicted / measured: above 1, the prediction promised more than the trial gave."""
        return self.predicted_speedup / self.measured_speedup

    def to_dict(self) -> dict[str, Any]:
        d = {"knob": self.knob, "finding": self.finding,
             "predicted_speedup": self.predicted_speedup,
             "measured_speedup": self.measured_speedup, "predicted_by": self.predicted_by}
        if self.host_pace is not None:
            d["host_pace"] = self.host_pace
        return d


@dataclass(frozen=True)
class RunEntry:
    """One run directory, as ``gpudoctor history`` lists it."""

    path: str
    recorded_utc: str
    program: str  # script path or module ("" when unknown)
    args: tuple[str, ...]
    is_module: bool
    git_commit: str | None
    gpu: str
    step_ms: float | None
    step_kind: str  # "unprofiled" or "profiled" ("" when unknown)
    top_finding: str | None
    top_saving_ms: float | None
    has_trace: bool
    findings: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    predictions: tuple[Prediction, ...] = ()  # its --try-fixes trials predicted and measured
    report_unreadable: bool = False  # a report file is there but holds no JSON object (cut short, edited)
    trials_unreadable: str = ""  # why its report's trials cannot be read ("" when they can)

    @property
    def identity(self) -> tuple[str, tuple[str, ...], bool]:
        return self.program, self.args, self.is_module

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "recorded_utc": self.recorded_utc, "program": self.program,
            "args": list(self.args),
            "is_module": self.is_module, "git_commit": self.git_commit, "gpu": self.gpu,
            "step_ms": None if self.step_ms is None else round(self.step_ms, 4),
            "step_kind": self.step_kind, "top_finding": self.top_finding,
            "top_saving_ms": None if self.top_saving_ms is None else round(self.top_saving_ms, 4),
            "findings": self.findings, "has_trace": self.has_trace,
            "predictions": [p.to_dict() for p in self.predictions],
            "report_unreadable": self.report_unreadable,
        } | ({"trials_unreadable": self.trials_unreadable} if self.trials_unreadable else {})


def program_from_argv(argv: list[Any]) -> dict[str, Any]:
    """{"target", "args", "is_module"} read back from ``gpudoctor run``'s recorded argv ({} if
    none)."""
    words = [str(a) for a in argv]
    if "run" not in words:
        return {}
    i = words.index("run") + 1
    while i < len(words):
        w = words[i]
        if w == "-m" and i + 1 < len(words):
            return {"target": words[i + 1], "args": words[i + 2:], "is_module": True}
        if w in _RUN_VALUE_OPTIONS:
            i += 2
            continue
        if w.startswith("-"):
            i += 1
            continue
        return {"target": w, "args": words[i + 1:], "is_module": False}
    return {}


def program_of(env: dict[str, Any]) -> dict[str, Any]:
    """The program of a run: env.json's ``program`` section, else read back from its argv."""
    program = env.get("program")
    if isinstance(program, dict) and isinstance(program.get("target"), str):
        return {"target": program["target"], "args": [str(a) for a in program.get("args") or []],
                "is_module": bool(program.get("is_module")),
                "git_commit": program.get("git_commit")}
    argv = env.get("argv")
    return program_from_argv(argv) if isinstance(argv, list) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def step_of(env: dict[str, Any], report: dict[str, Any]) -> tuple[float | None, str]:
    """(ms, kind): the run's step time as ``gpudoctor diff`` compares it (diff/compare.py
    ``choose_samples``), so that both quote one number for one run: the mean of the steps timed
    without the profiler, its outliers left out (``process_mean``), else of the profiled steps.
    Not the report's unprofiled step, a median (capture/timing.py): a mean is what the diff's ratio
    and interval are of."""
    unprofiled = unprofiled_samples(env)
    if len(unprofiled) >= MIN_SIDE_SAMPLES:
        return process_mean(unprofiled), "unprofiled"
    steps = report.get("steps") if isinstance(report.get("steps"), dict) else {}
    profiled = usable(steps.get("per_step_ms")) if isinstance(steps.get("per_step_ms"), list) else ()
    if profiled:
        return process_mean(profiled), "profiled"
    step = _number(report.get("step_ms"))
    return step, "profiled" if step else ""


def read_run(folder: Path) -> RunEntry | None:
    """A run directory's entry (None when ``folder`` holds no env.json)."""
    env_file = folder / "env.json"
    if not env_file.is_file():
        ranks = sorted(folder.glob("env.rank*.json"))
        if not ranks:
            return None
        env_file = ranks[0]
    env = read_json_object(env_file)
    report_file = folder / env_file.name.replace("env", "report", 1)
    report = read_json_object(report_file)
    program = program_of(env)
    step_ms, step_kind = step_of(env, report)
    findings = report.get("findings") if isinstance(report.get("findings"), list) else []
    top = findings[0] if findings and isinstance(findings[0], dict) else {}
    gpu = env.get("gpu") if isinstance(env.get("gpu"), dict) else {}
    predictions, trials_unreadable = _predictions(report, report_file.name)
    return RunEntry(
        path=str(folder),
        recorded_utc=str(env.get("recorded_utc") or ""),
        program=str(program.get("target") or ""),
        args=tuple(str(a) for a in program.get("args") or []),
        is_module=bool(program.get("is_module")),
        git_commit=program.get("git_commit")
        if isinstance(program.get("git_commit"), str) else None, gpu=str(gpu.get("name") or ""),
        step_ms=step_ms,
        step_kind=step_kind,
        top_finding=str(top["id"]) if isinstance(top.get("id"), str) else None,
        top_saving_ms=_number(top.get("saving_ms")),
        has_trace=any(folder.glob("trace*.json*")),
        findings=len(findings),
        predictions=predictions,
        report_unreadable=not report and report_file.is_file(),
        trials_unreadable=trials_unreadable,
    )


def _predictions(report: dict[str, Any], name: str) -> tuple[tuple[Prediction, ...], str]:
    """The trials of a run that were both predicted and measured, read from its report (``name``);
    none and why, where a trial record cannot be read (a field missing or of the wrong type)."""
    if "trials" not in report:
        return (), ""
    try:
        records = trial_records(report["trials"], f"{name} trials")
    except TrialRecordError as exc:
        return (), str(exc)
    return tuple(p for p in map(_prediction, records) if p is not None), ""


def _prediction(rec: TrialRecord) -> Prediction | None:
    """A trial's prediction beside its measurement (None: it lacks either, or did not run to
    the end)."""
    predicted, measured = _number(rec.predicted_speedup), _number(rec.measured_speedup)
    if not (predicted and measured and rec.status == "ok"):
        return None
    return Prediction(rec.knob, rec.finding or "", predicted, measured,
                      rec.predicted_by or "formula", _number(rec.host_pace))


def prediction_errors(entries: list[RunEntry]) -> dict[str, Any]:
    """How far the predictions were off over ``entries``' trials: predicted / measured per trial,
    its median and the share within 1.25x, in all and by how they were priced."""
    pairs = [(p, p.ratio) for e in entries for p in e.predictions]

    def summary(ratios: list[float]) -> dict[str, Any]:
        if not ratios:
            return {"trials": 0}
        ordered = sorted(ratios)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        return {"trials": len(ratios), "median_ratio": round(median, 3),
                "within_1_25x": sum(1 / 1.25 <= r <= 1.25 for r in ratios)}

    by: dict[str, list[float]] = {}
    for p, r in pairs:
        by.setdefault(p.predicted_by.split(" ")[0], []).append(r)
    return {"all": summary([r for _, r in pairs]),
            "by": {k: summary(v) for k, v in sorted(by.items())}}


def list_runs(base: Path = DEFAULT_RUNS) -> list[RunEntry]:
    """The run directories under ``base``, newest first (by recorded time, then name). Where
    ``base`` holds none itself, those one level further down: a folder of several ``--out``
    folders (one per program or per person) reads as their runs together. A run directory given
    itself is its own one run."""
    if not base.exists():
        raise InputError(f"{base} does not exist; give the folder `gpudoctor run --out` wrote to "
                         f"(default {DEFAULT_RUNS}/), or run a program with `gpudoctor run` first")
    if not base.is_dir():
        raise InputError(f"{base} is a file, not a folder of run directories; give the folder "
                         f"`gpudoctor run --out` wrote to (default {DEFAULT_RUNS}/)")
    itself = read_run(base)
    if itself is not None:  # a run directory given itself (its trials/ are not runs)
        return [itself]
    folders = _subfolders(base)
    entries = [e for e in (read_run(p) for p in folders) if e is not None]
    if not entries:
        deeper = [q for p in folders for q in _subfolders(p, quiet=True)]
        entries = [e for e in (read_run(q) for q in deeper) if e is not None]
    return sorted(entries, key=lambda e: (e.recorded_utc, Path(e.path).name), reverse=True)


def _subfolders(folder: Path, quiet: bool = False) -> list[Path]:
    """The folders directly in ``folder``; one that cannot be listed is an error, or, ``quiet``
    (a folder below the one given), holds none."""
    try:
        return [p for p in folder.iterdir() if p.is_dir()]
    except OSError as exc:
        if quiet:
            return []
        raise InputError(
            f"cannot list {folder}: {exc.strerror or exc}; check its permissions") from None


def last_pair(base: Path = DEFAULT_RUNS) -> tuple[RunEntry, RunEntry]:
    """(older, newer): the two most recent runs, with a trace, of the program run last."""
    runs = [e for e in list_runs(base) if e.has_trace]
    if not runs:
        raise InputError(f"--last: {base} holds no run directory with a trace; run the program "
                         "twice with `gpudoctor run` (before and after the change), or give BEFORE "
                         "and AFTER")
    newest = runs[0]
    same = [e for e in runs if e.identity == newest.identity]
    if len(same) < 2:
        what = " ".join([newest.program, *newest.args]) or Path(newest.path).name
        raise InputError(f"--last: {base} holds only one run of `{what}` (the latest program run); "
                         "run it again with `gpudoctor run` after the change, or give BEFORE "
                         "and AFTER")
    return same[1], same[0]
