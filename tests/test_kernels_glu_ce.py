"""Fused GLU (swiglu / geglu) and chunked linear cross-entropy against their PyTorch references.

Runs the Triton kernels under TRITON_INTERPRET=1 on CPU (set before triton is imported); on a GPU
machine, ``TRITON_INTERPRET=0 pytest tests/test_kernels_glu_ce.py`` runs the same tests on CUDA.
The interpreter rounds fp32 -> bf16 by truncation (the GPU rounds to nearest even), so bf16 is
compared loosely here and bit-for-bit only on CUDA.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

pytest.importorskip("triton")

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from gpudoctor.errors import InputError
from gpudoctor.kernels import cross_entropy as ce_mod
from gpudoctor.kernels.cross_entropy import chunk_rows, linear_cross_entropy
from gpudoctor.kernels.glu import fused_gated_mlp_forward, geglu, swiglu

# numpy's exp overflows to inf for very negative activations under the interpreter, as intended
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

DEVICE = "cuda" if os.environ["TRITON_INTERPRET"] != "1" and torch.cuda.is_available() else "cpu"

# -- GLU -----------------------------------------------------------------------------------------------

ACTS = {
    "silu": (swiglu, lambda g, u: F.silu(g) * u),
    "gelu_tanh": (lambda g, u: geglu(g, u), lambda g, u: F.gelu(g, approximate="tanh") * u),
    "gelu_erf": (lambda g, u: geglu(g, u, approximate="none"), lambda g, u: F.gelu(g) * u),
}


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_()


def _glu_check(act: str, gate: torch.Tensor, up: torch.Tensor, dy: torch.Tensor) -> None:
    ours, ref = ACTS[act]
    g, u = _leaf(gate), _leaf(up)
    y = ours(g, u)
    y.backward(dy)
    assert y.dtype == gate.dtype and y.shape == gate.shape
    if gate.dtype == torch.float32:
        g2, u2 = _leaf(gate), _leaf(up)
        y2 = ref(g2, u2)
        y2.backward(dy)
        tol = {"rtol": 1e-5, "atol": 1e-5}
        torch.testing.assert_close(y, y2, **tol)
        torch.testing.assert_close(g.grad, g2.grad, **tol)
        torch.testing.assert_close(u.grad, u2.grad, **tol)
        return
    y_eager = ref(gate, up)  # eager in the half dtype: what an unpatched HF model computes
    torch.testing.assert_close(y.float(), y_eager.float(), rtol=2e-2, atol=1e-2)
    if (
        DEVICE == "cuda"
    ):  # same formulas, functions and roundings as eager: bit for bit but for erf's
        # last fp32 bit (Triton's erf and CUDA's erff differ on 13% of inputs: 1.5% of bf16 outputs)
        assert (y != y_eager).sum().item() <= (0.03 if act == "gelu_erf" else 0.001) * y.numel() + 1
    g2, u2 = (
        _leaf(gate.float()),
        _leaf(up.float()),
    )  # gradients against fp32 math on the same inputs
    ref(g2, u2).backward(dy.float())
    torch.testing.assert_close(g.grad.float(), g2.grad, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(u.grad.float(), u2.grad, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("shape", [(1, 1), (3, 1), (2, 3, 37), (2, 4095), (2, 11008)])
def test_glu_matches_torch(shape, act, dtype):
    torch.manual_seed(0)
    gate = (torch.randn(shape, device=DEVICE) * 3).to(dtype)  # wide enough to reach both tails
    up = torch.randn(shape, device=DEVICE).to(dtype)
    _glu_check(act, gate, up, torch.randn(shape, device=DEVICE).to(dtype))


def test_glu_fp16_and_extremes():
    gate = torch.tensor([[-1e4, -90.0, -20.0, -1e-3, 0.0, 1e-3, 20.0, 90.0, 1e4]], device=DEVICE)
    up = torch.ones_like(gate)
    for act in ACTS:
        _glu_check(act, gate, up, torch.ones_like(gate))
        y = ACTS[act][0](gate.half(), up.half())
        assert torch.isfinite(y).all()


@pytest.mark.parametrize("act", list(ACTS))
def test_glu_non_contiguous(act):
    torch.manual_seed(1)
    ours, ref = ACTS[act]
    # a fused gate_up projection split in two: row stride 2 * 37, read in place
    proj = torch.randn(4, 6, 74, device=DEVICE, requires_grad=True)
    proj2 = _leaf(proj)
    dy = torch.randn(37, 24, device=DEVICE).t().reshape(4, 6, 37)  # a strided gradient too
    ours(*proj.chunk(2, dim=-1)).backward(dy)
    ref(*proj2.chunk(2, dim=-1)).backward(dy)
    torch.testing.assert_close(proj.grad, proj2.grad, rtol=1e-5, atol=1e-5)
    # transposed views (last stride != 1) are copied once; .sum() sends an expanded (stride 0) gradient
    g, u = (
        _leaf(torch.randn(37, 8, device=DEVICE).t()),
        _leaf(torch.randn(37, 8, device=DEVICE).t()),
    )
    g2, u2 = _leaf(g), _leaf(u)
    y = ours(g, u)
    y.sum().backward()
    ref(g2, u2).sum().backward()
    torch.testing.assert_close(y, ref(g2, u2), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g.grad, g2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(u.grad, u2.grad, rtol=1e-5, atol=1e-5)


def test_glu_saves_only_gate_and_up():
    g = torch.randn(4, 40, device=DEVICE, requires_grad=True)
    u = torch.randn(4, 40, device=DEVICE, requires_grad=True)
    for fn in (swiglu, geglu):
        saved: list[torch.Tensor] = []
        with torch.autograd.graph.saved_tensors_hooks(saved.append, lambda _: None):
            fn(g, u)
        assert sorted(t.data_ptr() for t in saved) == sorted([g.data_ptr(), u.data_ptr()])


def test_glu_errors():
    g = torch.randn(2, 8)
    with pytest.raises(InputError, match="up has shape"):
        swiglu(g, torch.randn(2, 9))
    with pytest.raises(InputError, match=r"up is torch\.float64"):
        swiglu(g, torch.randn(2, 8, dtype=torch.float64))
    with pytest.raises(InputError, match="up is on meta"):
        swiglu(g, torch.randn(2, 8, device="meta"))
    with pytest.raises(InputError, match=r"gate must be a torch\.Tensor"):
        swiglu([1.0], g)
    with pytest.raises(InputError, match="approximate must be"):
        geglu(g, g, approximate="erf")


class _MLP(nn.Module):
    def __init__(self, act: nn.Module, fused: bool = False, hidden: int = 12, inter: int = 40):
        super().__init__()
        if fused:  # Phi-3 style
            self.gate_up_proj = nn.Linear(hidden, 2 * inter, bias=False)
        else:
            self.gate_proj = nn.Linear(hidden, inter, bias=False)
            self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.act_fn = act

    def forward(self, x):
        if hasattr(self, "gate_up_proj"):
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(self.act_fn(gate) * up)


class GELUTanh(nn.Module):  # named as transformers' gelu_pytorch_tanh class
    def forward(self, x):
        return F.gelu(x, approximate="tanh")


@pytest.mark.parametrize(
    "act,fused", [(nn.SiLU(), False), (GELUTanh(), False), (nn.GELU(), False), (nn.SiLU(), True)]
)
def test_fused_gated_mlp_forward(act, fused):
    torch.manual_seed(2)
    mlp = _MLP(act, fused).to(DEVICE)
    x = torch.randn(2, 3, 12, device=DEVICE)
    y = fused_gated_mlp_forward(mlp, x)
    y.sum().backward()
    ours = [p.grad.clone() for p in mlp.parameters()]
    mlp.zero_grad()
    y2 = mlp(x)
    y2.sum().backward()
    torch.testing.assert_close(y, y2, rtol=1e-5, atol=1e-5)
    for a, b in zip(ours, [p.grad for p in mlp.parameters()]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_fused_gated_mlp_forward_errors():
    x = torch.randn(2, 12)
    with pytest.raises(InputError, match="activation 'ReLU'"):
        fused_gated_mlp_forward(_MLP(nn.ReLU()), x)
    mlp = _MLP(nn.ReLU())
    torch.testing.assert_close(
        fused_gated_mlp_forward(mlp, x, activation="silu"),
        mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x)),
    )
    bare = nn.Module()
    bare.act_fn = nn.SiLU()
    with pytest.raises(InputError, match="mlp_module"):
        fused_gated_mlp_forward(bare, x)


# -- linear cross-entropy --------------------------------------------------------------------------------


def _reference(h, w, t, b, ignore_index, reduction, smoothing, z):
    """F.cross_entropy on full fp64 logits plus z * lse^2 over non-ignored rows."""
    logits = h.double() @ w.double().T + (0 if b is None else b.double())
    per = F.cross_entropy(
        logits, t, ignore_index=ignore_index, reduction="none", label_smoothing=smoothing
    )
    valid = t != ignore_index
    per = per + z * torch.logsumexp(logits, -1) ** 2 * valid
    if reduction == "none":
        return per
    if reduction == "sum":
        return per.sum()
    return per.sum() / valid.sum().clamp(min=1)


def _ce_check(
    n,
    hid,
    vocab,
    *,
    dtype=torch.float32,
    bias=True,
    ignore=(1,),
    ignore_index=-100,
    reduction="mean",
    smoothing=0.0,
    z=0.0,
    chunk=None,
    batch=None,
    grad_out=2.0,
    tol=None,
):
    torch.manual_seed(n * 7 + vocab)
    h = torch.randn(n, hid, device=DEVICE).to(dtype)
    w = (torch.randn(vocab, hid, device=DEVICE) * hid**-0.5 * 2).to(dtype)
    b = torch.randn(vocab, device=DEVICE).to(dtype) if bias else None
    t = torch.randint(0, vocab, (n,), device=DEVICE)
    t[[i for i in ignore if i < n]] = ignore_index
    if batch:
        h, t = h.reshape(*batch, hid), t.reshape(batch)
    leaves = [_leaf(x) for x in (h, w, b) if x is not None]
    loss = linear_cross_entropy(
        leaves[0],
        leaves[1],
        t,
        bias=leaves[2] if bias else None,
        ignore_index=ignore_index,
        reduction=reduction,
        label_smoothing=smoothing,
        z_loss=z,
        chunk_size=chunk,
    )
    refs = [_leaf(x.double()) for x in (h, w, b) if x is not None]
    ref = _reference(
        refs[0].reshape(-1, hid),
        refs[1],
        t.reshape(-1),
        refs[2] if bias else None,
        ignore_index,
        reduction,
        smoothing,
        z,
    ).reshape(loss.shape)
    go = (
        torch.randn(loss.shape, device=DEVICE)
        if reduction == "none"
        else torch.tensor(grad_out, device=DEVICE)
    )
    loss.backward(go)
    ref.backward(go.double())
    assert loss.dtype == torch.promote_types(dtype, torch.float32)
    rtol, atol = tol or ((1e-5, 1e-6) if dtype in (torch.float32, torch.float64) else (3e-2, 3e-2))
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=rtol, atol=atol)
    for ours, r in zip(leaves, refs):
        scale = r.grad.abs().max().item() or 1.0  # gradients relative to their largest entry
        torch.testing.assert_close(ours.grad.double() / scale, r.grad / scale, rtol=rtol, atol=atol)
    return loss


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ce_smoothing_zloss_chunks(reduction):
    _ce_check(7, 24, 300, reduction=reduction, smoothing=0.1, z=1e-3, chunk=3, ignore=(1, 4))


@pytest.mark.parametrize(
    "kw",
    [
        {
            "n": 6,
            "hid": 20,
            "vocab": 5000,
            "bias": False,
        },  # more than one BLOCK_V of columns, ragged tail
        # Qwen2 vocabulary, few tokens. Gradients are fp32 sums over the vocabulary against a float64 reference:
        # about sqrt(V) x 2^-24 = 2.3e-5 of their largest entry, and the order the CPU's BLAS sums in differs
        # between machines (1.1e-5 measured on an AMD EPYC CI machine), so 5e-5 / 1e-4 rather than 1e-6 / 1e-5
        {"n": 3, "hid": 8, "vocab": 151936, "smoothing": 0.1, "tol": (1e-4, 5e-5)},
        # Llama 3 vocabulary; one chunk, since the CPU BLAS's one-row GEMV sums 128k products loosely (1e-3)
        {"n": 2, "hid": 12, "vocab": 128256, "reduction": "sum", "z": 1e-4, "tol": (1e-4, 5e-5)},
        {
            "n": 6,
            "hid": 10,
            "vocab": 97,
            "batch": (2, 3),
            "reduction": "none",
        },  # [B, S, H] hidden, [B, S] target
        {"n": 1, "hid": 5, "vocab": 33, "ignore": ()},  # one row
        {
            "n": 5,
            "hid": 9,
            "vocab": 50,
            "ignore": (),
            "ignore_index": 7,
        },  # an ignore_index that is a real class id
    ],
    ids=["5000", "151936", "128256", "3d-none", "1row", "ignore7"],
)
def test_ce_shapes(kw):
    _ce_check(**kw)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ce_half(dtype):
    _ce_check(9, 32, 1000, dtype=dtype, smoothing=0.05, z=1e-3, chunk=4)


def test_ce_fp64_and_native_path(monkeypatch):
    _ce_check(7, 16, 300, dtype=torch.float64, smoothing=0.1, z=1e-3, chunk=2, tol=(1e-10, 1e-12))
    monkeypatch.setattr(ce_mod, "use_triton", lambda *tensors: False)
    for reduction in ("mean", "none"):
        _ce_check(7, 16, 300, smoothing=0.1, z=1e-3, chunk=3, reduction=reduction)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ce_all_ignored(reduction):
    h = torch.randn(4, 8, device=DEVICE, requires_grad=True)
    w = torch.randn(40, 8, device=DEVICE, requires_grad=True)
    t = torch.full((4,), -100, device=DEVICE)
    loss = linear_cross_entropy(h, w, t, reduction=reduction, label_smoothing=0.1, z_loss=1e-2)
    assert torch.equal(loss, torch.zeros_like(loss))
    loss.sum().backward()
    assert torch.equal(h.grad, torch.zeros_like(h)) and torch.equal(w.grad, torch.zeros_like(w))


def test_ce_non_contiguous():
    torch.manual_seed(3)
    n, hid, vocab = 6, 10, 70
    h = torch.randn(hid, n, device=DEVICE).t()  # column-major hidden
    w = torch.randn(hid, vocab, device=DEVICE).t()  # a transposed weight view
    b = torch.randn(2 * vocab, device=DEVICE)[::2]
    t = torch.randint(0, vocab, (2 * n,), device=DEVICE)[::2]
    leaves = [_leaf(x) for x in (h, w, b)]
    loss = linear_cross_entropy(*leaves[:2], t, bias=leaves[2], chunk_size=4)
    refs = [_leaf(x.double()) for x in (h, w, b)]
    ref = _reference(*refs[:2], t, refs[2], -100, "mean", 0.0, 0.0)
    loss.backward()
    ref.backward()
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=1e-5, atol=1e-6)
    for ours, r in zip(leaves, refs):
        torch.testing.assert_close(ours.grad.double(), r.grad, rtol=1e-5, atol=1e-6)


def test_ce_partial_grads_and_no_grad():
    h = torch.randn(5, 8, device=DEVICE, requires_grad=True)
    w = torch.randn(30, 8, device=DEVICE)  # frozen head
    t = torch.randint(0, 30, (5,), device=DEVICE)
    linear_cross_entropy(h, w, t).backward()
    assert h.grad is not None and w.grad is None
    ref = F.cross_entropy(h.detach() @ w.T, t)
    with torch.no_grad():
        loss = linear_cross_entropy(h, w, t)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
    # "none" summed: its backward gets an expanded (stride 0) per-row gradient
    h.grad = None
    linear_cross_entropy(h, w, t, reduction="none").sum().backward()
    h2 = _leaf(h)
    F.cross_entropy(h2 @ w.T, t, reduction="sum").backward()
    torch.testing.assert_close(h.grad, h2.grad, rtol=1e-5, atol=1e-6)
    # the HF num_items_in_batch recipe: sum, then divide by a count over micro-batches
    total = linear_cross_entropy(h.detach(), w, t, reduction="sum")
    torch.testing.assert_close(total / 5, ref, rtol=1e-5, atol=1e-6)


def test_ce_under_autocast():
    """fp32 master weights under autocast: the head runs in bf16 as F.linear would; fp32 gradients."""
    torch.manual_seed(4)
    h = torch.randn(6, 16, device=DEVICE, requires_grad=True)
    w = torch.randn(50, 16, device=DEVICE, requires_grad=True)
    t = torch.randint(0, 50, (6,), device=DEVICE)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        loss = linear_cross_entropy(h, w, t)
        ref = F.cross_entropy(F.linear(h, w).float(), t)
    loss.backward()
    assert w.grad.dtype == torch.float32 and h.grad.dtype == torch.float32
    torch.testing.assert_close(loss, ref, rtol=2e-2, atol=2e-2)
    grads = [x.grad.clone() for x in (h, w)]
    h.grad = w.grad = None
    ref.backward()
    for ours, r in zip(grads, (h.grad, w.grad)):
        torch.testing.assert_close(ours, r, rtol=5e-2, atol=5e-2 * r.abs().max().item())


class _LargestAlloc(TorchDispatchMode):
    """Records the bytes of the largest tensor any op returns. ``set_`` is skipped: it allocates
    nothing (the Triton interpreter uses it to view an argument's existing storage as bytes)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket is torch.ops.aten.set_:
            return out
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel() * t.element_size())
        return out


@pytest.mark.parametrize("native", [False, True])
def test_ce_never_materializes_logits(native, monkeypatch):
    if native:
        monkeypatch.setattr(ce_mod, "use_triton", lambda *tensors: False)
    n, hid, vocab, chunk = (
        64,
        8,
        1000,
        16,
    )  # fp32 weight [V, H] (8000) < chunk x V (16000) < N x V (64000)
    h = torch.randn(n, hid, device=DEVICE, requires_grad=True)
    w = torch.randn(vocab, hid, device=DEVICE, requires_grad=True)
    t = torch.randint(0, vocab, (n,), device=DEVICE)
    with _LargestAlloc() as mode:
        linear_cross_entropy(h, w, t, label_smoothing=0.1, z_loss=1e-3, chunk_size=chunk).backward()
    assert 0 < mode.largest <= chunk * vocab * 4  # the fp32 logits of one chunk, never N x V
    assert h.grad.shape == h.shape and w.grad.shape == w.shape


def test_chunk_rows_rule():
    assert chunk_rows(8192, 151936, 2) == 1664  # 512 MiB of bf16 logits, a multiple of 128 rows
    assert chunk_rows(8192, 128256, 2) == 2048
    assert chunk_rows(8192, 128256, 4) == 1024
    assert chunk_rows(10, 151936, 2) == 10  # few tokens: one chunk
    assert chunk_rows(5, 10**9, 4) == 1  # a vocabulary past the budget: one row at a time
    assert chunk_rows(8192, 151936, 2) * 151936 * 2 <= ce_mod.CHUNK_BYTES


def test_ce_errors():
    h, w = torch.randn(3, 8), torch.randn(20, 8)
    t = torch.tensor([1, 2, 3])
    cases = [
        ({"target": t.float()}, "target must be an integer tensor"),
        ({"target": torch.tensor([1, 20, 3])}, "target holds class index 20, outside"),
        ({"target": torch.tensor([1, -5, 3])}, "target holds class index -5"),
        ({"target": torch.tensor([1, 2])}, "target has shape"),
        ({"weight": torch.randn(20, 9)}, "weight has shape"),
        ({"weight": w.double()}, "weight is torch.float64"),
        ({"weight": torch.randn(20, 8, device="meta")}, "weight is on meta"),
        ({"bias": torch.randn(21)}, "bias has 21 elements"),
        ({"hidden": [1.0]}, "hidden must be a torch.Tensor"),
        ({"reduction": "avg"}, "reduction must be"),
        ({"label_smoothing": 1.5}, "label_smoothing must be"),
        ({"z_loss": -1.0}, "z_loss must be"),
        ({"chunk_size": 0}, "chunk_size must be"),
    ]
    for kw, msg in cases:
        args = {"hidden": h, "weight": w, "target": t} | kw
        with pytest.raises(InputError, match=msg):
            linear_cross_entropy(**args)


def test_ce_backward_twice_is_refused():
    """The gradients are made in the forward and scaled in place by the backward: a second backward
    (retain_graph) would scale them twice, so it is refused with a message instead."""
    h = torch.randn(4, 8, device=DEVICE, requires_grad=True)
    w = torch.randn(16, 8, device=DEVICE, requires_grad=True)
    t = torch.randint(0, 16, (4,), device=DEVICE)
    loss = linear_cross_entropy(h, w, t)
    loss.backward(retain_graph=True)
    with pytest.raises(InputError, match="backward ran twice"):
        loss.backward()


def test_ce_count_stays_on_the_device():
    from gpudoctor.kernels.cross_entropy import _count_valid

    t = torch.tensor([1, -100, 3, 2])
    n = _count_valid(t, 5, -100)
    assert isinstance(n, torch.Tensor) and n.dim() == 0 and int(n) == 3
    with pytest.raises(InputError, match="class index 7, outside"):
        _count_valid(torch.tensor([7, 1]), 5, -100)
