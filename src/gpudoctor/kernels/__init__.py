"""Fused Triton kernels that cure the VRAM wall (activation memory that outgrows the card): each
saves only what it cannot cheaply recompute, and recomputes the rest in backward.

- ``rms_norm`` / ``RMSNorm``, ``layer_norm`` / ``LayerNorm``: save the input and per-row statistics.
- ``swiglu``, ``geglu``: save the two inputs, recompute the activation.
- ``linear_cross_entropy``: the LM head and the loss in token chunks; the logits are never whole.
- ``patch(model)`` / ``unpatch(model)``: swap a Hugging Face-style model's norms, gated MLPs and
  causal-LM loss for them, by structure.

CPU tensors and fp64 take a native PyTorch path (the same math).
"""

from __future__ import annotations

from typing import Any

__all__ = ["LayerNorm", "PatchReport", "RMSNorm", "geglu", "layer_norm",
           "linear_cross_entropy", "patch", "rms_norm", "swiglu", "unpatch"]

_WHERE = {
    "rms_norm": "gpudoctor.kernels._rms_norm", "RMSNorm": "gpudoctor.kernels._rms_norm",
    "layer_norm": "gpudoctor.kernels._layer_norm", "LayerNorm": "gpudoctor.kernels._layer_norm",
    "swiglu": "gpudoctor.kernels.glu", "geglu": "gpudoctor.kernels.glu",
    "linear_cross_entropy": "gpudoctor.kernels.cross_entropy",
    "patch": "gpudoctor.kernels.patching", "unpatch": "gpudoctor.kernels.patching",
    "PatchReport": "gpudoctor.kernels.patching",
}


def __getattr__(name: str) -> Any:
    """Lazy: importing gpudoctor.kernels does not import triton until an op is used.

    The ops live in modules whose names are none of the public names (``_rms_norm`` holds
    ``rms_norm``): importing a submodule binds its name on this package, and a submodule named
    ``rms_norm`` would shadow the function, in whatever order things were imported.
    """
    if name in _WHERE:
        import importlib

        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    raise AttributeError(f"module 'gpudoctor.kernels' has no attribute {name!r}")
