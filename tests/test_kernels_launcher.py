"""The cached launcher: the compiled kernel is reused only for arguments Triton would have
specialized the same way, and is handed every argument, constexprs last, in signature order."""

from __future__ import annotations

from types import SimpleNamespace
from typing import ClassVar

import torch

from gpudoctor.kernels import _common
from gpudoctor.kernels._common import Launcher


class FakeJit:
    """Stands in for a @triton.jit function: kernel(X, n, eps, BLOCK: constexpr, FLAG: constexpr)."""

    params: ClassVar[list[SimpleNamespace]] = [
        SimpleNamespace(name=n, is_constexpr=c)
        for n, c in (("X", False), ("n", False), ("eps", False), ("BLOCK", True), ("FLAG", True))
    ]

    def __init__(self) -> None:
        self.compiles: list[tuple] = []
        self.launches: list[tuple] = []

    def __getitem__(self, grid):
        def compile_and_launch(*args, num_warps, **constexprs):
            self.compiles.append((grid, args, num_warps, constexprs))
            fake = self

            class Compiled:
                def __getitem__(self, g):
                    return lambda *a, stream=None: fake.launches.append((g, a))

            return Compiled()

        return compile_and_launch


def _on_cpu(monkeypatch) -> None:
    """The fast path on CPU tensors: no interpreter, the current device is the CPU's -1, stream 0."""
    monkeypatch.setattr(_common, "interpreting", lambda: False)
    monkeypatch.setattr(_common, "_current_device", lambda: -1)
    monkeypatch.setattr(_common, "_current_stream", lambda device: 0)


def test_cached_launch_reuses_the_kernel_only_for_the_same_specialization(monkeypatch) -> None:
    _on_cpu(monkeypatch)
    fn = FakeJit()
    launch = Launcher(fn)
    assert launch.fast and launch.constexpr_names == ("BLOCK", "FLAG")
    buf = torch.zeros(64, dtype=torch.float32)
    aligned, misaligned = buf[:32], buf[1:33]  # data_ptr % 16: 0 and 4

    launch((3,), aligned, 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=4)
    launch(
        (5,), aligned, 4112, 1e-5, BLOCK=128, FLAG=True, num_warps=4
    )  # 4112 % 16 == 0 too: cached
    assert len(fn.compiles) == 1
    assert fn.launches == [((5, 1, 1), (aligned, 4112, 1e-5, 128, True))]

    launch((5,), misaligned, 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=4)  # alignment differs
    launch(
        (5,), aligned, 4097, 1e-6, BLOCK=128, FLAG=True, num_warps=4
    )  # no longer divisible by 16
    launch(
        (5,), aligned, 1, 1e-6, BLOCK=128, FLAG=True, num_warps=4
    )  # == 1 is its own specialization
    launch((5,), aligned, 2**31, 1e-6, BLOCK=128, FLAG=True, num_warps=4)  # 64-bit integer
    launch((5,), aligned, 4096, 1e-6, BLOCK=256, FLAG=True, num_warps=4)  # another constexpr
    launch((5,), aligned, 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=8)  # another num_warps
    launch(
        (5,), aligned.to(torch.float16), 4096, 1e-6, BLOCK=128, FLAG=True, num_warps=4
    )  # another dtype
    assert len(fn.compiles) == 8
    assert len(fn.launches) == 1


def test_interpreter_launches_through_triton_every_time(monkeypatch) -> None:
    monkeypatch.setattr(_common, "interpreting", lambda: True)
    fn = FakeJit()
    launch = Launcher(fn)
    x = torch.zeros(16)
    for _ in range(3):
        launch((1,), x, 16, 0.5, BLOCK=16, FLAG=False, num_warps=1)
    assert len(fn.compiles) == 3 and not fn.launches


def test_inline_specializations_equal_one_call_per_argument() -> None:
    """The cache key's one-comprehension form keys every kind of argument as ``_specialization`` does."""
    buf = torch.zeros(16)
    args = (
        buf,
        buf[1:],
        torch.zeros(2, dtype=torch.bfloat16),
        1,
        16,
        17,
        2**31,
        2**63,
        -100,
        0.5,
        True,
    )
    assert _common._specializations(args) == tuple(map(_common._specialization, args))
    assert _common._specializations(args)[3:6] == (
        ("i", True, False, True, True),
        ("i", False, True, True, True),
        ("i", False, False, True, True),
    )


def test_positional_launch_is_the_keyword_launch(monkeypatch) -> None:
    _on_cpu(monkeypatch)
    fn = FakeJit()
    launch = Launcher(fn)
    x = torch.zeros(32)
    launch((2,), x, 64, 1e-6, BLOCK=64, FLAG=False, num_warps=2)  # compiles
    launch.launch(
        (4,), (x, 64, 1e-6), (64, False), 2
    )  # the same specialization: cached, constexprs last
    assert len(fn.compiles) == 1 and fn.compiles[0][2:] == (2, {"BLOCK": 64, "FLAG": False})
    assert fn.launches == [((4, 1, 1), (x, 64, 1e-6, 64, False))]
