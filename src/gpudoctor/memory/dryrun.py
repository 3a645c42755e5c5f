"""Exact parameters and activation memory of a ``module:factory`` model, from a dry run.

``load_factory("pkg.mod:build")`` imports the factory and calls it under ``torch.device("meta")``,
so that even a 70B model is built at once and holds no memory. ``dry_run`` then runs one forward
and one backward of it on *fake* CPU tensors (``FakeTensorMode``: shapes and dtypes, no data) and
follows every storage from its allocation to its free.

Fake CPU tensors rather than the meta device, or fake CUDA tensors:

- autocast has no meta key (``torch.autocast("meta")`` is refused, and a CUDA autocast leaves
  meta tensors alone); fake CUDA tensors take the CUDA autocast key, but on a CPU-only torch
  their first autograd node asks for a CUDA device guard and the process aborts. Fake CPU
  tensors go through the CPU autocast key, whose policy keeps ``layer_norm``, ``softmax``,
  ``pow``, ``exp``, ``sum``... in bf16 where CUDA's runs them in fp32: the CUDA fp32 kernels it
  lacks are registered at the AutocastCPU key for the length of the run (``_cuda_kernels``).
- attention and dropout save what the kernel they run on saves, and the CPU picks other kernels
  than CUDA: math attention for dropout (the seq x seq probabilities, where CUDA's flash kernel
  saves only a log-sum-exp per row), a dropout mask of the input's dtype (CUDA's is bool).
  ``_cuda_kernels`` routes both to the kernel CUDA would pick. On meta tensors attention always
  takes the math path.
- a Hugging Face model built with no ``position_ids`` would build a (batch, 1, seq, seq) mask and
  repeat K and V per head on fake tensors (``_hf_one_sequence_per_row`` says why, and fixes it).

The tracking is our own ``TorchDispatchMode`` (``_LiveBytes``): each op's outputs' untyped
storages are counted at their ``nbytes`` (views share a storage and count once) and weakly
referenced, and the reference's callback sees the free. The library's
``torch.distributed._tools.mem_tracker.MemTracker`` works here (CPU-only torch, fake tensors) and
gave the same bytes on every model tried, but it walks every module's statistics after every op:
40 s for a Llama-3.1-8B step at 4096 tokens, against 2 s for ``_LiveBytes``.

Checked against ``torch.cuda.memory_allocated`` on an H200 (torch 2.11, transformers 5.17), bytes
held at the end of the forward beside the weights, dry run vs GPU, Llama-3.1-8B's shape at batch
1 x 4096: bf16 28,562,243,596 vs 28,562,277,376; fp32 weights + bf16 autocast 48,975,921,164 vs
48,975,954,944; bf16 + checkpointing 3,311,517,708 vs 3,311,518,720. Both peaks agree to 1e-6 but
the checkpointed backward's (0.5% under). Small Llama, GPT-2 and Mixtral models at 2 x 1024 (bf16,
fp32 + bf16/fp16 autocast, checkpointing, fp32): 0.984 to 1.000 of the GPU's, the gap being the
caching allocator rounding blocks up.

Not modelled: kernels other than eager PyTorch's (the flash-attn package, Liger, Triton,
torch.compile), the allocator's rounding and fragmentation, cuBLAS workspaces, the CUDA context.
A model that reads tensor values in its forward (``.item()``, a branch on a tensor, a
data-dependent shape) cannot run on fake tensors: an ``InputError`` says so.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import reprlib
import sys
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)
from torch.utils._python_dispatch import TorchDispatchMode

from gpudoctor.errors import InputError

Example = torch.Tensor | tuple[torch.Tensor, ...] | dict[str, torch.Tensor]

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
AUTOCAST = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}

_ACCEPTED = "accepted: 'pkg.module:factory' or 'path/to/file.py:factory'"
_RESULT = "an nn.Module or a tuple (module, example_input) with a tensor, a tuple of tensors or a dict of tensors"


class Loaded(NamedTuple):
    """What a factory made: the model (on the meta device) and its example input, if it gave one."""

    module: nn.Module
    example_input: Example | None


@dataclass(frozen=True)
class DryRun:
    """Bytes of one training step's forward and backward, as a GPU would hold them.

    ``saved_bytes`` and the two peaks count beyond the weights (parameters and buffers): the
    input, the activations, each op's temporaries and, in the backward, the gradients as they
    appear. Bytes are storage ``nbytes``; a GPU's caching allocator rounds each block up a little.
    """

    n_params: int  # unique parameters (tied weights once)
    param_bytes: int
    buffer_bytes: int
    grad_bytes: int  # the parameters' gradients once the backward is over
    saved_bytes: int  # held for the backward at the end of the forward (output dropped, loss aside)
    forward_peak_bytes: int
    backward_peak_bytes: int
    checkpointed: bool = False  # gradient checkpointing was asked for and the module has it


# --- loading a factory ---------------------------------------------------------------------------


def load_factory(spec: str) -> Loaded:
    """Import ``module:attr`` and build the model on the meta device.

    ``attr`` is called with no arguments inside ``torch.device("meta")`` (an ``nn.Module``
    instance is taken as is); whatever it returns with real tensors is moved to meta, so nothing
    proportional to the model stays allocated. Every failure is one ``InputError`` line.
    """
    target, attr = _split_spec(spec)
    obj = _resolve(_import_target(spec, target), attr, spec)
    result = obj if isinstance(obj, nn.Module) else _call_factory(obj, spec)
    module, example = _check_result(result, spec)
    return Loaded(_to_meta(module), _map_tensors(example, lambda t: t.to("meta")))


def _split_spec(spec: str) -> tuple[str, str]:
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise InputError(f"{spec!r} is not a model factory: no 'module:attribute' ({_ACCEPTED})")
    return target, attr


def _import_target(spec: str, target: str) -> Any:
    """A module by dotted name (the current directory importable, as with ``python -m``) or a
    file."""
    if target.endswith(".py") or os.sep in target or "/" in target:
        return _import_file(spec, Path(target))
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(target)
    except ImportError as e:
        raise InputError(f"{spec!r}: cannot import module {target!r} ({e}); {_ACCEPTED}") from e
    except Exception as e:
        raise InputError(f"{spec!r}: importing {target!r} raised {type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(os.getcwd())


def _import_file(spec: str, path: Path) -> Any:
    if not path.is_file():
        raise InputError(f"{spec!r}: no file {str(path)!r}; {_ACCEPTED}")
    name = f"_gpudoctor_factory_{path.stem}"
    mod_spec = importlib.util.spec_from_file_location(name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise InputError(f"{spec!r}: {str(path)!r} is not an importable Python file; {_ACCEPTED}")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        mod_spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise InputError(f"{spec!r}: running {str(path)!r} raised {type(e).__name__}: {e}") from e
    return module


def _resolve(module: Any, attr: str, spec: str) -> Any:
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(
                f"{spec!r}: {module.__name__!r} has no attribute {attr!r}; {_ACCEPTED}")
        obj = getattr(obj, part)
    return obj


def _call_factory(factory: Any, spec: str) -> Any:
    if not callable(factory):
        raise InputError(f"{spec!r} is {_describe(factory)}, not a callable that returns {_RESULT}")
    try:
        with torch.device("meta"):
            return factory()
    except Exception as e:
        raise InputError(f"{spec!r}: the factory raised {type(e).__name__}: {e}") from e


def _check_result(result: Any, spec: str) -> tuple[nn.Module, Example | None]:
    if isinstance(result, nn.Module):
        return result, None
    pair = isinstance(result, tuple) and len(result) == 2
    if pair and isinstance(result[0], nn.Module) and _is_example(result[1]):
        return result[0], result[1]
    raise InputError(f"{spec!r} returned {_describe(result)}; expected {_RESULT}")


def _is_example(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return True
    if isinstance(x, tuple) and x:
        return all(isinstance(t, torch.Tensor) for t in x)
    if isinstance(x, Mapping) and x:
        return all(isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in x.items())
    return False


def _describe(x: Any) -> str:
    if isinstance(x, tuple):
        return "a tuple of (" + ", ".join(type(v).__name__ for v in x) + ")"
    return f"{type(x).__name__} {reprlib.repr(x)}"


def _to_meta(module: nn.Module) -> nn.Module:
    """A factory that ignored ``torch.device('meta')`` gave real tensors: drop their memory."""
    tensors = [*module.parameters(), *module.buffers()]
    if any(t.device.type != "meta" for t in tensors):
        module = module.to("meta")
    return module


def _map_tensors(example: Example | None,
                 fn: Callable[[torch.Tensor], torch.Tensor]) -> Example | None:
    if example is None:
        return None
    if isinstance(example, torch.Tensor):
        return fn(example)
    if isinstance(example, tuple):
        return tuple(fn(t) for t in example)
    return {k: fn(t) for k, t in example.items()}


# --- the dry run ---------------------------------------------------------------------------------


def dry_run(
    module: nn.Module,
    example_input: Example | None = None,
    *,
    batch: int,
    seq: int,
    params_dtype: str = "bf16",
    autocast: str = "none",
    checkpointing: bool = False,
    loss: str | Callable[[Any], torch.Tensor] = "auto",
    grads_exist: bool = False,
) -> DryRun:
    """One forward and one backward of ``module`` on fake tensors, every storage tracked.

    With no ``example_input`` the module must be a Hugging Face causal LM (``config.vocab_size``):
    it gets ``input_ids`` of shape (batch, seq) and ``labels=input_ids``; ``batch`` and ``seq`` are
    used for nothing else. Floating inputs take ``params_dtype``, as a real step would feed them.
    ``autocast`` runs the forward under CUDA's autocast policy, the backward outside it, as
    training loops do. ``loss="auto"`` takes the output's ``.loss``, else its first element, summed
    when it is not a scalar; a callable maps the output to the loss. ``grads_exist`` gives every
    parameter a gradient before the step, as gradient accumulation does after its first
    micro-batch: the backward adds into them, and its peak counts no new gradients. The module is
    changed in place (its tensors become fake ones) and is of no use for a real step afterwards.
    """
    dtype = _choice(params_dtype, DTYPES, "params_dtype")
    amp = _choice(autocast, AUTOCAST, "autocast")
    reduce = _loss_fn(loss)
    call = _step_inputs(module, example_input, batch, seq)
    positions = isinstance(example_input, Mapping) and "position_ids" in example_input
    with FakeTensorMode(), _cuda_kernels(amp is not None), _hf_one_sequence_per_row(not positions):
        try:
            _fake_module(module, dtype)
            args, kwargs = call(dtype)
            checkpointed = checkpointing and hasattr(module, "gradient_checkpointing_enable")
            if checkpointed:
                module.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs={"use_reentrant": False})
            module.train()
            return _measure(module, args, kwargs, amp, reduce, checkpointed, grads_exist)
        except InputError:
            raise
        except Exception as e:
            raise InputError(_failure(module, e)) from e


def _failure(module: nn.Module, e: Exception) -> str:
    """One line: what failed, and why when it is the dry run's own limit."""
    lines = str(e).strip().splitlines()
    why = ""
    if isinstance(e, (DataDependentOutputException, DynamicOutputShapeException)):
        why = ("; the model reads tensor values (.item(), a branch on a tensor, a "
               "data-dependent shape), which a dry run on fake tensors cannot")
    return f"the dry run of {type(module).__name__} failed: {type(e).__name__}: {lines[0] if lines else ''}{why}"


def _choice(value: str, table: Mapping[str, Any], what: str) -> Any:
    if value not in table:
        raise InputError(f"{what} {value!r} is not one of {', '.join(table)}")
    return table[value]


def _loss_fn(loss: str | Callable[[Any], torch.Tensor]) -> Callable[[Any], torch.Tensor]:
    if callable(loss):
        return loss
    if loss != "auto":
        raise InputError(
            f"loss {loss!r} is not 'auto' or a callable that maps the output to a scalar")
    return _auto_loss


def _auto_loss(output: Any) -> torch.Tensor:
    """``.loss`` (a Hugging Face ModelOutput), else the first tensor of the output, summed."""
    first = getattr(output, "loss", None)
    if first is None:
        first = output
        while isinstance(first, (tuple, list, Mapping)):
            values = list(first.values()) if isinstance(first, Mapping) else list(first)
            if not values:
                break
            first = values[0]
    if not isinstance(first, torch.Tensor):
        raise InputError(f"the model's output is a {type(output).__name__} with no tensor to take "
                         "as the loss; pass loss= a callable that maps the output to a scalar")
    return first if first.dim() == 0 else first.sum()


InputsFor = Callable[[torch.dtype], tuple[tuple[Any, ...], dict[str, Any]]]


def _step_inputs(module: nn.Module, example: Example | None, batch: int, seq: int) -> InputsFor:
    """How to call the module, as a function of the parameters' dtype (inputs made fake, later)."""
    if example is not None:
        return lambda dtype: _fake_example(example, dtype)
    config = getattr(module, "config", None)
    if not isinstance(getattr(config, "vocab_size", None), int):
        raise InputError(f"{type(module).__name__} is not a Hugging Face causal LM (no "
                         "config.vocab_size): make the factory return (module, example_input) with "
                         "one micro-batch of input")
    if batch < 1 or seq < 1:
        raise InputError(f"batch and seq must be positive, got batch={batch} seq={seq}")

    def lm(dtype: torch.dtype) -> tuple[tuple[Any, ...], dict[str, Any]]:
        ids = torch.zeros(batch, seq, dtype=torch.long)
        kwargs: dict[str, Any] = {"input_ids": ids, "labels": ids}
        if hasattr(config, "use_cache"):
            kwargs["use_cache"] = False  # a training step keeps no KV cache
        return (), kwargs

    return lm


def _fake_example(example: Example, dtype: torch.dtype) -> tuple[tuple[Any, ...], dict[str, Any]]:
    def fake(t: torch.Tensor) -> torch.Tensor:
        return torch.zeros(t.shape, dtype=dtype if t.is_floating_point() else t.dtype)

    made = _map_tensors(example, fake)
    if isinstance(made, dict):
        return (), made
    return (made if isinstance(made, tuple) else (made,)), {}


def _fake_module(module: nn.Module, dtype: torch.dtype) -> None:
    """Swap every parameter, buffer and tensor attribute for a fresh tensor of the active mode.

    Called under ``FakeTensorMode``, so nothing is allocated. One replacement per original tensor
    keeps tied weights tied (``module.parameters()`` then yields them once). Floating tensors take
    ``dtype``, as ``module.to(dtype)`` would give them.
    """
    made: dict[int, torch.Tensor] = {}

    def fresh(t: torch.Tensor, cast: bool) -> torch.Tensor:
        if id(t) not in made:
            new = torch.empty(t.shape, dtype=dtype if cast and t.is_floating_point() else t.dtype)
            made[id(t)] = nn.Parameter(new, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else new
        return made[id(t)]

    for sub in module.modules():
        for name, p in sub._parameters.items():
            if p is not None:
                sub._parameters[name] = fresh(p, cast=True)  # type: ignore[assignment]
        for name, b in sub._buffers.items():
            if b is not None:
                sub._buffers[name] = fresh(b, cast=True)
    for sub in module.modules():
        for name, value in list(vars(sub).items()):
            if isinstance(value, torch.Tensor):
                setattr(sub, name, fresh(value, cast=False))


def _measure(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
             amp: torch.dtype | None, reduce: Callable[[Any], torch.Tensor], checkpointed: bool,
             grads_exist: bool = False) -> DryRun:
    """Run the step under a ``_LiveBytes``: the forward (the output dropped once the loss is taken,
    as a loop that keeps only the loss does), then the backward, each with its own peak."""
    params = list(module.parameters())
    weights = [*params, *module.buffers()]
    if grads_exist:  # made before the tracker starts: the accumulated gradients are not the step's
        for p in params:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    tracker = _LiveBytes(weights, [*_tensors_in(args), *_tensors_in(kwargs)])
    with tracker:
        with torch.autocast("cpu", dtype=amp, enabled=amp is not None):
            output = module(*args, **kwargs)
            loss = reduce(output)
        del output, args, kwargs
        forward_peak, tracker.peak = tracker.peak, tracker.live
        saved = tracker.live - _unique_bytes([loss])
        loss.backward()
    return DryRun(
        n_params=sum(p.numel() for p in params),
        param_bytes=_unique_bytes(params),
        buffer_bytes=_unique_bytes(weights) - _unique_bytes(params),
        grad_bytes=_unique_bytes([p.grad for p in params if p.grad is not None]),
        saved_bytes=saved,
        forward_peak_bytes=forward_peak,
        backward_peak_bytes=tracker.peak,
        checkpointed=checkpointed,
    )


def _tensors_in(x: Any) -> list[torch.Tensor]:
    items = x.values() if isinstance(x, Mapping) else x
    return [t for t in items if isinstance(t, torch.Tensor)]


class _LiveBytes(TorchDispatchMode):
    """Bytes of the storages alive beyond the weights, and their peak since ``peak`` was set.

    Every op's outputs are looked at: a storage not seen before is counted at its ``nbytes`` and
    weakly referenced, and the reference's callback takes it off when the storage is freed. Views
    share their base's storage, so they add nothing; the weights' storages are known from the start
    and never counted, so a view of a weight (``weight.t()``) adds nothing either.
    """

    def __init__(self, weights: list[torch.Tensor], inputs: list[torch.Tensor]) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._weights = {id(t.untyped_storage()) for t in weights}
        self._refs: dict[int, weakref.ref[Any]] = {}
        for t in inputs:  # a step holds its input on the GPU too
            self._track(t)
        self.peak = self.live

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in _flat_tensors(out):
            self._track(t)
        self.peak = max(self.peak, self.live)
        return out

    def _track(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key = id(st)
        if key in self._weights or key in self._refs:
            return
        nbytes = st.nbytes()
        self.live += nbytes
        self._refs[key] = weakref.ref(st, lambda _, key=key, nbytes=nbytes: self._free(key, nbytes))

    def _free(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        del self._refs[key]


def _flat_tensors(x: Any) -> Iterator[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (tuple, list)):
        for v in x:
            yield from _flat_tensors(v)


def _unique_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views and tied weights once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[id(st)] = st.nbytes()
    return sum(seen.values())


@contextlib.contextmanager
def _hf_one_sequence_per_row(active: bool) -> Iterator[None]:
    """Tell Hugging Face's masking that the synthesized batch holds no packed sequences.

    Given no ``position_ids``, a model numbers each row 0..seq-1; on real tensors
    ``find_packed_sequence_indices`` finds one sequence per row, so attention needs no mask:
    sdpa runs causal, with GQA, on the flash kernel. On fake tensors it cannot look at the values
    and returns a mask, which makes the model build a (batch, 1, seq, seq) mask and repeat K and
    V for every head: memory a GPU step does not use. The answer is known, so it is given.
    """
    masking = sys.modules.get("transformers.masking_utils")
    original = getattr(masking, "find_packed_sequence_indices", None)
    if not active or original is None:
        yield
        return
    masking.find_packed_sequence_indices = lambda *args, **kwargs: None  # type: ignore[union-attr]
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = original  # type: ignore[union-attr]


# --- CUDA's kernels and autocast policy on fake CPU tensors -----------------------------------

# CUDA's fp32 list and its fp32-unless-a-dtype-is-given list (aten/src/ATen/autocast_mode.h);
# the ops that the CPU table already handles are skipped at registration.
_CUDA_FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
    "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus",
    "layer_norm", "native_layer_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm",
    "nuclear_norm.dim", "cosine_similarity", "dist", "pdist", "renorm", "logsumexp",
)
_CUDA_FP32_UNLESS_DTYPE = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum",
    "linalg_vector_norm", "linalg_matrix_norm", "sum", "sum.dim_IntList",
)


@contextlib.contextmanager
def _cuda_kernels(autocast: bool) -> Iterator[None]:
    """While open, CPU tensors save for backward what CUDA tensors would; dropped on exit.

    Attention and dropout are taken at the AutogradCPU key (see ``_cuda_sdpa``, ``_cuda_dropout``);
    with ``autocast``, CUDA's fp32 ops missing from the CPU autocast table are added at the
    AutocastCPU key. The registrations are process-wide while open, as any ``torch.library`` one.
    """
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("scaled_dot_product_attention", _cuda_sdpa, "AutogradCPU")
        lib.impl("dropout", _cuda_dropout, "AutogradCPU")
        for name in _CUDA_FP32 if autocast else ():
            _register_autocast(lib, name, _fp32_kernel)
        for name in _CUDA_FP32_UNLESS_DTYPE if autocast else ():
            _register_autocast(lib, name, _fp32_dtype_kernel)
        yield
    finally:
        lib._destroy()


def _cuda_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
               is_causal: bool = False, scale: float | None = None,
               enable_gqa: bool = False) -> torch.Tensor:
    """Attention on the kernel a GPU would pick, for what it saves.

    The fused kernels (flash, memory-efficient) keep q, k, v, the output and one log-sum-exp per
    row; math keeps the (seq x seq) probabilities and, with dropout, their mask. The CPU picks
    math for dropout, which CUDA's fused kernels take in their stride, and flash for fp32 with
    GQA, which CUDA runs on math. So the choice follows CUDA's rules (sm80 and later) and a fused
    case runs the CPU's flash op, whose backward saves what the CUDA kernels save. Autocast has
    already cast the inputs, as on a GPU (sdpa is on both lower-precision lists).
    """
    gqa = {"enable_gqa": True} if enable_gqa else {}  # torch < 2.5 has no such argument
    if query.dim() == 4 and _cuda_fused(query, key, value, attn_mask, enable_gqa):
        dv = value.shape[-1]
        if dv != query.shape[-1]:
            # MLA (DeepSeek): v narrower than q and k. CUDA's memory-efficient kernel takes it;
            # the CPU's flash op does not, so v is zero-padded and the output sliced: the saved
            # v and output count at q's head dim, a little over the GPU's (v and out only)
            value = torch.nn.functional.pad(value, (0, query.shape[-1] - dv))
            return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                query, key, value, dropout_p, is_causal, attn_mask=attn_mask,
                scale=scale)[0][..., :dv]
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
    return torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, **gqa)[0]


def _cuda_fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                gqa: bool) -> bool:
    """Would CUDA run flash or memory-efficient attention (rather than math) on these inputs?"""
    low = q.dtype in (torch.float16, torch.bfloat16)
    dim = q.shape[-1]
    flash = low and mask is None and dim <= 256 and dim % 8 == 0 and k.shape[-1] == v.shape[-1] == dim
    grouped = gqa and q.shape[1] != k.shape[1]
    efficient = (low or q.dtype == torch.float32) and not grouped and dim % (8 if low else 4) == 0
    return flash or efficient


def _cuda_dropout(input: torch.Tensor, p: float, train: bool) -> torch.Tensor:
    """CUDA's fused dropout (``native_dropout``) saves a bool mask; the CPU's a mask of the input's
    dtype, 2 to 4 times the bytes."""
    if not train or p == 0:
        return input
    return torch.native_dropout(input, p, True)[0]


def _register_autocast(lib: Any, name: str, make: Callable[[Any], Callable[..., Any]]) -> None:
    base, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.aten, base), overload or "default", None)
    if op is None or torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "AutocastCPU"):
        return
    lib.impl(name, make(op), "AutocastCPU")


_NO_AUTOCAST = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


def _lower(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in (torch.bfloat16, torch.float16) and t.device.type == "cpu"


def _fp32_kernel(op: Any) -> Callable[..., Any]:
    """CUDA's ``fp32`` policy: every bf16/fp16 tensor argument is cast to fp32 (autograd sees
    it)."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST):
            args = tuple(_up(a) for a in args)
            kwargs = {k: _up(v) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def _up(x: Any) -> Any:
    if _lower(x):
        return x.to(torch.float32)
    if isinstance(x, (list, tuple)) and any(_lower(t) for t in x):
        return type(x)(_up(t) for t in x)
    return x


def _fp32_dtype_kernel(op: Any) -> Callable[..., Any]:
    """CUDA's ``fp32_set_opt_dtype``: with no dtype given and a low-precision input,
    ``dtype=fp32``."""
    names = [a.name for a in op._schema.arguments]
    at = names.index("dtype")
    kwarg_only = op._schema.arguments[at].kwarg_only

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST):
            given = kwargs.get("dtype") if kwarg_only or len(args) <= at else args[at]
            if given is None and args and _lower(args[0]):
                if kwarg_only or len(args) <= at:
                    kwargs["dtype"] = torch.float32
                else:
                    args = (*args[:at], torch.float32, *args[at + 1:])
            return op(*args, **kwargs)

    return kernel
