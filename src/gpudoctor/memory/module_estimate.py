"""Training memory of a live ``nn.Module`` (``module:factory``), from a dry run instead of rules.

The parameter count is the module's own (tied weights once), the activations, the gradients as
they appear and each op's temporaries come from one forward and backward on fake tensors
(``dryrun.py``); the optimizer states and the step's temporaries follow the same ``torch.optim``
rules as for a config (training.py). Tensor, pipeline and context parallelism need the model's
structure, which a config has and an arbitrary module does not: they are refused here.
"""

from __future__ import annotations

from dataclasses import asdict

from gpudoctor.errors import InputError
from gpudoctor.memory.activations import DTYPE_BYTES
from gpudoctor.memory.estimate import (
    CUBLAS_WORKSPACE_BYTES,
    CUDA_CONTEXT_BYTES,
    RESERVED_OVER_ALLOCATED,
    MemoryEstimate,
)
from gpudoctor.memory.options import TrainOptions
from gpudoctor.memory.training import state_bytes_per_param


def check_module_options(o: TrainOptions) -> None:
    for name in ("tp", "pp", "cp"):
        if getattr(o, name) != 1:
            raise InputError(f"--{name} needs the model's structure: give its config.json or a "
                             "preset; module:factory is priced for data parallelism, ZeRO/FSDP and "
                             "accumulation")
    if o.sp:
        raise InputError("--sp needs --tp, which module:factory does not price; give a config.json")


def _adafactor_state_elements(module) -> int:
    """torch.optim.Adafactor: a row and a column vector per matrix, the full size for vectors."""
    total = 0
    for p in module.parameters():
        if p.dim() >= 2:
            total += p.shape[-2] + p.shape[-1]
        else:
            total += p.numel()
    return total


def estimate_module(source: str, o: TrainOptions) -> MemoryEstimate:
    from gpudoctor.memory.dryrun import dry_run, load_factory

    check_module_options(o)
    loaded = load_factory(source)
    module = loaded.module
    adafactor_elems = _adafactor_state_elements(module) if o.optimizer == "adafactor" else 0
    accumulate = o.microbatches > 1
    run = dry_run(module, loaded.example_input, batch=o.batch, seq=o.seq,
                  params_dtype=o.params_dtype, autocast=o.autocast,
                  checkpointing=o.checkpointing == "full", grads_exist=accumulate)
    pb = DTYPE_BYTES[o.params_dtype]
    shard = o.shard_degree
    stage = o.zero_stage
    weights = (run.param_bytes / (shard if stage >= 3 else 1)) + run.buffer_bytes
    grads = run.grad_bytes / (shard if stage >= 2 else 1)
    if o.optimizer == "adafactor":
        states = adafactor_elems * (4 if o.master_weights else pb)
    else:
        states = run.n_params * state_bytes_per_param(o)
    states /= shard if stage >= 1 else 1
    master = run.n_params * 4 / (shard if stage >= 1 else 1) if o.master_weights else 0.0
    workspace = 2 * CUBLAS_WORKSPACE_BYTES
    persistent = weights + states + master + workspace
    if accumulate:  # the gradients existed before the step (the dry run counted none of them)
        backward = persistent + grads + run.backward_peak_bytes
    else:  # the dry run's backward counts full gradients; sharding keeps fewer of them
        backward = persistent + run.backward_peak_bytes - (run.grad_bytes - grads)
    phases = {"forward": persistent + run.forward_peak_bytes + (grads if accumulate else 0.0),
              "backward": backward}
    temp = {"adamw": run.param_bytes * ((4 / pb) if o.master_weights else 1.0),
            "adamw8bit": 0.0, "sgd": 0.0,
            "sgd-momentum": 0.0, "adafactor": float(CUBLAS_WORKSPACE_BYTES)}[o.optimizer]
    temp /= shard if stage >= 1 and o.optimizer == "adamw" else 1
    phases["optimizer"] = persistent + grads + temp
    phase = max(phases, key=lambda k: phases[k])
    peak = phases[phase]
    breakdown = {"weights": weights, "optimizer_states": states, "master_weights": master,
                 "cuda_workspaces": workspace}
    if phase == "optimizer":
        breakdown.update(gradients=grads, optimizer_step_temporaries=temp)
    else:
        breakdown["activations"] = run.saved_bytes
    breakdown["transient"] = peak - sum(breakdown.values())
    return MemoryEstimate(
        mode="train",
        model=source,
        n_params=run.n_params,
        breakdown={k: round(v) for k, v in breakdown.items() if round(v) != 0 or k in ("weights",)},
        peak_bytes=round(peak),
        phase=phase,
        reserved_bytes=round(peak * RESERVED_OVER_ALLOCATED),
        context_bytes=CUDA_CONTEXT_BYTES,
        options=asdict(o),
        phases={k: round(v) for k, v in phases.items()},
        notes=(
            "module:factory: activations from a dry run of one forward and backward on fake tensors",),
        extra={"dry_run": asdict(run)},
    )
