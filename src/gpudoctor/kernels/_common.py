"""What every fused op shares: when to take the Triton path, input checks, launch helpers, and the
registration of each op as a ``gpudoctor::`` PyTorch custom op the compiler can trace.

The Triton path runs on CUDA tensors of fp32/bf16/fp16 when triton imports; under
``TRITON_INTERPRET=1`` it also runs on CPU tensors (that is how CI tests the kernels without a GPU).
Everything else (CPU tensors, fp64, shapes where the kernel is measured slower) takes the native
PyTorch path, which computes the same thing.
"""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Callable

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


def triton_available() -> bool:
    # a module constant, not an lru_cache: torch.compile traces the public functions, and dynamo
    # warns on (and does not cache through) functools.lru_cache wrappers
    return tl is not None


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


def check_tensor(name: str, t: object, *, dims: int | None = None,
                 min_dims: int | None = None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dims is not None and t.dim() != dims:
        raise InputError(f"{name} must have {dims} dimension(s), got shape {tuple(t.shape)}")
    if min_dims is not None and t.dim() < min_dims:
        raise InputError(
            f"{name} must have at least {min_dims} dimension(s), got shape {tuple(t.shape)}")
    if not (t.is_floating_point() or name in ("target",)):
        raise InputError(f"{name} must be a floating-point tensor (fp32, bf16, fp16; fp64 uses the "
                         f"native path), got {t.dtype}")
    return t


def check_same(reference_name: str, reference: torch.Tensor, **others: torch.Tensor | None) -> None:
    """Same device (and dtype for the float operands) as the reference, or a one-line error."""
    for name, t in others.items():
        if t is None:
            continue
        if t.device != reference.device:
            raise InputError(
                f"{name} is on {t.device} but {reference_name} is on {reference.device}; move both "
                "to one device")
        if t.is_floating_point() and t.dtype != reference.dtype:
            raise InputError(
                f"{name} is {t.dtype} but {reference_name} is {reference.dtype}; give both the "
                "same dtype")


# -- launching with less CPU per call
# ------------------------------------------------------------------
#
# ``kernel[grid](...)`` binds and specializes every argument and hashes a cache key in Python on
# each call; for the norms (tens of microseconds of GPU work at 8M elements) that CPU time, not the
# GPU, sets the step time. ``Launcher`` keeps the compiled kernel from the first call and launches
# it directly afterwards, keyed by everything Triton specializes on (each tensor's dtype and 16-byte
# alignment, each integer's ==1 / divisible-by-16 / 32-bit range, the constexprs, num_warps, the
# device), so a cached kernel only ever runs with arguments it was compiled for.
#
# Two levels of key: the exact one (the integers and floats themselves, each tensor's dtype and
# address modulo 16) is cheap to build and hash, and repeats every step; on a miss the
# specialization key finds the kernel Triton compiled for those arguments, and the exact key is
# remembered for the next call.
#
# A cached kernel is launched through its low-level launcher, ``CompiledKernel.run(gridX, gridY,
# gridZ, stream, function, packed_metadata, launch_metadata, enter_hook, exit_hook, *args)``: the
# call ``CompiledKernel[grid](*args)`` makes after building a closure, looking up the device and
# stream through ``triton.runtime.driver``, and building the launch metadata for the launch hooks
# (triton 3.6 does that on every launch, its hooks being empty ``HookChain`` objects rather than
# None, and its C launcher then calls both). With no hook registered, the metadata and hooks are
# passed as None, which the C launcher skips. Tensors are passed as their addresses: for a tensor
# the C launcher calls ``data_ptr()`` and then ``cuPointerGetAttribute`` (a driver call, per pointer
# argument and launch, that checks the memory is the GPU's); an int it takes as the address (triton
# 3.6 and 3.9 ``getPointer``). Every tensor reaching a launch here is on the launching GPU
# (``use_triton``, ``check_same``, the kernels' own allocations). Where a hook is registered
# (Proton, a user's), or the compiled kernel lacks that API (triton before 3.3), the launch goes
# through ``CompiledKernel[grid]`` as before; should the direct call fail, the launcher falls back
# to it for good.


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


def _constexprs(fn) -> tuple[str, ...]:
    """The constexpr parameters of a kernel without ``params`` (the interpreter's wrapper), from the
    Python function's annotations (``tl.constexpr``, or the string under ``from __future__ import
    annotations``)."""
    import inspect

    inner = getattr(fn, "fn", fn)
    try:
        parameters = inspect.signature(inner).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in parameters if "constexpr" in str(p.annotation))


def _specializations(args: tuple) -> tuple:
    """``_specialization`` of each argument, tensors and ints inline: one list comprehension, not a
    Python call per argument (about half the host time a launch, benchmarks/BENCHMARKS-kernels.md
    "Evidence moved from the source: kernel constants")."""
    return tuple([(a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor)
                  else (("i", a == 1, a % 16 == 0, -(2**31) <= a < 2**31, 0 <= a < 2**64)
                        if type(a) is int
                        else _specialization(a))
                  for a in args])


def _exact(args: tuple) -> tuple:
    """The exact key of a launch's arguments: an int as itself, a tensor as its dtype and address
    modulo 16, anything else with its type (1, 1.0 and True are equal in Python, and Triton types
    them differently). Equal exact keys have equal specializations (``_specializations``); it takes
    half the host time of the specialization key (benchmarks/BENCHMARKS-kernels.md "Evidence moved
    from the source: kernel constants")."""
    return tuple([a if type(a) is int else (a.dtype, a.data_ptr() & 15) if isinstance(a,
                                                                                      torch.Tensor)
                  else (type(a), a) for a in args])


# Bounds of the two caches: shapes vary little in training; a bound keeps odd callers (a new
# sequence length every call) from growing them without end. Past the bound a launch pays the
# specialization key.
MAX_COMPILED = 256
MAX_EXACT = 1024


def _hooks():
    """triton's launch-hook holder (``triton.knobs.runtime``), or None where this triton has none
    there."""
    try:
        from triton import knobs
    except ImportError:
        return None
    runtime = getattr(knobs, "runtime", None)
    return runtime if hasattr(runtime, "launch_enter_hook") and hasattr(runtime, "launch_exit_hook") else None


_HOOKS = _hooks() if tl is not None else None


def hooks_idle() -> bool:
    """Whether no launch hook is registered, so a launch may pass None for the metadata and hooks:
    each hook None (triton 3.3, 3.4) or an empty ``HookChain`` (3.5 on)."""
    if _HOOKS is None:
        return False
    enter, leave = _HOOKS.launch_enter_hook, _HOOKS.launch_exit_hook
    return (enter is None or getattr(enter, "calls", None) == []) and (
        leave is None or getattr(leave, "calls", None) == [])


def _current_device() -> int:
    return torch._C._cuda_getDevice()


def _current_stream(device: int) -> int:
    """The raw CUDA stream Triton launches on (``driver.active.get_current_stream``)."""
    return torch._C._cuda_getCurrentRawStream(device)


def bindable(compiled: object) -> bool:
    """Whether a compiled kernel exposes the low-level launcher the direct launch calls (triton
    3.3+)."""
    return all(hasattr(compiled, name) for name in ("run", "function", "packed_metadata",
                                                    "launch_metadata"))


_data_ptr = torch.Tensor.data_ptr
_dtype = operator.attrgetter("dtype")


class Launcher:
    """``Launcher(jit_fn)(grid, *args, **constexprs, num_warps=W)``: the same launch as
    ``jit_fn[grid](*args, **constexprs, num_warps=W)`` with the per-call Python work cut to building
    an exact key, a dict lookup and the low-level launcher's call. Constexprs come last in the
    kernel's signature (true of every kernel here). ``direct=False`` launches cached kernels through
    ``CompiledKernel[grid]`` instead (the fallback, measured against the direct launch by
    benchmarks/bench_kernels_host.py)."""

    def __init__(self, fn, *, direct: bool = True) -> None:
        self.fn = fn
        self.cache: dict = {}  # exact key -> (compiled kernel, its launcher, function handle, packed metadata)
        self.compiled: dict = {}  # specialization key -> the same
        params = getattr(fn, "params", None)
        self.constexpr_names = tuple(p.name for p in params if p.is_constexpr) if params else _constexprs(fn)
        # the fast path needs the compiled-kernel API and a real GPU; the interpreter launches as
        # usual
        self.fast = params is not None and not interpreting()
        self.direct = direct

    def __call__(self, grid: tuple[int, ...], *args: object, num_warps: int = 4,
                 **constexprs: object) -> None:
        self.launch(grid, args, tuple(constexprs[name] for name in self.constexpr_names), num_warps)

    def launch(self, grid: tuple[int, ...], args: tuple, values: tuple, num_warps: int) -> None:
        """The launch with the constexprs as a tuple in signature order: no keyword dict on a cached
        call."""
        first = args[0]
        if type(first) is not torch.Tensor and isinstance(first, torch.Tensor) and traced(first):
            # inside a compiler's trace of a triton_op: record the kernel, launch nothing
            torch.library.wrap_triton(self.fn)[grid](*args, num_warps=num_warps,
                                                     **self._named(values))
            return
        if not self.fast:
            self.fn[grid](*args, num_warps=num_warps, **self._named(values))
            return
        device = first.get_device()
        if device != _current_device():
            # Triton launches on the current device; a model spread over GPUs (device_map="auto")
            # calls with tensors on another one, so launch there
            with torch.cuda.device(device):
                self.launch(grid, args, values, num_warps)
            return
        key = (device, num_warps, values, _exact(args))
        bound = self.cache.get(key)
        if bound is None:
            bound = self._bind(grid, args, values, num_warps, device, key)
            if bound is None:  # compiled and launched by Triton just now
                return
        self._run(bound, grid, args, None, values, num_warps, device)

    def launch_split(self, grid: tuple[int, ...], tensors: tuple, scalars: tuple, values: tuple,
                     num_warps: int) -> None:
        """``launch(grid, tensors + scalars, values, num_warps)`` for a kernel whose tensor
        arguments all come before the others. The exact key is then built from C-level maps over
        each group (every tensor's dtype and address modulo 16; the scalars and their types), with
        no per-argument type test in Python: half the host time of ``launch``'s key
        (benchmarks/BENCHMARKS-kernels.md "Evidence moved from the source: kernel constants"). Its
        keys never equal ``launch``'s (other lengths) and, like them, equal keys have equal
        specializations."""
        first = tensors[0]
        # a trace, a Parameter, the interpreter
        if type(first) is not torch.Tensor or not self.fast:
            self.launch(grid, tensors + scalars, values, num_warps)
            return
        device = first.get_device()
        if device != _current_device():
            self.launch(grid, tensors + scalars, values, num_warps)
            return
        ptrs = list(map(_data_ptr, tensors))
        key = (device, num_warps, values, tuple(map(_dtype, tensors)),
               tuple([p & 15 for p in ptrs]), scalars, tuple(map(type, scalars)))
        bound = self.cache.get(key)
        if bound is None:
            bound = self._bind(grid, tensors + scalars, values, num_warps, device, key)
            if bound is None:  # compiled and launched by Triton just now
                return
        self._run(bound, grid, tensors + scalars, ptrs + list(scalars), values, num_warps, device)

    def _run(self, bound: tuple, grid: tuple[int, ...], args: tuple, addressed: list | None,
             values: tuple, num_warps: int, device: int) -> None:
        """Launch a cached kernel: directly with ``addressed`` (args, each tensor as its address;
        None: made here) where no hook is registered, else through the compiled kernel's runner,
        else through Triton."""
        if self.direct and hooks_idle():
            n = len(grid)
            if addressed is None:
                addressed = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
            try:
                bound[1](grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1,
                         _current_stream(device),
                         bound[2], bound[3], None, None, None, *addressed, *values)
                return
            except Exception:  # noqa: BLE001 - a Triton whose launcher API differs: launch as below, from now on
                self.direct = False
        # the compiled kernel's runner takes a 3-d grid; the stream is the one it would look up
        try:
            bound[0][(*grid, 1, 1)[:3]](*args, *values, stream=_current_stream(device))
        except Exception:  # noqa: BLE001 - a Triton whose compiled-kernel API differs: launch as usual
            self.fast = False
            self.fn[grid](*args, num_warps=num_warps, **self._named(values))

    def _bind(self, grid: tuple[int, ...], args: tuple, values: tuple, num_warps: int, device: int,
              key: tuple) -> tuple | None:
        """The bound kernel for these arguments from the specialization cache, or None after
        compiling (and launching) it through Triton; either way the exact key is remembered."""
        spec = (device, num_warps, values, _specializations(args))
        bound = self.compiled.get(spec)
        launched = bound is None
        if launched:
            compiled = self.fn[grid](*args, num_warps=num_warps, **self._named(values))
            if bindable(compiled):
                bound = (compiled, compiled.run, compiled.function, compiled.packed_metadata)
            else:  # the direct launch cannot work with this triton
                bound, self.direct = (compiled, None, None, None), False
            if len(self.compiled) < MAX_COMPILED:
                self.compiled[spec] = bound
        if len(self.cache) < MAX_EXACT and spec in self.compiled:
            self.cache[key] = bound
        return None if launched else bound

    def _named(self, values: tuple) -> dict[str, object]:
        return dict(zip(self.constexpr_names, values, strict=True))


def native_is_faster(table: tuple[tuple[int, int], ...], numel: int, hidden: int) -> bool:
    """Whether PyTorch's own fused op takes less GPU time than the kernel for a [..., hidden] input
    of ``numel`` elements: ``table`` holds (widest row, below this many elements) pairs measured per
    op, narrowest first; a row takes the first class wide enough for it, and wider rows than any,
    the kernel."""
    below = next((n for widest, n in table if hidden <= widest), 0)
    return numel < below


# -- custom ops: what torch.compile and CUDA graphs see
# --------------------------------------------------
#
# Each op is registered as ``gpudoctor::<name>`` with a fake (meta) implementation giving its exact
# output shapes and dtypes and an autograd formula whose backward is a ``gpudoctor::`` op too, so a
# compiled model holds one node per op and no graph break (today's ``autograd.Function`` broke the
# graph at each launch). With ``torch.library.triton_op`` (torch >= 2.6) Inductor also sees the
# Triton kernels inside the op and schedules them with its own; ``torch.library.custom_op`` (2.4,
# 2.5) gives an opaque node; older torch has neither and keeps the ``autograd.Function`` path (with
# its graph breaks).
#
# Eager calls do not go through the ops: the dispatcher's round trip to a Python kernel and the
# generated autograd node cost about twice an ``autograd.Function``'s host time
# (benchmarks/BENCHMARKS-kernels.md "Evidence moved from the source: kernel constants"); the public
# functions take the op only when ``torch.compiler.is_compiling()``.

TRITON_OP, CUSTOM_OP, FUNCTION = "triton_op", "custom_op", "autograd.Function"


def registration_api(library: object = torch.library) -> str:
    """Which registration API this torch has: TRITON_OP, CUSTOM_OP or FUNCTION (none)."""
    if hasattr(library, "triton_op") and hasattr(library, "wrap_triton") and hasattr(library,
                                                                                     "custom_op"):
        return TRITON_OP
    if hasattr(library, "custom_op"):
        return CUSTOM_OP
    return FUNCTION


API = registration_api()
# every op registered so far: name -> the API it was registered with (FUNCTION: its registration
# failed, FAILED says why, and the op keeps the autograd.Function path)
REGISTERED: dict[str, str] = {}
FAILED: dict[str, str] = {}


def define_op(name: str, impl: Callable, fake: Callable, *, reference: Callable,
              triton: bool = True) -> Callable | None:
    """Register ``gpudoctor::name`` (``impl``'s annotations give the schema); None where torch has
    no API.

    ``triton=False`` registers an opaque ``custom_op`` even where ``triton_op`` exists (an op whose
    body is mostly cuBLAS calls and in-place work on a reused buffer, which functionalization would
    copy). So does the Triton interpreter (TRITON_INTERPRET=1), whose kernels a trace cannot record.
    ``reference``: the op on CPU tensors, the same math in PyTorch ops (under the interpreter the
    CPU runs ``impl``, the kernels interpreted), so the op runs, and ``opcheck`` checks it, without
    a GPU.
    """
    api = API if (triton and not interpreting()) or API == FUNCTION else CUSTOM_OP
    if api == FUNCTION:
        return None

    @functools.wraps(impl)
    def kernel(*args):
        if args[0].device.type == "cpu" and not interpreting():
            return reference(*args)
        return impl(*args)

    qualname = f"gpudoctor::{name}"
    try:
        if api == TRITON_OP:
            op = torch.library.triton_op(qualname, kernel, mutates_args=())
        else:
            op = torch.library.custom_op(qualname, kernel, mutates_args=())
        op.register_fake(fake)  # exact shapes and dtypes, with no device work (triton_op's default runs impl)
    except Exception as exc:  # noqa: BLE001 - an older torch that cannot infer the schema: today's path
        REGISTERED[name] = FUNCTION
        FAILED[name] = f"{type(exc).__name__}: {exc}"[:200]
        return None
    REGISTERED[name] = api
    return op


def path_in_use() -> str:
    """One line for PatchReport: how the registered ops reach torch.compile."""
    apis = set(REGISTERED.values()) - {FUNCTION}
    if FAILED:
        first = next(iter(FAILED.items()))
        return (f"autograd.Function for {', '.join(sorted(FAILED))} (registration failed: "
                f"{first[0]}: {first[1]}; torch.compile breaks the graph there)"
                + ("; custom ops for the rest" if apis else ""))
    if not apis:
        return ("autograd.Function: this torch has no torch.library.custom_op (2.4+), so "
                "torch.compile breaks the graph at each patched module that runs a kernel under it")
    if TRITON_OP in apis:
        return ("gpudoctor:: ops through torch.library.triton_op: torch.compile traces them with "
                "no graph break and Inductor sees the norms' Triton kernels (the GLUs and "
                "linear_cross_entropy stay opaque ops)")
    return ("gpudoctor:: ops through torch.library.custom_op: torch.compile keeps each as one "
            "opaque node, no graph break")


def traced(t: torch.Tensor) -> bool:
    """Whether ``t`` is a tensor of a compiler's trace (a fake or functional tensor), not one with
    memory: a triton_op's body then launches through ``torch.library.wrap_triton``, which records
    the kernel."""
    return type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter)


def concrete(t2: torch.Tensor) -> tuple[int, int]:
    """(rows, H) of a 2-D tensor as ints. A compiler tracing with dynamic shapes hands the op
    symbolic sizes, but the block size, tile rows and grid are decided in Python from them
    (constexprs): the op then specializes on its input's size (a guard; a new size compiles
    again)."""
    n_rows, hidden = t2.shape
    if type(n_rows) is int and type(hidden) is int:
        return n_rows, hidden
    return int(n_rows), int(hidden)
