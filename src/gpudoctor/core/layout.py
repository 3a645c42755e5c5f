"""How a training step is split over the GPUs (``Layout``) and what the pipeline leaves idle
(``bubble_fraction``): the vocabulary that the planner (plan/train.py), the memory estimator
(memory/options.py) and ``explain`` (explain/schedule_bubble.py) share."""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.errors import InputError

SCHEDULES = ("1f1b", "interleaved", "zb-h1")
CHECKPOINTING = ("none", "selective", "full")


def bubble_fraction(pp: int, microbatches: int, schedule: str = "1f1b",
                    virtual_stages: int = 2) -> float:
    """Idle time over ideal compute time (Narayanan et al. 2021, sec. 2.2): 1F1B (p-1)/m;
    interleaved (p-1)/(v m); ZB-H1 (Qi et al. 2023) about a third of 1F1B, (p-1)/(3m)."""
    if schedule not in SCHEDULES:
        raise InputError(f"schedule {schedule!r} is not one of: {', '.join(SCHEDULES)}")
    if pp <= 1:
        return 0.0
    p, m = pp, microbatches
    if schedule == "interleaved":
        return (p - 1) / (virtual_stages * m)
    if schedule == "zb-h1":
        return (p - 1) / (3 * m)
    return (p - 1) / m


@dataclass(frozen=True)
class Layout:
    """One way to split the step over the GPUs."""

    dp: int
    tp: int
    pp: int
    cp: int = 1
    zero: int = 0  # 0 DDP, 1, 2, 3 (= FSDP)
    microbatch: int = 1  # sequences per micro-batch per DP rank
    checkpointing: str = "none"  # one of CHECKPOINTING
    schedule: str = "1f1b"  # one of SCHEDULES
    virtual_stages: int = 2  # interleaved only
    sp: bool = True  # sequence parallelism on the TP group (Korthikanti et al. 2022); no effect at tp = 1

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "cp", "microbatch", "virtual_stages"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"Layout.{name} must be a whole number >= 1, got {v!r}")
        if self.zero not in (0, 1, 2, 3):
            raise InputError(f"Layout.zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.checkpointing not in CHECKPOINTING:
            raise InputError(
                f"checkpointing {self.checkpointing!r} is not one of: {', '.join(CHECKPOINTING)}")
        if self.schedule not in SCHEDULES:
            raise InputError(f"schedule {self.schedule!r} is not one of: {', '.join(SCHEDULES)}")

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def sequence_parallel(self) -> bool:
        """Whether activations outside the TP regions are split over the TP ranks."""
        return self.sp and self.tp > 1
