"""What a run's first steps computed, so two runs of one program can be compared for numerics
(``gpudoctor run --try-fixes``): the loss of the first steps and the peak GPU memory.

- **Loss**: the tensor passed to ``backward`` (``loss.backward()`` and
  ``torch.autograd.backward(loss)`` both go through ``torch.autograd.backward``), recorded as
  ``float(loss)`` for the first ``k`` calls whose tensor is a single number. ``float`` waits for
  the GPU, so only the first steps pay it: the warm-up half that the unprofiled timing leaves out.
- **Seed**: the baseline and every trial seed Python's, NumPy's and torch's generators with one
  value before the program starts, so that a program that does not seed itself draws the same
  weights and batches in each run (a program that seeds itself overrides it).
- **Peak memory**: ``torch.cuda.max_memory_allocated()`` at the end; None without CUDA.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Iterator
from typing import Any

TRIAL_SEED = 20261125
LOSS_STEPS = 3  # first backward calls whose loss is recorded


def seed_all(seed: int = TRIAL_SEED) -> None:
    random.seed(seed)
    with contextlib.suppress(ImportError):
        import numpy as np

        np.random.seed(seed % 2**32)
    import torch

    torch.manual_seed(seed)


@contextlib.contextmanager
def record_losses(k: int = LOSS_STEPS) -> Iterator[list[float | None]]:
    """Record ``float(loss)`` of the first ``k`` backward calls into the list it yields."""
    import torch

    losses: list[float | None] = []
    original = torch.autograd.backward

    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if len(losses) < k:
            value = _scalar(torch, tensors)
            if value is not None:
                # None: NaN or inf, a divergence
                losses.append(value if math.isfinite(value) else None)
        return original(tensors, *args, **kwargs)

    torch.autograd.backward = backward
    try:
        yield losses
    finally:
        if torch.autograd.backward is backward:
            torch.autograd.backward = original


def _scalar(torch: Any, tensors: Any) -> float | None:
    if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
        tensors = tensors[0]
    if not isinstance(tensors, torch.Tensor) or tensors.numel() != 1:
        return None
    try:
        value = float(tensors.detach().float())
    except RuntimeError:
        return None
    return value


def peak_memory_bytes() -> int | None:
    """The peak of ``torch.cuda.max_memory_allocated()``; None without CUDA (or once it failed)."""
    import torch

    if not torch.cuda.is_available():
        return None
    try:
        return int(torch.cuda.max_memory_allocated())
    except RuntimeError:
        return None
