"""Predict GPU memory before launch: training and generation, per GPU, with what to change.

Flow: a ``ModelSpec`` (config.json, preset or live module) -> options checked against it ->
``estimate_training`` / ``estimate_inference`` -> suggestions when it does not fit.
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from gpudoctor.core.spec import ModelSpec
from gpudoctor.errors import InputError
from gpudoctor.memory.estimate import MemoryEstimate, Suggestion
from gpudoctor.memory.options import (
    InferOptions,
    TrainOptions,
    check_common_train,
    check_context,
    master_weights_note,
    precision_summary,
    validate_infer,
    validate_train,
)

__all__ = ["MemoryEstimate", "ModelSpec", "Suggestion", "estimate", "estimate_from_options",
           "load_spec"]


def load_spec(source: str) -> ModelSpec:
    """A config.json path (or a directory holding one), a preset name, or ``module:factory``."""
    from gpudoctor.core import presets
    from gpudoctor.core.hf_config import from_hf_config

    path = Path(source)
    if path.suffix == ".json" or path.is_dir() or path.exists():
        if not path.exists():
            raise InputError(f"{source}: no such file; give a config.json path, a preset "
                             f"({', '.join(sorted(presets.PRESETS))}) or module:factory")
        return from_hf_config(path)
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
             suggest: bool = True, context: str = "note") -> MemoryEstimate:
    """``context``: what a sequence beyond the model's positions gets, ``options.check_context``'s
    policy (refuse, extend, note); ``gpudoctor memory`` refuses it unless --allow-long-context."""
    from gpudoctor.memory.fit import with_fit

    if isinstance(options, InferOptions):
        from gpudoctor.memory.inference import estimate_inference

        options = validate_infer(spec, options)
        note = check_context(spec, options, context)
        est = estimate_inference(spec, options, gpu, past_positions=context == "extend")
    else:
        from gpudoctor.memory.training import estimate_training

        ignored = master_weights_note(options)
        options = validate_train(spec, options)
        note = check_context(spec, options, context)
        est = estimate_training(spec, options)
        if ignored:
            est = replace(est, notes=(ignored, *est.notes))
    if note:
        est = replace(est, notes=(*est.notes, note))
    est = _with_accuracy(spec, est)
    return with_fit(spec, options, est, gpu, suggest)


def _with_accuracy(spec: ModelSpec, est: MemoryEstimate) -> MemoryEstimate:
    """A model type measured outside 5% carries its measured error (``accuracy.py``)."""
    from gpudoctor.memory.accuracy import accuracy_note, measured_error

    err = measured_error(spec.family, est.mode)
    if err is None:
        return est
    return replace(est, notes=(accuracy_note(spec.family, est.mode), *est.notes),
                   extra={**est.extra, "measured_error": err})


def estimate_from_options(source: str | ModelSpec, *, infer: bool = False, gpu: str | None = None,
                          suggest: bool = True, context: str = "note", **opts) -> MemoryEstimate:
    """``gpudoctor memory``'s engine: a spec source and the CLI's options by name (None: not
    given)."""
    cls = InferOptions if infer else TrainOptions
    if isinstance(source, str) and is_module_source(source):
        if infer:
            raise InputError(
                "module:factory is priced for training; for generation give a config.json or "
                "a preset")
        from gpudoctor.memory.fit import with_fit
        from gpudoctor.memory.module_estimate import estimate_module

        options = TrainOptions(**_split(TrainOptions, opts))
        ignored = master_weights_note(options)
        # the option checks that need no model structure (TP/PP against heads/layers need a spec)
        checked = check_common_train(options)
        est = replace(estimate_module(source, checked), assumptions=(precision_summary(checked),))
        est = replace(est, notes=(ignored, *est.notes)) if ignored else est
        return with_fit(None, options, est, gpu, suggest=False)
    spec = source if isinstance(source, ModelSpec) else load_spec(source)
    given = _split(cls, opts)
    defaults, note = _defaults_within(spec, cls, given)
    est = estimate(spec, cls(**given, **defaults), gpu, suggest, context)
    return replace(est, notes=(note, *est.notes)) if note else est


def _defaults_within(spec: ModelSpec, cls, given: dict) -> tuple[dict, str | None]:
    """Defaults for the lengths not given that stay within the model's positions: GPT-2 (1,024)
    is priced at --seq 1024, not at the default 2,048 it cannot run."""
    limit = spec.max_positions
    if not limit:
        return {}, None
    out: dict = {}
    if cls is TrainOptions:
        if "seq" not in given and TrainOptions.seq > limit:
            out["seq"] = limit
    else:
        new = given.get("new", InferOptions.new)
        if "prompt" not in given and InferOptions.prompt + new > limit and new < limit:
            out["prompt"] = limit - new
        prompt = given.get("prompt", out.get("prompt", InferOptions.prompt))
        if "new" not in given and prompt + InferOptions.new > limit and prompt <= limit:
            out["new"] = limit - prompt
    if not out:
        return {}, None
    what = ", ".join(f"--{k} {v}" for k, v in out.items())
    return out, (f"{what}: not given, so set to fit {spec.name}'s {limit:,} positions "
                 f"(the default{'s' if len(out) > 1 else ''} would not)")


def is_module_source(source: str) -> bool:
    """``pkg.module:factory`` or ``file.py:factory`` (not an existing path, not a preset)."""
    from gpudoctor.core import presets

    head, sep, attr = source.rpartition(":")
    return bool(sep and head and attr and not Path(source).exists()
                and source.lower() not in presets.PRESETS)

