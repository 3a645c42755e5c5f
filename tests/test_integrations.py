"""The framework hooks on real CPU runs: Lightning, the Hugging Face Trainer, the accelerate context.

Each run writes a bundle (trace.json.gz, env.json) whose recorded window holds exactly ``steps``
optimizer steps, with gradient accumulation folded into them. A framework that is not installed
skips its tests (CI installs lightning, transformers and accelerate with the dev extras).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from gpudoctor.errors import InputError


def _bundle(out: Path) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    """The single run directory under ``out``, its env.json and its trace's events."""
    (run_dir,) = out.iterdir()
    (env_file,) = run_dir.glob("env*.json")  # env.rank3.json in a distributed job
    (trace,) = run_dir.glob("trace*.json.gz")
    env = json.loads(env_file.read_text())
    with gzip.open(trace, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return run_dir, env, events


def _count(events: list[dict[str, Any]], prefix: str) -> int:
    """Complete events whose name starts with ``prefix`` (``name$``: exactly ``name``)."""
    exact = prefix.endswith("$")
    name = prefix.rstrip("$")
    return sum(
        1
        for e in events
        if e.get("ph") == "X"
        and (e.get("name") == name if exact else str(e.get("name", "")).startswith(name))
    )


# -- Lightning -------------------------------------------------------------------------------------


def _lightning_fit(
    tmp_path: Path, batches: int, accumulate: int = 1, fail_at: int | None = None
) -> Any:
    pl = pytest.importorskip("lightning.pytorch")
    from gpudoctor.integrations.lightning import GpuDoctorCallback

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)
            )

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            if fail_at is not None and batch_idx == fail_at:
                raise RuntimeError("boom")
            with torch.profiler.record_function("tiny_forward"):
                return self.net(batch).square().mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    loader = torch.utils.data.DataLoader(torch.randn(batches * 4, 16), batch_size=4)
    callback = GpuDoctorCallback(skip=3, steps=3, out=tmp_path / "runs", quiet=True)
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accumulate_grad_batches=accumulate,
    )
    trainer.fit(Tiny(), loader)
    return callback


@pytest.mark.e2e
def test_lightning_writes_a_bundle_of_three_steps(tmp_path: Path) -> None:
    callback = _lightning_fit(tmp_path, batches=20)
    run_dir, env, events = _bundle(tmp_path / "runs")
    assert run_dir == Path(callback.run_dir) and run_dir.name.startswith("lightning-")
    assert "-rank" not in run_dir.name  # one process: no rank in the name
    assert env["capture"]["steps_recorded"] == 3
    assert _count(events, "ProfilerStep#") == 3
    # Lightning steps the optimizer with a closure: each recorded step is one forward inside one step()
    assert _count(events, "Optimizer.step#AdamW.step") == 3
    assert _count(events, "tiny_forward") == 3


def test_lightning_counts_optimizer_steps_under_gradient_accumulation(tmp_path: Path) -> None:
    _lightning_fit(tmp_path, batches=40, accumulate=2)
    _, env, events = _bundle(tmp_path / "runs")
    assert env["capture"]["steps_recorded"] == 3
    assert _count(events, "Optimizer.step#AdamW.step") == 3
    assert _count(events, "tiny_forward") == 6  # two micro-batches per optimizer step


def test_lightning_failure_inside_the_window_keeps_what_was_captured(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        _lightning_fit(tmp_path, batches=20, fail_at=5)  # window: steps 4-7 (1 warm-up + 3)
    _, env, events = _bundle(tmp_path / "runs")
    assert "RuntimeError: boom" in env["capture"]["error"]
    assert _count(events, "tiny_forward") >= 1


# -- Hugging Face Trainer --------------------------------------------------------------------------


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int = 16, vocab: int = 128) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


@pytest.mark.e2e
@pytest.mark.parametrize("accumulate", [1, 2])
def test_hf_trainer_writes_a_bundle_of_three_steps(tmp_path: Path, accumulate: int) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")  # the Trainer needs it
    from gpudoctor.integrations.huggingface import GpuDoctorCallback

    config = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(config)  # random weights, nothing downloaded
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        max_steps=14,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        gradient_accumulation_steps=accumulate,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    callback = GpuDoctorCallback(skip=3, steps=3, out=tmp_path / "runs", quiet=True)
    transformers.Trainer(
        model=model, args=args, train_dataset=_Tokens(14 * 4 * accumulate), callbacks=[callback]
    ).train()
    run_dir, env, events = _bundle(tmp_path / "runs")
    assert run_dir.name.startswith("hf-trainer-") and "-rank" not in run_dir.name
    assert env["capture"]["steps_recorded"] == 3
    assert _count(events, "ProfilerStep#") == 3
    assert _count(events, "Optimizer.step#") == 3
    # GPT-2 looks up two embeddings (tokens, positions) per forward: accumulate forwards per step
    assert _count(events, "aten::embedding$") == 2 * accumulate * 3


# -- the accelerate / plain-loop context -----------------------------------------------------------


def test_accelerate_context_counts_optimizer_steps(tmp_path: Path) -> None:
    accelerate = pytest.importorskip("accelerate")
    import gpudoctor.integrations as gi

    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(torch.randn(40 * 4, 16), batch_size=4)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    with gi.profile(accelerator, skip=3, steps=3, out=tmp_path / "runs", quiet=True) as doc:
        for batch in loader:
            with accelerator.accumulate(model):
                with torch.profiler.record_function("tiny_forward"):
                    loss = model(batch).square().mean()
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
            doc.step()
    run_dir, env, events = _bundle(tmp_path / "runs")
    assert Path(doc.run_dir) == run_dir
    assert env["capture"]["steps_recorded"] == 3
    assert _count(events, "Optimizer.step#SGD.step") == 3
    assert _count(events, "tiny_forward") == 6


def test_plain_context_and_rank_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpudoctor.integrations as gi

    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.delenv(
        "MASTER_ADDR", raising=False
    )  # no store to reach: this rank records alone, and says so
    model = torch.nn.Linear(8, 8)
    with gi.profile(skip=2, steps=2, out=tmp_path / "runs", quiet=True) as doc:
        # 9 steps: 1 timed before the window, 2 after it (past the one that settles): 3, no note
        for _ in range(9):
            model(torch.randn(4, 8)).sum().backward()
            doc.step()
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("profile-rank3-") and Path(doc.run_dir) == run_dir / "rank3"
    assert sorted(p.name for p in (run_dir / "rank3").iterdir()) == [
        "env.json",
        "report.html",
        "report.json",
        "trace.json.gz",
    ]
    env = json.loads((run_dir / "rank3" / "env.json").read_text())
    assert env["capture"]["steps_recorded"] == 2
    assert (env["rank"], env["world_size"], env["local_rank"]) == (3, 4, 1)
    assert env["window"] == {"first_step": 3, "steps": 2} and env["window_agreed"] is False
    assert env["capture"]["notes"] == [
        (
            "rank 3 could not agree its window with the other ranks (no process group, and no MASTER_ADDR / "
            "MASTER_PORT: no store to agree through): it recorded from its own step 3, which may not be the other ranks' steps"
        )
    ]


def test_rank_of_an_accelerator_and_of_a_single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpudoctor.integrations.context import rank_of

    class Acc:
        process_index, num_processes = 2, 4

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert rank_of(Acc()) == 2
    assert rank_of(None) is None
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert rank_of(None) is None  # torchrun with one process: no rank in the names
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert rank_of(None) == 0


def test_the_framework_hooks_join_the_window_agreement_with_their_own_ranks(tmp_path: Path) -> None:
    """Lightning's trainer and the HF Trainer's args name the rank: each hook's capture gets the
    same RankSync as `gpudoctor run`, so it agrees the window and writes RUN/rank<R>/ alike."""
    import socket
    from types import SimpleNamespace

    from gpudoctor.capture.rank_window import RankInfo

    pytest.importorskip("lightning.pytorch")
    pytest.importorskip("transformers")
    from gpudoctor.integrations.huggingface import GpuDoctorCallback as HfCallback
    from gpudoctor.integrations.lightning import GpuDoctorCallback as PlCallback

    host = socket.gethostname()
    pl = PlCallback(out=tmp_path / "pl", quiet=True)
    pl.on_train_start(
        SimpleNamespace(global_rank=3, world_size=4, local_rank=1, global_step=0), None
    )
    hf = HfCallback(out=tmp_path / "hf", quiet=True)
    hf.on_train_begin(
        SimpleNamespace(process_index=1, world_size=2, local_process_index=1), None, None
    )
    single = HfCallback(out=tmp_path / "one", quiet=True)
    single.on_train_begin(
        SimpleNamespace(process_index=0, world_size=1, local_process_index=0), None, None
    )
    try:
        assert pl.capture.sync.info == RankInfo(3, 4, 1, host)
        assert pl.capture.session.sync is pl.capture.sync
        assert Path(pl.run_dir).name == "rank3" and Path(pl.run_dir).parent.name.startswith(
            "lightning-rank3-"
        )
        assert hf.capture.sync.info == RankInfo(1, 2, 1, host)
        assert single.capture.sync is None and Path(single.run_dir).name.startswith("hf-trainer-")
    finally:
        for callback in (pl, hf, single):
            callback.capture.finish()  # detaches, and unregisters its exit hook


def test_a_window_that_never_closed_says_why(tmp_path: Path) -> None:
    import gpudoctor.integrations as gi
    from gpudoctor.errors import GpuDoctorError

    with gi.profile(skip=10, steps=5, out=tmp_path / "runs", quiet=True) as doc:
        for _ in range(4):
            doc.step()
    with pytest.raises(GpuDoctorError, match="before the window closed"):
        doc.report()


def test_a_failed_diagnosis_does_not_end_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpudoctor.integrations as gi
    import gpudoctor.live

    def broken(*_: Any, **__: Any) -> None:
        raise ValueError("bad trace")

    monkeypatch.setattr(gpudoctor.live, "diagnose_capture", broken)
    with gi.profile(skip=1, steps=1, out=tmp_path / "runs", quiet=True) as doc:
        for _ in range(4):
            doc.step()
    assert (Path(doc.run_dir) / "trace.json.gz").is_file()  # one process: no rank in the names
    assert "diagnosing it failed (ValueError: bad trace)" in doc.capture.note


# -- imports ---------------------------------------------------------------------------------------


def test_import_gpudoctor_loads_no_framework() -> None:
    code = (
        "import sys, gpudoctor, gpudoctor.integrations; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('lightning', 'pytorch_lightning', 'transformers', 'accelerate')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "module, blocked, package",
    [
        (
            "lightning",
            ("lightning", "lightning.pytorch", "pytorch_lightning"),
            "pip install lightning",
        ),
        ("huggingface", ("transformers",), "pip install transformers"),
    ],
)
def test_a_missing_framework_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, module: str, blocked: tuple[str, ...], package: str
) -> None:
    for name in blocked:
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    monkeypatch.delitem(sys.modules, f"gpudoctor.integrations.{module}", raising=False)
    with pytest.raises(InputError, match=package) as info:
        __import__(f"gpudoctor.integrations.{module}")
    assert "\n" not in str(info.value)
