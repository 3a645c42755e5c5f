"""The DataLoader a program runs, as ``gpudoctor run`` saw it: the settings a fix is written from.

The trace says a batch was made on the training thread or by workers, not how many workers, how
large a batch, nor how many CPUs the host lends the program. The capture reads them off the loader's
iterator (capture/loader_queue.py) and keeps them in env.json (``capture.dataloader``); the
input-pipeline finding writes its fix from them and prices the workers it prescribes, as the
``loader-workers`` knob sets them (tryfix/knobs.py): one rule for both.
"""

from __future__ import annotations

import math
import os
from typing import Any

import msgspec

# Environment variable through which ``run --try-fixes`` hands the loader-workers knob the workers
# the input-pipeline finding prescribed (tryfix/knobs.py).
WORKERS_ENV = "GPUDOCTOR_LOADER_WORKERS"
# The input-pipeline finding's evidence key for the workers its fix sets and its price is for.
WORKERS_PRESCRIBED = "workers_prescribed"
# Workers prescribed where the loader has none: as many as the host lends the program, at most this
# many (more rarely help one GPU's loop, and each holds a copy of the dataset's Python objects).
MAX_FIRST_WORKERS = 8


class LoaderSettings(msgspec.Struct, frozen=True):
    """One DataLoader's settings, and the CPUs the program may use (None: not known)."""

    num_workers: int
    pin_memory: bool
    batch_size: int | None = None
    persistent_workers: bool = False
    cpus: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)

    @classmethod
    def parse(cls, value: Any) -> LoaderSettings | None:
        """``capture.dataloader`` of an env.json, or None where it is absent or malformed."""
        if not isinstance(value, dict):
            return None
        workers, batch, cpus = (value.get(k) for k in ("num_workers", "batch_size", "cpus"))
        if not _count(workers, zero=True):
            return None
        return cls(num_workers=workers, pin_memory=value.get("pin_memory") is True,
                   batch_size=batch if _count(batch) else None,
                   persistent_workers=value.get("persistent_workers") is True,
                   cpus=cpus if _count(cpus) else None)


def prescribed_workers(now: int, cpus: int | None) -> int:
    """The workers to give a loader with ``now``: MAX_FIRST_WORKERS where it has none, else twice as
    many, and no more than the host's CPUs where they are known."""
    wanted = MAX_FIRST_WORKERS if now <= 0 else 2 * now
    return max(min(wanted, cpus), 1) if cpus else wanted


def workers_to_keep_up(now: int, rest_share: float, cpus: int) -> int:
    """The workers that keep up with the rest of the step, for a loader whose ``now`` workers set
    the step: each worker takes ``now`` steps to make a batch, so a batch every ``rest_share`` of
    the step (the step without its wait for batches) takes ``now / rest_share`` of them. One more
    than now at least; at most the CPUs less one, which the training process keeps (``now`` where
    the workers already have them)."""
    wanted = math.ceil(now / max(rest_share, 1e-9) - 1e-9)
    return max(min(wanted, cpus - 1), min(now + 1, cpus - 1), now)


def _count(value: Any, zero: bool = False) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)
            and (value >= 0 if zero else value > 0))


def usable_cpus() -> int | None:
    """The CPUs this process may run on: its affinity where the OS gives one (a container or
    ``taskset`` lends fewer than the machine has), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()
