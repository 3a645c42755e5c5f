"""Host cost of the eager kernels, with Triton's launch stubbed out so it runs without a GPU.

- The direct launch hands ``CompiledKernel.run`` exactly what triton's own ``CompiledKernel[grid]`` runner
  hands it (the installed triton's runner, on a compiled kernel whose handles are stand-ins), except the
  launch metadata and the two hooks, None where the runner passes empty hook chains, and each tensor's
  address where the runner passes the tensor (the C launcher reads that address from it); a registered hook
  sends the launch through the runner, and a launcher that raises makes the fallback permanent.
- An RMSNorm forward + backward makes a fixed number of Python calls into gpudoctor and launches, and
  gpudoctor's code calls a fixed list of C functions around the launch (counted, not timed).
"""

from __future__ import annotations

import inspect
import sys
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("triton")
from triton import knobs
from triton.compiler.compiler import CompiledKernel

from gpudoctor.kernels import _common
from gpudoctor.kernels import _rms_norm as _rms
from gpudoctor.kernels._common import Launcher


def _on_cpu(monkeypatch, stream: int = 7) -> None:
    """The fast path on CPU tensors: no interpreter, the current device is the CPU's -1, a fixed stream."""
    monkeypatch.setattr(_common, "interpreting", lambda: False)
    monkeypatch.setattr(_common, "_current_device", lambda: -1)
    monkeypatch.setattr(_common, "_current_stream", lambda device: stream)


def _compiled(calls: list, fail_direct: bool = False) -> CompiledKernel:
    """A triton CompiledKernel whose module, function and launcher are stand-ins: its ``__getitem__``
    runner is the installed triton's own code; its launcher records each call."""
    kernel = CompiledKernel.__new__(CompiledKernel)

    def run(*args):
        if (
            fail_direct and args[6] is None
        ):  # a launcher that wants the metadata: the direct call fails
            raise TypeError("launch_metadata must not be None")
        calls.append(args)

    kernel.module, kernel._run, kernel.function, kernel.packed_metadata = (
        object(),
        run,
        0xF00,
        ("packed",),
    )
    kernel.src, kernel.name, kernel.metadata = None, "stub", SimpleNamespace()
    kernel._module_pid = (
        -1
    )  # triton 3.9's __del__ unloads the module only in the process that loaded it
    return kernel


class FakeJit:
    """Stands in for a @triton.jit function with ``params`` (names, constexpr or not); the first launch of a
    specialization "compiles" and returns ``compiled`` (or a fresh stand-in per compile)."""

    def __init__(
        self,
        names: list[str],
        constexprs: tuple[str, ...],
        compiled: CompiledKernel | None = None,
        calls: list | None = None,
    ) -> None:
        self.params = [SimpleNamespace(name=n, is_constexpr=n in constexprs) for n in names]
        self.compiled, self.calls = compiled, calls if calls is not None else []
        self.compiles = 0

    @classmethod
    def like(cls, kernel, calls: list) -> FakeJit:
        fn = getattr(
            kernel, "fn", kernel
        )  # a JITFunction or the interpreter's wrapper: the Python function
        names = list(inspect.signature(fn).parameters)
        return cls(names, _common._constexprs(kernel), calls=calls)

    def __getitem__(self, grid):
        def compile_and_launch(*args, num_warps, **constexprs):
            self.compiles += 1
            return self.compiled or _compiled(self.calls)

        return compile_and_launch


def _launch_three(launch: Launcher, x: torch.Tensor) -> None:
    launch((3,), x, 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=4)  # compiles (through Triton)
    launch((5, 2), x, 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=4)  # cached: the direct launch
    launch.direct = False
    launch((5, 2), x, 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=4)  # cached: through the runner


def test_direct_launch_hands_the_launcher_what_tritons_runner_does(monkeypatch) -> None:
    _on_cpu(monkeypatch, stream=7)
    calls: list = []
    fn = FakeJit(["X", "n", "eps", "BLOCK", "FLAG"], ("BLOCK", "FLAG"), _compiled(calls))
    x = torch.zeros(32)
    _launch_three(Launcher(fn), x)
    assert fn.compiles == 1 and len(calls) == 2
    direct, runner = calls
    # gridX, gridY, gridZ, stream, function, packed metadata, then every argument, constexprs last
    assert direct[:6] == runner[:6] == (5, 2, 1, 7, 0xF00, ("packed",))
    assert runner[9:] == (x, 4096, 1e-6, 128, True)
    assert direct[9:] == (
        x.data_ptr(),
        4096,
        1e-6,
        128,
        True,
    )  # the address the C launcher takes from x
    assert direct[6:9] == (None, None, None)
    assert (
        runner[6] is not None and runner[7].calls == [] and runner[8].calls == []
    )  # nothing to call


def test_a_registered_launch_hook_sends_the_launch_through_the_runner(monkeypatch) -> None:
    _on_cpu(monkeypatch)
    calls: list = []
    launch = Launcher(
        FakeJit(["X", "n", "eps", "BLOCK", "FLAG"], ("BLOCK", "FLAG"), _compiled(calls))
    )
    x = torch.zeros(32)
    launch((3,), x, 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=4)

    def hook(metadata) -> None:
        pass

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert not _common.hooks_idle()
        launch((3,), x, 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=4)
        (args,) = calls
        assert args[6] is not None and args[7].calls == [
            hook
        ]  # the C launcher calls it with the metadata
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert _common.hooks_idle()
    assert launch.direct  # the next launch without a hook goes direct again
    launch((3,), x, 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=4)
    assert calls[1][6:9] == (None, None, None)


def test_a_launcher_that_rejects_the_direct_call_falls_back_for_good(monkeypatch) -> None:
    _on_cpu(monkeypatch)
    calls: list = []
    launch = Launcher(
        FakeJit(["X", "n", "eps", "BLOCK", "FLAG"], ("BLOCK", "FLAG"), _compiled(calls, True))
    )
    x = torch.zeros(32)
    for _ in range(3):
        launch((3,), x, 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=4)
    assert not launch.direct and launch.fast
    assert len(calls) == 2 and all(
        args[6] is not None for args in calls
    )  # both cached launches ran, once each


def test_exact_key_finds_the_specialization_once_then_itself(monkeypatch) -> None:
    """Two exact keys of one specialization share the compiled kernel; each is remembered after one
    specialization lookup."""
    _on_cpu(monkeypatch)
    fn = FakeJit(["X", "n", "eps", "BLOCK", "FLAG"], ("BLOCK", "FLAG"))
    launch = Launcher(fn)
    x = torch.zeros(64)
    for n in (4096, 4112, 4096, 4112):  # both divisible by 16, neither 1: one specialization
        launch((3,), x, n, 1e-6, BLOCK=128, FLAG=True, num_warps=4)
    assert fn.compiles == 1 and len(launch.compiled) == 1 and len(launch.cache) == 2
    assert len(fn.calls) == 3  # the first launch went through Triton's own launch


def test_split_launch_hands_the_launcher_what_launch_does(monkeypatch) -> None:
    """launch_split(grid, tensors, scalars, ...) is launch(grid, tensors + scalars, ...): the same direct call,
    the same compiled kernel; a misaligned tensor or an int where a float was makes another specialization."""
    _on_cpu(monkeypatch, stream=7)
    calls: list = []
    fn = FakeJit(["X", "Y", "n", "eps", "BLOCK", "FLAG"], ("BLOCK", "FLAG"), _compiled(calls))
    launch = Launcher(fn)
    x, y = torch.zeros(32), torch.zeros(32, dtype=torch.bfloat16)
    launch((3,), x, y, 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=4)  # compiles
    launch((5, 2), x, y, 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=4)
    launch.launch_split((5, 2), (x, y), (4096, 1e-6), (128, True), 4)
    assert fn.compiles == 1 and len(calls) == 2 and calls[0] == calls[1]
    assert calls[1][9:] == (x.data_ptr(), y.data_ptr(), 4096, 1e-6, 128, True)
    assert len(launch.cache) == 2  # each form its own exact key, of one specialization
    launch.launch_split(
        (5, 2), (x[1:], y), (4096, 1e-6), (128, True), 4
    )  # 4 bytes past a 16-byte boundary
    launch.launch_split(
        (5, 2), (x, y), (4096, 1), (128, True), 4
    )  # an int: Triton types it i32, not fp32
    assert fn.compiles == 3 and len(calls) == 2  # each compiled (and launched) through Triton
    launch.launch_split((5, 2), (x, y), (4096, 1), (128, True), 4)
    assert fn.compiles == 3 and calls[2][9:] == (x.data_ptr(), y.data_ptr(), 4096, 1, 128, True)


def test_exact_keys_tell_apart_what_python_calls_equal() -> None:
    """1, 1.0 and True are equal (and hash alike) in Python; Triton types them i32, fp32 and i1."""
    buf = torch.zeros(8)
    keys = [_common._exact((buf, v)) for v in (1, 1.0, True)]
    assert len(set(keys)) == 3
    assert _common._exact((buf, buf[1:], 7)) == ((torch.float32, 0), (torch.float32, 4), 7)


# -- one RMSNorm forward + backward, the launch stubbed -------------------------------------------------


@pytest.fixture
def stubbed(monkeypatch):
    """_rms_norm's launchers over stand-in kernels (the real kernels' parameters), CPU tensors taking the
    kernel path: everything an eager call does on the host except the launch itself."""
    _on_cpu(monkeypatch)
    monkeypatch.setattr(_rms, "use_triton", lambda *tensors: True)
    calls: list = []
    for name in ("_launch_fwd", "_launch_bwd", "_launch_sum"):
        monkeypatch.setattr(_rms, name, Launcher(FakeJit.like(getattr(_rms, name).fn, calls)))
    return calls


def _fwd_bwd(shape):
    x = torch.randn(shape, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(shape[-1], dtype=torch.bfloat16, requires_grad=True)
    dy = torch.ones_like(x)

    def call() -> None:
        x.grad = w.grad = None
        _rms.rms_norm(x, w, 1e-6).backward(dy)

    call.w = w
    return call


def _gpudoctor_calls(fn) -> list[str]:
    """The Python functions of gpudoctor one call of fn enters, in order."""
    entered = []

    def profile(frame, event, arg) -> None:
        if event == "call" and "gpudoctor" in frame.f_code.co_filename:
            entered.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return entered


def test_rms_norm_forward_backward_launches_and_python_calls(stubbed) -> None:
    small, tall = _fwd_bwd((4, 4096)), _fwd_bwd((64, 4096))
    for call in (small, tall):
        call()  # plans and launch keys made
    stubbed.clear()
    small()
    # 4 rows of 4096: the forward and one backward program that stores dw itself; 64 rows: + stage two
    assert [len(args) - 9 for args in stubbed] == [14, 21]
    # the backward's DW (the address of its 6th argument) is dw itself, the weight's gradient
    assert stubbed[1][:3] == (1, 1, 1) and stubbed[1][9 + 5] == small.w.grad.data_ptr()
    stubbed.clear()
    tall()
    # fp32 partial rows, one a program (4: the resident programs on CPU), summed into dw by stage two
    assert (
        len(stubbed) == 3
        and stubbed[1][:3] == (4, 1, 1)
        and stubbed[1][9 + 5] != tall.w.grad.data_ptr()
    )
    assert stubbed[2][9 + 2] == tall.w.grad.data_ptr() and stubbed[2][9 + 4 : 9 + 6] == (
        4,
        4096,
    )  # n_parts, H
    # no view, no plan, no specialization key, no device query, no check one by one (valid inputs pass one
    # condition), no Function.apply or once_differentiable wrapper: one launch each way, its key from two
    # groups of arguments (comprehension frames, which Python 3.12 inlines, left out)
    launch = ["launch_split", "_run", "hooks_idle"]
    called = [name for name in _gpudoctor_calls(small) if not name.startswith("<")]
    assert called == [
        "rms_norm",
        "apply_function",
        "forward",
        "_forward",
        "rows_of",
        *launch,
        "backward",
        "_backward",
        "rows_of",
        "rows_of",
        *launch,
    ]


def test_double_backward_raises_as_once_differentiable(stubbed) -> None:
    """The backward skips once_differentiable's wrapper only where grad mode is off (every backward without
    create_graph); with create_graph=True the wrapper runs, and differentiating its result raises."""
    x = torch.randn(4, 4096, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(4096, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.ones_like(
        x, requires_grad=True
    )  # once_differentiable marks outputs only when an input needs grad
    (dx,) = torch.autograd.grad(_rms.rms_norm(x, w, 1e-6), x, dy, create_graph=True)
    assert dx.requires_grad and type(dx.grad_fn).__name__ == "Error"  # DelayedError's node
    with pytest.raises(
        RuntimeError,
        match="trying to differentiate twice a function that was marked with @once_differentiable",
    ):
        dx.sum().backward()


def test_functorch_transforms_take_function_apply(stubbed) -> None:
    """Under torch.func the call goes through Function.apply, which rejects a Function without setup_context,
    as it did before the C apply was called directly."""
    x = torch.randn(4, 4096, dtype=torch.bfloat16)
    w = torch.ones(4096, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="it must override the setup_context"):
        torch.func.grad(lambda x: _rms.rms_norm(x, w, 1e-6).float().sum())(x)


def _gpudoctor_c_calls(fn) -> list[str]:
    """The C functions (torch's and the builtins) that gpudoctor's own code calls in one call of fn, in order."""
    called = []

    def profile(frame, event, arg) -> None:
        if event == "c_call" and "gpudoctor" in frame.f_code.co_filename:
            called.append(getattr(arg, "__name__", repr(arg)))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return called


def test_rms_norm_host_work_per_call_is_a_fixed_list_of_c_calls(stubbed) -> None:
    """Everything around the launch, one forward + backward of 4 x 4096 bf16, counted in the C functions
    gpudoctor's code calls rather than timed (a loaded machine moves the time, not the calls): a regression of
    the launch path (a per-call specialization, a view, a device query) adds calls here. Its time, 46-49 us on a
    2-core machine against 30 us for an empty autograd.Function, is benchmarks/bench_kernels_host.py's."""
    call = _fwd_bwd((4, 4096))
    call()  # plans and launch keys made
    stubbed.clear()
    checks = [
        "isinstance",
        "isinstance",
        "dim",
        "dim",
        "is_floating_point",
        "numel",
        "is_grad_enabled",
        "_are_functorch_transforms_active",
        "unwrap_if_dead",
        "unwrap_if_dead",
        "apply",
    ]
    # each way: the inputs' one condition, the outputs allocated, the device read once, the launch looked up
    launch = ["get", "getattr", "getattr", "len"]
    forward = ["is_contiguous", "numel", "get", "empty_like", "new_empty", "get_device", *launch]
    backward = [
        "is_grad_enabled",
        "is_contiguous",
        "numel",
        "is_contiguous",
        "numel",
        "get_device",
        "get",
        "empty_like",
        "new_empty",
        "get_device",
        *launch,
    ]
    assert _gpudoctor_c_calls(call) == checks + forward + backward
