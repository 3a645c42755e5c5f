"""A Lightning callback that profiles a window of optimizer steps and diagnoses it.

    from gpudoctor.integrations.lightning import GpuDoctorCallback
    trainer = lightning.Trainer(callbacks=[GpuDoctorCallback(skip=10, steps=5)])
    trainer.fit(model, loader)  # -> gpudoctor-runs/lightning-<stamp>/report.html

Works with ``lightning`` (``lightning.pytorch``) or the older ``pytorch_lightning`` package. A step
is one optimizer step: batches that only accumulate gradients (``accumulate_grad_batches``) are
part of the next step. In a distributed job every rank records the same steps (agreed through
the job's store) into ``gpudoctor-runs/lightning-<stamp>/rank<R>/``, and rank 0 writes the
combined report there.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gpudoctor.capture.rank_window import rank_info
from gpudoctor.integrations._capture import DEFAULT_OUT, RunCapture, missing

if TYPE_CHECKING:
    from gpudoctor.report.model import Report

try:
    from lightning.pytorch import Callback
except ImportError:
    try:
        from pytorch_lightning import Callback
    except ImportError:
        raise missing("Lightning", "lightning") from None


class GpuDoctorCallback(Callback):
    """Profiles optimizer steps ``skip + 2 .. skip + 1 + steps`` and writes the run bundle.

        trainer = lightning.Trainer(callbacks=[GpuDoctorCallback(skip=10, steps=5)])
        trainer.fit(model, loader)
        print(trainer.callbacks[0].report().findings[0].title)  # or open report.html
    """

    def __init__(self, skip: int = 10, steps: int = 5, out: str | os.PathLike[str] = DEFAULT_OUT,
                 stack: bool = False, name: str = "lightning", quiet: bool = False) -> None:
        super().__init__()
        self.skip, self.steps, self.out, self.stack, self.name, self.quiet = skip, steps, out, stack, name, quiet
        self.capture: RunCapture | None = None
        self._global_step = 0

    @property
    def run_dir(self) -> os.PathLike[str] | None:
        return self.capture.run_dir if self.capture is not None else None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        rank = rank_info(int(trainer.global_rank), int(getattr(trainer, "world_size", 1)),
                         int(getattr(trainer, "local_rank", trainer.global_rank)))
        self.capture = RunCapture(skip=self.skip, steps=self.steps, stack=self.stack, out=self.out,
                                  name=self.name, rank=rank, quiet=self.quiet)
        self._global_step = trainer.global_step
        self.capture.start()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # global_step counts optimizer steps: unchanged on a batch that only accumulated gradients
        if self.capture is None or trainer.global_step == self._global_step:
            return
        self._global_step = trainer.global_step
        self.capture.step()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.capture is not None:
            self.capture.finish()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self.capture is not None:
            self.capture.fail(f"{type(exception).__name__}: {exception}")

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.capture is not None:
            self.capture.finish()

    def report(self) -> Report:
        """The diagnosis of the recorded window (raises GpuDoctorError saying why when there is
        none)."""
        if self.capture is None:
            from gpudoctor.errors import GpuDoctorError

            raise GpuDoctorError(
                "the callback has not run: pass it to Trainer(callbacks=[...]) and call fit()")
        return self.capture.require_report()
