"""Where the host time of one ``gpudoctor.kernels.rms_norm`` forward + backward goes, the launch aside, on CPU.

``PYTHONPATH=src python3 benchmarks/probes/probe_host_path.py [--batches 31] [--calls 2000]`` needs no GPU: it
times (``time.perf_counter_ns`` around ``calls`` back-to-back calls; median and least of ``batches`` such batches,
us per call) each piece of the eager path in isolation on CPU tensors of 4 x 4096 bf16 (the shape of
bench_kernels_host.py's ``host`` part), then the whole call with the kernel path forced on (``use_triton``
True) and the launchers replaced by no-ops, then with the launchers' own Python included (each launcher
over a stand-in compiled kernel whose low-level launcher does nothing, as tests/test_kernels_host.py does),
and ``torch.nn.RMSNorm`` forward + backward on the same tensors for reference (its CPU math included).
Point PYTHONPATH at another checkout's ``src`` to time that one; pieces it lacks print as "-".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from types import SimpleNamespace

import torch
from torch.autograd.function import once_differentiable

from gpudoctor.kernels import _common
from gpudoctor.kernels import _rms_norm as _rms

SHAPE = (4, 4096)
DT = torch.bfloat16


def per_call_us(fn, calls: int, batches: int) -> tuple[float, float]:
    """(median, least) over ``batches`` of the wall time per call of ``calls`` back-to-back calls of fn, in us:
    on a machine shared with other work the least is the steadier of the two."""
    for _ in range(min(calls, 200)):
        fn()
    times = []
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter_ns() - t0) / calls / 1e3)
    return statistics.median(times), min(times)


# -- stand-ins: an autograd.Function that does nothing, launchers that launch nothing -------------------


class EmptyFunction(torch.autograd.Function):
    """Computes nothing: the floor of a Python op's forward + backward (bench_kernels_host.py uses it too)."""

    @staticmethod
    def forward(ctx, x, w):
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, dy):
        return dy, None


class _Saving(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, dy):
        _ = ctx.saved_tensors
        return dy, None


class _SavingOnce(_Saving):
    """_Saving with its backward under once_differentiable: the decorator's own cost."""

    backward = staticmethod(once_differentiable(_Saving.backward))


class _NoLaunch:
    """A launcher that launches nothing: the call's Python without the launch."""

    def launch(self, grid, args, values, num_warps) -> None:
        pass

    def launch_split(self, grid, tensors, scalars, values, num_warps) -> None:
        pass


def _stub_compiled(kernel_cls):
    """A triton CompiledKernel whose low-level launcher does nothing (tests/test_kernels_host.py's stand-in)."""
    kernel = kernel_cls.__new__(kernel_cls)
    kernel.module, kernel._run, kernel.function, kernel.packed_metadata = (
        object(),
        lambda *a: None,
        0xF00,
        ("p",),
    )
    kernel.src, kernel.name, kernel.metadata, kernel._module_pid = (
        None,
        "stub",
        SimpleNamespace(),
        -1,
    )
    return kernel


class _StubJit:
    """A @triton.jit stand-in with the real kernel's parameters: compiles to ``_stub_compiled``."""

    def __init__(self, kernel, kernel_cls) -> None:
        import inspect

        names = list(inspect.signature(getattr(kernel, "fn", kernel)).parameters)
        constexprs = _common._constexprs(kernel)
        self.params = [SimpleNamespace(name=n, is_constexpr=n in constexprs) for n in names]
        self.kernel_cls = kernel_cls

    def __getitem__(self, grid):
        return lambda *args, num_warps, **constexprs: _stub_compiled(self.kernel_cls)


class Patched:
    """``with Patched(launch):`` the kernel path forced on; launchers no-ops (``"none"``), stand-in Launchers
    (``"stub"``, the launchers' Python included) or left alone."""

    NAMES = ("_launch_fwd", "_launch_bwd", "_launch_sum")

    def __init__(self, launch: str) -> None:
        self.launch = launch

    def __enter__(self) -> None:
        self.saved = {n: getattr(_rms, n) for n in ("use_triton", *self.NAMES)}
        self.common = {
            n: getattr(_common, n) for n in ("interpreting", "_current_device", "_current_stream")
        }
        _rms.use_triton = lambda *tensors: True
        if self.launch == "none":
            for n in self.NAMES:
                setattr(_rms, n, _NoLaunch())
        elif self.launch == "stub":
            from triton.compiler.compiler import CompiledKernel

            _common.interpreting = lambda: False
            _common._current_device = lambda: -1  # a CPU tensor's get_device()
            _common._current_stream = lambda device: 7
            for n in self.NAMES:
                setattr(_rms, n, _common.Launcher(_StubJit(self.saved[n].fn, CompiledKernel)))

    def __exit__(self, *exc) -> None:
        for n, v in self.saved.items():
            setattr(_rms, n, v)
        for n, v in self.common.items():
            setattr(_common, n, v)


# -- the pieces --------------------------------------------------------------------------------------------


def pieces(x, w, dy) -> list[tuple[str, object]]:
    """(name, zero-argument callable) of each piece of the eager path, isolated."""
    xd, wd = x.detach(), w.detach()
    shape = x.shape
    hidden, n_rows = shape[-1], x.numel() // shape[-1]
    offset, casting = 0, "llama"
    out = [
        ("check_tensor x (min_dims=1)", lambda: _common.check_tensor("x", x, min_dims=1)),
        ("check_tensor weight (dims=1)", lambda: _common.check_tensor("weight", w, dims=1)),
        ("check_same x, weight", lambda: _common.check_same("x", x, weight=w)),
        ("weight.shape[0] != x.shape[-1]", lambda: w.shape[0] != x.shape[-1]),
        ("check_eps", lambda: _rms.check_eps(1e-6)),
        (
            "float(offset), casting checks",
            lambda: (float(offset), casting in _rms.CASTINGS, casting == "llama"),
        ),
        ("x.numel() == 0", lambda: x.numel() == 0),
        ("use_triton (real; False on CPU)", lambda: _common.use_triton(x, w)),
        ("torch.compiler.is_compiling()", torch.compiler.is_compiling),
        ("'torch._dynamo' in sys.modules", lambda: "torch._dynamo" in sys.modules),
        (
            "grad enabled and requires_grad",
            lambda: torch.is_grad_enabled() and (x.requires_grad or w.requires_grad),
        ),
        (
            "x.shape[-1] int check",
            lambda: x.shape[-1] if type(x.shape[-1]) is int else int(x.shape[-1]),
        ),
        ("rows_of(x)", lambda: _rms.rows_of(x, hidden)),
        ("forward plan key + lookup", lambda: _rms._FWD_PLANS.get((n_rows, hidden, x.dtype, True))),
        (
            "backward plan key + lookup (get_device)",
            lambda: _rms._BWD_PLANS.get((n_rows, hidden, x.dtype, x.get_device(), True, True)),
        ),
        ("x.element_size()", x.element_size),
        ("torch.empty_like(x)", lambda: torch.empty_like(xd)),
        ("x.new_empty(x.shape)", lambda: xd.new_empty(shape)),
        ("x.new_empty(rows, dtype=fp32)", lambda: xd.new_empty(n_rows, dtype=torch.float32)),
        (
            "torch.empty(rows, dtype, device)",
            lambda: torch.empty(n_rows, dtype=torch.float32, device=xd.device),
        ),
        ("w.new_empty(hidden)", lambda: wd.new_empty(hidden)),
        (
            "_exact(forward args)",
            lambda: _common._exact((xd, wd, xd, xd, hidden, hidden, n_rows, hidden, 1e-6, 0.0)),
        ),
        ("hooks_idle()", _common.hooks_idle if _common.tl is not None else (lambda: None)),
        ("x.data_ptr() x4", lambda: (xd.data_ptr(), wd.data_ptr(), xd.data_ptr(), xd.data_ptr())),
    ]

    def fn_of(cls):
        def run():
            x.grad = w.grad = None
            cls.apply(x, w).backward(dy)

        return run

    def c_apply_of(cls):
        if not hasattr(_rms, "_c_apply"):  # a checkout without it: the row prints "-"
            return lambda: _rms._c_apply  # raises AttributeError when timed
        c_apply = _rms._c_apply(cls)[0]

        def run():
            x.grad = w.grad = None
            c_apply(x, w).backward(dy)

        return run

    def valid(x=x, weight=w):  # rms_norm's one condition for valid inputs
        return (
            isinstance(x, torch.Tensor)
            and isinstance(weight, torch.Tensor)
            and x.dim()
            and weight.dim() == 1
            and x.is_floating_point()
            and weight.dtype == x.dtype
            and weight.shape[0] == x.shape[-1]
            and weight.device == x.device
        )

    out += [
        ("the checks above in one condition", valid),
        ("Function.apply fwd+bwd, empty bodies", fn_of(EmptyFunction)),
        ("  + save_for_backward / saved_tensors", fn_of(_Saving)),
        ("  + once_differentiable", fn_of(_SavingOnce)),
        ("Function's C apply fwd+bwd, empty bodies", c_apply_of(EmptyFunction)),
    ]
    return out


def whole(x, w, dy, casting: str = "llama"):
    def run():
        x.grad = w.grad = None
        _rms.rms_norm(x, w, 1e-6, casting=casting).backward(dy)

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=31)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the pieces are single-threaded host work; no pool to wake
    x = torch.randn(SHAPE, dtype=DT, requires_grad=True)
    w = torch.ones(SHAPE[-1], dtype=DT, requires_grad=True)
    dy = torch.ones_like(x)
    rows: list[tuple[str, tuple[float, float] | None]] = []
    for name, fn in pieces(x, w, dy):
        try:
            rows.append((name, per_call_us(fn, args.calls, args.batches)))
        except (AttributeError, TypeError):  # a piece this checkout lacks
            rows.append((name, None))
    whole_calls = max(args.calls // 10, 50)
    with Patched("none"):
        rows.append(
            (
                "rms_norm fwd+bwd, launchers no-ops",
                per_call_us(whole(x, w, dy), whole_calls, args.batches),
            )
        )
        rows.append(
            ("  gemma casting", per_call_us(whole(x, w, dy, "gemma"), whole_calls, args.batches))
        )
        with torch.no_grad():
            xi, wi = x.detach(), w.detach()
            rows.append(
                (
                    "rms_norm forward, no grad, no-op launch",
                    per_call_us(lambda: _rms.rms_norm(xi, wi, 1e-6), args.calls, args.batches),
                )
            )
    if _common.tl is not None:
        with Patched("stub"):
            xd, wd = x.detach(), w.detach()
            y, rstd = torch.empty_like(xd), torch.empty(SHAPE[0])
            tensors, scalars = (
                (xd, wd, y, rstd),
                (SHAPE[1], SHAPE[1], SHAPE[0], SHAPE[1], 1e-6, 0.0),
            )
            plan = _rms._forward_plan(SHAPE[0], SHAPE[1], xd.element_size(), True)
            launch = _rms._launch_fwd
            launch.launch(
                plan[0], tensors + scalars, plan[1], plan[2]
            )  # compiled: the cached path from here
            rows.append(
                (
                    "stub Launcher.launch, forward's 10 args",
                    per_call_us(
                        lambda: launch.launch(plan[0], tensors + scalars, plan[1], plan[2]),
                        args.calls,
                        args.batches,
                    ),
                )
            )
            try:
                rows.append(
                    (
                        "stub Launcher.launch_split, the same",
                        per_call_us(
                            lambda: launch.launch_split(
                                plan[0], tensors, scalars, plan[1], plan[2]
                            ),
                            args.calls,
                            args.batches,
                        ),
                    )
                )
            except AttributeError:  # a checkout without it
                rows.append(("stub Launcher.launch_split, the same", None))
            rows.append(
                (
                    "rms_norm fwd+bwd, stub Launchers",
                    per_call_us(whole(x, w, dy), whole_calls, args.batches),
                )
            )
    module = torch.nn.RMSNorm(SHAPE[-1], eps=1e-6, dtype=DT)

    def torch_run():
        x.grad = None
        module.weight.grad = None
        module(x).backward(dy)

    rows.append(
        (
            "torch.nn.RMSNorm fwd+bwd (CPU math too)",
            per_call_us(torch_run, whole_calls, args.batches),
        )
    )
    width = max(len(n) for n, _ in rows)
    print(f"{'piece (4 x 4096 bf16, CPU), us a call':<{width}}   median    least")
    for name, us in rows:
        print(
            f"{name:<{width}}  "
            + ("      -        -" if us is None else f"{us[0]:7.2f}  {us[1]:7.2f}")
        )


if __name__ == "__main__":
    main()
