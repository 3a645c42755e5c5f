"""gpudoctor run --try-fixes: the knobs applied in a fresh child, the trials' verdicts, the
reports, and the command line's errors (all on the CPU: the timings mean nothing here, the
mechanics do)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from sigint import default_sigint, sigint_ignored
from trial_records import record

from gpudoctor.capture.runner import Target
from gpudoctor.core.loader import usable_cpus
from gpudoctor.core.trial_record import NotTried, TrialRound
from gpudoctor.diff.samples import compare_samples
from gpudoctor.errors import InputError
from gpudoctor.tryfix import knobs as knobs_mod
from gpudoctor.tryfix import render as render_mod
from gpudoctor.tryfix import trial as trial_mod
from gpudoctor.tryfix.child_trial import ChildTrial, read_child_trial
from gpudoctor.tryfix.render import render_console, section_html
from gpudoctor.tryfix.session import TrialsOutcome
from gpudoctor.tryfix.trial import (
    CONFIRMED,
    FASTER_UNPREDICTED,
    NO_EFFECT,
    NOISY,
    NOT_APPLIED,
    NOT_ENOUGH,
    SMALLER,
    TOO_FEW,
    WORSE,
    Baseline,
    Planned,
    Trials,
    numerics,
    parse_fixes,
    plan,
    verdict,
)

SRC = Path(__file__).parent.parent / "src"
PROBE = Path(__file__).parent / "programs" / "tryfix" / "probe.py"
BASE = (10.0, 10.2, 9.9, 10.1, 10.0, 9.8, 10.2, 10.0)


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in its own tmp_path: a trial with no sandbox runs the program in the current
    directory, and tests/programs/tryfix/probe.py writes probe.json there."""
    monkeypatch.chdir(tmp_path)


# samples enough for a verdict (trial.MIN_JUDGED_STEPS steps over trial.MIN_JUDGED_S on each side)
JUDGED = tuple(v * 10 for v in BASE) * 3  # 24 steps of ~100 ms


def _scaled(factor: float, base: tuple[float, ...] = JUDGED) -> list[float]:
    return [v * factor for v in base]


# -- --fixes and the plan ------------------------------------------------------------------------


def test_parse_fixes_accepts_known_ids_and_lists_them_on_error() -> None:
    assert parse_fixes(None) is None
    assert parse_fixes("tf32, loader-workers,tf32") == ["tf32", "loader-workers"]
    with pytest.raises(InputError) as err:
        parse_fixes("tf32,warp-speed")
    message = str(err.value)
    assert "'warp-speed'" in message and "\n" not in message
    assert all(k.id in message for k in knobs_mod.KNOBS)
    with pytest.raises(InputError, match="no knob named"):
        parse_fixes(" , ")


def _finding(fid: str, speedup: float = 1.5, saving: float = 3.0) -> SimpleNamespace:
    return SimpleNamespace(id=fid, predicted_speedup=speedup, saving_ms=saving)


def test_plan_maps_findings_to_knobs_and_lists_code_changes() -> None:
    findings = [
        _finding("input-pipeline", 2.0),
        _finding("host-sync"),
        _finding("fp32-matmul", 1.8),
        _finding("naive-attention"),
    ]
    p = plan(findings, None)
    assert [t.knob.id for t in p.trials] == ["loader-workers", "bf16-autocast", "tf32"]
    assert p.trials[0].finding == "input-pipeline" and p.trials[0].predicted_speedup == 2.0
    assert [n.finding for n in p.not_tried] == ["host-sync", "naive-attention"]
    only = plan(findings, ["tf32", "optimizer-fused"])
    assert [(t.knob.id, t.finding) for t in only.trials] == [
        ("tf32", "fp32-matmul"),
        ("optimizer-fused", None),
    ]
    assert plan([_finding("host-sync")], None).trials == []


def test_compile_is_priced_by_fusion_alone_and_reduce_overhead_with_the_launches() -> None:
    """The findings of a Hugging Face Trainer's Llama step on an H100 (2026-11-26 12:17 UTC,
    hf_trainer_llama): launch-bound 6.3905 ms (x1.3723), unfused-elementwise 3.7238 ms (x1.1878), of
    a 23.55 ms step. Without the report's own knob prices (a trace whose graph could not be built),
    compile is priced by its fusion finding alone: summed with launch-bound's saving it read x9.1
    and x2.4 where x0.98 and x0.93 were measured (benchmarks/BENCHMARKS-replay.md "Replay", knob trials)."""
    launch = SimpleNamespace(id="launch-bound", predicted_speedup=1.3723, saving_ms=6.3905)
    fusion = SimpleNamespace(id="unfused-elementwise", predicted_speedup=1.1878, saving_ms=3.7238)
    trials = {t.knob.id: t for t in plan([launch, fusion], None).trials}
    assert list(trials) == [
        "compile-reduce-overhead",
        "compile",
    ]  # launch-bound does not add a compile trial
    compile_ = trials["compile"]
    assert compile_.finding == "unfused-elementwise" and compile_.predicted_speedup == 1.1878
    # reduce-overhead fuses too: the two savings summed
    reduce = trials["compile-reduce-overhead"]
    assert (
        reduce.finding == "launch-bound + unfused-elementwise"
        and reduce.saving_ms == pytest.approx(10.1143)
    )
    assert reduce.predicted_speedup == pytest.approx(1.7525, abs=1e-4)
    # named by --fixes with no fusion finding: no price
    assert plan([launch], ["compile"]).trials[-1].predicted_speedup is None


def test_the_reports_own_knob_prices_stand_for_the_findings_sums() -> None:
    """A report's ``knob_prices`` (rules/knob_prices.py) price a knob whether or not a finding
    calls for it, and in place of the findings' sum."""
    launch = SimpleNamespace(id="launch-bound", predicted_speedup=9.0932, saving_ms=20.2941)
    prices = {
        "compile-reduce-overhead": {
            "predicted_speedup": 3.2,
            "step_ms": 22.8,
            "step_after_ms": 7.125,
        },
        "compile": {"predicted_speedup": 1.0, "step_ms": 22.8, "step_after_ms": 22.8},
    }
    trials = {
        t.knob.id: t for t in plan([launch], ["compile-reduce-overhead", "compile"], prices).trials
    }
    reduce, compile_ = trials["compile-reduce-overhead"], trials["compile"]
    assert (reduce.finding, reduce.predicted_speedup, reduce.priced_by) == (
        "launch-bound",
        3.2,
        "replay (the knob's own edit)",
    )
    assert reduce.saving_ms == pytest.approx(15.675)
    assert (
        compile_.finding is None and compile_.predicted_speedup == 1.0 and compile_.saving_ms == 0.0
    )
    # a price that is not one (missing or non-positive numbers) leaves the findings' price
    broken = {"compile-reduce-overhead": {"predicted_speedup": 3.2, "step_ms": 22.8}}
    (alone,) = plan([launch], None, broken).trials
    assert alone.predicted_speedup == 9.0932 and alone.priced_by is None


def test_a_knob_its_replay_prices_slower_is_listed_not_tried_unless_named() -> None:
    """fp32-matmul found (x1.20 by its fix), but bf16 autocast's own replay on the step is slower
    (x0.94: its casts on a host-bound step, as the word-LM's): listed as not tried, and why; named,
    it is tried at that price."""
    fp32 = SimpleNamespace(id="fp32-matmul", predicted_speedup=1.2, saving_ms=1.6667)
    prices = {"bf16-autocast": {"predicted_speedup": 0.94, "step_ms": 10.0, "step_after_ms": 10.64}}
    p = plan([fp32], None, prices)
    assert "bf16-autocast" not in [t.knob.id for t in p.trials]
    (line,) = [n.reason for n in p.not_tried if n.reason.startswith("bf16-autocast")]
    assert line == (
        "bf16-autocast: its replay predicts a slower step (x0.94, 0.64 ms more a step: what it "
        "adds to the host outweighs what it saves); name it with --fixes to try it"
    )
    (named,) = plan([fp32], ["bf16-autocast"], prices).trials
    assert named.predicted_speedup == 0.94 and named.saving_ms == pytest.approx(-0.64)


def test_knobs_whose_findings_put_under_one_percent_at_stake_are_listed_not_tried_unless_named() -> (
    None
):
    """The Hugging Face Trainer's findings (H100, 2026-11-26): fp32-matmul 0.0 and 0.0029 ms (x1.0,
    x1.0001), the input pipeline 0.32 ms (x1.0138)."""
    loader = SimpleNamespace(id="input-pipeline", predicted_speedup=1.0138, saving_ms=0.3196)
    for fp32, stake in (
        (SimpleNamespace(id="fp32-matmul", predicted_speedup=1.0, saving_ms=0.0), "0 ms"),
        (
            SimpleNamespace(id="fp32-matmul", predicted_speedup=1.0001, saving_ms=0.0029),
            "0.0029 ms (x1.0001)",
        ),
    ):
        p = plan([loader, fp32], None)
        assert [t.knob.id for t in p.trials] == ["loader-workers"]
        assert p.not_tried == [
            NotTried(
                "fp32-matmul",
                f"{kid}: the finding puts {stake} of the step at stake, less than a trial can "
                "tell from the drift between processes; name it with --fixes to try it",
            )
            for kid in ("bf16-autocast", "tf32")
        ]
        assert [t.knob.id for t in plan([loader, fp32], ["tf32"]).trials] == [
            "tf32"
        ]  # named: tried
    # nanoGPT's launch-bound finding, x1.0053: its reduce-overhead trial (measured x1.26) is tried on
    # the fusion saving it also removes, not on the launches alone
    tiny = SimpleNamespace(id="launch-bound", predicted_speedup=1.0053, saving_ms=0.09)
    assert plan([tiny], None).trials == []
    fusion = SimpleNamespace(id="unfused-elementwise", predicted_speedup=1.33, saving_ms=4.2)
    assert "compile-reduce-overhead" in {t.knob.id for t in plan([tiny, fusion], None).trials}
    none = SimpleNamespace(id="launch-bound", predicted_speedup=1.0, saving_ms=0.0)
    trials = {t.knob.id: t for t in plan([none, fusion], None).trials}
    assert trials["compile-reduce-overhead"].predicted_speedup == pytest.approx(1.33)
    assert plan([none], None).trials == []  # nothing else at stake: listed, not tried


def test_every_finding_with_a_fix_has_a_knob_or_a_reason() -> None:
    from gpudoctor.rules.registry import discover

    for fid in discover():
        assert knobs_mod.knobs_for(fid) or fid in knobs_mod.NEEDS_CODE, fid


def test_child_env_adds_to_an_existing_alloc_conf() -> None:
    env = knobs_mod.child_env(
        ["no-empty-cache"], {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}
    )
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128,expandable_segments:True"
    assert knobs_mod.child_env(["tf32"], {}) == {}


def test_compile_knobs_compile_from_a_fresh_inductor_cache_even_where_the_user_set_one(
    tmp_path: Path,
) -> None:
    """A warm Inductor cache starts its worker pool behind the compiled steps (knobs.FRESH_CACHE): each
    compile trial gets empty cache folders of its own, the user's are left alone, other knobs get none."""
    for kid in ("compile", "compile-reduce-overhead"):
        env = knobs_mod.child_env([kid], {"TORCHINDUCTOR_CACHE_DIR": "/mine"}, str(tmp_path))
        assert env == {
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "torchinductor_cache_dir"),
            "TRITON_CACHE_DIR": str(tmp_path / "triton_cache_dir"),
            "GPUDOCTOR_FRESH_INDUCTOR_CACHE": "1",
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
            "TORCH_LOGS": "graph_breaks",
        }
        # Dynamo's graph breaks logged for the trial's reason, added to the user's own logs
        assert knobs_mod.child_env([kid], {"TORCH_LOGS": "+dynamo"})["TORCH_LOGS"] == (
            "+dynamo,graph_breaks"
        )
        assert knobs_mod.needs_fresh_dir([kid])
        # the worker pool slowed pinned copies 80x (knobs.IN_PROCESS_COMPILE); a user's own setting is kept
        assert (
            knobs_mod.child_env([kid], {"TORCHINDUCTOR_COMPILE_THREADS": "8"})[
                "TORCHINDUCTOR_COMPILE_THREADS"
            ]
            == "8"
        )
    assert knobs_mod.child_env(["bf16-autocast"], {}, str(tmp_path)) == {}
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in knobs_mod.child_env(["tf32"], {})
    assert not knobs_mod.needs_fresh_dir(["bf16-autocast", "tf32"])


def test_a_compile_trials_cache_is_removed_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    made = []
    real = tempfile.mkdtemp

    def mkdtemp(**kw):
        made.append(real(dir=tmp_path, **kw))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    seen = {}

    def run_child(self, trial_dir, spec_path, env, cwd, target):
        seen.update(env)
        Path(env["TORCHINDUCTOR_CACHE_DIR"]).mkdir(
            parents=True, exist_ok=True
        )  # what the child's compile writes
        return "ok", "", None, 0.0

    monkeypatch.setattr(trial_mod.Trials, "_run_child", run_child)
    trials = _trials(tmp_path, sandbox=False)
    for name in ("compile", "compile.r2", "tf32", "combined"):
        (tmp_path / "run" / "trials" / name).mkdir(parents=True, exist_ok=True)
    trials._spawn(tmp_path / "run" / "trials" / "compile", ["compile"], tmp_path)
    assert len(made) == 1 and seen["TORCHINDUCTOR_CACHE_DIR"].startswith(made[0])
    assert seen["GPUDOCTOR_FRESH_INDUCTOR_CACHE"] == "1"
    assert Path(made[0]).exists()  # kept for the combined trial
    # a second process of the same knob (--trial-repeats) compiles from a fresh cache of its own
    trials._spawn(tmp_path / "run" / "trials" / "compile.r2", ["compile"], tmp_path)
    assert (
        len(made) == 2
        and seen["TORCHINDUCTOR_CACHE_DIR"].startswith(made[1])
        and not Path(made[1]).exists()
    )
    # the combined trial reuses what the compile trial left, and says so
    trials._spawn(tmp_path / "run" / "trials" / "combined", ["loader-workers", "compile"], tmp_path)
    assert len(made) == 2 and seen["TORCHINDUCTOR_CACHE_DIR"].startswith(made[0])
    assert seen["GPUDOCTOR_FRESH_INDUCTOR_CACHE"] == knobs_mod.REUSED_CACHE
    monkeypatch.setenv("GPUDOCTOR_FRESH_INDUCTOR_CACHE", knobs_mod.REUSED_CACHE)
    assert "with the Inductor cache its own compile trial left" in knobs_mod._cache_note()
    # and the invocation's end removes it
    monkeypatch.setattr(trial_mod.Trials, "_run", lambda self, planned: [])
    trials.run([])
    assert not Path(made[0]).exists()


# -- verdicts with synthetic samples ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("factor", "predicted", "expected"),
    [
        (0.5, 2.0, CONFIRMED),  # measured x2.0 for x2.0 predicted
        (0.5, 1.2, CONFIRMED),  # beats its prediction
        (0.9, 3.0, SMALLER),  # saves 10% where 67% was predicted
        (1.0, 2.0, NO_EFFECT),
        (1.3, 2.0, WORSE),
        (0.5, None, FASTER_UNPREDICTED),
    ],
)
def test_verdict(factor: float, predicted: float | None, expected: str) -> None:
    assert verdict(compare_samples(JUDGED, _scaled(factor)), predicted) == expected


@pytest.mark.parametrize(
    ("base", "trial"),
    [
        (JUDGED, _scaled(0.03)),  # x33 from 24 trial steps of 3 ms: 0.07 s timed
        (JUDGED[:9], _scaled(0.5)[:9]),  # 9 steps a side, 0.9 and 0.45 s
        (
            tuple(v / 100 for v in JUDGED) * 30,
            [v / 200 for v in JUDGED] * 30,
        ),  # 720 steps a side, under 1 s
    ],
)
def test_no_verdict_from_too_few_steps_or_under_a_second_of_them(
    base: tuple[float, ...], trial: list[float]
) -> None:
    """On a loaded 2-core CPU a bf16 trial read "faster x33.77" where bf16 ran 3.5x slower."""
    change = compare_samples(base, trial)
    assert change.verdict == "faster"  # diff's noise model alone would call it
    assert verdict(change, 2.0) == verdict(change, None) == NOT_ENOUGH
    assert trial_mod.short_of_evidence((trial_mod.timed(base), trial_mod.timed(trial))).endswith(
        "a verdict needs 10 steps and 1 s of them on each side"
    )
    assert (
        verdict(compare_samples(JUDGED, _scaled(0.5)), None) == FASTER_UNPREDICTED
    )  # 24 steps, 1.2 s and more


def test_a_trial_short_of_evidence_says_what_it_timed(tmp_path: Path) -> None:
    records = _rounds_runner(
        tmp_path, {"control": 25.0, "compile": 14.0, "control-end": 25.0}, repeats=1, copies=2
    ).run([Planned(knobs_mod.BY_ID["compile"], "unfused-elementwise", 1.5, 5.0)])
    [compile_] = [r for r in records if r.knob == "compile"]
    assert compile_.verdict == NOT_ENOUGH and compile_.measured_speedup > 1.7
    assert compile_.reason.startswith(
        "the reference timed 6 steps over 0.15 s and the trial timed "
        "6 steps over 0.08 s; a verdict needs 10 steps"
    )


def test_a_change_inside_the_controls_drift_is_not_called_no_effect() -> None:
    # the controls moved by 40%: a 30% saving whose interval excludes 0 is within the drift
    assert verdict(compare_samples(JUDGED, _scaled(0.7), floor_pct=40.0), 2.0) == NOISY
    assert verdict(compare_samples(JUDGED, _scaled(1.0), floor_pct=40.0), 2.0) == NO_EFFECT
    assert verdict(compare_samples(JUDGED, _scaled(0.7), floor_pct=1.0), 2.0) == CONFIRMED


def test_verdict_ballpark_is_half_the_predicted_saving_at_the_intervals_best_end() -> None:
    change = compare_samples(JUDGED, _scaled(0.7))  # saves ~30%
    best = -change.ci_low_pct / 100
    assert (
        verdict(change, 1 / (1 - 2 * best) - 1e-6) == CONFIRMED
    )  # predicted saving just under 2x best
    assert verdict(change, 1 / (1 - 2 * best - 0.01)) == SMALLER
    assert verdict(compare_samples([10.0], [5.0]), 2.0) == TOO_FEW


def test_numerics_flags_divergence_beyond_tolerance() -> None:
    ok = numerics([2.0, 1.9], [2.01, 1.91], checked=True)
    assert ok.diverged is False and ok.max_rel_diff == pytest.approx(0.00526, abs=1e-4)
    assert numerics([2.0, 1.9], [2.0, 2.5], checked=True).diverged is True
    # NaN where the baseline was finite
    assert numerics([2.0], [None], checked=True).diverged is True
    assert numerics([2.0], [3.0], checked=False).diverged is None
    assert numerics([], [], checked=True).diverged is None


def test_a_divergence_under_compiled_dropout_says_why() -> None:
    import torch

    model = torch.nn.Sequential(
        torch.nn.Linear(4, 4),
        torch.nn.Dropout(0.1),
        torch.nn.Dropout(0.0),
        torch.nn.Sequential(torch.nn.Dropout2d(0.2)),
    )
    note = knobs_mod._dropout_note(model)
    assert note.startswith("; 2 dropout modules:")  # p = 0 draws nothing
    assert knobs_mod._dropout_note(torch.nn.Linear(4, 4)) == ""
    effects = [f"Bert.forward = torch.compile(Bert.forward){note}"]
    # the BERT fine-tune's losses (H100, 2026-11-26): equal first step, 5.6% apart at the second
    diverged = numerics([1.1087, 1.1232], [1.1087, 1.1865], checked=True, effects=effects)
    assert diverged.diverged is True and "dropout" in diverged.reason
    assert "(dropout: " in render_mod.numerics_text(diverged)
    assert (
        numerics([1.1087, 1.1232], [1.1087, 1.1233], checked=True, effects=effects).reason is None
    )
    assert (
        numerics(
            [1.1087, 1.1232],
            [1.1087, 1.1865],
            checked=True,
            effects=["Bert.forward under autocast"],
        ).reason
        is None
    )


# -- trials in child processes ---------------------------------------------------------------------


def _trials(
    tmp_path: Path, *args: str, timeout: float = 120, sandbox: bool = True, trace: bool = False
) -> Trials:
    # the children import the gpudoctor these tests import (Trials puts its folder on their PYTHONPATH)
    baseline = Baseline(tuple(BASE), (1.4, 1.39, 1.38), None, skip=6)
    return Trials(
        Target(str(PROBE), args),
        {"target": str(PROBE)},
        tmp_path / "run",
        baseline,
        timeout_s=timeout,
        sandbox=tmp_path / "sandbox" if sandbox else None,
        trace=trace,
    )


@pytest.mark.e2e
def test_knobs_are_applied_in_the_child(tmp_path: Path) -> None:
    runner = _trials(tmp_path)
    rec = runner.one(
        "all", ["loader-workers", "optimizer-foreach", "bf16-autocast", "no-empty-cache"], None
    )
    assert rec.status == "ok", rec
    seen = json.loads(
        (tmp_path / "sandbox" / "all" / "probe.json").read_text()
    )  # the sandbox was the cwd
    assert seen["num_workers"] == min(8, usable_cpus() or 1) and seen["persistent_workers"] is True
    assert seen["pin_memory"] is False  # pinned only with CUDA
    assert seen["foreach"] is True
    assert seen["autocast"] is True and seen["autocast_dtype"] == "torch.bfloat16"
    assert seen["output_dtype"] == "torch.bfloat16"
    assert seen["alloc_conf"] == "expandable_segments:True"
    assert seen["empty_cache"] == "gpudoctor.tryfix.knobs"
    assert any(e.startswith("DataLoader: num_workers 0 ->") for e in rec.effects)
    assert "SGD(foreach=True)" in rec.effects
    assert any("autocast('cpu', dtype=torch.bfloat16)" in e for e in rec.effects)
    assert rec.numerics.checked and len(rec.numerics.trial) == 3
    assert rec.n_trial >= 2 and rec.measured_speedup is not None and rec.verdict is not None
    env = json.loads((tmp_path / "run" / "trials" / "all" / "env.json").read_text())
    # every sample timed is kept (trial.DROP_OUTLIERS)
    assert len(env["capture"]["unprofiled_step_ms_samples"]) == rec.n_trial
    assert not rec.outliers_ms.trial
    assert env["trial"]["knobs"] == list(rec.knobs)

    fused = runner.one("fused", ["optimizer-fused", "tf32"], None)
    seen = json.loads((tmp_path / "sandbox" / "fused" / "probe.json").read_text())
    assert fused.status == "ok", fused
    assert seen["fused"] is True and not seen["foreach"]
    assert seen["alloc_conf"] is None and seen["autocast"] is False


def test_every_outermost_module_of_the_first_iteration_gets_the_knob() -> None:
    """Blocks called one by one from a list, and a parameterless module among them: each block
    with parameters is changed once, before its first call; the hooks are gone after one loop."""
    import torch
    from torch.nn.modules import module as nn_module

    blocks = [torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4)]
    changed: list[str] = []
    effects: list[str] = []
    hooks_before = len(nn_module._global_forward_pre_hooks)
    knobs_mod.on_outermost_module(
        lambda m: changed.append(str(id(m))) or f"{type(m).__name__} changed", effects
    )
    x = torch.randn(2, 4)
    for _ in range(3):
        h = x
        for block in blocks:
            h = block(h)
    assert changed == [str(id(blocks[0])), str(id(blocks[2]))]
    assert effects == ["Linear changed", "Linear changed"]
    assert len(nn_module._global_forward_pre_hooks) == hooks_before


@pytest.mark.e2e
def test_compile_knobs_time_steps_after_their_compilation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A knob with warm-up steps (the compile knobs: knobs.WARMUP_COMPILE) runs that many more
    steps before the ones it times: the child is told skip 24 (trial.TRIAL_MIN_SKIP, above the
    baseline's 6) + 4 and sees 28 steps."""
    import dataclasses

    assert (
        knobs_mod.BY_ID["compile"].warmup_steps
        == knobs_mod.BY_ID["compile-reduce-overhead"].warmup_steps
        == 10
    )
    monkeypatch.setitem(
        knobs_mod.BY_ID, "tf32", dataclasses.replace(knobs_mod.BY_ID["tf32"], warmup_steps=4)
    )
    rec = _trials(tmp_path, sandbox=False).one("tf32", ["tf32"], None)
    assert rec.status == "ok", rec
    spec = json.loads((tmp_path / "run" / "trials" / "tf32" / "spec.json").read_text())
    assert spec["skip"] == 24 + 4
    trial = json.loads((tmp_path / "run" / "trials" / "tf32" / "trial.json").read_text())
    # 28 steps, then the 12 judged settled (capture/timing.settled) and the steps after them are
    # timed until the program's 40 steps end it, before the 30 a trial times: 24 samples when the
    # steps settled at 28; on a loaded CPU they may settle later (fewer), or never (the later half
    # of the 40, 20)
    seen, timed = trial["steps_seen"], len(trial["samples_ms"])
    assert seen == 40 and 12 <= timed <= 24, (seen, timed)


@pytest.mark.e2e
def test_a_trial_that_ended_before_its_window_says_it_kept_no_trace(tmp_path: Path) -> None:
    """Asked for a trace, a trial whose program ends while the trial still times its steps (the
    probe's 40 steps: 24 skipped, 12 judged settled, the rest timed) has no window to keep, and
    its reason says so beside the verdict."""
    rec = _trials(tmp_path, sandbox=False, trace=True).one("tf32", ["tf32"], None)
    assert rec.status == "ok", rec
    assert not (tmp_path / "run" / "trials" / "tf32" / trial_mod.TRACE_FILE).exists()
    assert trial_mod.NO_TRACE in rec.reason
    quiet = _trials(tmp_path / "untraced", sandbox=False).one("tf32", ["tf32"], None)
    assert trial_mod.NO_TRACE not in quiet.reason


@pytest.mark.e2e
def test_a_crashed_trial_is_reported_and_the_next_runs(tmp_path: Path) -> None:
    runner = _trials(tmp_path, "--crash-when-foreach", sandbox=False)
    records = runner.run(
        [
            Planned(knobs_mod.BY_ID["optimizer-foreach"], "optimizer-loop", 1.3, 2.0),
            Planned(knobs_mod.BY_ID["expandable-segments"], "memory-pressure", 1.1, 1.0),
        ]
    )
    control, crashed, ok, end = records
    assert end.knob == "control-end" and end.status == "ok" and runner.floor_pct >= 1.0
    assert control.knob == "control" and control.verdict == "reference"
    # once control-end ran, the knob that ran is measured against both controls
    assert runner.reference == trial_mod.CONTROLS_BOTH and ok.reference == trial_mod.CONTROLS_BOTH
    assert crashed.reference == "control"
    assert crashed.status == "crashed" and "planted crash" in crashed.reason
    assert crashed.verdict is None and crashed.measured_speedup is None
    assert ok.status == "ok" and ok.verdict is not None
    # no sandbox: the trials ran where gpudoctor runs (this test's tmp_path), and the program wrote there
    assert Path(ok.cwd).resolve() == Path.cwd().resolve() == tmp_path.resolve()
    assert (tmp_path / "probe.json").is_file()


# -- trial.json: what the child tells its parent ------------------------------------------------

RAN = ChildTrial(
    ("tf32",),
    ("tf32 on",),
    (2.5, None),
    0,
    "",
    ran=True,
    stopped_by_gpudoctor=True,
    step_source="optimizer",
    steps_seen=40,
    samples_ms=(1.5, 2.0),
    sample_steps=(38, 39),
    unsettled="",
    peak_memory_bytes=None,
)


def test_trial_json_keeps_its_keys_and_reads_back(tmp_path: Path) -> None:
    """Five keys when a knob could not be applied, twelve once the program ran, in the order the
    child always wrote them; each reads back as written. A file written before the samples' steps
    were (no ``sample_steps``) reads back with none."""
    failed = ChildTrial(("tf32",), error="RuntimeError: no")
    assert list(failed.to_dict()) == ["knobs", "effects", "losses", "exit_code", "error"]
    assert list(RAN.to_dict()) == [
        "knobs",
        "effects",
        "losses",
        "exit_code",
        "error",
        "stopped_by_gpudoctor",
        "step_source",
        "steps_seen",
        "samples_ms",
        "sample_steps",
        "unsettled",
        "peak_memory_bytes",
    ]
    for child in (failed, RAN):
        (tmp_path / "trial.json").write_text(json.dumps(child.to_dict(), indent=2))
        assert read_child_trial(tmp_path / "trial.json") == (child, "")
    older = {k: v for k, v in RAN.to_dict().items() if k != "sample_steps"}
    (tmp_path / "trial.json").write_text(json.dumps(older))
    assert read_child_trial(tmp_path / "trial.json") == (
        dataclasses.replace(RAN, sample_steps=()),
        "",
    )


@pytest.mark.parametrize(
    "text, said",
    [
        (None, ""),  # none written: the child's output says why
        ("{", "trial.json is not JSON: "),
        ("[1, 2]", "trial.json holds list, not an object"),
        ('{"knobs": ["tf32"]}', "trial.json: no 'effects' (a list of strings)"),
        (
            json.dumps(RAN.to_dict() | {"samples_ms": "fast"}),
            "trial.json: 'samples_ms' is 'fast', not a list of numbers (or nulls)",
        ),
        (
            json.dumps({k: v for k, v in RAN.to_dict().items() if k != "steps_seen"}),
            "trial.json: no 'steps_seen' (a whole number)",
        ),
        (
            json.dumps(RAN.to_dict() | {"sample_steps": [38, 39.5]}),
            "trial.json: 'sample_steps' is [38, 39.5], not a list of whole numbers",
        ),
    ],
)
def test_a_trial_json_the_child_did_not_write_reads_as_none_and_why(
    tmp_path: Path, text: str | None, said: str
) -> None:
    if text is not None:
        (tmp_path / "trial.json").write_text(text)
    child, why = read_child_trial(tmp_path / "trial.json")
    assert child is None and why.startswith(said) and (why == "") == (said == "")


@pytest.mark.parametrize(
    "script, reason",
    [
        # the child died before writing it: its last line says why, as before
        ("print('boom'); raise SystemExit(1)", "exit code 1: boom"),
        # it wrote one gpudoctor cannot read: what is wrong with it, not a traceback
        (
            "open(TRIAL, 'w').write('[1, 2]')",
            "exit code 0: trial.json holds list, not an object",
        ),
    ],
)
def test_a_trial_without_a_readable_trial_json_is_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, reason: str
) -> None:
    real = subprocess.Popen

    def popen(cmd: list[str], **kwargs):  # a stand-in child, in the session Trials gives it
        trial = str(Path(cmd[-1]).parent / "trial.json")
        return real([sys.executable, "-c", f"TRIAL = {trial!r}; {script}"], **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    rec = _trials(tmp_path, sandbox=False).one("tf32", ["tf32"], None)
    assert (rec.status, rec.reason) == ("crashed", reason)
    assert rec.verdict is None and rec.effects == () and rec.exit_code is None


@pytest.mark.e2e
def test_a_trial_past_its_timeout_is_stopped(tmp_path: Path) -> None:
    rec = _trials(tmp_path, "--hang-when-fused", timeout=8).one(
        "optimizer-fused", ["optimizer-fused"], None
    )
    assert rec.status == "timed out" and rec.verdict is None
    # stopped at its 8 s timeout, not left to hang (the bound only catches a hang)
    assert rec.wall_s < 300


# a trial's program that sends SIGINT to its own process group (the trial's session) at its 4th step
SELF_INTERRUPT = """import os, signal, time
import torch
m = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(60):
    m(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    if i == 3:
        os.killpg(os.getpgid(0), signal.SIGINT)
        time.sleep(1)
print("finished")
"""


@pytest.mark.e2e
def test_a_trial_takes_ctrl_c_when_gpudoctor_was_started_with_sigint_ignored(
    tmp_path: Path,
) -> None:
    """gpudoctor started as a background job (SIGINT ignored, which its children would inherit): a trial
    still takes SIGINT sent to its process group as python would, a KeyboardInterrupt."""
    with sigint_ignored():
        rec = _trial_of_script(tmp_path, "interrupts.py", SELF_INTERRUPT, "tf32")
    assert rec.status == "crashed" and rec.reason == "exit code 130: interrupted by Ctrl-C", rec


def _trials_alive(folder: Path) -> list[str]:
    """The command lines of the trial processes (tryfix/child.py) whose files are under ``folder``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "gpudoctor.tryfix.child" in text and str(folder) in text:
            found.append(text)
    return found


@pytest.mark.e2e
@pytest.mark.skipif(
    not Path("/proc/self/cmdline").exists(), reason="reads the processes from /proc"
)
def test_ctrl_c_during_a_trial_ends_gpudoctor_and_the_trial(tmp_path: Path) -> None:
    """The trial runs in its own session, out of the terminal's reach; a real Ctrl-C to gpudoctor while it
    waits for one ends gpudoctor with 130 and takes the trial's processes with it."""
    cmd = [
        sys.executable,
        "-m",
        "gpudoctor",
        "run",
        "--skip",
        "6",
        "--steps",
        "2",
        "--calibrate",
        "0",
        "--out",
        str(tmp_path / "runs"),
        "--try-fixes",
        "--fixes",
        "optimizer-fused",
        "--no-trial-trace",
        "--sandbox",
        str(tmp_path / "sb"),
        str(PROBE),
        "--hang-when-fused",
    ]
    hung = (
        tmp_path / "sb" / "optimizer-fused" / "probe.json"
    )  # written at its first step, before it hangs
    env = dict(os.environ, PYTHONPATH=str(SRC))
    with subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    ) as proc:
        try:
            deadline = time.monotonic() + 280
            while not hung.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert hung.exists() and proc.poll() is None, "the fused trial never started"
            assert _trials_alive(tmp_path)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert _trials_alive(tmp_path) == []


def _trial_of_script(tmp_path: Path, name: str, source: str, knob: str) -> dict:
    """One trial of ``knob`` on a script written to ``tmp_path / name``, in the working directory."""
    script = tmp_path / name
    script.write_text(source)
    runner = _trials(tmp_path, sandbox=False)
    runner.target = Target(str(script))
    return runner.one(knob, [knob], None)


@pytest.mark.e2e
def test_a_knob_that_finds_nothing_is_not_applied(tmp_path: Path) -> None:
    rec = _trial_of_script(
        tmp_path,
        "plain.py",
        "import torch\nx = torch.randn(64, 64)\nfor i in range(20):\n"
        "    x = torch.tanh(x @ x.T / 64)\n    import gpudoctor; gpudoctor.step()\n",
        "loader-workers",
    )
    assert rec.status == NOT_APPLIED and rec.verdict == NOT_APPLIED


@pytest.mark.e2e
def test_the_tf32_knob_holds_when_the_program_turns_tf32_off() -> None:
    """The lab's fp32_matmul trap sets allow_tf32 = False itself: without the hold, the knob's trial
    timed fp32 and would read "no effect". Run in a fresh process: the knob patches torch."""
    code = (
        "from gpudoctor.tryfix.knobs import apply_knobs\n"
        "effects = apply_knobs(['tf32'])\n"
        "import torch\n"
        "torch.backends.cuda.matmul.allow_tf32 = False\n"
        "torch.backends.cuda.matmul.allow_tf32 = False\n"
        "torch.backends.cudnn.allow_tf32 = False\n"
        "torch.set_float32_matmul_precision('highest')\n"
        "print(torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,"
        " torch.get_float32_matmul_precision())\n"
        "print(len(effects), effects[1])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src")),
    )
    flags, effects = out.stdout.splitlines()[-2:]
    assert flags == "True True high"
    # each override named once
    assert (
        effects
        == "4 the program's torch.backends.cuda.matmul.allow_tf32 = False ignored: TF32 kept on"
    )


@pytest.mark.e2e
def test_compile_on_a_model_the_program_compiled_already_is_not_applied(tmp_path: Path) -> None:
    """torch.compile of an OptimizedModule's forward changes nothing but the effect line; the trial
    says the program compiled it (backend "eager" here: the trace is cheap on the CPU)."""
    rec = _trial_of_script(
        tmp_path,
        "self_compiled.py",
        "import torch\nmodel = torch.compile(torch.nn.Linear(16, 16), backend='eager')\n"
        "x = torch.randn(8, 16)\nfor i in range(20):\n    model(x).sum().backward()\n"
        "    import gpudoctor; gpudoctor.step()\n",
        "compile",
    )
    assert rec.status == NOT_APPLIED, rec
    left = f"{knobs_mod.LEFT_AS_IS}OptimizedModule is compiled by the program already"
    assert rec.effects == (left,)
    assert rec.reason.endswith(": OptimizedModule is compiled by the program already")


@pytest.mark.e2e
def test_a_trial_ends_when_its_record_is_written_not_after_the_programs_teardown(
    tmp_path: Path,
) -> None:
    """The interpreter's teardown is skipped once trial.json is written (a DataLoader's persistent
    workers are joined there, 5 s each): a program whose exit handler sleeps an hour ends at once."""
    rec = _trial_of_script(
        tmp_path,
        "slow_exit.py",
        "import atexit, time, torch\nimport gpudoctor\natexit.register(time.sleep, 3600)\n"
        "x = torch.randn(64, 64)\nfor i in range(60):\n    x = torch.tanh(x @ x.T / 64)\n"
        "    gpudoctor.step()\n",
        "tf32",
    )
    assert rec.status == "ok" and rec.n_trial >= 2, rec
    assert rec.wall_s < 600  # not the exit handler's hour


# -- rendering ---------------------------------------------------------------------------------------


def test_console_and_html_sections() -> None:
    from rich.console import Console

    console = Console(record=True, width=160)
    oom = record(
        knob="compile",
        status="out of memory",
        reason="CUDA out of memory",
        verdict=None,
        measured_speedup=None,
    )
    not_tried = [NotTried("host-sync", "in the code")]
    render_console(TrialsOutcome([record(), oom], not_tried), console)
    text = console.export_text()
    assert "Fixes tried" in text
    assert (
        "bf16-autocast" in text
        and "x1.80" in text
        and "x1.70 [1.60-1.80]" in text
        and "confirmed" in text
    )
    assert "1024 MiB -> 512 MiB" in text and "within 5% tolerance" in text
    assert "out of memory: CUDA out of memory" in text
    assert "not tried: host-sync: in the code" in text
    console = Console(record=True, width=160)
    ends = (("ok", 14.02), ("crashed", None), ("ok", 14.5))
    rounds = tuple(
        TrialRound(f"/runs/r/trials/compile.r{i}", status, "", 9.0, 30, mean)
        for i, (status, mean) in enumerate(ends, 1)
    )
    repeated = TrialsOutcome([record(rounds=rounds)])
    render_console(repeated, console)
    assert "3 processes: 14.02, crashed, 14.50 ms" in console.export_text()
    assert "3 processes: 14.02, crashed, 14.50 ms" in section_html(repeated)
    page = section_html(TrialsOutcome([record()], [NotTried("<x>", "r")]))
    assert "&lt;b&gt;Net&lt;/b&gt;" in page and "<b>Net" not in page and "&lt;x&gt;" in page


# -- the command line --------------------------------------------------------------------------------


def gd(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="120")
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["run", "--try-fixes", "--fixes", "tf32,nitro", str(PROBE)],
            "unknown knob 'nitro'; knobs: loader-workers",
        ),
        (["run", "--try-fixes"], "--try-fixes needs a program"),
        (
            ["run", "--try-fixes", "--trial-timeout", "0", str(PROBE)],
            "--trial-timeout must be a positive",
        ),
    ],
)
def test_bad_input_is_one_line(args: list[str], message: str) -> None:
    out = gd(*args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert not out.stdout


@pytest.mark.e2e
def test_run_try_fixes_end_to_end(tmp_path: Path) -> None:
    out = gd(
        "run",
        "--skip",
        "6",
        "--steps",
        "2",
        "--calibrate",
        "0",
        "--out",
        str(tmp_path / "runs"),
        "--try-fixes",
        "--fixes",
        "optimizer-foreach",
        "--sandbox",
        str(tmp_path / "sb"),
        str(PROBE),
        "--iters",
        "3000",
        cwd=tmp_path,
    )  # a trial's window opens after a second of settled steps
    assert out.returncode == 0, out.stderr
    assert (
        "Fixes tried" in out.stdout
        and "optimizer-foreach" in out.stdout
        and "Traceback" not in out.stderr
    )
    (run_dir,) = (tmp_path / "runs").iterdir()
    report = json.loads((run_dir / "report.json").read_text())
    control, trial, end = report["trials"]
    assert end["knob"] == "control-end" and trial["floor_pct"] >= 1.0
    assert (
        control["knob"] == "control"
        and control["knobs"] == []
        and control["verdict"] == "reference"
    )
    assert trial["reference"] == "controls before and after"
    # the control's samples moved to the geometric mean of the two controls' means
    # (trial.bracketed), over the steps the control and the trial both timed (trial.same_steps)
    first, last = control["trial_ms"], end["trial_ms"]
    child = {
        name: json.loads((run_dir / "trials" / name / "trial.json").read_text())
        for name in ("control", "optimizer-foreach")
    }
    for c in child.values():  # each child counted a step for every sample
        assert len(c["sample_steps"]) == len(c["samples_ms"]) > 0
    timed = {name: dict(zip(c["sample_steps"], c["samples_ms"])) for name, c in child.items()}
    shared = sorted(timed["control"].keys() & timed["optimizer-foreach"].keys())
    # where the two settled (each child's own clock) sets how many steps they share: too few, and
    # the whole windows are compared
    if len(shared) < trial_mod.MIN_JUDGED_STEPS:
        used = {name: list(c["samples_ms"]) for name, c in child.items()}
    else:
        used = {name: [t[k] for k in shared] for name, t in timed.items()}
    assert (trial["n_baseline"], trial["n_trial"]) == (
        len(used["control"]),
        len(used["optimizer-foreach"]),
    )
    scale = (first * last) ** 0.5 / first
    control_mean = sum(used["control"]) / len(used["control"])
    assert trial["baseline_ms"] == pytest.approx(control_mean * scale, rel=0.02)
    trial_mean = sum(used["optimizer-foreach"]) / len(used["optimizer-foreach"])
    assert trial["trial_ms"] == pytest.approx(trial_mean, rel=0.02)
    assert trial["knob"] == "optimizer-foreach" and trial["status"] == "ok"
    for key in (
        "measured_speedup",
        "speedup_ci95",
        "verdict",
        "peak_memory_bytes",
        "numerics",
        "effects",
        "baseline_ms",
        "trial_ms",
        "n_baseline",
        "n_trial",
        "predicted_speedup",
        "finding",
        "dir",
    ):
        assert key in trial
    assert report["trials_not_tried"] == []
    trial_dir = run_dir / "trials" / "optimizer-foreach"
    assert (trial_dir / "env.json").is_file() and (trial_dir / "trace.json.gz").is_file()
    diff = gd("diff", str(run_dir), str(trial_dir), "--json")  # a trial directory is a run bundle
    assert diff.returncode == 0, diff.stderr
    # diff reads every sample the trial timed; it drops outliers (at most one in ten)
    n = len(child["optimizer-foreach"]["samples_ms"])
    assert n - n // 10 <= json.loads(diff.stdout)["samples"]["after"] <= n
    assert trial["outliers_ms"] == {"baseline": [], "trial": []}
    assert (tmp_path / "sb" / "optimizer-foreach" / "probe.json").is_file()
    assert trial["files_written"] == ["probe.json"] and trial["cwd"] == str(
        tmp_path / "sb" / "optimizer-foreach"
    )
    assert 'id="fixes-tried"' in (run_dir / "report.html").read_text()
    assert (
        trial["numerics"]["baseline"] and len(trial["numerics"]["baseline"]) == 3
    )  # the control's losses
    assert "control" in out.stdout and "reference" in out.stdout


@pytest.mark.e2e
def test_run_try_fixes_with_nothing_to_try_says_so(tmp_path: Path) -> None:
    out = gd(
        "run",
        "--skip",
        "6",
        "--steps",
        "2",
        "--calibrate",
        "0",
        "--out",
        str(tmp_path / "runs"),
        "--try-fixes",
        "--json",
        str(PROBE),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["trials"] == [] and "name the knobs to try with --fixes" in report["trials_note"]
    assert not list((tmp_path / "runs").glob("*/trials"))


@pytest.mark.parametrize(
    ("trap", "knob"),
    [
        ("fp32_matmul", "bf16-autocast"),
        ("input_pipeline", "loader-workers"),
        ("optimizer_loop", "optimizer-foreach"),
    ],
)
def test_plan_on_real_reports_of_the_lab_traps(trap: str, knob: str) -> None:
    """The findings of recorded H100 traces plan their knobs, with the finding's prediction."""
    from gpudoctor.pipeline import analyze_path

    report = analyze_path(Path(__file__).parent / "data" / trap / "trace.json.gz")
    planned = {t.knob.id: t for t in plan(report.findings, None).trials}
    assert knob in planned, [f.id for f in report.findings]
    finding = next(f for f in report.findings if f.id == planned[knob].finding)
    assert planned[knob].predicted_speedup == finding.predicted_speedup > 1.0


def test_reduce_overhead_knob_clones_what_the_cuda_graph_returns():
    # A GAN keeps the generator's output past the discriminator's next replay: under
    # mode="reduce-overhead" that output would be overwritten, so the knob hands back copies.
    import torch

    kept = torch.arange(6.0).reshape(2, 3)

    def forward(x):
        return {"out": kept, "pair": (kept, 7)}

    got = knobs_mod._cloning_outputs(forward)(None)
    assert got["pair"][1] == 7
    for t in (got["out"], got["pair"][0]):
        assert torch.equal(t, kept)
        assert t.data_ptr() != kept.data_ptr()


def _modules():  # type: ignore[no-untyped-def]
    """A module, and a wrapper that passes ``forward`` set on it to the module it wraps, as
    Lightning Fabric's _FabricModule does (module-level classes: torch.save pickles them by name)."""
    return _Net, _ForwardingWrapper


def test_a_knobs_forward_is_the_instances_own_and_left_out_of_pickles_and_copies(
    tmp_path: Path,
) -> None:
    """A public word-language-model example saves its model with torch.save(model) (the compile and
    bf16 trials crashed pickling the knob's wrapper), an EMA deep-copies it, and Lightning Fabric's
    module wrapper passes attributes set on it to the module it wraps (the trials recursed until
    RecursionError): the knob's forward is set in the instance's own dict and left out of its state."""
    import copy

    import torch

    Net, Wrapper = _modules()
    x = torch.ones(2, 4)
    net = Net()
    plain = net(x)
    original = net.forward
    knobs_mod.set_forward(net, lambda *a: original(*a) * 2)
    assert torch.equal(net(x), plain * 2)
    torch.save(net, tmp_path / "net.pt")
    loaded = torch.load(tmp_path / "net.pt", weights_only=False)
    assert torch.equal(loaded(x), plain) and "forward" not in vars(loaded)
    assert torch.equal(copy.deepcopy(net)(x), plain)
    wrapped = Wrapper(Net())
    inner_forward = wrapped.forward
    knobs_mod.set_forward(wrapped, lambda *a: inner_forward(*a) + 1)
    assert torch.equal(wrapped(x), wrapped.inner(x) + 1)  # no recursion through the wrapped module


def test_the_autocast_knob_hands_an_fp32_model_s_outputs_back_in_fp32() -> None:
    """A DCGAN example feeds the discriminator's output to nn.BCELoss with fp32 labels, outside the
    forward: under the knob's autocast it crashed ("Found dtype Float but expected BFloat16")."""
    import torch

    got = knobs_mod._as_fp32(
        {"out": torch.ones(2, dtype=torch.bfloat16), "ids": torch.arange(2), "n": 3}
    )
    assert got["out"].dtype == torch.float32 and got["ids"].dtype == torch.int64 and got["n"] == 3


def test_a_loader_whose_time_is_pinning_gets_the_pin_once_fix_and_no_worker_trial() -> None:
    """A Lightning module fed 16 MB pre-made batches (H100 trace): 4.65 of the 4.91 ms per ``__next__``
    is ``aten::pin_memory``. Eight workers made such a step 2.1x slower (H100, 2026-11-26): the first fix
    is pinning the data set once, and the loader-workers knob is not tried, with the reason."""
    from gpudoctor.pipeline import analyze_path

    report = analyze_path(Path(__file__).parent / "data" / "gallery_h100" / "lightning_module")
    finding = next(f for f in report.findings if f.id == "input-pipeline")
    numbers = finding.evidence.numbers
    assert numbers["loader_time_is_pinning"] is True
    assert (
        numbers["host_time_pinning_ms_per_step"] == 4.654
        and numbers["host_time_in_dataloader_ms_per_step"] == 4.91
    )
    assert "step_floor_after_fix_ms" not in numbers
    assert finding.fixes[0].title.startswith("Pin the in-memory data set once")
    assert round(finding.saving_ms, 3) == 4.513  # replayed without the pinning's host time
    p = plan(report.findings, None)
    assert "loader-workers" not in [t.knob.id for t in p.trials]
    assert any(n.finding == "input-pipeline" and "pinning" in n.reason for n in p.not_tried)
    # named with --fixes, the knob is tried all the same
    assert "loader-workers" in [t.knob.id for t in plan(report.findings, ["loader-workers"]).trials]


def test_the_pin_once_price_against_the_measured_fix() -> None:
    """The same program as it is now (H100, 2026-11-26, 4.90 ms a step): 0.34 ms a step pinning, replayed
    without it: 0.301 ms (x1.07; the formula, its idle: 0.262 ms, x1.06). Pinning its data set once measured 4.60 -> 4.48 and 4.92 -> 4.48 ms a step in two
    plain pairs of runs (x1.03, x1.10) in the same call."""
    from gpudoctor.pipeline import analyze_path

    report = analyze_path(Path(__file__).parent / "data" / "gallery_h100" / "lightning_module_b")
    finding = report.findings[0]
    assert (
        finding.id == "input-pipeline"
        and finding.evidence.numbers["loader_time_is_pinning"] is True
    )
    assert round(finding.saving_ms, 3) == 0.301 and round(finding.predicted_speedup, 2) == 1.07


def test_pinning_slowed_under_torch_compile_puts_the_in_process_compile_first() -> None:
    """The Lightning module's compile trial (H100, 2026-11-26): its loader pinned 16 MB batches at 3.2 GB/s
    with Inductor's compile workers up; the same program's own run pinned at 45 GB/s and its newer run at 32
    (lightning_module_b, no compile: pin-once first, nothing said of compile)."""
    from gpudoctor.pipeline import analyze_path

    data = Path(__file__).parent / "data" / "gallery_h100"
    compiled = next(
        f
        for f in analyze_path(data / "lightning_module_compiled").findings
        if f.id == "input-pipeline"
    )
    numbers = compiled.evidence.numbers
    assert (
        numbers["pinning_gb_per_s"] == 3.24
        and numbers["pinning_slowed_under_torch_compile"] is True
    )
    assert "TORCHINDUCTOR_COMPILE_THREADS=1" in compiled.fixes[0].code
    assert compiled.fixes[1].title.startswith("Pin the in-memory data set once")
    assert "torch.compile" in compiled.summary and round(compiled.saving_ms, 3) == 3.694
    plain = next(
        f for f in analyze_path(data / "lightning_module_b").findings if f.id == "input-pipeline"
    )
    assert plain.evidence.numbers["pinning_gb_per_s"] == 32.32
    assert plain.evidence.numbers["pinning_slowed_under_torch_compile"] is False
    assert plain.fixes[0].title.startswith("Pin the in-memory data set once")


# -- --trial-repeats: rounds of processes -----------------------------------------------------------


def _rounds_runner(
    tmp_path: Path,
    means: dict[str, float | str],
    repeats: int,
    copies: int = 40,
    timed: Callable[[list[str]], tuple] | None = None,
) -> Trials:
    """Trials whose children are planted: each trial name (``compile``, ``compile.r2``, ...) ends
    with 3 x ``copies`` steps around its mean (120: over a second, enough for a verdict), or with
    the status given as a string. ``timed(knob_ids)``, where given, plants the samples and their
    steps instead."""
    runner = _trials(tmp_path, sandbox=False)
    runner.repeats = repeats

    def spawn(trial_dir: Path, knob_ids: list[str], cwd: Path) -> tuple:
        planted = means[trial_dir.name] if timed is None else 0.0
        if isinstance(planted, str):
            return planted, "planted", None, 1.0
        samples, steps = (
            timed(knob_ids) if timed else ((planted * 0.99, planted * 1.01, planted) * copies, ())
        )
        child = ChildTrial(
            tuple(knob_ids),
            effects=("planted",) if knob_ids else (),
            losses=(2.0,),
            exit_code=0,
            ran=True,
            samples_ms=tuple(samples),
            sample_steps=tuple(steps),
            peak_memory_bytes=100,
        )
        return "ok", "", child, 2.0

    runner._spawn = spawn  # type: ignore[method-assign]
    return runner


def test_repeated_trials_alternate_with_the_control_and_are_measured_over_their_processes(
    tmp_path: Path,
) -> None:
    means = {
        "control": 25.0,
        "compile": 14.0,
        "tf32": 25.3,
        "control.r2": 28.0,
        "compile.r2": 15.0,
        "tf32.r2": 27.7,
        "control-end": 26.0,
    }
    runner = _rounds_runner(tmp_path, means, repeats=2)
    order: list[str] = []
    runner.progress = order.append
    records = runner.run(
        [
            Planned(knobs_mod.BY_ID["compile"], "unfused-elementwise", 1.5, 5.0),
            Planned(knobs_mod.BY_ID["tf32"], "fp32-matmul", 1.3, 3.0),
        ]
    )
    assert order == [
        "control",
        "compile",
        "tf32",
        "control.r2",
        "compile.r2",
        "tf32.r2",
        "control-end",
    ]
    control, end, compile_, tf32 = records
    assert [r.mean_ms for r in control.rounds] == [25.0, 28.0, 26.0]
    assert "ran 3 times, 3 to their steps: means 25.00-28.00 ms (12.0% apart)" in end.reason
    # geometric means: controls 26.3041 ms, compile's processes 14.4914 (worked in test_diff_samples.py)
    assert compile_.knob == "compile" and [r.mean_ms for r in compile_.rounds] == [14.0, 15.0]
    assert compile_.measured_speedup == pytest.approx(1.8152, abs=1e-4)
    assert compile_.speedup_ci95 == pytest.approx([1.5481, 2.1283], abs=1e-4)
    assert compile_.verdict == CONFIRMED and compile_.floor_pct == 1.0
    assert compile_.method == "processes (3 vs 2), pooled t on log means"
    assert compile_.n_trial == 240  # 2 x 120
    assert compile_.dir.endswith("trials/compile")
    assert compile_.rounds[1].dir.endswith("trials/compile.r2")
    # tf32 moved with the controls: no effect, though each of its processes is tight
    assert tf32.verdict == NO_EFFECT
    assert len(records) == 4  # one confirmed knob: nothing to combine


def test_repeated_trials_are_measured_over_the_steps_every_process_timed(tmp_path: Path) -> None:
    """Each control times steps 10-129, of which 100-129 are an epoch's slow end (twice as long);
    each compile round times steps 40-99. Over the steps all five processes timed (40-99) the
    controls step at 25 ms and compile at 12.5: x2.00, where the whole windows read x2.25."""

    def timed(knob_ids: list[str]) -> tuple:
        if knob_ids:
            return [12.5] * 60, range(40, 100)
        return [50.0 if k >= 100 else 25.0 for k in range(10, 130)], range(10, 130)

    runner = _rounds_runner(tmp_path, {}, repeats=2, timed=timed)
    records = runner.run([Planned(knobs_mod.BY_ID["compile"], "unfused-elementwise", 1.5, 5.0)])
    compile_ = records[-1]
    assert compile_.knob == "compile"
    assert compile_.measured_speedup == pytest.approx(2.0, abs=1e-3)
    assert compile_.n_baseline == 3 * 60 and compile_.n_trial == 2 * 60
    # without the steps, the whole windows
    whole = trial_mod.common_steps([((25.0,) * 40 + (50.0,) * 20, ()), ((12.5,) * 60, ())])
    assert whole == [(25.0,) * 40 + (50.0,) * 20, (12.5,) * 60]


def test_a_round_that_crashes_leaves_the_others_measured_and_says_so(tmp_path: Path) -> None:
    means = {
        "control": 25.0,
        "compile": 14.0,
        "control.r2": 26.0,
        "compile.r2": "crashed",
        "control.r3": 25.5,
        "compile.r3": 14.5,
        "control-end": 25.8,
    }
    records = _rounds_runner(tmp_path, means, repeats=3).run(
        [Planned(knobs_mod.BY_ID["compile"], "unfused-elementwise", 1.5, 5.0)]
    )
    compile_ = records[-1]
    assert compile_.status == "ok" and compile_.verdict == CONFIRMED
    assert "round 2: crashed" in compile_.reason
    assert [r.status for r in compile_.rounds] == ["ok", "crashed", "ok"]
    assert compile_.method == "processes (4 vs 2), pooled t on log means"


def test_a_control_round_that_fails_is_left_out_of_the_reference(tmp_path: Path) -> None:
    means = {
        "control": 25.0,
        "compile": 14.0,
        "control.r2": "timed out",
        "compile.r2": 15.0,
        "control-end": 26.0,
    }
    records = _rounds_runner(tmp_path, means, repeats=2).run(
        [Planned(knobs_mod.BY_ID["compile"], "unfused-elementwise", 1.5, 5.0)]
    )
    control, end, compile_ = records
    assert [r.status for r in control.rounds] == ["ok", "timed out", "ok"]
    assert control.rounds[1].mean_ms is None
    assert "ran 3 times, 2 to their steps: means 25.00-26.00 ms (4.0% apart)" in end.reason
    assert compile_.method == "processes (2 vs 2), pooled t on log means"
    assert compile_.baseline_ms == pytest.approx((25.0 * 26.0) ** 0.5, abs=1e-4)


# two knobs confirmed over two rounds, then run together (planted mean steps, ms)
COMBINED_ROUNDS: dict[str, float | str] = {
    "control": 25.0,
    "compile": 14.0,
    "loader-workers": 20.0,
    "control.r2": 25.5,
    "compile.r2": 14.2,
    "loader-workers.r2": 20.3,
    "control-end": 25.2,
    "combined": 11.0,
    "combined.r2": 11.2,
}


def test_repeated_confirmed_knobs_are_combined_in_as_many_rounds(tmp_path: Path) -> None:
    means = COMBINED_ROUNDS
    records = _rounds_runner(tmp_path, means, repeats=2).run(
        [
            Planned(knobs_mod.BY_ID["compile"], "unfused-elementwise", 1.5, 5.0),
            Planned(knobs_mod.BY_ID["loader-workers"], "input-pipeline", 1.2, 4.0),
        ]
    )
    combined = records[-1]
    assert combined.knob == "combined" and combined.knobs == ("compile", "loader-workers")
    assert [r.mean_ms for r in combined.rounds] == [11.0, 11.2]
    assert combined.verdict == FASTER_UNPREDICTED and combined.measured_speedup > 2.2


def test_the_combined_trial_is_held_to_its_knobs_replayed_together(tmp_path: Path) -> None:
    """With a price for the knobs together, the combined trial is judged against it, as each
    knob is against its own; the runner asks for it with the knobs that were combined."""
    means = COMBINED_ROUNDS
    runner = _rounds_runner(tmp_path, means, repeats=2)
    asked: list[list[str]] = []

    def price(ids: list[str]) -> trial_mod.Together:
        asked.append(ids)
        return trial_mod.Together(2.4, 14.6)

    runner.price_together = price
    records = runner.run(
        [
            Planned(knobs_mod.BY_ID["compile"], "unfused-elementwise", 1.5, 5.0),
            Planned(knobs_mod.BY_ID["loader-workers"], "input-pipeline", 1.2, 4.0),
        ]
    )
    combined = records[-1]
    assert asked == [["compile", "loader-workers"]]
    assert combined.predicted_speedup == 2.4 and combined.predicted_saving_ms == 14.6
    assert combined.predicted_by == "replay (the knobs' edits together)"
    assert combined.verdict == CONFIRMED


def test_repeats_fall_back_to_one_process_a_knob_when_the_control_fails(tmp_path: Path) -> None:
    means = {"control": "crashed", "compile": 14.0, "control-end": 25.0}
    records = _rounds_runner(tmp_path, means, repeats=2).run(
        [Planned(knobs_mod.BY_ID["compile"], "unfused-elementwise", 1.5, 5.0)]
    )
    assert [r.knob for r in records] == ["control", "compile"]
    assert records[1].reference == "diagnosed run" and records[1].rounds is None


@pytest.mark.e2e
def test_run_try_fixes_with_repeats_end_to_end(tmp_path: Path) -> None:
    out = gd(
        "run",
        "--skip",
        "6",
        "--steps",
        "2",
        "--calibrate",
        "0",
        "--out",
        str(tmp_path / "runs"),
        "--fixes",
        "optimizer-foreach",
        "--trial-repeats",
        "2",
        "--no-trial-trace",
        str(PROBE),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    trials = json.loads((run_dir / "trials.json").read_text())["trials"]
    assert [t["knob"] for t in trials] == ["control", "control-end", "optimizer-foreach"]
    control, _, knob = trials
    assert len(control["rounds"]) == 3 and len(knob["rounds"]) == 2
    assert all(r["status"] == "ok" and r["mean_ms"] > 0 for r in control["rounds"] + knob["rounds"])
    assert (
        knob["method"] == "processes (3 vs 2), pooled t on log means"
        and knob["speedup_ci95"] is not None
    )
    assert (run_dir / "trials" / "optimizer-foreach.r2" / "trial.json").is_file()
    assert (run_dir / "trials" / "control.r2" / "trial.json").is_file()
    assert "2 processes:" in out.stdout and "3 processes:" in out.stdout


def test_controls_far_apart_suggest_repeats(tmp_path: Path) -> None:
    far = _rounds_runner(
        tmp_path / "far", {"control": 25.0, "compile": 14.0, "control-end": 28.0}, repeats=1
    )
    end = far.run([Planned(knobs_mod.BY_ID["compile"], "unfused-elementwise", 1.5, 5.0)])[-1]
    assert end.knob == "control-end" and "12.0% apart" in end.reason
    assert end.reason.endswith("--trial-repeats 3 measures each knob over three")
    near = _rounds_runner(
        tmp_path / "near", {"control": 25.0, "compile": 14.0, "control-end": 25.5}, repeats=1
    )
    assert (
        "--trial-repeats"
        not in near.run([Planned(knobs_mod.BY_ID["compile"], "unfused-elementwise", 1.5, 5.0)])[
            -1
        ].reason
    )


def test_trial_repeats_out_of_range_is_one_line() -> None:
    out = gd("run", "--trial-repeats", "0", str(PROBE))
    assert (
        out.returncode == 2
        and "--trial-repeats must be a whole number from 1 to 20, got 0" in out.stderr
    )
    assert "Traceback" not in out.stderr


def test_a_control_far_off_the_diagnosed_step_says_the_prices_may_not_hold(tmp_path: Path) -> None:
    """unet_ema (H100, 2026-11-26): diagnosed at 18.96 ms, its control at 24.63 (+30%), compile priced
    x1.30 and measured x1.00. Within 20% the control's line stays as it was."""
    diagnosed = statistics.fmean(BASE)
    for factor, says in ((1.3, True), (1.1, False)):
        means = {
            "control": diagnosed * factor,
            "compile": diagnosed,
            "control-end": diagnosed * factor,
        }
        control = _rounds_runner(tmp_path / str(factor), means, repeats=1).run(
            [Planned(knobs_mod.BY_ID["compile"], "unfused-elementwise", 1.3, 4.4)]
        )[0]
        text = render_mod.outcome_text(control)
        assert text.startswith(
            "reference for the trials (measured: the diagnosed run -> this run with no knob)"
        )
        assert ("the prices assume the diagnosed run's" in text) is says
        if says:
            assert (
                f"{control.baseline_ms:.2f} ms a step; this process stepped at "
                f"{control.trial_ms:.2f} ms (+30%)"
            ) in text


def test_the_control_line_quotes_the_step_the_report_header_shows(tmp_path: Path) -> None:
    """One report quoted "step 16.048 ms ± 9.406 (8 steps)" in its header and "the diagnosed run's
    94.38 ms a step" on the control's line: the mean of the steps before the window, named as the
    step the findings were priced on. The note now quotes the header's step; the mean is labelled."""
    runner = _rounds_runner(
        tmp_path, {"control": 21.0, "compile": 14.0, "control-end": 21.0}, repeats=1
    )
    runner.baseline = dataclasses.replace(
        runner.baseline, priced_ms=16.048
    )  # the header's unprofiled step
    control = runner.run([Planned(knobs_mod.BY_ID["compile"], "unfused-elementwise", 1.3, 4.4)])[0]
    # the samples' mean: 10.03
    assert control.baseline_ms == pytest.approx(statistics.fmean(BASE), abs=1e-3)
    text = render_mod.outcome_text(control)
    assert (
        "the prices assume the diagnosed run's unprofiled step, 16.048 ms (the report's \"step\" line); this "
        "process stepped at 21.00 ms (+31%)"
    ) in text
    assert "10.03 ms" not in text
    assert render_mod.means_text(control) == (
        "the diagnosed run's steps before its window 10.03 -> this run 21.00 ms "
        "a step (means of 8 and 120 steps)"
    )


def test_a_trial_and_its_control_are_compared_over_the_steps_both_timed() -> None:
    """A control timed steps 10-99, with slow epoch ends at 40 and 80; a compile trial steps 50-79,
    none of them: both sides are cut to 50-79. Without indices on a side, or with fewer shared steps
    than a verdict needs, the whole windows are compared."""
    control = [20.0 if k in (40, 80) else 10.0 for k in range(10, 100)]
    trial = [8.0] * 30
    before, after = trial_mod.same_steps(control, range(10, 100), trial, range(50, 80))
    assert before == (10.0,) * 30 and after == (8.0,) * 30
    assert trial_mod.same_steps(control, (), trial, range(50, 80)) == (tuple(control), tuple(trial))
    few = trial_mod.MIN_JUDGED_STEPS - 1
    assert trial_mod.same_steps(control, range(10, 100), trial[:few], range(95, 95 + few)) == (
        tuple(control),
        tuple(trial[:few]),
    )
    # steps not one per sample: not known
    assert trial_mod.same_steps(control, range(10, 99), trial, range(50, 80)) == (
        tuple(control),
        tuple(trial),
    )


def test_bracketed_moves_the_first_control_to_the_two_controls_geometric_mean() -> None:
    first, last = (10.0, 11.0, 12.0), (16.0, 18.0, 20.0)  # process means 11 and 18
    moved = trial_mod.bracketed(first, last)
    scale = (11.0 * 18.0) ** 0.5 / 11.0
    assert moved == pytest.approx(tuple(v * scale for v in first))
    assert sum(moved) / 3 == pytest.approx((11.0 * 18.0) ** 0.5)
    # the spread within the process is kept: the same relative spread
    assert (max(moved) - min(moved)) / (sum(moved) / 3) == pytest.approx(2.0 / 11.0)
    assert trial_mod.bracketed(first, ()) == first and trial_mod.bracketed((), last) == ()


def test_the_tf32_knob_is_priced_by_its_own_replay_not_the_bf16_fix() -> None:
    """hf_bert_fp32 (H100 bundle): fp32-matmul is priced for bf16 autocast (x1.58, its casts added
    on a host-held step; x1.84 with 2/3 of a cast per GEMM kernel at the median launch); the tf32 knob replays the GEMMs at the TF32 rate with no
    cast: x1.97 (TF32 by hand measured x2.07, the knob x1.91 on the same program)."""
    from gpudoctor.pipeline import analyze_path

    report = analyze_path(Path(__file__).parent / "data" / "gallery_h100" / "hf_bert_fp32")
    finding = report.finding("fp32-matmul")
    assert round(finding.predicted_speedup, 3) == 1.581
    assert finding.evidence.numbers["predicted_speedup_with_tf32"] == 1.9675
    trials = {t.knob.id: t for t in plan(report.findings, ["tf32", "bf16-autocast"]).trials}
    assert (
        round(trials["tf32"].predicted_speedup, 4) == 1.9675
        and trials["tf32"].priced_by == "replay"
    )
    assert round(trials["bf16-autocast"].predicted_speedup, 3) == 1.581


# the modules of test_a_knobs_forward_is_the_instances_own_... (torch.save pickles them by name)
from torch import nn as _nn  # noqa: E402


class _Net(_nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = _nn.Linear(4, 4)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.fc(x)


class _ForwardingWrapper(_nn.Module):
    def __init__(self, inner: _nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.inner(x)

    def __setattr__(self, name: str, value: object) -> None:
        if name == "forward":
            return setattr(self.inner, name, value)
        return super().__setattr__(name, value)


def test_a_trial_judged_again_does_not_say_its_reason_twice() -> None:
    """A trial is judged against the diagnosed run, then again against the controls before and
    after it: the second judging's "not enough steps" reason was appended to the first's."""
    from gpudoctor.tryfix.trial import _with_reason

    short = "the trial timed 85 steps over 0.50 s; a verdict needs 10 steps and 1 s of them on each side"
    once = _with_reason(record(reason=""), short)
    assert once.reason == short
    assert _with_reason(once, short).reason == short
    assert _with_reason(once, "", "dropout").reason == f"{short}; dropout"


def test_bf16_autocast_is_left_out_on_a_gpu_whose_tensor_cores_take_fp16_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A T4 (compute capability 7.5): bf16 autocast there runs its matmuls without tensor cores,
    and the fix, fp16 autocast with a GradScaler, changes the training loop. The knob changes
    nothing and says so, and the trial is then "not applied"."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    monkeypatch.setattr(torch.version, "hip", None)
    effects: list[str] = []
    knobs_mod.BY_ID["bf16-autocast"].apply(effects)
    said = (
        f"{knobs_mod.LEFT_AS_IS}this GPU's tensor cores take fp16, not bf16: fp16 autocast with "
        "a GradScaler in the training loop is the change to make"
    )
    assert effects == [said]


def test_the_loader_knob_is_handed_the_workers_the_finding_prescribed(tmp_path: Path) -> None:
    """The input-pipeline finding's evidence names the workers its price is for; the trial of the
    loader-workers knob gets them through the child's environment, and no other trial does."""
    from gpudoctor.core.finding import Evidence, Finding
    from gpudoctor.tryfix.session import prescribed_loader_workers

    class _Report:
        def __init__(self, findings):
            self.findings = findings

        def finding(self, fid):
            return next((f for f in self.findings if f.id == fid), None)

    finding = Finding(
        "input-pipeline", "t", "critical", 1.0, 2.0, "s", Evidence({"workers_prescribed": 10}), ()
    )
    assert prescribed_loader_workers(_Report([finding])) == 10
    assert prescribed_loader_workers(_Report([])) is None
    assert prescribed_loader_workers(None) is None
    trials = _trials(tmp_path, sandbox=False)
    trials.loader_workers = 10
    assert trials._child_env(["loader-workers"], None, False)["GPUDOCTOR_LOADER_WORKERS"] == "10"
    assert "GPUDOCTOR_LOADER_WORKERS" not in trials._child_env(["compile"], None, False)
