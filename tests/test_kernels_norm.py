"""gpudoctor.kernels.rms_norm / layer_norm against PyTorch references, under the Triton interpreter.

TRITON_INTERPRET=1 is set before triton is imported (triton.jit reads it when a kernel is decorated),
so the kernels run on CPU tensors. References: the HF LlamaRMSNorm / GemmaRMSNorm math written out
below, and torch.nn.functional.layer_norm.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
if os.environ["TRITON_INTERPRET"] != "1":
    pytest.skip(
        "TRITON_INTERPRET is set to something other than 1: no kernels on CPU",
        allow_module_level=True,
    )

import gpudoctor.kernels._layer_norm as ln_mod
import gpudoctor.kernels._rms_norm as rms_mod
from gpudoctor.errors import InputError

if (
    type(rms_mod._rms_norm_fwd).__name__ != "InterpretedFunction"
):  # imported earlier, before the env was set
    rms_mod = importlib.reload(rms_mod)
    ln_mod = importlib.reload(ln_mod)

FP32 = {"atol": 1e-5, "rtol": 1e-5}
# bf16 against an fp32 reference: one rounding of the output (llama casting: two). The interpreter
# truncates fp32 -> bf16 where a GPU rounds to nearest, so a rounding costs up to 1 ulp (2^-7) here.
BF16 = {"atol": 1e-2, "rtol": 2e-2}


def bf16_tol(i, shape):
    """Tolerance of output i of (y, dx, dw, db): dw and db sum one term per row, each term off by
    up to 1 ulp of itself, so their absolute error grows with the rows summed."""
    rows = torch.Size(shape[:-1]).numel()
    return BF16 if i < 2 else {**BF16, "atol": 1e-2 * rows}


SHAPES = [(1, 1), (1, 7), (3, 4095), (5, 11008)]


# -- references ---------------------------------------------------------------------------------------


def hf_llama_rms(x, w, eps=1e-6):
    """transformers' LlamaRMSNorm.forward."""
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return w * h.to(input_dtype)


def hf_gemma_rms(x, w, eps=1e-6):
    """transformers' GemmaRMSNorm.forward (its weight is stored as w - 1)."""
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (out * (1.0 + w.float())).type_as(x)


def exact_rms(x, w, casting, eps=1e-6):
    """Both casings in fp64: the reference of fp32 inputs (for them llama's cast is a no-op)."""
    xd = x.double()
    offset = 1.0 if casting == "gemma" else 0.0
    return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * (offset + w.double())


def inputs(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = shape[-1]
    x = torch.randn(shape, generator=g)
    w = 1 + 0.1 * torch.randn(h, generator=g)
    b = 0.1 * torch.randn(h, generator=g)
    dy = torch.randn(shape, generator=g)
    return [t.to(dtype) for t in (x, w, b, dy)]


def grads(fn, tensors, dy):
    """(output, grads of every tensor) with fresh leaves that require grad."""
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    y = fn(*leaves)
    return (y, *torch.autograd.grad(y, leaves, dy, allow_unused=True))


def close(got, want, **tol):
    torch.testing.assert_close(got.double(), want.double(), **tol)


def kernel_ran(y):
    return type(y.grad_fn).__name__ in ("_RMSNormFunctionBackward", "_LayerNormFunctionBackward")


# -- RMSNorm -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("casting", ["llama", "gemma"])
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm_fp32(shape, casting):
    x, w, _, dy = inputs(shape)
    offset = 1.0 if casting == "gemma" else 0.0
    got = grads(lambda x, w: rms_mod.rms_norm(x, w, offset=offset, casting=casting), (x, w), dy)
    want = grads(lambda x, w: exact_rms(x, w, casting), (x, w), dy.double())
    assert kernel_ran(got[0]) and got[0].dtype == torch.float32
    for g, r in zip(got, want):
        close(g, r, **FP32)


@pytest.mark.parametrize("casting", ["llama", "gemma"])
@pytest.mark.parametrize("shape", SHAPES[1:])
def test_rms_norm_bf16(shape, casting):
    x, w, _, dy = inputs(shape, torch.bfloat16)
    offset = 1.0 if casting == "gemma" else 0.0
    got = grads(lambda x, w: rms_mod.rms_norm(x, w, offset=offset, casting=casting), (x, w), dy)
    ref = hf_llama_rms if casting == "llama" else hf_gemma_rms
    want = grads(ref, (x.float(), w.float()), dy.float())  # fp32 reference, cast by the comparison
    assert kernel_ran(got[0]) and all(g.dtype == torch.bfloat16 for g in got)
    for i, (g, r) in enumerate(zip(got, want)):
        close(g, r.to(torch.bfloat16), **bf16_tol(i, shape))


def test_rms_norm_matches_hf_rounding_fp16():
    """Llama casting rounds x_hat to fp16 before the weight: the kernel's output is HF's, bit for bit
    but for the odd last-bit flip (the kernel's sum order and rsqrt differ from torch's)."""
    x, w, _, _ = inputs((5, 11008), torch.float16)
    got = rms_mod.rms_norm(x, w)
    want = hf_llama_rms(x, w)
    assert (got == want).float().mean() > 0.999
    close(got, want, atol=0, rtol=2**-10)  # at most one fp16 ulp
    gemma = rms_mod.rms_norm(x, w, offset=1.0, casting="gemma")
    assert (gemma == hf_gemma_rms(x, w)).float().mean() > 0.999


# -- LayerNorm -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("affine", ["weight+bias", "weight", "none"])
@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm_fp32(shape, affine):
    x, w, b, dy = inputs(shape)
    tensors = {"weight+bias": (x, w, b), "weight": (x, w), "none": (x,)}[affine]

    def pad(t):
        return list(t) + [None] * (3 - len(t))

    got = grads(lambda *t: ln_mod.layer_norm(*pad(t)), tensors, dy)
    want = grads(
        lambda *t: F.layer_norm(t[0], shape[-1:], *pad(t)[1:]),
        [t.double() for t in tensors],
        dy.double(),
    )
    assert kernel_ran(got[0])
    for g, r in zip(got, want):
        close(g, r, **FP32)


@pytest.mark.parametrize("shape", SHAPES[1:])
def test_layer_norm_bf16(shape):
    x, w, b, dy = inputs(shape, torch.bfloat16)
    got = grads(ln_mod.layer_norm, (x, w, b), dy)
    want = grads(
        lambda x, w, b: F.layer_norm(x, shape[-1:], w, b),
        (x.float(), w.float(), b.float()),
        dy.float(),
    )
    assert kernel_ran(got[0]) and all(g.dtype == torch.bfloat16 for g in got)
    for i, (g, r) in enumerate(zip(got, want)):
        close(g, r.to(torch.bfloat16), **bf16_tol(i, shape))


def test_fp16_both():
    x, w, b, dy = inputs((3, 4095), torch.float16)
    got = grads(ln_mod.layer_norm, (x, w, b), dy)
    want = grads(
        lambda x, w, b: F.layer_norm(x, (4095,), w, b),
        (x.float(), w.float(), b.float()),
        dy.float(),
    )
    # the kernels ran (not a fallback to torch), in fp16: y, dx, dw, db
    assert kernel_ran(got[0]) and len(got) == 4 and all(g.dtype == torch.float16 for g in got)
    for g, r in zip(got, want):
        close(g, r.half(), atol=2e-3, rtol=2e-3)
    got = grads(rms_mod.rms_norm, (x, w), dy)
    want = grads(hf_llama_rms, (x.float(), w.float()), dy.float())
    assert kernel_ran(got[0]) and len(got) == 3 and all(g.dtype == torch.float16 for g in got)
    for g, r in zip(got, want):
        close(g, r.half(), atol=2e-3, rtol=2e-3)


# -- both: wide rows, strides, 3-D, what is saved ------------------------------------------------------


def rms_pair(casting="llama"):
    return (
        lambda x, w, b: rms_mod.rms_norm(x, w, casting=casting),
        lambda x, w, b: exact_rms(x, w, casting),
    )


def ln_pair():
    return ln_mod.layer_norm, lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b)


@pytest.fixture(autouse=True)
def _fresh_launch_plans():
    """RMSNorm caches its launch plan per shape; tests that lower a tuning constant must not meet a plan
    made under another value."""
    rms_mod._FWD_PLANS.clear()
    rms_mod._BWD_PLANS.clear()
    yield
    rms_mod._FWD_PLANS.clear()
    rms_mod._BWD_PLANS.clear()


def spy_launcher(monkeypatch, module, name, record):
    """Replace ``module.<name>`` (a Launcher) by one that calls ``record(constexprs by name, args)`` before
    each launch, whether called with keywords or through ``.launch`` / ``.launch_split``."""
    real = getattr(module, name)

    class Spy:
        constexpr_names = real.constexpr_names

        def __call__(self, grid, *args, num_warps=4, **constexprs):
            self.launch(grid, args, tuple(constexprs[n] for n in real.constexpr_names), num_warps)

        def launch(self, grid, args, values, num_warps):
            record(dict(zip(real.constexpr_names, values, strict=True)), args)
            real.launch(grid, args, values, num_warps)

        def launch_split(self, grid, tensors, scalars, values, num_warps):
            record(dict(zip(real.constexpr_names, values, strict=True)), tensors + scalars)
            real.launch_split(grid, tensors, scalars, values, num_warps)

    monkeypatch.setattr(module, name, Spy())


def _grads_per_knob(monkeypatch, pair, tensors, knob, values, launch_key=None):
    """The pair's op gradients with ``rms_mod.<knob>`` (which both norms read) set to each of ``values``,
    and what the backward launch got as ``launch_key`` (default: the knob's name) each time."""
    x, w, b, dy = tensors
    op, _ = pair()
    module = rms_mod if pair is rms_pair else ln_mod
    results, used = [], []
    key = launch_key or knob
    spy_launcher(monkeypatch, module, "_launch_bwd", lambda k, _: used.append(k[key]))
    for value in values:
        monkeypatch.setattr(rms_mod, knob, value)
        rms_mod._BWD_PLANS.clear()
        results.append(grads(op, (x, w, b), dy))
    return results, used


def _assert_equal_grads(first, second):
    for a, r in zip(first, second):
        if r is not None:
            assert torch.equal(a, r)


def check_fp32(op, ref, x, w, b, dy):
    got = grads(op, (x, w, b), dy)
    want = grads(ref, (x.double(), w.double(), b.double()), dy.double())
    assert kernel_ran(got[0])
    for g, r in zip(got, want):
        if r is not None:  # rms_norm ignores b: its grad is None on both sides
            close(g, r, **FP32)


@pytest.mark.parametrize("pair", [rms_pair, ln_pair])
@pytest.mark.parametrize("shape", [(3, 4095), (5, 11008), (2, 3, 1000)])
def test_column_loop(pair, shape, monkeypatch):
    """Rows wider than MAX_FUSED_BYTES loop over LOOP_BLOCK chunks (lowered here so small rows do)."""
    monkeypatch.setattr(rms_mod, "MAX_FUSED_BYTES", 2048)
    monkeypatch.setattr(rms_mod, "LOOP_BLOCK", 1024)
    assert rms_mod.tile_block(shape[-1], 4) == (1024, False)
    x, w, b, dy = inputs(shape, torch.float32, seed=1)
    check_fp32(*pair(), x, w, b, dy)


@pytest.mark.e2e
@pytest.mark.parametrize("pair", [rms_pair, ln_pair])
def test_wide_row_default_limits(pair):
    """H = 70001 fp32 is past MAX_FUSED_BYTES: the looping kernels, at their real chunk size."""
    assert rms_mod.tile_block(70001, 4)[1] is False
    x, w, b, dy = inputs((2, 70001), seed=2)
    check_fp32(*pair(), x, w, b, dy)


@pytest.mark.parametrize("pair", [rms_pair, ln_pair])
@pytest.mark.parametrize("view", ["transposed", "sliced", "strided-3d"])
def test_non_contiguous_input(pair, view):
    g = torch.Generator().manual_seed(3)
    h = 300
    if view == "transposed":  # column stride != 1: copied once
        x = torch.randn(h, 6, generator=g).t()
    elif view == "sliced":  # row stride 310: read in place
        x = torch.randn(6, h + 10, generator=g)[:, 5 : h + 5]
    else:  # [2, 3, H] out of [2, 6, H]: one row stride of 2H, read in place
        x = torch.randn(2, 6, h, generator=g)[:, ::2, :]
    assert not x.is_contiguous()
    rows = rms_mod.as_rows(x, h)
    assert (rows.data_ptr() == x.data_ptr()) == (view != "transposed")
    _, w, b, _ = inputs((h,), seed=4)
    dy = (
        torch.randn(x.shape, generator=g).transpose(0, -1).contiguous().transpose(0, -1)
    )  # strided too
    check_fp32(*pair(), x, w, b, dy)


@pytest.mark.parametrize("pair", [rms_pair, ln_pair])
def test_3d_input_and_expanded_grad(pair):
    x, w, b, _ = inputs((2, 5, 96), seed=5)
    op, ref = pair()
    got = grads(
        lambda *t: op(*t).sum(), (x, w, b), torch.tensor(1.0)
    )  # dy is an expanded (stride 0) tensor
    want = grads(
        lambda *t: ref(*t).sum(), (x.double(), w.double(), b.double()), torch.tensor(1.0).double()
    )
    for g, r in zip(got[1:3], want[1:3]):
        close(g, r, **FP32)
    y = op(x.requires_grad_(), w, b)
    assert y.shape == x.shape and kernel_ran(y)


def test_saves_only_input_and_row_statistics():
    x, w, b, _ = inputs((2, 5, 96))
    x.requires_grad_()
    x_hat_saved = rms_mod.rms_norm(x, w).grad_fn.saved_tensors
    # a contiguous input is saved as it is (no view built), LayerNorm's as its [rows, H] view
    assert [tuple(t.shape) for t in x_hat_saved] == [(2, 5, 96), (96,), (10,)]
    assert x_hat_saved[0].data_ptr() == x.data_ptr() and x_hat_saved[2].dtype == torch.float32
    saved = ln_mod.layer_norm(x, w, b).grad_fn.saved_tensors
    assert [tuple(t.shape) for t in saved] == [(10, 96), (96,), (10,), (10,)]
    assert saved[0].data_ptr() == x.data_ptr()


def test_frozen_weight_and_empty_input():
    x, w, b, dy = inputs((4, 33))
    x.requires_grad_()
    for op, ref in (rms_pair(), ln_pair()):
        (dx,) = torch.autograd.grad(op(x, w, b), x, dy)  # w, b need no grad: dw, db are not reduced
        (dx_ref,) = torch.autograd.grad(ref(x.double(), w.double(), b.double()), x, dy.double())
        close(dx, dx_ref, **FP32)
    empty = torch.empty(0, 33)
    assert rms_mod.rms_norm(empty, w).shape == (0, 33) and ln_mod.layer_norm(empty, w, b).shape == (
        0,
        33,
    )


# -- the native path -----------------------------------------------------------------------------------


def test_native_fp64():
    x, w, b, _ = inputs((3, 40), torch.float64)
    for casting in ("llama", "gemma"):
        y = rms_mod.rms_norm(x, w, offset=float(casting == "gemma"), casting=casting)
        assert not kernel_ran(y) and y.dtype == torch.float64
        close(y, exact_rms(x, w, casting), atol=1e-12, rtol=1e-12)
    close(ln_mod.layer_norm(x, w, b), F.layer_norm(x, (40,), w, b), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_cpu_matches_kernel(dtype, monkeypatch):
    """Without the interpreter a CPU tensor takes the native path: the same values and gradients."""
    x, w, b, dy = inputs((3, 4095), dtype)
    ops = (
        lambda x, w, b: rms_mod.rms_norm(x, w),
        lambda x, w, b: rms_mod.rms_norm(x, w, 1e-5, offset=1.0, casting="gemma"),
        ln_mod.layer_norm,
    )
    for op in ops:
        kernel = grads(op, (x, w, b), dy)
        with monkeypatch.context() as m:
            m.setenv("TRITON_INTERPRET", "0")
            native = grads(op, (x, w, b), dy)
        assert kernel_ran(kernel[0]) and not kernel_ran(native[0])
        for i, (k, n) in enumerate(zip(kernel, native)):
            if n is not None:
                close(k, n, **(FP32 if dtype == torch.float32 else bf16_tol(i, x.shape)))


def test_native_llama_is_hf_bit_for_bit(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x, w, _, _ = inputs((3, 4095), torch.bfloat16)
    assert torch.equal(rms_mod.rms_norm(x, w), hf_llama_rms(x, w))
    assert torch.equal(rms_mod.rms_norm(x, w, offset=1.0, casting="gemma"), hf_gemma_rms(x, w))


@pytest.mark.e2e
def test_without_triton_in_a_fresh_process():
    """No triton at all (blocked import): the modules import and the native path computes."""
    code = textwrap.dedent("""
        import os, sys
        os.environ.pop("TRITON_INTERPRET", None)
        sys.modules["triton"] = None
        import torch, torch.nn.functional as F
        from gpudoctor.kernels._layer_norm import layer_norm
        from gpudoctor.kernels._rms_norm import rms_norm
        x, w, b = torch.randn(4, 7), torch.rand(7), torch.rand(7)
        ref = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
        assert torch.allclose(rms_norm(x, w), ref, atol=1e-6)
        assert torch.allclose(layer_norm(x, w, b), F.layer_norm(x, (7,), w, b), atol=1e-6)
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# -- modules ------------------------------------------------------------------------------------------


class HFLlamaRMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        return hf_llama_rms(hidden_states, self.weight, self.variance_epsilon)


def test_rms_norm_module():
    hf = HFLlamaRMSNorm(7, eps=1e-5)
    with torch.no_grad():
        hf.weight.add_(0.1 * torch.randn(7))
    ours = rms_mod.RMSNorm.from_module(hf)
    assert ours.weight is hf.weight and ours.variance_epsilon == 1e-5 and ours.hidden_size == 7
    x = torch.randn(2, 3, 7)
    close(ours(x), hf(x), **FP32)
    ours.variance_epsilon = 1e-3
    assert ours.eps == 1e-3
    fresh = rms_mod.RMSNorm(7)
    fresh.load_state_dict(hf.state_dict())
    close(fresh(x), rms_mod.rms_norm(x, hf.weight), atol=0, rtol=0)
    gemma = rms_mod.RMSNorm(7, offset=1.0, casting="gemma")
    assert torch.equal(gemma.weight, torch.zeros(7))  # the scale 1 + w starts at 1
    close(gemma(x), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), **FP32)
    assert "casting='gemma'" in repr(gemma)


def test_layer_norm_module():
    ref = torch.nn.LayerNorm(33, eps=1e-4)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    ours = ln_mod.LayerNorm(33, eps=1e-4)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(4, 33)
    y = ours(x)
    assert kernel_ran(y) and isinstance(ours, torch.nn.LayerNorm)
    close(y, ref(x), **FP32)
    no_bias = ln_mod.LayerNorm(33, bias=False)
    assert no_bias.bias is None
    close(no_bias(x), F.layer_norm(x, (33,), no_bias.weight, None), **FP32)


# -- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x, w: rms_mod.rms_norm(x.tolist(), w), "x must be a torch.Tensor, got list"),
        (lambda x, w: rms_mod.rms_norm(x, 1.0), "weight must be a torch.Tensor, got float"),
        (
            lambda x, w: rms_mod.rms_norm(x, w[:5]),
            r"weight has 5 elements but x's last dimension .* is 7",
        ),
        (
            lambda x, w: rms_mod.rms_norm(x, w.bfloat16()),
            "weight is torch.bfloat16 but x is torch.float32",
        ),
        (lambda x, w: rms_mod.rms_norm(x, w.to("meta")), "weight is on meta but x is on cpu"),
        (lambda x, w: rms_mod.rms_norm(x.long(), w), "x must be a floating-point tensor"),
        (
            lambda x, w: rms_mod.rms_norm(x, w, casting="mistral"),
            "casting must be one of 'llama', 'gemma'",
        ),
        (lambda x, w: rms_mod.rms_norm(x, w, eps=-1.0), "eps must be a number >= 0"),
        (
            lambda x, w: rms_mod.rms_norm(x[0, 0], w),
            r"x must have at least 1 dimension\(s\), got shape \(\)",
        ),
        (
            lambda x, w: rms_mod.rms_norm(x, w[None]),
            r"weight must have 1 dimension\(s\), got shape \(1, 7\)",
        ),
        (lambda x, w: rms_mod.rms_norm(x, w.long()), "weight must be a floating-point tensor"),
        (
            lambda x, w: rms_mod.rms_norm(x, w, eps=float("nan")),
            "eps must be a number >= 0, got nan",
        ),
        (lambda x, w: rms_mod.rms_norm(x, w, eps=True), "eps must be a number >= 0, got True"),
        (
            lambda x, w: ln_mod.layer_norm(x, w, w[:6]),
            r"bias has 6 elements but x's last dimension .* is 7",
        ),
        (lambda x, w: ln_mod.layer_norm(x, "w", None), "weight must be a torch.Tensor, got str"),
        (
            lambda x, w: ln_mod.layer_norm(x, w, w.half()),
            "bias is torch.float16 but x is torch.float32",
        ),
        (lambda x, w: ln_mod.layer_norm(x, None, w.to("meta")), "bias is on meta but x is on cpu"),
        (lambda x, w: ln_mod.LayerNorm((3, 7)), "normalized_shape must be one int"),
        (
            lambda x, w: rms_mod.RMSNorm.from_module(torch.nn.ReLU()),
            "has no weight and variance_epsilon/eps",
        ),
    ],
)
def test_errors(call, message):
    x, w, _, _ = inputs((2, 7))
    with pytest.raises(InputError, match=message):
        call(x, w)


@pytest.mark.parametrize("pair", [rms_pair, ln_pair])
@pytest.mark.parametrize("shape", [(37, 100), (5, 3, 60), (3, 33)])
def test_row_tiles_with_a_partial_last_tile(pair, shape, monkeypatch):
    """Narrow rows go [ROWS, BLOCK] at a time; the last tile is cut short by the row count, and a
    backward program that owns several tiles sums its partial weight gradient over all of them."""
    monkeypatch.setattr(rms_mod, "TILE_ELEMENTS", 512)
    monkeypatch.setattr(ln_mod, "TILE_ELEMENTS", 512)
    rows = torch.Size(shape[:-1]).numel()
    block, single = rms_mod.tile_block(shape[-1], 4)
    tile_rows = rms_mod.rows_per_tile(block, single, rows)
    assert tile_rows > 1 and rows % tile_rows != 0
    n_tiles = -(-rows // tile_rows)
    _, per = rms_mod.grid_programs(torch.device("cpu"), n_tiles, 4)
    assert n_tiles <= 2 or per > 1  # some program walks more than one tile (4 interpreter programs)
    x, w, b, dy = inputs(shape, torch.float32, seed=7)
    check_fp32(*pair(), x, w, b, dy)


@pytest.mark.parametrize("op", ["rms", "ln"])
def test_inference_takes_the_kernel_without_an_autograd_node(op, monkeypatch):
    """Under no_grad (or with nothing requiring grad) the forward kernel runs alone: same output,
    no graph, nothing saved."""
    x, w, b, _ = inputs((6, 300), torch.float32, seed=11)
    fn = (lambda x, w, b: rms_mod.rms_norm(x, w)) if op == "rms" else ln_mod.layer_norm
    launched = []
    module = rms_mod if op == "rms" else ln_mod
    real = module._forward
    monkeypatch.setattr(module, "_forward", lambda *a: launched.append(1) or real(*a))
    with torch.no_grad():
        y = fn(x, w, b)
    assert y.grad_fn is None and launched == [1]
    y_plain = fn(x, w, b)  # no input requires grad: also no node
    assert y_plain.grad_fn is None and launched == [1, 1]
    want = fn(x.requires_grad_(True), w, b)
    assert kernel_ran(want)
    torch.testing.assert_close(y, want.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("affine", ["weight+bias", "weight", "bias"])
@pytest.mark.parametrize("shape", [(37, 100), (3, 5, 70)])
def test_layer_norm_split_backward(affine, shape, monkeypatch):
    """Wide rows take a dx kernel without the weight/bias accumulators, then a column-parallel kernel
    for the partials (lowered limits here so small rows do, with partial row and column tiles)."""
    monkeypatch.setattr(ln_mod, "SPLIT_MIN_BLOCK", 64)
    monkeypatch.setattr(ln_mod, "SPLIT_ROWS", 4)
    monkeypatch.setattr(ln_mod, "SPLIT_COLS", 32)
    monkeypatch.setattr(
        ln_mod, "FUSED_WIDE_MAX_TILES", 0
    )  # one tile a program here: split all the same
    launched = []
    real = ln_mod._split_partials
    monkeypatch.setattr(ln_mod, "_split_partials", lambda *a: launched.append(1) or real(*a))
    x, w, b, dy = inputs(shape, torch.float32, seed=13)
    params = {"weight": w, "bias": b}
    used = [k for k in ("weight", "bias") if k in affine]

    def run(op, dtype):
        leaves = [x.to(dtype).requires_grad_()] + [
            params[k].to(dtype).requires_grad_() for k in used
        ]
        kw = dict(zip(used, leaves[1:]))
        y = op(leaves[0], kw.get("weight"), kw.get("bias"))
        return (y, *torch.autograd.grad(y, leaves, dy.to(dtype)))

    got = run(ln_mod.layer_norm, torch.float32)
    want = run(lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b), torch.float64)
    assert launched and kernel_ran(got[0])
    for g, r in zip(got, want):
        close(g, r, **FP32)


# -- stage two: the weight / bias gradient summed over the backward programs' partial rows -------------


@pytest.mark.parametrize("n_parts", [1, 7, 70])
@pytest.mark.parametrize("hidden", [1, 100, 4095])
def test_sum_partials_fp32(n_parts, hidden, monkeypatch):
    """One launch sums (programs, H) fp32 partials over the programs, one buffer or two at once (70
    rows: four full blocks of 16 and a partial one; 4095 columns: a partial last column block)."""
    monkeypatch.setattr(rms_mod, "SUM_ROWS", 16)
    g = torch.Generator().manual_seed(hidden + n_parts)
    p, q = (10 * torch.randn(n_parts, hidden, generator=g) for _ in range(2))
    (one,) = rms_mod.sum_rows([(p, torch.float32)])
    both = rms_mod.sum_rows([(p, torch.float32), (q, torch.float32)])
    for got, part in ((one, p), (both[0], p), (both[1], q)):
        assert got.dtype == torch.float32 and got.shape == (hidden,)
        close(got, part.double().sum(0), atol=1e-4, rtol=1e-6)


@pytest.mark.parametrize("hidden", [1, 4095])
@pytest.mark.parametrize("n_parts", [37, 264])
def test_sum_partials_rounds_once(hidden, n_parts, monkeypatch):
    """Half-precision outputs are the fp32 sum rounded once, each in its own dtype: within one ulp of
    the exact sum (the interpreter truncates where a GPU rounds to nearest) and of PyTorch's
    ``sum(0).to(dtype)``, the two kernels this launch replaces."""
    monkeypatch.setattr(rms_mod, "SUM_ROWS", 32)
    monkeypatch.setattr(rms_mod, "SUM_COLS", 64)
    g = torch.Generator().manual_seed(n_parts)
    p, q = (torch.randn(n_parts, hidden, generator=g) for _ in range(2))
    dw, db = rms_mod.sum_rows([(p, torch.bfloat16), (q, torch.float16)])
    assert (dw.dtype, db.dtype) == (torch.bfloat16, torch.float16)
    for got, part, ulp in ((dw, p, 2**-7), (db, q, 2**-10)):
        fp32_err = n_parts * float(part.abs().max()) * 2**-23  # the fp32 sum's own error, at most
        close(got, part.double().sum(0), atol=fp32_err, rtol=ulp)
        close(got, part.sum(0).to(got.dtype), atol=fp32_err, rtol=ulp)


@pytest.mark.parametrize("pair", [rms_pair, ln_pair])
@pytest.mark.parametrize("shape", [(9, 100), (9, 8, 1)])
def test_backward_stage_two_with_small_blocks(pair, shape, monkeypatch):
    """dw (and db) through the stage-two kernel with blocks smaller than the partials: several column
    programs, a row loop over the programs' partial rows with a partial last block."""
    monkeypatch.setattr(rms_mod, "TILE_ELEMENTS", 8)
    monkeypatch.setattr(ln_mod, "TILE_ELEMENTS", 8)
    monkeypatch.setattr(rms_mod, "SUM_ROWS", 2)
    monkeypatch.setattr(rms_mod, "SUM_COLS", 8)
    launched = []
    spy_launcher(
        monkeypatch, rms_mod, "_launch_sum", lambda k, a: launched.append((a[4], k["HAS_Q"]))
    )
    x, w, b, dy = inputs(shape, torch.float32, seed=17)
    check_fp32(*pair(), x, w, b, dy)
    # one launch (LayerNorm's dw and db in it together), over 3 partial rows (9 row tiles over at most 4
    # interpreter programs: 3 tiles each): a full block of 2 and a partial one
    assert launched == [(3, pair is ln_pair)]


@pytest.mark.parametrize("pair", [rms_pair, ln_pair])
def test_prefetch_changes_no_result(pair, monkeypatch):
    """The backward that loads the next row tile early computes exactly what the plain one does (tiles
    of 2 rows, 37 rows: the last tile is cut short; some programs walk several tiles)."""
    monkeypatch.setattr(rms_mod, "TILE_ELEMENTS", 256)
    monkeypatch.setattr(ln_mod, "TILE_ELEMENTS", 256)
    x, w, b, dy = inputs((37, 100), torch.bfloat16, seed=19)
    results, used = _grads_per_knob(monkeypatch, pair, (x, w, b, dy), "PREFETCH", (False, True))
    assert used == [False, True]
    _assert_equal_grads(*results)
    assert not rms_mod.use_prefetch(x.float(), 2, 128, 4)  # fp32: not measured, not taken
    assert not rms_mod.use_prefetch(x, 1, 16384, 16)  # 32 elements a thread: spilled


def test_layer_norm_pipelined_tile_loop(monkeypatch):
    """Tiles of 3 to PIPELINE_MAX_ROWS rows (16-bit) have Triton pipeline the backward's tile loop in place
    of the register prefetch; the result is the same (the interpreter runs the loop as written)."""
    monkeypatch.setattr(ln_mod, "TILE_ELEMENTS", 512)  # 100 wide: blocks of 128, 4 rows a tile
    x, w, b, dy = inputs((37, 100), torch.bfloat16, seed=23)
    used, results = [], []
    real = ln_mod._launch_bwd
    monkeypatch.setattr(
        ln_mod,
        "_launch_bwd",
        lambda *a, **k: used.append((k["PREFETCH"], k["STAGES"])) or real(*a, **k),
    )
    for stages in (1, 3):
        monkeypatch.setattr(ln_mod, "PIPELINE_STAGES", stages)
        results.append(grads(ln_mod.layer_norm, (x, w, b), dy))
    assert used == [(False, 1), (False, 3)]
    for a, r in zip(*results):
        assert torch.equal(a, r)
    grads(ln_mod.layer_norm, (x.float(), w.float(), b.float()), dy.float())
    assert used[-1] == (False, 1)  # fp32: not measured, not taken


def test_native_thresholds_follow_the_h100_measurements():
    """benchmarks/results/native_threshold_h100_2026-11-24.json: where PyTorch's fused op took less GPU
    time than the kernel (forward + backward, bf16), the call goes to it; nowhere else."""
    from gpudoctor.kernels._common import native_is_faster
    from gpudoctor.kernels._layer_norm import NATIVE_BELOW as LN
    from gpudoctor.kernels._rms_norm import NATIVE_BELOW as RMS

    def native(table, m, h):
        return native_is_faster(table, m * h, h)

    # RMSNorm (torch.nn.RMSNorm's casting): torch's only at 64K elements of narrow rows
    assert native(RMS, 256, 256) and native(RMS, 64, 1024)
    assert not native(RMS, 1024, 256) and not native(RMS, 16, 4096) and not native(RMS, 4, 16384)
    # LayerNorm: narrow rows to torch's up to 256K (256 wide) / 2M (1024 wide); 4096 and wider never
    assert native(LN, 1024, 256) and not native(LN, 4096, 256)
    assert native(LN, 2048, 1024) and not native(LN, 8192, 1024)
    assert not native(LN, 16, 4096) and not native(LN, 128, 16384) and not native(LN, 4, 16384)


# -- wide rows: the weight reloaded each tile, LayerNorm fused at one tile a program; per-width tiles -----


@pytest.mark.parametrize("pair", [rms_pair, ln_pair])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reloaded_weight_changes_no_result(pair, dtype, monkeypatch):
    """The backward that reads the weight again for each row tile (RELOAD_W, 16384-wide rows on a GPU;
    lowered here) computes exactly what the one holding it does: odd H (a partial column block), 37 rows
    in tiles of 2 (a partial last tile; programs walk several tiles)."""
    monkeypatch.setattr(rms_mod, "TILE_ELEMENTS", 256)
    monkeypatch.setattr(ln_mod, "TILE_ELEMENTS", 256)
    monkeypatch.setattr(
        ln_mod, "SPLIT_MIN_BLOCK", 1 << 30
    )  # LayerNorm: the fused backward at any tile count
    x, w, b, dy = inputs((37, 100), dtype, seed=29)
    results, used = _grads_per_knob(
        monkeypatch,
        pair,
        (x, w, b, dy),
        "RELOAD_W_MIN_BLOCK",
        (1 << 30, 128),
        launch_key="RELOAD_W",
    )
    assert used == [False, True]
    _assert_equal_grads(*results)
    if dtype == torch.float32:
        check_fp32(*pair(), x, w, b, dy)


@pytest.mark.parametrize("shape, fused", [((3, 100), True), ((2, 3, 70), True), ((37, 100), False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_wide_rows_fused_at_one_tile_a_program(shape, fused, dtype, monkeypatch):
    """Rows at least SPLIT_MIN_BLOCK wide (lowered here) keep the fused backward, with the weight reloaded,
    when each program gets one row tile (FUSED_WIDE_MAX_TILES); more tiles a program take the split one."""
    monkeypatch.setattr(ln_mod, "SPLIT_MIN_BLOCK", 64)
    monkeypatch.setattr(
        ln_mod, "TILE_ELEMENTS", 256
    )  # 2 rows a tile: 3 rows -> 2 tiles, 37 -> 19 (4 programs)
    monkeypatch.setattr(rms_mod, "RELOAD_W_MIN_BLOCK", 64)
    split, reload = [], []
    real_split, real_bwd = ln_mod._split_partials, ln_mod._launch_bwd
    monkeypatch.setattr(ln_mod, "_split_partials", lambda *a: split.append(1) or real_split(*a))
    monkeypatch.setattr(
        ln_mod, "_launch_bwd", lambda *a, **k: reload.append(k["RELOAD_W"]) or real_bwd(*a, **k)
    )
    x, w, b, dy = inputs(shape, dtype, seed=31)
    got = grads(ln_mod.layer_norm, (x, w, b), dy)
    want = grads(
        lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b),
        (x.double(), w.double(), b.double()),
        dy.double(),
    )
    assert kernel_ran(got[0]) and bool(split) is not fused and reload == [fused]
    for i, (g, r) in enumerate(zip(got, want)):
        close(g, r, **(FP32 if dtype == torch.float32 else bf16_tol(i, shape)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("limit, backward_rows", [(10**6, 2), (100, 8)])
def test_layer_norm_tiles_by_row_width(dtype, limit, backward_rows, monkeypatch):
    """FORWARD_TILE_ELEMENTS / BACKWARD_TILE_ELEMENTS give one row width its own tiles (the backward's only
    up to a size): 37 rows of 100 (blocks of 128) go 4 rows a tile forward, 2 backward (8 above the size
    limit); partial last tiles both ways."""
    monkeypatch.setattr(ln_mod, "TILE_ELEMENTS", 1024)
    monkeypatch.setattr(ln_mod, "FORWARD_TILE_ELEMENTS", {128: 512})
    monkeypatch.setattr(ln_mod, "BACKWARD_TILE_ELEMENTS", {128: (256, limit)})
    rows = {}
    for name in ("_launch_fwd", "_launch_bwd"):
        real = getattr(ln_mod, name)
        monkeypatch.setattr(
            ln_mod,
            name,
            lambda *a, _n=name, _r=real, **k: rows.setdefault(_n, k["ROWS"]) and _r(*a, **k),
        )
    x, w, b, dy = inputs((37, 100), dtype, seed=37)
    got = grads(ln_mod.layer_norm, (x, w, b), dy)
    want = grads(
        lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b),
        (x.double(), w.double(), b.double()),
        dy.double(),
    )
    assert rows == {"_launch_fwd": 4, "_launch_bwd": backward_rows}
    for i, (g, r) in enumerate(zip(got, want)):
        close(g, r, **(FP32 if dtype == torch.float32 else bf16_tol(i, (37, 100))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("shape", "programs"), [((3, 4095), 3), ((2, 3, 1000), 2)]
)  # tiles of 1 and of 4 rows
def test_one_program_backward_stores_dw_itself(dtype, shape, programs, monkeypatch):
    """A backward of at most WHOLE_MAX_TILES row tiles runs as one program storing dw in the weight's dtype,
    with no stage two; its gradients are those of the partial-sums path (fp32: to the last bit but the
    order of the sum; bf16: one rounding of the same fp32 sum), and of the reference."""
    x, w, b, dy = inputs(shape, dtype, seed=29)
    op, _ = rms_pair()
    launched = []
    spy_launcher(monkeypatch, rms_mod, "_launch_sum", lambda k, a: launched.append(a[4]))
    seen = []
    results, grids = [], []
    real = rms_mod._launch_bwd
    monkeypatch.setattr(
        rms_mod,
        "_launch_bwd",
        SimpleNamespace(
            launch_split=lambda grid, tensors, scalars, values, warps: (
                grids.append(grid),
                real.launch_split(grid, tensors, scalars, values, warps),
            )
        ),
    )
    for tiles in (rms_mod.WHOLE_MAX_TILES, 0):
        monkeypatch.setattr(rms_mod, "WHOLE_MAX_TILES", tiles)
        rms_mod._BWD_PLANS.clear()
        results.append(grads(op, (x, w, b), dy))
        seen.append(len(launched))
    assert grids == [
        (1,),
        (programs,),
    ]  # the partial-sums path: a program a tile (up to 4 in the interpreter)
    assert seen == [0, 1]  # stage two only on the partial-sums path
    whole, partial = results
    assert (
        whole[2].dtype == dtype
        and torch.equal(whole[0], partial[0])
        and torch.equal(whole[1], partial[1])
    )
    close(
        whole[2].float(),
        partial[2].float(),
        **(FP32 if dtype == torch.float32 else bf16_tol(2, shape)),
    )
    if dtype == torch.float32:
        check_fp32(*rms_pair(), x, w, b, dy)
