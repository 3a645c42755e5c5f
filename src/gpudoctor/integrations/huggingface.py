"""A Hugging Face ``TrainerCallback`` that profiles a window of optimizer steps and diagnoses it.

    from gpudoctor.integrations.huggingface import GpuDoctorCallback
    trainer = transformers.Trainer(model, args, train_dataset=ds, callbacks=[GpuDoctorCallback()])
    trainer.train()  # -> gpudoctor-runs/hf-trainer-<stamp>/report.html

``on_step_end`` is one optimizer step (the Trainer already folds gradient accumulation into it).
In a distributed job every rank records the same steps (agreed through the job's store) into
``gpudoctor-runs/hf-trainer-<stamp>/rank<R>/`` (R: ``args.process_index``), and rank 0 writes
the combined report there. The Trainer has no exception hook: a run
that raises inside the window writes what was captured when the interpreter exits.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gpudoctor.capture.rank_window import rank_info
from gpudoctor.integrations._capture import DEFAULT_OUT, RunCapture, missing

if TYPE_CHECKING:
    from gpudoctor.report.model import Report

try:
    from transformers import TrainerCallback
except ImportError:
    raise missing("Hugging Face transformers", "transformers") from None


class GpuDoctorCallback(TrainerCallback):
    """Profiles optimizer steps ``skip + 2 .. skip + 1 + steps`` and writes the run bundle.

        callback = GpuDoctorCallback(skip=10, steps=5)
        transformers.Trainer(model, args, train_dataset=ds, callbacks=[callback]).train()
        print(callback.report().findings[0].title)  # or open callback.run_dir / "report.html"
    """

    def __init__(self, skip: int = 10, steps: int = 5, out: str | os.PathLike[str] = DEFAULT_OUT,
                 stack: bool = False, name: str = "hf-trainer", quiet: bool = False) -> None:
        self.skip, self.steps, self.out, self.stack, self.name, self.quiet = skip, steps, out, stack, name, quiet
        self.capture: RunCapture | None = None

    @property
    def run_dir(self) -> os.PathLike[str] | None:
        return self.capture.run_dir if self.capture is not None else None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        rank = rank_info(int(getattr(args, "process_index", 0)),
                         int(getattr(args, "world_size", 1)),
                         int(getattr(args, "local_process_index",
                                     getattr(args, "process_index", 0))))
        self.capture = RunCapture(skip=self.skip, steps=self.steps, stack=self.stack, out=self.out,
                                  name=self.name, rank=rank, quiet=self.quiet)
        self.capture.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.capture is not None:
            self.capture.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.capture is not None:
            self.capture.finish()

    def report(self) -> Report:
        """The diagnosis of the recorded window (raises GpuDoctorError saying why when there is
        none)."""
        if self.capture is None:
            from gpudoctor.errors import GpuDoctorError

            raise GpuDoctorError(
                "the callback has not run: pass it to Trainer(callbacks=[...]) and call train()")
        return self.capture.require_report()
