"""The fixes that need no code change: knobs turned from outside the program.

Each knob is applied in the fresh process of a trial (tryfix/child.py), after torch is imported
and before the program's first line runs; the program's files are never edited. What a knob
changed is written to the list ``effects`` (one line per change) so the report can say whether
it fired at all: a knob that found nothing to change (no DataLoader, no torch.optim optimizer)
is reported as not applied rather than as "no effect".

Rules for overriding what the program passed:

- **DataLoader** (``loader-workers``, ``pin-memory``): ``num_workers`` 0 (left at its default or
  passed explicitly: that is what the input-pipeline finding blames) becomes ``min(8, CPUs)``; N > 0
  becomes ``min(2N, CPUs)`` (the finding's "twice as many as now"); where ``run --try-fixes`` hands
  it the workers the finding prescribed (``core.loader.WORKERS_ENV``), that many; ``pin_memory``
  False becomes True when CUDA is available; ``persistent_workers`` is set to True only when the
  program did not pass it. A loader over an ``IterableDataset`` keeps its workers (each worker
  would replay the whole stream).
- **Optimizers** (``optimizer-foreach``, ``optimizer-fused``): every ``torch.optim`` optimizer class
  whose constructor takes ``foreach`` / ``fused`` gets ``foreach=True`` (or ``fused=True`` with
  ``foreach`` cleared: torch refuses both) whatever the program passed. A class without the
  argument (LBFGS) is left alone.
- **The outermost modules** (``bf16-autocast``, ``compile``, ``compile-reduce-overhead``): each
  module with parameters called at the top level (no module call around it) on the main thread
  during the first iteration (one model; a GAN's two networks; blocks called one by one from a
  list), ``effects`` names each. Its ``forward`` runs under
  ``torch.autocast(device, dtype=torch.bfloat16)`` (``cuda``, or ``cpu`` without CUDA) from its
  first call on (not on an NVIDIA GPU whose tensor cores take fp16 only: ``BF16_TENSOR_CORES_FROM``),
  or its ``forward`` is compiled
  (``module.forward = torch.compile(module.forward, mode=...)``, from its second call on: the
  first runs eager). Not ``module.compile()``: that compiles the module's call with its hooks,
  and the hooks that mark an inference loop's steps (capture/hooks.py) would run inside the graph
  instead of at each call, and the trial would time no step. A module the program compiled
  already (``torch.compile(model)``, ``model.compile()``) is left as it is, and a trial that
  changed nothing else is not applied.
- **TF32** (``tf32``): ``torch.backends.cuda.matmul.allow_tf32``, ``torch.backends.cudnn.allow_tf32``
  and ``torch.set_float32_matmul_precision("high")``; the program turning them off again
  (``allow_tf32 = False``, ``"highest"``, ``fp32_precision = "ieee"``) is ignored and named.
- **Allocator** (``expandable-segments``, ``no-empty-cache``): ``PYTORCH_CUDA_ALLOC_CONF`` gets
  ``expandable_segments:True`` (added to what the environment already has; set by the parent in
  the child's environment, before CUDA starts); ``no-empty-cache`` also makes
  ``torch.cuda.empty_cache`` a no-op.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.core.loader import WORKERS_ENV, prescribed_workers, usable_cpus

Effects = list[str]


@dataclass(frozen=True)
class Knob:
    id: str
    title: str  # what it does, in a few words
    findings: tuple[str, ...]  # the finding ids it fixes
    apply: Callable[[Effects], None] | None = None  # in the child, before the program runs
    env: dict[str, str] = field(default_factory=dict)  # added to the child's environment
    numerics: bool = False  # changes precision or kernels: the first losses are compared
    group: str = ""  # knobs of one group are alternatives: a combined trial takes one of them
    # steps the trial runs before the ones it times, beyond the baseline's --skip (WARMUP_COMPILE)
    warmup_steps: int = 0
    # variables set to a new, empty directory for the trial (whatever the user set), removed after
    # it
    fresh_dirs: tuple[str, ...] = ()
    # findings whose saving the knob's price adds, when the program has them, though they do not
    # call for its trial (trial.plan): compile also removes much of a launch-bound step's host time,
    # and reduce-overhead fuses as compile does
    also_saves: tuple[str, ...] = ()


# torch.compile compiles at the module's second call and again when gpudoctor's step discovery drops
# its global module hooks after the second step (the compiled code guards on them): with the
# baseline's --skip 5, the timed steps held the compilation. The compile trials run this many more
# steps first and time the same number of steps after them (benchmarks/BENCHMARKS-try-fixes.md
# "Evidence moved from the source: try-fixes").
WARMUP_COMPILE = 10


# -- DataLoader ----------------------------------------------------------------------------------


def _patch_dataloader(effects: Effects, workers: bool) -> None:
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    original = DataLoader.__init__
    signature = inspect.signature(original)
    cpus = usable_cpus() or 1  # the CPUs the input-pipeline finding priced its workers at
    # the workers the input-pipeline finding prescribed, where ``run --try-fixes`` handed them on
    handed = _handed_workers(cpus)
    cuda = torch.cuda.is_available()
    # datasets whose loader this knob already set: a wrapper that builds a new loader from the
    # old one's settings (accelerate's prepare) passes them on, and would double them again
    done: set[int] = set()

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:
            return original(self, *args, **kwargs)
        given = dict(bound.arguments)
        given.pop("self", None)
        changes = []
        if workers and not isinstance(given.get("dataset"), IterableDataset) and id(given.get("dataset")) not in done:
            done.add(id(given.get("dataset")))
            n = int(given.get("num_workers", 0) or 0)
            wanted = handed or prescribed_workers(n, cpus)
            if wanted > n:
                given["num_workers"] = wanted
                changes.append(f"num_workers {n} -> {wanted}")
            if given.get("num_workers", 0) and "persistent_workers" not in given:
                given["persistent_workers"] = True
                changes.append("persistent_workers=True")
        if cuda and not given.get("pin_memory", False):
            given["pin_memory"] = True
            changes.append("pin_memory=True")
        if changes:
            effects.append("DataLoader: " + ", ".join(changes))
        return original(self, **given)

    DataLoader.__init__ = __init__  # type: ignore[method-assign]


def _handed_workers(cpus: int) -> int | None:
    """``WORKERS_ENV`` as a count of workers (at most ``cpus``), None where unset or not a count."""
    value = os.environ.get(WORKERS_ENV, "")
    return min(int(value), cpus) if value.isdigit() and int(value) > 0 else None


def _loader_workers(effects: Effects) -> None:
    _patch_dataloader(effects, workers=True)


def _pin_memory(effects: Effects) -> None:
    _patch_dataloader(effects, workers=False)


# -- optimizers ----------------------------------------------------------------------------------


def _patch_optimizers(effects: Effects, flag: str) -> None:
    import torch

    patched = []
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)) or cls is torch.optim.Optimizer:
            continue
        original = cls.__dict__.get("__init__")
        if original is None:
            continue
        try:
            params = inspect.signature(original).parameters
        except (TypeError, ValueError):
            continue
        if flag not in params:
            continue
        cls.__init__ = _optimizer_init(original, cls.__name__, flag, "foreach" in params, effects)
        patched.append(cls.__name__)
    if not patched:
        effects.append(f"no torch.optim optimizer takes {flag}= in this torch")


def _optimizer_init(original: Callable[..., None], name: str, flag: str, has_foreach: bool,
                    effects: Effects) -> Callable[..., None]:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs[flag] = True
        if flag == "fused" and has_foreach:
            kwargs["foreach"] = None
        line = f"{type(self).__name__}({flag}=True)"  # once, under the class the program built
        if line not in effects:
            effects.append(line)
        return original(self, *args, **kwargs)

    return __init__


def _optimizer_foreach(effects: Effects) -> None:
    _patch_optimizers(effects, "foreach")


def _optimizer_fused(effects: Effects) -> None:
    _patch_optimizers(effects, "fused")


# -- the outermost module ------------------------------------------------------------------------


def on_outermost_module(change: Callable[[Any], str], effects: Effects,
                        around_first: Callable[[], Any] | None = None) -> None:
    """Call ``change(module)`` on each outermost module: every module with parameters called at the
    top level (no module call around it) on the main thread during the program's first iteration,
    before its first call runs; ``change`` returns a line for ``effects``. One model is one such
    module; a program that calls its blocks one by one from a list
    (tests/programs/lazy_import_sdpa.py) or a GAN's two networks are several, and a knob on the
    first alone measures nothing of the fix. The first iteration ends when a module already changed
    is called again at the top level.

    A change made there (a new ``forward``) takes effect from the module's next call:
    ``around_first`` (a context manager factory), when given, wraps each first call itself. The two
    global hooks are removed when the iteration ends, before that repeated call runs, so the timed
    steps run on nn.Module's fast path, as the baseline's do (and torch.compile, which guards on
    the number of global hooks, traces with them gone)."""
    from torch.nn.modules import module as nn_module

    thread = threading.get_ident()
    state: dict[str, Any] = {"depth": 0, "changed": set(), "ctx": None, "handles": [],
                             "done": False}

    def remove() -> None:
        state["done"] = True
        for handle in state["handles"]:
            handle.remove()
        state["handles"] = []

    def pre(module: Any, *args: Any) -> None:
        if threading.get_ident() != thread or state["done"]:
            return
        state["depth"] += 1
        if state["depth"] != 1:
            return
        # the loop came around: every outermost module is changed
        if id(module) in state["changed"]:
            remove()
            return
        try:
            params = sum(p.numel() for p in module.parameters())
        except (RuntimeError, AttributeError):
            return
        if params <= 0:
            return
        state["changed"].add(id(module))
        effects.append(change(module))
        if around_first is not None:
            state["ctx"] = around_first()
            state["ctx"].__enter__()

    def post(module: Any, *args: Any) -> None:
        if threading.get_ident() != thread or state["done"]:
            return
        state["depth"] = max(0, state["depth"] - 1)
        if state["depth"] == 0:
            ctx, state["ctx"] = state["ctx"], None
            if ctx is not None:
                ctx.__exit__(None, None, None)

    state["handles"] = [nn_module.register_module_forward_pre_hook(pre),
                        nn_module.register_module_forward_hook(post, always_call=True)]


# Compute capability from which NVIDIA's tensor cores take bf16 (Ampere); below it (V100, T4)
# bf16 autocast runs its matmuls without tensor cores, and fp16 with a gradient scaler is the fix,
# a change to the training loop that a knob cannot make from outside.
BF16_TENSOR_CORES_FROM = (8, 0)


def _bf16_autocast(effects: Effects) -> None:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and torch.version.hip is None and (
            torch.cuda.get_device_capability() < BF16_TENSOR_CORES_FROM):
        effects.append(f"{LEFT_AS_IS}this GPU's tensor cores take fp16, not bf16: fp16 autocast "
                       "with a GradScaler in the training loop is the change to make")
        return

    def autocast() -> Any:
        return torch.autocast(device, dtype=torch.bfloat16)

    def change(module: Any) -> str:
        forward = module.forward
        fp32_weights = any(p.dtype == torch.float32 for p in module.parameters())

        @functools.wraps(forward)
        def autocast_forward(*args: Any, **kwargs: Any) -> Any:
            with autocast():
                out = forward(*args, **kwargs)
            return _as_fp32(out) if fp32_weights else out

        set_forward(module, autocast_forward)
        back = ", its bf16 outputs cast back to fp32" if fp32_weights else ""
        return f"{type(module).__name__}.forward under torch.autocast({device!r}, dtype=torch.bfloat16){back}"

    on_outermost_module(change, effects, around_first=autocast)


def _as_fp32(out: Any) -> Any:
    """The module's outputs with its bf16 tensors cast back to fp32: the program's code after the
    forward (a loss on fp32 labels, ``nn.BCELoss``) gets the dtype it was written for, as when the
    autocast region also holds the loss."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.float() if isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16
                    else x, out)


PATCHED = "__gpudoctor_patched__"  # instance attribute: the names a knob set on a module


def set_forward(module: Any, forward: Callable[..., Any]) -> None:
    """``module.forward = forward`` on the instance alone, and invisible to pickling.

    Set in the instance's ``__dict__``: a wrapper module whose ``__setattr__`` passes attributes to
    the module it wraps (Lightning Fabric's _FabricModule) would otherwise give the wrapped module
    a forward that calls the wrapper, which calls it again (RecursionError). And a program that
    saves or copies its model (``torch.save(model)``, ``copy.deepcopy`` for an EMA) pickles the
    instance's attributes, where a wrapper function cannot go: the instance's ``__getstate__``
    leaves the knob's names out, so the saved or copied module is the program's own."""
    state = module.__dict__
    state["forward"] = forward
    state[PATCHED] = tuple(dict.fromkeys((*state.get(PATCHED, ()), "forward")))
    state["__getstate__"] = functools.partial(_state_without_patches, module)


def _state_without_patches(module: Any) -> dict[str, Any]:
    base = type(module).__getstate__
    state = dict(base(module) if callable(base) else module.__dict__)
    for name in (*state.get(PATCHED, ()), PATCHED, "__getstate__"):
        state.pop(name, None)
    return state


def _cache_note() -> str:
    """The compile trials' environment (FRESH_CACHE, IN_PROCESS_COMPILE), for the effects line."""
    cache = os.environ.get("GPUDOCTOR_FRESH_INDUCTOR_CACHE")
    note = ("; compiled with the Inductor cache its own compile trial left" if cache == REUSED_CACHE
            else "; compiled from a fresh Inductor cache" if cache else "")
    threads = os.environ.get("TORCHINDUCTOR_COMPILE_THREADS")
    if threads == "1":
        note += ("; in the program's own process (TORCHINDUCTOR_COMPILE_THREADS=1: set it too, "
                 "Inductor's worker pool slows the host's copies into pinned memory)")
    return note


def _compile(mode: str | None) -> Callable[[Effects], None]:
    def apply(effects: Effects) -> None:
        def change(module: Any) -> str:
            import torch

            kwargs = {"mode": mode} if mode else {}
            args = "".join(f", {k}={v!r}" for k, v in kwargs.items())
            name = type(module).__name__
            if _compiled_already(module):
                # compiling the compiled module again changes nothing but the effect line, and the
                # trial would measure the program as it was
                how = f": pass torch.compile(model{args}) in the program instead" if args else ""
                return f"{LEFT_AS_IS}{name} is compiled by the program already{how}"
            compiled = torch.compile(module.forward, **kwargs)
            note = _cache_note() + _dropout_note(module)
            if mode != "reduce-overhead":
                set_forward(module, compiled)
                return f"{name}.forward = torch.compile({name}.forward{args}){note}"
            # A CUDA graph's outputs live in its own pool and the next replay overwrites them: a
            # program that keeps one call's output past the next call (a GAN's fake images, fed to
            # the discriminator twice) stops with "accessing tensor output of CUDAGraphs that has
            # been overwritten". Cloning the outputs is the documented way out and costs one copy.
            set_forward(module, _cloning_outputs(compiled))
            return f"{name}.forward = torch.compile({name}.forward{args}), its outputs cloned{note}"

        on_outermost_module(change, effects)

    return apply


# An effect line that starts so names a module the knob found and did not change (trial.py: a
# trial whose every line is one is "not applied")
LEFT_AS_IS = "left as it is: "


def _compiled_already(module: Any) -> bool:
    """torch.compile(model) (an OptimizedModule), model.compile(), or a compiled forward."""
    from torch._dynamo.eval_frame import OptimizedModule

    return (isinstance(module, OptimizedModule)
            or getattr(module, "_compiled_call_impl", None) is not None
            or hasattr(getattr(module, "forward", None), "_torchdynamo_orig_callable"))


# The effect line's mark that the compiled module draws random masks (trial.numerics reads it)
DROPOUT_MARK = "dropout"


def _dropout_note(module: Any) -> str:
    """"; 12 dropout modules: ..." when the module holds dropout with p > 0. Inductor draws its
    own random masks (Philox), not eager's, so the first losses of a compiled model that trains
    with dropout differ by sampling noise, far more than a numerics change such as TF32 moves them
    (benchmarks/BENCHMARKS-try-fixes.md "Evidence moved from the source: try-fixes")."""
    from torch import nn

    count = sum(1 for m in module.modules() if isinstance(m, nn.modules.dropout._DropoutNd)
                and m.p > 0)
    if count == 0:
        return ""
    return (f"; {count} {DROPOUT_MARK} module{'s' if count > 1 else ''}: compiled, they draw other "
            "random masks than eager, so the first losses differ by sampling noise")


def _cloning_outputs(fn: Callable[..., Any]) -> Callable[..., Any]:
    import torch
    from torch.utils._pytree import tree_map

    def clone(x: Any) -> Any:
        return x.clone() if isinstance(x, torch.Tensor) else x

    def call(*args: Any, **kwargs: Any) -> Any:
        return tree_map(clone, fn(*args, **kwargs))

    return call


def _tf32(effects: Effects) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    effects.append(
        "TF32 matmuls and convolutions (torch.backends.*.allow_tf32, matmul precision 'high')")
    _keep_tf32(effects)


# What a program sets to turn TF32 off, which the knob keeps on: fp32 on purpose, or a library's
# default (the lab's fp32_matmul trap sets allow_tf32 = False itself; HF
# TrainingArguments(tf32=False))
_TF32_OFF = {"allow_tf32": (False,), "fp32_precision": ("ieee",)}


def _keep_tf32(effects: Effects) -> None:
    """Keep TF32 on when the program turns it off later (``allow_tf32 = False``,
    ``set_float32_matmul_precision("highest")``, ``fp32_precision = "ieee"``): otherwise the trial
    would time fp32 and read "no effect". Each override is named once in ``effects``."""
    import torch

    said: set[str] = set()

    def kept(what: str) -> None:
        if what not in said:
            said.add(what)
            effects.append(f"the program's {what} ignored: TF32 kept on")

    set_precision = torch.set_float32_matmul_precision

    def set_float32_matmul_precision(precision: str) -> None:
        if precision == "highest":
            kept("set_float32_matmul_precision('highest')")
            return
        set_precision(precision)

    torch.set_float32_matmul_precision = set_float32_matmul_precision
    for where, backend in (("torch.backends.cuda.matmul", torch.backends.cuda.matmul),
                           ("torch.backends.cudnn", torch.backends.cudnn)):
        cls = type(backend)
        original = cls.__setattr__

        def setattr_keeping_tf32(self: Any, name: str, value: Any, _original: Any = original,
                                 _where: str = where) -> None:
            if name in _TF32_OFF and value in _TF32_OFF[name]:
                kept(f"{_where}.{name} = {value!r}")
                return
            _original(self, name, value)

        cls.__setattr__ = setattr_keeping_tf32


def _expandable(effects: Effects) -> None:
    effects.append(f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')}")


def _no_empty_cache(effects: Effects) -> None:
    import torch

    _expandable(effects)
    calls = [0]

    def empty_cache() -> None:
        calls[0] += 1
        if calls[0] == 1:
            effects.append("torch.cuda.empty_cache() called and skipped")

    torch.cuda.empty_cache = empty_cache
    torch.cuda.memory.empty_cache = empty_cache


EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
# A compile trial compiles from an empty Inductor cache of its own. With the graph already in the
# cache, loading it calls ``async_compile.triton`` for each kernel, which starts Inductor's pool of
# compile workers (one per CPU, up to 32; torch/_inductor/async_compile.py ``use_process_pool``)
# without waiting for it: the workers import torch on every CPU while the compiled steps run and
# stall them. With a cold cache the compile itself waits for the pool, which is up before the timed
# steps. The trial also leaves the user's cache as it was; its cost is a compile from nothing (tens
# of seconds) per compile trial (benchmarks/BENCHMARKS-try-fixes.md "Evidence moved from the source:
# try-fixes").
FRESH_CACHE = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
# The combined trial compiles the same model again: it reuses the cache its compile knob's own trial
# left (tryfix/trial.py ``Trials._spawn``) instead of compiling from nothing a second time (the
# compile is most of a combined trial's time). What made a warm cache stall the steps was the worker
# pool it started; the compile trials run without one (IN_PROCESS_COMPILE).
REUSED_CACHE = "reused"
# And a compile trial compiles in the program's own process, with no worker pool, unless the user
# set the variable: with the pool up, the host's copies into pinned memory ran 80x slower, and a
# program that pins its batches on the training thread measured slower compiled
# (benchmarks/BENCHMARKS-try-fixes.md "Evidence moved from the source: try-fixes"). The effects line
# tells the user to set it too.
IN_PROCESS_COMPILE = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}
# Dynamo logs where and why it broke the graph, read into the trial's reason
# (tryfix/graph_breaks.py): logged at compile time only, nothing in the timed steps
GRAPH_BREAK_LOGS = {"TORCH_LOGS": "graph_breaks"}
COMPILE_ENV = {**IN_PROCESS_COMPILE, **GRAPH_BREAK_LOGS}
# comma-separated settings a knob adds to; any other a user set is kept
_MERGED = ("PYTORCH_CUDA_ALLOC_CONF", "TORCH_LOGS")

KNOBS: tuple[Knob, ...] = (
    Knob("loader-workers", "DataLoader worker processes, pinned batches, persistent workers",
         ("input-pipeline",), _loader_workers, group="loader"),
    Knob("pin-memory", "DataLoader(pin_memory=True)", ("pageable-copy",), _pin_memory,
         group="loader"),
    Knob("bf16-autocast", "bf16 autocast around the outermost module's forward", ("fp32-matmul",),
         _bf16_autocast, numerics=True),
    Knob("tf32", "TF32 for fp32 matmuls and convolutions", ("fp32-matmul",), _tf32, numerics=True),
    Knob("optimizer-foreach", "torch.optim optimizers with foreach=True", ("optimizer-loop",),
         _optimizer_foreach, group="optimizer"),
    Knob("optimizer-fused", "torch.optim optimizers with fused=True", ("optimizer-loop",),
         _optimizer_fused, numerics=True, group="optimizer"),
    # reduce-overhead is Inductor's fusion under CUDA graphs: priced with the fusion saving too
    # (priced on the launches alone it under-predicted: benchmarks/BENCHMARKS-try-fixes.md "Evidence
    # moved from the source: try-fixes")
    Knob("compile-reduce-overhead", 'torch.compile(outermost module, mode="reduce-overhead")',
         ("launch-bound",), _compile("reduce-overhead"), env=COMPILE_ENV, numerics=True,
         group="compile", warmup_steps=WARMUP_COMPILE,
         fresh_dirs=FRESH_CACHE, also_saves=("unfused-elementwise",)),
    # priced by fusion alone: summed with launch-bound's saving it read x9.1 and x2.4 where x0.98
    # and x0.93 were measured (benchmarks/BENCHMARKS-replay.md "Replay", knob trials); the report's
    # own replayed price of the knob (rules/knob_prices.py) comes first
    Knob("compile", "torch.compile(outermost module)", ("unfused-elementwise",), _compile(None),
         env=COMPILE_ENV, numerics=True, group="compile", warmup_steps=WARMUP_COMPILE,
         fresh_dirs=FRESH_CACHE),
    Knob("expandable-segments", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
         ("memory-pressure",), _expandable, env=EXPANDABLE, group="allocator"),
    Knob("no-empty-cache", "expandable segments, torch.cuda.empty_cache() made a no-op",
         ("allocator-churn",), _no_empty_cache, env=EXPANDABLE, group="allocator"),
)
BY_ID = {k.id: k for k in KNOBS}

NEEDS_CODE = {
    "host-sync": "the sync (.item(), .cpu(), a Python branch on a GPU value) is in the program's "
                 "own code",
    "naive-attention": "the attention is written out in the model's code: "
                       "scaled_dot_product_attention replaces it",
    "misaligned-gemm": "the odd sizes (vocabulary, hidden, batch) are the model's own: padding "
                       "them changes it",
    "per-sample-loop": "the Python loop over samples is the program's own: batching it is a "
                       "code change",
    "small-gemm": "batching the small matmuls together is a code change",
    "host-blocking-work": "the blocking host work is in the program's own loop",
    "dynamic-shapes": "the varying shapes come from the program's data: bucketing or padding them "
                      "is a code change",
}


def knobs_for(finding_id: str) -> tuple[Knob, ...]:
    return tuple(k for k in KNOBS if finding_id in k.findings)


def child_env(knob_ids: list[str] | tuple[str, ...], base: dict[str, str],
              fresh_dir: str | None = None, reused: bool = False) -> dict[str, str]:
    """The child's environment: ``base`` plus each knob's variables (a comma-separated setting such
    as PYTORCH_CUDA_ALLOC_CONF is added to, not replaced; any other variable the user set is kept),
    and each knob's ``fresh_dirs`` set to a folder of the empty ``fresh_dir`` (what the user set is
    not), or, ``reused``, of the folder an earlier compile trial of the same invocation left."""
    env = dict(base)
    for kid in knob_ids:
        knob = BY_ID[kid]
        for name, value in knob.env.items():
            old = env.get(name, "")
            if not old:
                env[name] = value
            elif name in _MERGED and value not in old.split(","):
                env[name] = f"{old},{value}"
        if fresh_dir is not None and knob.fresh_dirs:
            for name in knob.fresh_dirs:
                env[name] = os.path.join(fresh_dir, name.lower())
            env["GPUDOCTOR_FRESH_INDUCTOR_CACHE"] = REUSED_CACHE if reused else "1"
    return env


def needs_fresh_dir(knob_ids: list[str] | tuple[str, ...]) -> bool:
    return any(BY_ID[kid].fresh_dirs for kid in knob_ids)


def apply_knobs(knob_ids: list[str] | tuple[str, ...]) -> Effects:
    effects: Effects = []
    for kid in knob_ids:
        knob = BY_ID[kid]
        if knob.apply is not None:
            knob.apply(effects)
    return effects
