"""What the stepped optimizer holds on the GPU: its parameters, gradients and states, in bytes.

Measured once per run (capture/session.py ``model_state_of``), written to env.json as
``capture.model_state`` and read back from it (capture/bundle.py ``facts_of``); the memory-pressure
finding uses it to say what fills the card and what each change frees. ``to_dict`` is the only
place it becomes a dict: env.json's and report.json's ``model_state``, key for key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# the byte counts a model state must hold (whole numbers, not negative); the two names beside them
# are kept where they are strings
COUNTS = ("params", "param_bytes", "grad_bytes", "state_bytes")


@dataclass(frozen=True)
class ModelState:
    """The parameters an optimizer steps, on the GPU, and the bytes they and their state take."""

    params: int  # parameter elements
    param_bytes: int
    grad_bytes: int  # 0 when no gradient existed yet
    state_bytes: int  # the optimizer's own tensors (Adam's two moments)
    optimizer: str | None = None  # its class name ("AdamW"); None when a file did not say
    param_dtype: str | None = None  # the dtype most parameter elements have ("float32")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, keys in the order env.json has always had (a name None is left out)."""
        d: dict[str, Any] = {} if self.optimizer is None else {"optimizer": self.optimizer}
        d |= {"params": self.params, "param_bytes": self.param_bytes, "grad_bytes": self.grad_bytes,
              "state_bytes": self.state_bytes}
        return d if self.param_dtype is None else {**d, "param_dtype": self.param_dtype}

    @classmethod
    def parse(cls, value: Any) -> ModelState | None:
        """An env.json ``capture.model_state``; None when absent or malformed (a count missing, not
        a whole number or negative), as every env.json field reads (capture/bundle.py)."""
        if not isinstance(value, dict) or not all(_count(value.get(k)) for k in COUNTS):
            return None
        return cls(*(value[k] for k in COUNTS), optimizer=_name(value.get("optimizer")),
                   param_dtype=_name(value.get("param_dtype")))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _name(value: Any) -> str | None:
    return value if isinstance(value, str) else None
