"""What every fused op shares: when to take the Triton path, input checks, launch helpers.

The Triton path runs on CUDA tensors of fp32/bf16/fp16 when triton imports; under
``TRITON_INTERPRET=1`` it also runs on CPU tensors (that is how CI tests the kernels without a GPU).
Everything else (CPU tensors, fp64, shapes where the kernel is measured slower) takes the native
PyTorch path, which computes the same thing.
"""

from __future__ import annotations

import functools
import os

import torch

from gpudoctor.errors import InputError

KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

try:  # the kernel modules decorate with ``jit`` and use ``tl``; without triton they still import
    import triton
    import triton.language as tl

    jit = triton.jit
except ImportError:  # the native path still works; the kernels are then never launched
    tl = None

    def jit(fn):
        return fn


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def use_triton(*tensors: torch.Tensor) -> bool:
    """Triton for CUDA tensors of a kernel dtype (CPU ones too under TRITON_INTERPRET=1)."""
    if not triton_available():
        return False
    first = tensors[0]
    if first.dtype not in KERNEL_DTYPES:
        return False
    return first.is_cuda or (interpreting() and first.device.type == "cpu")


def check_tensor(name: str, t: object, *, dims: int | None = None, min_dims: int | None = None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dims is not None and t.dim() != dims:
        raise InputError(f"{name} must have {dims} dimension(s), got shape {tuple(t.shape)}")
    if min_dims is not None and t.dim() < min_dims:
        raise InputError(f"{name} must have at least {min_dims} dimension(s), got shape {tuple(t.shape)}")
    if not (t.is_floating_point() or name in ("target",)):
        raise InputError(f"{name} must be a floating-point tensor (fp32, bf16, fp16; fp64 uses the native path), "
                         f"got {t.dtype}")
    return t


def check_same(reference_name: str, reference: torch.Tensor, **others: torch.Tensor | None) -> None:
    """Same device (and dtype for the float operands) as the reference, or a one-line error."""
    for name, t in others.items():
        if t is None:
            continue
        if t.device != reference.device:
            raise InputError(f"{name} is on {t.device} but {reference_name} is on {reference.device}; move both to one device")
        if t.is_floating_point() and t.dtype != reference.dtype:
            raise InputError(f"{name} is {t.dtype} but {reference_name} is {reference.dtype}; give both the same dtype")


# -- launching with less CPU per call ------------------------------------------------------------------
#
# ``kernel[grid](...)`` binds and specializes every argument and hashes a cache key in Python on each
# call; for the norms (tens of microseconds of GPU work at 8M elements) that CPU time, not the GPU,
# sets the step time. ``Launcher`` keeps the compiled kernel from the first call and launches it
# directly afterwards, keyed by everything Triton specializes on (each tensor's dtype and 16-byte
# alignment, each integer's ==1 / divisible-by-16 / 32-bit range, the constexprs, num_warps, the
# device), so a cached kernel only ever runs with arguments it was compiled for.


def _specialization(arg: object) -> object:
    if isinstance(arg, torch.Tensor):
        return arg.dtype, arg.data_ptr() % 16 == 0
    if isinstance(arg, bool):
        return "b", arg
    if isinstance(arg, int):
        return "i", arg == 1, arg % 16 == 0, -(2**31) <= arg < 2**31, 0 <= arg < 2**64
    if isinstance(arg, float):
        return "f"
    return type(arg).__name__, arg


class Launcher:
    """``Launcher(jit_fn)(grid, *args, **constexprs, num_warps=W)``: the same launch as
    ``jit_fn[grid](*args, **constexprs, num_warps=W)`` with the per-call Python work cut to a dict
    lookup. Constexprs come last in the kernel's signature (true of every kernel here)."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self.cache: dict = {}
        params = getattr(fn, "params", None)
        self.constexpr_names = tuple(p.name for p in params if p.is_constexpr) if params else ()
        # the fast path needs the compiled-kernel API and a real GPU; the interpreter launches as usual
        self.fast = params is not None and not interpreting()

    def __call__(self, grid: tuple[int, ...], *args: object, num_warps: int = 4, **constexprs: object) -> None:
        first = args[0]
        if isinstance(first, torch.Tensor) and first.is_cuda and first.device.index != torch.cuda.current_device():
            # Triton launches on the current device; a model spread over GPUs (device_map="auto")
            # calls with tensors on another one, so launch there
            with torch.cuda.device(first.device):
                self(grid, *args, num_warps=num_warps, **constexprs)
            return
        if not self.fast:
            self.fn[grid](*args, num_warps=num_warps, **constexprs)
            return
        values = tuple(constexprs[name] for name in self.constexpr_names)
        device = first.device.index if isinstance(first, torch.Tensor) else None
        key = (device, num_warps, values, *map(_specialization, args))
        compiled = self.cache.get(key)
        if compiled is None:
            compiled = self.fn[grid](*args, num_warps=num_warps, **constexprs)
            if len(self.cache) < 256:  # shapes vary little in training; a bound keeps odd callers safe
                self.cache[key] = compiled
            return
        try:
            compiled[(*grid, 1, 1)[:3]](*args, *values)  # the compiled kernel's runner takes a 3-d grid
        except Exception:  # noqa: BLE001 - a Triton whose compiled-kernel API differs: launch as usual
            self.fast = False
            self.fn[grid](*args, num_warps=num_warps, **constexprs)


def native_is_faster(table: tuple[tuple[int, int], ...], numel: int, hidden: int) -> bool:
    """Whether PyTorch's own fused op takes less GPU time than the kernel for a [..., hidden] input of
    ``numel`` elements: ``table`` holds (widest row, below this many elements) pairs measured per op,
    narrowest first; a row takes the first class wide enough for it, and wider rows than any, the kernel."""
    below = next((n for widest, n in table if hidden <= widest), 0)
    return numel < below
