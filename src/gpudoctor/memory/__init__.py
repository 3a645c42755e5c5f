"""Predict GPU memory before launch: training and generation, per GPU, with what to change.

Flow: a ``ModelSpec`` (config.json, preset or live module) -> options checked against it ->
``estimate_training`` / ``estimate_inference`` -> suggestions when it does not fit.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from gpudoctor.errors import InputError
from gpudoctor.memory.estimate import MemoryEstimate, Suggestion
from gpudoctor.memory.options import (
    InferOptions,
    TrainOptions,
    check_common_train,
    validate_infer,
    validate_train,
)
from gpudoctor.memory.spec import ModelSpec

__all__ = ["MemoryEstimate", "ModelSpec", "Suggestion", "estimate", "estimate_from_options", "load_spec"]


def load_spec(source: str) -> ModelSpec:
    """A config.json path (or a directory holding one), a preset name, or ``module:factory``."""
    from gpudoctor.memory import presets
    from gpudoctor.memory import spec as spec_mod

    path = Path(source)
    if path.suffix == ".json" or path.is_dir() or path.exists():
        if not path.exists():
            raise InputError(f"{source}: no such file; give a config.json path, a preset "
                             f"({', '.join(sorted(presets.PRESETS))}) or module:factory")
        return spec_mod.from_hf_config(path)
    if source.lower() in presets.PRESETS:
        return presets.from_preset(source.lower())
    raise InputError(f"{source!r} is not a config.json path, a preset or module:factory; presets: "
                     f"{', '.join(sorted(presets.PRESETS))}")


def _split(cls, opts: dict) -> dict:
    names = {f.name for f in fields(cls)}
    unknown = sorted(k for k, v in opts.items() if k not in names and v is not None)
    if unknown:
        raise InputError(f"options {', '.join(unknown)} do not apply to "
                         f"{'generation (--infer)' if cls is InferOptions else 'training'}")
    return {k: v for k, v in opts.items() if v is not None}


def estimate(spec: ModelSpec, options: TrainOptions | InferOptions, gpu: str | None = None,
             suggest: bool = True) -> MemoryEstimate:
    from gpudoctor.memory.fit import with_fit

    if isinstance(options, InferOptions):
        from gpudoctor.memory.inference import estimate_inference

        est = estimate_inference(spec, validate_infer(spec, options), gpu)
    else:
        from gpudoctor.memory.training import estimate_training

        est = estimate_training(spec, validate_train(spec, options))
    return with_fit(spec, options, est, gpu, suggest)


def estimate_from_options(source: str | ModelSpec, *, infer: bool = False, gpu: str | None = None,
                          suggest: bool = True, **opts) -> MemoryEstimate:
    """``gpudoctor memory``'s engine: a spec source and the CLI's options by name."""
    cls = InferOptions if infer else TrainOptions
    if isinstance(source, str) and is_module_source(source):
        if infer:
            raise InputError("module:factory is priced for training; for generation give a config.json or a preset")
        from gpudoctor.memory.fit import with_fit
        from gpudoctor.memory.module_estimate import estimate_module

        options = TrainOptions(**_split(TrainOptions, opts))
        # the option checks that need no model structure (TP/PP against heads/layers need a spec)
        return with_fit(None, options, estimate_module(source, check_common_train(options)), gpu, suggest=False)
    spec = source if isinstance(source, ModelSpec) else load_spec(source)
    return estimate(spec, cls(**_split(cls, opts)), gpu, suggest)


def is_module_source(source: str) -> bool:
    """``pkg.module:factory`` or ``file.py:factory`` (not an existing path, not a preset)."""
    from gpudoctor.memory import presets

    head, sep, attr = source.rpartition(":")
    return bool(sep and head and attr and not Path(source).exists() and source.lower() not in presets.PRESETS)

