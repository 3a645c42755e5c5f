"""memory-pressure: the card is nearly full (the VRAM wall).

Near the limit the caching allocator frees its cache and retries (cudaFree + cudaMalloc inside the
step), batch size cannot grow, and the next longer sequence is an OOM. The saving counts the
GPU idle behind those allocator calls; the severity reflects the headroom left.

The finding says what fills the card: what stays allocated between steps (weights, optimizer
states) against what each step adds on top (activations, gradients, temporaries), and, when the
run recorded the optimizer's own sizes (``gpudoctor run``), weights, gradients and optimizer states
apart. Each fix carries the bytes it frees, priced by the same rules as ``gpudoctor memory``
(memory/training.py): 8-bit AdamW keeps about 2 bytes of state per parameter; bf16 halves weights,
gradients and states; ZeRO/FSDP divide states (and more) by the ranks; checkpointing keeps only the
layer inputs of the activations (under a tenth of them for transformer layers, memory/activations.py).
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.memory import MemoryResult
from gpudoctor.core.arrays import distinct
from gpudoctor.core.finding import (
    ALL_IDLE,
    Evidence,
    Finding,
    Fix,
    make_finding,
)
from gpudoctor.kernels.prescribe import kernel_fix
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import sources_of_host
from gpudoctor.rules.shared import PRESSURE_FRACTION

ID = "memory-pressure"

# What full activation checkpointing keeps of a transformer layer's saved activations: the layer
# input (2 bytes x tokens x hidden in bf16) against ~24-34 hidden-sized tensors plus the MLP's
# (memory/activations.py; the estimator is within 3% of 21 H200 training runs). Conservative.
CHECKPOINT_KEEPS = 0.10


def check(a: Analysis) -> Finding | None:
    mem = a.memory
    if not mem.applicable or mem.capacity_bytes == 0 or mem.peak_reserved_fraction < PRESSURE_FRACTION:
        return None
    idle = a.idle.ms("allocator")
    saving = idle  # host time inside the allocator calls is already part of this idle
    culprits = a.idle.culprits.get("allocator", np.empty(0, np.int64))
    numbers, fills = _what_fills(mem)
    numbers.update({
        "peak_reserved_GB": round(mem.peak_reserved_bytes / 1e9, 2),
        "peak_allocated_GB": round(mem.peak_allocated_bytes / 1e9, 2),
        "capacity_GB": round(mem.capacity_bytes / 1e9, 2),
        "peak_reserved_pct": round(100 * mem.peak_reserved_fraction, 1),
        "fragmentation_pct": round(100 * mem.fragmentation, 1),
        "allocator_calls_per_step": round(mem.malloc_calls_per_step, 1),
        "gpu_idle_behind_allocator_ms_per_step": round(idle, 3),
    })
    finding = make_finding(
        ID,
        "GPU memory is nearly full",
        a.step_ms,
        saving,
        f"Peak reserved memory is {mem.peak_reserved_bytes / 1e9:.1f} GB of "
        f"{mem.capacity_bytes / 1e9:.1f} GB ({100 * mem.peak_reserved_fraction:.1f}%); the "
        f"allocator runs {mem.malloc_calls_per_step:.0f} cudaMalloc/cudaFree calls per step to "
        f"stay under the limit. {fills}",
        Evidence(numbers=numbers,
                 sources=sources_of_host(a.trace, culprits) if culprits.size else ()),
        tuple(_fixes(mem, _op_names(a))),
        wrong_fix="torch.cuda.empty_cache() in the loop does not free memory that tensors hold; it "
                  "only adds allocator calls.",
        idle_ms=ALL_IDLE,
        min_severity="major",  # the wall itself is a major problem even when its time cost is small
    )
    return finding


def _op_names(a: Analysis) -> tuple[str, ...]:
    """The distinct op names of the trace (what the fused kernels could replace)."""
    host = a.trace.host
    if not len(host):
        return ()
    return tuple(sorted(a.trace.strings[int(i)] for i in distinct(host.name)
                        if a.trace.strings[int(i)].startswith("aten::")))


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def _parts(mem: MemoryResult) -> tuple[float, float, float, float]:
    """(weights, gradients, optimizer states, what the step adds beyond them) in bytes."""
    state = mem.model_state
    if state is None:
        return 0.0, 0.0, 0.0, max(mem.peak_allocated_bytes - mem.persistent_bytes, 0)
    weights = float(state.param_bytes)
    grads = float(state.grad_bytes) or weights  # grads exist at the peak of backward
    states = float(state.state_bytes)
    return weights, grads, states, max(mem.peak_allocated_bytes - weights - grads - states, 0.0)


def _what_fills(mem: MemoryResult) -> tuple[dict, str]:
    weights, grads, states, step = _parts(mem)
    if mem.model_state is not None:
        numbers = {"weights_GB": round(weights / 1e9, 2), "gradients_GB": round(grads / 1e9, 2),
                   "optimizer_states_GB": round(states / 1e9, 2),
                   "activations_and_temporaries_GB": round(step / 1e9, 2)}
        text = (f"At the peak: weights {_gb(weights)}, gradients {_gb(grads)}, optimizer states "
                f"{_gb(states)} ({mem.model_state.optimizer or 'optimizer'}), activations and "
                f"temporaries {_gb(step)}.")
        return numbers, text
    numbers = {"held_between_steps_GB": round(mem.persistent_bytes / 1e9, 2),
               "added_by_the_step_GB": round(step / 1e9, 2)}
    text = (f"{_gb(mem.persistent_bytes)} stays allocated between steps (weights, optimizer "
            f"states); the step adds up to {_gb(step)} on top (activations, gradients, "
            "temporaries).")
    return numbers, text


def _fixes(mem: MemoryResult, trace_ops: tuple[str, ...] = ()) -> list[Fix]:
    weights, grads, states, step = _parts(mem)
    state = mem.model_state
    activations = step if state else max(step - weights, 0.0) if weights else step
    fixes: list[tuple[float, Fix]] = []
    fixes.append((activations * (1 - CHECKPOINT_KEEPS), Fix(
        "Recompute activations in backward instead of keeping them (frees up to "
        f"~{_gb(activations * (1 - CHECKPOINT_KEEPS))})",
        "model.gradient_checkpointing_enable()   # HF; or "
        "torch.utils.checkpoint.checkpoint(block, x)")))
    fixes.append((activations / 2, Fix(
        f"Halve the micro-batch and accumulate gradients over two (frees ~{_gb(activations / 2)}, "
        "same effective batch)",
        "loss = model(x_micro) / accum; loss.backward()\nif (i + 1) % accum == 0: opt.step(); "
        "opt.zero_grad()")))
    if state is not None and state.param_dtype == "float32":
        freed = (weights + grads + states) / 2
        fixes.append((freed,
                      Fix(f"Keep weights, gradients and Adam states in bf16 (frees ~{_gb(freed)})",
                                 "model.to(torch.bfloat16)   # or autocast for activations only")))
    if state is not None and states and "adam" in (state.optimizer or "").lower():
        # here, not at the top: the memory estimator's package costs every analysis ~20 ms to import
        from gpudoctor.memory.training import ADAM8BIT_STATE_BYTES

        freed = max(states - ADAM8BIT_STATE_BYTES * state.params, 0.0)
        fixes.append((freed, Fix(f"8-bit AdamW (frees ~{_gb(freed)} of optimizer states)",
                                 "import bitsandbytes as bnb; opt = "
                                 "bnb.optim.AdamW8bit(model.parameters(), lr=...)")))
    if states:
        fixes.append((states / 2, Fix(
            "Shard optimizer states over the data-parallel ranks with ZeRO-1/FSDP (frees states x "
            f"(1 - 1/ranks): {_gb(states / 2)} with 2 ranks)", "")))
    else:
        fixes.append((0.0, Fix("Shard or shrink optimizer states (8-bit Adam, FSDP / ZeRO)", "")))
    held = mem.persistent_bytes - (weights + states if state else 0.0)
    if not state and held > 2 * step:
        # most of the card is taken before the step starts: activations are not the problem
        fixes.append((held, Fix(
            f"Find what stays allocated between steps ({_gb(held)}): weights and optimizer states, "
            "or tensors kept alive by the loop (outputs or losses kept with their graph, caches)",
            "torch.cuda.memory._record_memory_history(); ...; "
            "torch.cuda.memory._dump_snapshot('mem.pickle')\n"
            "# then open mem.pickle at https://pytorch.org/memory_viz; keep loss.item(), not loss")))
    fixes.sort(key=lambda item: -item[0])
    out = [fix for _, fix in fixes]
    if trace_ops:
        fused = kernel_fix(trace_ops)
        if fused is not None:  # activations are what the kernels shrink: right after checkpointing
            out.insert(1 if state else 2, fused)
    out.append(Fix("Cut fragmentation", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"))
    out.append(Fix("Size it before launch: `gpudoctor memory config.json --batch B --seq S --gpu "
                   "NAME` gives the breakdown and the cheapest change that fits", ""))
    return out


RULE = Rule(
    ID, "GPU memory pressure", check, __doc__ or "", needs=("memory_events",),
    order=130, idle_cause="allocator", owns_idle=("allocator",),
)
