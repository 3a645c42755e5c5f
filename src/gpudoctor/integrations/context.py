"""``gpudoctor.integrations.profile``: a window over a hand-written loop, rank-aware (accelerate,
torch.distributed, torchrun) and counting optimizer steps, not micro-batches.

    with gpudoctor.integrations.profile(accelerator, skip=10, steps=5) as doc:
        for batch in loader:
            train_step(batch); doc.step()
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import TYPE_CHECKING, Any

from gpudoctor.capture.bundle import distributed_rank, global_rank
from gpudoctor.capture.rank_window import RankInfo, rank_info
from gpudoctor.integrations._capture import DEFAULT_OUT, RunCapture

if TYPE_CHECKING:
    from gpudoctor.report.model import Report


class Profile:
    """The context ``profile()`` returns: ``step()`` per iteration, ``report()`` afterwards."""

    def __init__(self, accelerator: Any = None, skip: int = 10, steps: int = 5, stack: bool = False,
                 out: str | os.PathLike[str] = DEFAULT_OUT, name: str = "profile",
                 quiet: bool = False) -> None:
        self.accelerator = accelerator
        self.rank = rank_of(accelerator)
        self.capture = RunCapture(skip=skip, steps=steps, stack=stack, out=out, name=name,
                                  rank=info_of(accelerator), quiet=quiet)

    @property
    def run_dir(self) -> os.PathLike[str]:
        return self.capture.run_dir

    def __enter__(self) -> Profile:  # noqa: PYI034 - not meant to be subclassed
        self.capture.start()
        return self

    def step(self) -> None:
        """Mark the end of one iteration. Under ``accelerator.accumulate(model)``, iterations that
        only accumulate gradients (``accelerator.sync_gradients`` False) are not steps: a step is
        one optimizer step."""
        if self.accelerator is not None and not getattr(self.accelerator, "sync_gradients", True):
            return
        self.capture.step()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            self.capture.fail(f"{type(exc).__name__}: {exc}")
        else:
            self.capture.finish()

    def report(self) -> Report:
        """The diagnosis of the recorded window (raises GpuDoctorError saying why when there is
        none)."""
        return self.capture.require_report()


def profile(accelerator: Any = None, skip: int = 10, steps: int = 5, stack: bool = False,
            out: str | os.PathLike[str] = DEFAULT_OUT, name: str = "profile",
            quiet: bool = False) -> Profile:
    """Profile ``steps`` optimizer steps after ``skip`` untouched ones. In a distributed job every
    rank records the same steps into ``RUN/rank<R>/`` and rank 0 writes the combined report.

        with gpudoctor.integrations.profile(accelerator, skip=10, steps=5) as doc:
            for batch in loader:
                train_step(batch); doc.step()

    The rank comes from ``accelerator.process_index`` (an ``accelerate.Accelerator``), else from
    torch.distributed, else from the ``RANK`` / ``WORLD_SIZE`` variables a launcher sets.
    """
    return Profile(accelerator, skip=skip, steps=steps, stack=stack, out=out, name=name,
                   quiet=quiet)


def info_of(accelerator: Any = None) -> RankInfo | None:
    """This process's place in a distributed job (None for a single process): from an
    ``accelerate.Accelerator`` when given, else torch.distributed or the launcher's variables."""
    if accelerator is not None and hasattr(accelerator, "process_index"):
        return rank_info(int(accelerator.process_index),
                         int(getattr(accelerator, "num_processes", 1)),
                         int(getattr(accelerator, "local_process_index",
                                     accelerator.process_index)))
    return rank_info()


def rank_of(accelerator: Any = None) -> int | None:
    """The global rank of this process in a distributed job, None for a single process."""
    if accelerator is not None and hasattr(accelerator, "process_index"):
        return distributed_rank(int(accelerator.process_index),
                                int(getattr(accelerator, "num_processes", 1)))
    return global_rank()
