"""Step detection in programs that say nothing about their loop (capture/detect.py, capture/hooks.py).

The detector's rules on plain events, then real loops in this process: an inference loop, gradient
accumulation, two optimizers, a loss module beside the model, a training loop with no optimizer,
``generate``, forwards on other threads, a compiled model, an LBFGS closure.
"""

from __future__ import annotations

import os
import sys
import threading
import types
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from gpudoctor.capture.detect import Source, StepDetector
from gpudoctor.capture.session import CaptureConfig, CaptureSession
from gpudoctor.core.clock import SYSTEM_CLOCK, Clock, ManualClock

# -- the detector, on plain events ----------------------------------------------------------------


def test_an_optimizer_replaces_forwards_before_the_window_and_is_locked_after() -> None:
    d = StepDetector(patience=2)
    assert d.outer_forward(1, 100, training_like=False)  # inference-like: a boundary at once
    assert d.source is Source.FORWARD
    epoch = d.epoch
    assert d.optimizer_step(7) and d.source is Source.OPTIMIZER and d.epoch == epoch + 1
    assert not d.outer_forward(1, 100, training_like=False)
    d.lock()
    assert not d.explicit() and d.source is Source.OPTIMIZER


def test_the_first_optimizer_leads_and_others_are_not_steps() -> None:
    d = StepDetector()
    assert d.optimizer_step(1)
    assert not d.optimizer_step(2)
    assert d.optimizer_step(1)


def test_training_forwards_with_no_backward_count_after_long_patience() -> None:
    d = StepDetector(patience=1)
    assert [d.outer_forward(1, 10, training_like=True) for _ in range(6)] == [False] * 4 + [
        True,
        True,
    ]


def test_backward_calls_are_steps_when_no_optimizer_steps() -> None:
    d = StepDetector(patience=2)
    marks = []
    for _ in range(4):
        marks.append(d.outer_forward(1, 10, training_like=True))
        marks.append(d.backward_call())
    assert (
        marks == [False, False, False, False, False, True, False, True]
        and d.source is Source.BACKWARD
    )


def test_an_unrolled_cell_waits_for_its_optimizer() -> None:
    # an RNN cell called 64 times before each backward: 64 forwards are not 64 steps
    d = StepDetector(patience=32)
    forwards = [d.outer_forward(1, 10, training_like=True) for _ in range(64)]
    assert not any(forwards) and not d.backward_call() and d.optimizer_step(9)
    assert not any(d.outer_forward(1, 10, training_like=True) for _ in range(64))


def test_evaluation_forwards_before_training_give_way_to_the_optimizer() -> None:
    """Lightning's sanity check: 2 eval forwards, then training: the training forwards are not
    steps, the optimizer's are, and the count restarts with them (the epoch moves)."""
    d = StepDetector(patience=2)
    assert d.outer_forward(1, 10, training_like=False) and d.outer_forward(
        1, 10, training_like=False
    )
    epoch = d.epoch
    assert (
        not d.outer_forward(1, 10, training_like=True) and d.source is None and d.epoch == epoch + 1
    )
    assert not d.backward_call() and d.optimizer_step(5) and d.source is Source.OPTIMIZER
    assert not d.outer_forward(
        1, 10, training_like=False
    )  # a later validation forward is not a step
    # an inference loop is unaffected, and training forwards after the window opened change nothing
    d2 = StepDetector(patience=2)
    assert d2.outer_forward(1, 10, training_like=False)
    d2.lock()
    assert d2.outer_forward(1, 10, training_like=True) and d2.source is Source.FORWARD


def test_the_root_is_the_module_with_the_most_parameters() -> None:
    d = StepDetector()
    assert d.outer_forward(1, 0, training_like=False, name="CrossEntropyLoss")
    assert d.outer_forward(2, 1000, training_like=False, name="GPT") and d.root_name == "GPT"
    assert not d.outer_forward(1, 0, training_like=False)


def test_graph_replays_count_only_without_a_module() -> None:
    d = StepDetector()
    assert d.graph_replay() and d.source is Source.GRAPH
    d2 = StepDetector()
    d2.outer_forward(1, 10, training_like=False)
    assert not d2.graph_replay()


# -- real loops in this process -------------------------------------------------------------------


def session(
    tmp_path: Path,
    skip: int = 3,
    steps: int = 2,
    calibration: int = 2,
    clock: Clock = SYSTEM_CLOCK,
    **kw: object,
) -> CaptureSession:
    s = CaptureSession(
        CaptureConfig(
            steps=steps, skip=skip, calibration_steps=calibration, nvml_interval_s=0, **kw
        ),
        tmp_path,
        clock=clock,
    )  # type: ignore[arg-type]
    s.start()
    return s


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def global_hooks() -> int:
    from gpudoctor.capture import hooks

    return len(hooks._CURRENT)


def test_an_inference_loop_steps_at_each_forward_of_the_model(tmp_path: Path) -> None:
    model, loss_fn = mlp().eval(), nn.MSELoss()
    s = session(tmp_path)
    with torch.no_grad():
        for i in range(20):  # noqa: B007 - i is the iteration the session stopped at
            out = model(torch.randn(8, 16))
            loss_fn(out, torch.zeros(8, 4))
            if s.done:
                break
    s.close()
    r = s.result
    assert r.step_source == "module-forward" and r.root_module == "Sequential"
    # skip 3, 1 warm-up, 2 recorded, 1 left to settle after the export, then 2 timed (3 boundaries)
    assert (r.steps_seen, r.steps_recorded, i) == (3 + 1 + 2 + 1 + 3, 2, 9)
    assert len(r.unprofiled_after_ms) == 2 and r.trace_path is not None
    assert global_hooks() == 0


def test_gradient_accumulation_makes_one_step_per_optimizer_step(tmp_path: Path) -> None:
    model = mlp()
    opt = torch.optim.AdamW(model.parameters())
    s = session(tmp_path)
    forwards = 0
    while not s.done:
        for _ in range(4):
            model(torch.randn(8, 16)).sum().backward()
            forwards += 1
        opt.step()
        opt.zero_grad()
    s.close()
    assert s.result.step_source == "optimizer-step"
    assert (
        s.result.steps_seen == 3 + 1 + 2 + 1 + 3 and forwards == 4 * s.result.steps_seen
    )  # + 1 to settle


def test_two_optimizers_make_one_step(tmp_path: Path) -> None:
    gen, disc = mlp(), nn.Sequential(nn.Linear(4, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters()), torch.optim.Adam(disc.parameters())
    s = session(tmp_path)
    iterations = 0
    while not s.done:
        fake = gen(torch.randn(8, 16))
        disc(fake.detach()).mean().backward()
        opt_d.step()
        disc(fake).mean().backward()
        opt_g.step()
        iterations += 1
    s.close()
    assert s.result.step_source == "optimizer-step" and s.result.steps_seen == iterations == 10
    # the generator once, the discriminator twice: three compiled calls a step under the compile knob
    assert s.result.outermost_calls_per_step == 3


def test_blocks_called_in_turn_from_a_list_are_counted_each(tmp_path: Path) -> None:
    blocks = nn.ModuleList([nn.Linear(16, 16) for _ in range(4)])
    opt = torch.optim.SGD(blocks.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()  # no parameters: not a call the knob compiles
    s = session(tmp_path)
    while not s.done:
        h = torch.randn(8, 16)
        for block in blocks:
            h = block(h)
        loss_fn(h, torch.zeros(8, 16)).backward()
        opt.step()
        opt.zero_grad()
    s.close()
    assert s.result.step_source == "optimizer-step" and s.result.outermost_calls_per_step == 4


def test_calls_without_grad_are_not_counted(tmp_path: Path) -> None:
    model = mlp().eval()
    s = session(tmp_path)
    with torch.no_grad():
        while not s.done:
            model(torch.randn(8, 16))
    s.close()
    assert s.result.step_source == "module-forward" and s.result.outermost_calls_per_step is None


def test_a_training_loop_with_no_optimizer_steps_at_each_backward(tmp_path: Path) -> None:
    model = mlp()
    s = session(tmp_path, patience=5)
    n = 0
    while not s.done and n < 100:
        model(torch.randn(8, 16)).sum().backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
        n += 1
    s.close()
    assert (
        s.result.step_source == "backward-call" and n == 5 + 10
    )  # patience, then 10 steps (1 to settle)


def test_forwards_on_other_threads_are_not_steps(tmp_path: Path) -> None:
    model = mlp().eval()
    s = session(tmp_path)

    def elsewhere() -> None:
        with torch.no_grad():
            for _ in range(50):
                model(torch.randn(2, 16))

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join()
    assert s.result.steps_seen == 0
    s.close()


def test_an_exception_inside_a_forward_leaves_the_depth_right(tmp_path: Path) -> None:
    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("boom")

    model, boom = mlp().eval(), nn.Sequential(nn.Linear(16, 16), Boom())
    s = session(tmp_path, skip=50)
    with pytest.raises(ValueError):
        boom(torch.randn(2, 16))
    assert s._hooks is not None and s._hooks.depth == 0
    with torch.no_grad():
        model(torch.randn(2, 16))
        model(torch.randn(2, 16))
    assert s.result.steps_seen == 2
    s.close()


def test_a_closure_runs_inside_one_optimizer_step(tmp_path: Path) -> None:
    model = mlp()
    opt = torch.optim.LBFGS(model.parameters(), max_iter=3)
    x = torch.randn(8, 16)
    s = session(tmp_path)
    n = 0
    while not s.done:

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            return loss

        opt.step(closure)
        n += 1
    s.close()
    assert s.result.step_source == "optimizer-step" and n == s.result.steps_seen == 10


def test_a_compiled_model_keeps_its_graphs(tmp_path: Path) -> None:
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = torch.compile(mlp().eval(), backend="eager")
    s = session(tmp_path)
    with warnings.catch_warnings(record=True) as seen, torch.no_grad():
        for _ in range(30):
            model(torch.randn(8, 16))
            if s.done:
                break
    s.close()
    assert s.result.step_source == "module-forward" and s.result.root_module == "OptimizedModule"
    assert counters["stats"]["unique_graphs"] == 1  # no recompilation when the hooks went away
    assert not [w for w in seen if "global hooks" in str(w.message)]


def test_generate_calls_are_steps_and_their_forwards_are_tokens(
    tmp_path: Path, monkeypatch
) -> None:
    class GenerationMixin:
        def generate(self, x: torch.Tensor, max_new_tokens: int = 6) -> torch.Tensor:
            for _ in range(max_new_tokens):
                x = self(x)
            return x

    class TinyLM(nn.Module, GenerationMixin):
        def __init__(self) -> None:
            super().__init__()
            self.body = mlp()
            self.head = nn.Linear(4, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.body(x))

    utils = types.ModuleType("transformers.generation.utils")
    utils.GenerationMixin = GenerationMixin  # type: ignore[attr-defined]
    model = TinyLM().eval()
    # no transformers when the session starts (a real one imported by an earlier test would be the
    # one wrapped at start, and this module's generate() never would)
    monkeypatch.delitem(sys.modules, "transformers.generation.utils", raising=False)
    s = session(tmp_path)
    # imported after the session started, as a program does: wrapped inside the first call
    monkeypatch.setitem(sys.modules, "transformers.generation.utils", utils)
    calls = 0
    with torch.no_grad():
        while not s.done:
            model.generate(torch.randn(1, 16))
            calls += 1
    s.close()
    r = s.result
    # the first call began before generate() was wrapped, so it is not a step
    assert r.step_source == "generate-call" and calls == r.steps_seen + 1
    assert r.generate["forwards_per_call"] == 6 and r.generate["calls_timed"] >= 2
    assert r.generate["decode_ms_per_token"] > 0
    assert GenerationMixin.__dict__["generate"].__name__ == "generate" and not hasattr(
        GenerationMixin.__dict__["generate"], "__wrapped__"
    )


class _SlowSamples(torch.utils.data.Dataset):
    """4 ms a sample: two workers cannot keep ahead of the loop."""

    def __len__(self) -> int:
        return 400

    def __getitem__(self, i: int) -> torch.Tensor:
        import time

        time.sleep(0.004)
        return torch.randn(16)


def test_steps_served_from_a_dataloader_backlog_are_not_timed(tmp_path: Path) -> None:
    loader = torch.utils.data.DataLoader(
        _SlowSamples(), batch_size=2, num_workers=2, prefetch_factor=2
    )
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    s = session(tmp_path, skip=8, steps=2, calibration=3)
    yielded = 0
    for x in loader:
        model(x).sum().backward()
        opt.step()
        yielded += 1
        if s.done:
            break
    s.close()
    r = s.result
    # 2 workers x prefetch 2 = 4 batches of backlog at the start, and again after the window; then
    # two rounds of the queue (8 steps, more than the 3 asked) timed: the loader's bursts
    assert s.loader.depth == 4
    assert r.steps_seen == 8 + 1 + 2 + 4 + 1 + 9 and yielded == r.steps_seen  # + 1 to settle
    assert len(r.unprofiled_before_ms) == 3 and len(r.unprofiled_after_ms) == 8


def test_the_window_waits_until_the_dataloader_backlog_is_served(tmp_path: Path) -> None:
    """--skip 2 against a queue of 4 batches: the window opens at step 5, the first step whose
    batch the workers had to make while the loop ran (not step 2, inside the backlog)."""

    loader = torch.utils.data.DataLoader(
        _SlowSamples(), batch_size=2, num_workers=2, prefetch_factor=2
    )
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    s = session(tmp_path, skip=2, steps=2, calibration=3)
    for x in loader:
        model(x).sum().backward()
        opt.step()
        if s.done:
            break
    s.close()
    r = s.result
    assert s.loader.depth == 4
    # 5 steps before the window (2 skipped + 3 more in the backlog), 1 warm-up, 2 recorded, the
    # 4 refilled after the window, then two rounds of the queue timed (9 boundaries)
    assert r.steps_seen == 5 + 1 + 2 + 4 + 1 + 9
    assert r.steps_recorded == 2


def test_session_asks_kineto_to_detach_cupti_after_the_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUPTI left attached slows every launch after the window (pytorch/pytorch#144455); a value
    the user or torch set stays."""
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    s = CaptureSession(CaptureConfig(steps=1, skip=0, nvml_interval_s=0), tmp_path)
    s.start(hook_optimizers=False)
    s.close()
    assert os.environ["TEARDOWN_CUPTI"] == "1"
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    s = CaptureSession(CaptureConfig(steps=1, skip=0, nvml_interval_s=0), tmp_path)
    s.start(hook_optimizers=False)
    s.close()
    assert os.environ["TEARDOWN_CUPTI"] == "0"


def test_only_the_first_loader_iterator_serves_a_start_up_backlog(tmp_path: Path) -> None:
    """A later epoch's iterator counts its batches from 0 again but has no queue filled while the
    program set up: read as one, an epoch shorter than the queue (accelerate's loop, 8 workers x 2)
    left no step timed."""
    s = CaptureSession(CaptureConfig(steps=1, skip=0, nvml_interval_s=0), tmp_path)

    class It:
        _num_workers, _prefetch_factor = 8, 2

        def __init__(self, yielded: int) -> None:
            self._num_yielded = yielded

    first = It(3)
    s.batch(first)
    assert s.loader.depth == 16 and s.loader.backlog
    first._num_yielded = 16
    s.batch(first)
    assert not s.loader.backlog
    s.batch(It(0))  # the next epoch
    assert not s.loader.backlog
    fresh = CaptureSession(CaptureConfig(steps=1, skip=0, nvml_interval_s=0), tmp_path)
    fresh.batch(It(2))
    fresh.batch(It(0))  # a second iterator before the first served its queue: the backlog is over
    assert not fresh.loader.backlog


def test_a_persistent_loaders_next_epoch_serves_no_start_up_backlog(tmp_path: Path) -> None:
    """With persistent workers the DataLoader hands out the same iterator every epoch, its count reset
    to 0: an epoch of 8 batches against a queue of 16 read as backlog at every step, and a Lightning
    trial timed none (H100, 2026-11-26)."""
    s = CaptureSession(CaptureConfig(steps=1, skip=0, nvml_interval_s=0), tmp_path)

    class It:
        _num_workers, _prefetch_factor, _num_yielded = 8, 2, 0

    it = It()
    for yielded in range(8):  # the first epoch: all of it served from the queue filled at start-up
        it._num_yielded = yielded
        s.batch(it)
        assert s.loader.backlog
    it._num_yielded = 0  # the same object, reset for the next epoch
    s.batch(it)
    assert not s.loader.backlog
    it._num_yielded = 1
    s.batch(it)
    assert not s.loader.backlog


def test_a_loader_knob_sets_workers_once_per_dataset() -> None:
    """accelerate's prepare builds a new DataLoader from the old one's settings: the knob must not
    double the workers it set (8 -> 16 on an H100 host of 16 CPUs, 2026-11-26)."""
    from torch.utils.data import DataLoader, TensorDataset

    from gpudoctor.core.loader import usable_cpus
    from gpudoctor.tryfix.knobs import apply_knobs

    original = DataLoader.__init__
    try:
        effects = apply_knobs(["loader-workers"])
        data = TensorDataset(torch.zeros(8, 2))
        first = DataLoader(data, batch_size=2)
        again = DataLoader(data, batch_size=2, num_workers=first.num_workers)
        assert again.num_workers == first.num_workers == min(8, usable_cpus() or 1)
        assert sum(e.startswith("DataLoader: num_workers") for e in effects) == 1
    finally:
        DataLoader.__init__ = original  # type: ignore[method-assign]


def test_steps_that_compiled_are_not_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step in which torch.compile compiled (dynamo's compile-time records grew) is cut from the
    unprofiled samples: a recompile of 1 s among 13 ms steps is not a step as the program runs."""
    records: dict[str, list[float]] = {}
    # dynamo itself imported first: torch.optim imports it on first use, and an import under the
    # stand-in utils below fails (in a worker where no earlier test had imported it)
    import torch._dynamo

    monkeypatch.setitem(
        sys.modules, "torch._dynamo.utils", types.SimpleNamespace(compilation_time_metrics=records)
    )
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    s = session(tmp_path, skip=8, steps=2, calibration=4)
    step = 0
    while not s.done and step < 40:
        step += 1
        if step in (6, 16):  # a compile inside step 6 (before the window) and step 16 (after it)
            records.setdefault("_compile.compile_inner", []).append(1.0)
        model(torch.randn(4, 16)).sum().backward()
        opt.step()
    s.close()
    r = s.result
    # before: steps 1-8, the interval ending at step 6 cut (4 of them kept without it)
    assert len(r.unprofiled_before_ms) == 3
    # after (calibration 4): the step compiling is cut, one more step timed to make up for it
    assert len(r.unprofiled_after_ms) == 4 and r.steps_seen == 18


def test_the_loader_knob_prescribes_for_the_cpus_the_program_may_use(monkeypatch) -> None:
    """A container or ``taskset`` lends fewer CPUs than the machine has: the knob sets the workers
    the input-pipeline finding priced, from the CPUs the process may run on."""
    from torch.utils.data import DataLoader, TensorDataset

    from gpudoctor.tryfix import knobs

    lent = max(1, (os.cpu_count() or 2) - 1)  # fewer than the machine's, none it does not have
    monkeypatch.setattr(knobs, "usable_cpus", lambda: lent)
    original = DataLoader.__init__
    try:
        knobs.apply_knobs(["loader-workers"])
        assert DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=2).num_workers == min(
            8, lent
        )
    finally:
        DataLoader.__init__ = original


def test_an_evaluation_before_training_does_not_hold_the_window(tmp_path: Path) -> None:
    """nanoGPT's estimate_loss at iteration 0: many no-grad forwards of the model in eval mode
    before the first optimizer step. The window waits for the training steps."""
    model = mlp()
    opt = torch.optim.AdamW(model.parameters())
    s = session(tmp_path, clock=ManualClock())  # the wait's time bound never ends on its own
    model.eval()
    with torch.no_grad():
        for _ in range(40):
            model(torch.randn(8, 16))
    assert not s.result.trace_path and s.result.step_source == "module-forward"
    model.train()
    steps = 0
    while not s.done and steps < 100:
        model(torch.randn(8, 16)).sum().backward()
        opt.step()
        opt.zero_grad()
        steps += 1
    s.close()
    r = s.result
    assert r.step_source == "optimizer-step" and r.trace_path is not None
    assert steps == 3 + 1 + 2 + 1 + 3
    assert any("waited past an evaluation before training (38 forwards" in n for n in r.notes)


def _evaluate_until_done(model: nn.Module, s: CaptureSession) -> tuple[CaptureSession, int]:
    """No-grad forwards until the session is done (at most 200); the session closed, and the
    forwards run."""
    n = 0
    with torch.no_grad():
        while not s.done and n < 200:
            model(torch.randn(8, 16))
            n += 1
    s.close()
    return s, n


def test_an_evaluation_with_an_optimizer_that_never_steps_opens_after_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpudoctor.capture import session as session_module

    monkeypatch.setattr(session_module, "EVAL_WAIT_STEPS", 25)
    model = mlp().eval()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # built, never stepped
    s, n = _evaluate_until_done(model, session(tmp_path, clock=ManualClock()))
    r = s.result
    assert r.step_source == "module-forward" and r.trace_path is not None
    assert n == 3 + 25 + 1 + 2 + 1 + 3
    assert any("evaluated for 25 forwards with an optimizer built" in x for x in r.notes)
    del opt


def test_an_optimizer_of_another_model_does_not_make_inference_wait(tmp_path: Path) -> None:
    model, other = mlp().eval(), mlp()
    opt = torch.optim.SGD(other.parameters(), lr=0.1)
    s, n = _evaluate_until_done(model, session(tmp_path))
    assert s.result.step_source == "module-forward" and n == 3 + 1 + 2 + 1 + 3
    assert not any("evaluat" in x for x in s.result.notes)
    del opt


def test_the_wait_for_training_ends_at_its_time_bound(tmp_path: Path) -> None:
    """An evaluation that outlasts EVAL_WAIT_S (on the session's clock) is recorded as it is."""
    from gpudoctor.capture.session import EVAL_WAIT_S

    model = mlp().eval()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # built, never stepped
    clock = ManualClock()
    s = session(tmp_path, clock=clock)
    n = 0
    with torch.no_grad():
        while not s.done and n < 200:
            model(torch.randn(8, 16))
            n += 1
            if n == 10:  # waiting since the third forward: the eleventh opens the window
                clock.advance(EVAL_WAIT_S)
    s.close()
    assert s.result.step_source == "module-forward" and s.result.trace_path is not None
    assert n == 11 + 1 + 2 + 1 + 3
    assert any("evaluated for 8 forwards with an optimizer built" in x for x in s.result.notes)
    del opt
