"""The fused kernels as ``gpudoctor::`` custom ops: registered with exact fake (meta) shapes, checked by
``torch.library.opcheck``, traced by torch.compile with no graph break in a patched Llama-style model, and
a torch without the registration API falls back to the autograd.Function path and says so.

In this process the kernels run under TRITON_INTERPRET=1 (as the other kernel tests), where the ops are
registered with ``custom_op`` (a trace cannot record interpreted kernels); the ``triton_op`` registration
and the fallback are checked in fresh interpreters without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

pytest.importorskip("triton")

from gpudoctor.kernels import _common, patch
from gpudoctor.kernels import _layer_norm as _ln  # noqa: F401 - registers gpudoctor::layer_norm
from gpudoctor.kernels import _rms_norm as _rms  # noqa: F401 - registers gpudoctor::rms_norm
from gpudoctor.kernels import cross_entropy as _ce  # noqa: F401 - registers gpudoctor::linear_cross_entropy
from gpudoctor.kernels import glu as _glu  # noqa: F401 - registers gpudoctor::glu

SRC = str(Path(__file__).resolve().parents[1] / "src")
OPCHECK_OK = {
    "test_schema": "SUCCESS",
    "test_autograd_registration": "SUCCESS",
    "test_faketensor": "SUCCESS",
    "test_aot_dispatch_dynamic": "SUCCESS",
}


def test_registration_api_follows_what_torch_library_has() -> None:
    both = SimpleNamespace(triton_op=1, wrap_triton=1, custom_op=1)
    assert _common.registration_api(both) == "triton_op"
    assert _common.registration_api(SimpleNamespace(custom_op=1)) == "custom_op"  # torch 2.4, 2.5
    assert (
        _common.registration_api(SimpleNamespace(triton_op=1, custom_op=1)) == "custom_op"
    )  # no wrap_triton
    assert _common.registration_api(SimpleNamespace()) == "autograd.Function"  # torch < 2.4


def test_fake_implementations_give_exact_shapes_and_dtypes_on_meta_tensors() -> None:
    meta = {"device": "meta"}
    x = torch.empty(2, 3, 40, dtype=torch.bfloat16, **meta).transpose(0, 1)  # non-contiguous input
    w = torch.empty(40, dtype=torch.bfloat16, **meta)
    y, rstd = torch.ops.gpudoctor.rms_norm(x, w, 1e-6, 0.0, True)
    assert (y.shape, y.dtype, y.is_contiguous(), rstd.shape, rstd.dtype) == (
        (3, 2, 40),
        torch.bfloat16,
        True,
        (6,),
        torch.float32,
    )
    dx, dw = torch.ops.gpudoctor.rms_norm_backward(y, x, w, rstd, 0.0, True, True)
    assert (dx.shape, dx.dtype, dw.shape, dw.dtype) == (
        (3, 2, 40),
        torch.bfloat16,
        (40,),
        torch.bfloat16,
    )
    assert torch.ops.gpudoctor.rms_norm_backward(y, x, w, rstd, 0.0, True, False)[1].shape == (0,)

    y, mean, rstd = torch.ops.gpudoctor.layer_norm(x, None, w, 1e-5)
    assert [(t.shape, t.dtype) for t in (y, mean, rstd)] == [
        ((3, 2, 40), torch.bfloat16),
        ((6,), torch.float32),
        ((6,), torch.float32),
    ]
    grads = torch.ops.gpudoctor.layer_norm_backward(y, x, w, mean, rstd, True, False)
    assert [(t.shape, t.dtype) for t in grads] == [
        ((3, 2, 40), torch.bfloat16),
        ((40,), torch.bfloat16),
        ((0,), torch.bfloat16),
    ]

    g = torch.empty(4, 7, 24, dtype=torch.float16, **meta)
    out = torch.ops.gpudoctor.glu(g, g, 0)
    dg, du = torch.ops.gpudoctor.glu_backward(out, g, g, 1)
    assert (out.shape, out.dtype, dg.shape, du.dtype) == (
        (4, 7, 24),
        torch.float16,
        (4, 7, 24),
        torch.float16,
    )

    h = torch.empty(12, 16, dtype=torch.bfloat16, **meta)
    weight = torch.empty(50, 16, dtype=torch.bfloat16, **meta)
    bias = torch.empty(50, dtype=torch.bfloat16, **meta)
    target = torch.empty(12, dtype=torch.long, **meta)
    scale = torch.empty(1, dtype=torch.float32, **meta)
    loss, g_h, g_w, g_b = torch.ops.gpudoctor.linear_cross_entropy(
        h, weight, bias, target, scale, None, -100, "mean", 0.0, 0.0, 8, True, True, True
    )
    assert [(t.shape, t.dtype) for t in (loss, g_h, g_w, g_b)] == [
        ((), torch.float32),
        ((12, 16), torch.bfloat16),
        ((50, 16), torch.bfloat16),
        ((50,), torch.bfloat16),
    ]
    per_row = torch.ops.gpudoctor.linear_cross_entropy(
        h, weight, None, target, scale, None, -100, "none", 0.0, 0.0, 8, True, True, False
    )
    assert [t.shape for t in per_row] == [
        (12,),
        (0,),
        (0,),
        (0,),
    ]  # "none": gradients wait for grad_output


@pytest.mark.e2e
def test_opcheck_passes_for_every_op_on_cpu_tensors() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 5, 40, requires_grad=True)
    w = (torch.rand(40) + 0.5).requires_grad_(True)
    assert (
        torch.library.opcheck(torch.ops.gpudoctor.rms_norm.default, (x, w, 1e-6, 1.0, False))
        == OPCHECK_OK
    )
    y, rstd = torch.ops.gpudoctor.rms_norm(x, w, 1e-6, 0.0, True)
    args = (torch.randn_like(y), x.detach(), w.detach(), rstd, 0.0, True, True)
    assert torch.library.opcheck(torch.ops.gpudoctor.rms_norm_backward.default, args) == OPCHECK_OK
    b = torch.randn(40, requires_grad=True)
    for weight, bias in ((w, b), (None, b), (w, None)):
        assert (
            torch.library.opcheck(torch.ops.gpudoctor.layer_norm.default, (x, weight, bias, 1e-5))
            == OPCHECK_OK
        )
    y, mean, rstd = torch.ops.gpudoctor.layer_norm(x, w, b, 1e-5)
    args = (torch.randn_like(y), x.detach(), w.detach(), mean, rstd, True, True)
    assert (
        torch.library.opcheck(torch.ops.gpudoctor.layer_norm_backward.default, args) == OPCHECK_OK
    )
    # a bf16 input with an fp32 weight whose gradient is not asked for: the empty dw in the weight's dtype
    x16 = x.detach().bfloat16()
    _, mean16, rstd16 = torch.ops.gpudoctor.layer_norm(x16, None, None, 1e-5)
    args = (torch.randn_like(x16), x16, w.detach(), mean16, rstd16, False, True)
    assert (
        torch.library.opcheck(torch.ops.gpudoctor.layer_norm_backward.default, args) == OPCHECK_OK
    )
    gate, up = torch.randn(4, 6, 24, requires_grad=True), torch.randn(4, 6, 24, requires_grad=True)
    assert torch.library.opcheck(torch.ops.gpudoctor.glu.default, (gate, up, 1)) == OPCHECK_OK
    h, weight = torch.randn(12, 16, requires_grad=True), torch.randn(50, 16, requires_grad=True)
    target = torch.randint(0, 50, (12,))
    target[3] = -100
    args = (
        h,
        weight,
        None,
        target,
        torch.full((1,), 1 / 11),
        None,
        -100,
        "mean",
        0.1,
        1e-4,
        5,
        True,
        True,
        False,
    )
    assert (
        torch.library.opcheck(torch.ops.gpudoctor.linear_cross_entropy.default, args) == OPCHECK_OK
    )


def _llama(layers: int = 2):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=layers,
        vocab_size=96,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


@pytest.mark.e2e
def test_patched_llama_compiles_with_zero_graph_breaks_and_one_node_per_op() -> None:
    model = _llama()
    ids = torch.randint(0, 96, (2, 10), generator=torch.Generator().manual_seed(1))
    report = patch(model, compiled="op")
    assert report.replaced == {"causal-LM loss": 1, "gated MLP": 2, "RMSNorm": 5}
    assert report.path.startswith("gpudoctor:: ops through torch.library.custom_op")
    assert report.under_compile() == (
        "RMSNorm gpudoctor::rms_norm, gated MLP gpudoctor::glu, causal-LM loss "
        "gpudoctor::linear_cross_entropy"
    )
    explained = _explain(model, ids)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    # 2 norms a layer and the final one, one gated MLP a layer, one loss: each a single node
    assert _gpudoctor_nodes(explained) == {
        "gpudoctor.rms_norm.default": 5,
        "gpudoctor.glu.default": 2,
        "gpudoctor.linear_cross_entropy.default": 1,
    }


def _explain(model, ids):
    torch._dynamo.reset()
    return torch._dynamo.explain(model)(input_ids=ids, labels=ids)


def _gpudoctor_nodes(explained) -> Counter:
    return Counter(
        str(n.target)
        for g in explained.graphs
        for n in g.graph.nodes
        if "gpudoctor" in str(n.target)
    )


def _calls(explained) -> Counter:
    """The graph's call targets, by name (the loss's nodes and the gpudoctor ops left out)."""
    return Counter(
        str(getattr(n.target, "__name__", n.target))
        for g in explained.graphs
        for n in g.graph.nodes
        if n.op in ("call_function", "call_method", "call_module")
    )


@pytest.mark.e2e
def test_patched_llama_compiles_its_norms_and_mlps_as_the_unpatched_model_does() -> None:
    """compiled="native" (the default): under torch.compile the norms and gated MLPs trace into their own
    forward, the graph the unpatched model gives, and so does a loss with few logits; one graph, no break."""
    model = _llama()
    ids = torch.randint(0, 96, (2, 10), generator=torch.Generator().manual_seed(1))
    unpatched = _explain(model, ids)
    report = patch(model)
    assert report.under_compile() == (
        "RMSNorm and gated MLP its own forward, causal-LM loss its own forward up to "
        "67,108,864 logits, gpudoctor::linear_cross_entropy above"
    )
    assert "; under torch.compile: RMSNorm and gated MLP its own forward, causal-LM loss" in str(
        report
    )
    patched = _explain(model, ids)
    assert (patched.graph_count, patched.graph_break_count) == (1, 0)
    assert _gpudoctor_nodes(patched) == {}  # 20 tokens x 96: the class's own loss
    before, after = _calls(unpatched), _calls(patched)
    # every norm's and MLP's own math is there, as unpatched: 5 rsqrt, 2 silu; and the same loss
    assert (after["rsqrt"], after["silu"]) == (before["rsqrt"], before["silu"]) == (5, 2)
    assert after == before


@pytest.mark.e2e
def test_a_patched_llama_with_many_logits_compiles_its_loss_as_the_op(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above NATIVE_LOSS_MAX_LOGITS (here lowered under the 2 x 10 x 96 = 1920 logits) the loss is the
    op under compile (its memory); at the bound it is the class's own."""
    from gpudoctor.kernels import patching

    model = _llama()
    ids = torch.randint(0, 96, (2, 10), generator=torch.Generator().manual_seed(1))
    patch(model)
    monkeypatch.setattr(patching, "NATIVE_LOSS_MAX_LOGITS", 1919)
    explained = _explain(model, ids)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    assert _gpudoctor_nodes(explained) == {"gpudoctor.linear_cross_entropy.default": 1}
    monkeypatch.setattr(patching, "NATIVE_LOSS_MAX_LOGITS", 1920)
    assert _gpudoctor_nodes(_explain(model, ids)) == {}


@pytest.mark.e2e
@pytest.mark.parametrize("max_logits", [0, 1 << 26])  # the loss as the op, and as the class's own
def test_compiled_patched_training_step_matches_eager(
    max_logits: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled graph (AOTAutograd, so the ops' autograd and fake registrations run) gives eager's loss
    and gradients."""
    from gpudoctor.kernels import patching

    monkeypatch.setattr(patching, "NATIVE_LOSS_MAX_LOGITS", max_logits)
    model = _llama(layers=1)
    patch(model)
    ids = torch.randint(0, 96, (2, 10), generator=torch.Generator().manual_seed(2))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    eager = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    loss_c = compiled(input_ids=ids, labels=ids).loss
    loss_c.backward()
    assert torch.allclose(loss_c, loss, rtol=0, atol=1e-6)
    worst = max(float((p.grad - eager[n]).abs().max()) for n, p in model.named_parameters())
    assert worst < 1e-5


def _run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**clean, "PYTHONPATH": SRC, **env},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


@pytest.mark.e2e
def test_triton_op_registration_passes_opcheck_with_the_cpu_reference() -> None:
    """Without the interpreter the norms are triton_ops (the GLUs and the loss opaque custom_ops); on CPU
    tensors the norms' traced decomposition is the PyTorch reference, which opcheck runs through AOTAutograd."""
    out = _run("""
        import torch
        from gpudoctor.kernels import _common, _layer_norm, _rms_norm, glu, cross_entropy
        print(sorted(_common.REGISTERED.items()))
        x = torch.randn(3, 5, 40, requires_grad=True, dtype=torch.bfloat16)
        w = torch.rand(40, requires_grad=True, dtype=torch.bfloat16)
        print(sorted(set(torch.library.opcheck(torch.ops.gpudoctor.rms_norm.default, (x, w, 1e-6, 0.0, True)).values())))
        g = torch.randn(4, 24, requires_grad=True)
        print(sorted(set(torch.library.opcheck(torch.ops.gpudoctor.glu.default, (g, g.detach() * 2, 2)).values())))
        # Inductor compiles the triton_op's decomposition (here the reference) into the graph
        x, w = torch.randn(6, 40, requires_grad=True), torch.rand(40, requires_grad=True)
        f = lambda x, w: torch.ops.gpudoctor.rms_norm(x, w, 1e-6, 0.0, True)[0] * 2
        f(x, w).sum().backward()
        want = x.grad.clone(), w.grad.clone()
        x.grad = w.grad = None
        got = torch.compile(f, fullgraph=True)(x, w)
        got.sum().backward()
        print(bool((got - f(x, w)).abs().max() < 1e-5), bool((x.grad - want[0]).abs().max() < 1e-5),
              bool((w.grad - want[1]).abs().max() < 1e-5))
    """)
    registered, rms, glu, compiled = out.splitlines()
    assert compiled == "True True True"
    assert registered == (
        "[('glu', 'custom_op'), ('glu_backward', 'custom_op'), ('layer_norm', 'triton_op'), "
        "('layer_norm_backward', 'triton_op'), ('linear_cross_entropy', 'custom_op'), "
        "('rms_norm', 'triton_op'), ('rms_norm_backward', 'triton_op')]"
    )
    assert rms == glu == "['SUCCESS']"


@pytest.mark.e2e
def test_torch_without_the_registration_api_falls_back_and_says_so() -> None:
    out = _run(
        """
        import torch
        for name in ("triton_op", "wrap_triton", "custom_op"):
            delattr(torch.library, name)  # as torch < 2.4
        from torch import nn
        from gpudoctor.kernels import _common, patch

        class Norm(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(torch.rand(16) + 0.5)
                self.variance_epsilon = 1e-6

            def forward(self, x):
                xf = x.float()
                return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

        m = nn.Sequential(Norm())
        x = torch.randn(4, 16)
        before = m(x)
        report = patch(m)
        print(_common.API, len(_common.REGISTERED), torch.allclose(m(x), before, atol=1e-6))
        print(report)
    """,
        TRITON_INTERPRET="1",
    )
    first, line = out.splitlines()
    assert first == "autograd.Function 0 True"
    assert line == (
        "gpudoctor.kernels.patch: replaced 1 RMSNorm; under torch.compile: RMSNorm its own forward; "
        "path: autograd.Function: this torch has no torch.library.custom_op (2.4+), so torch.compile "
        "breaks the graph at each patched module that runs a kernel under it"
    )


def test_a_registration_that_fails_keeps_the_function_path_and_says_why(monkeypatch) -> None:
    """An older torch that cannot infer a schema (or refuses the op) must not break the import: the op keeps
    the autograd.Function path and the PatchReport line names it."""

    def refuse(*args, **kwargs):
        raise TypeError("unsupported annotation")

    monkeypatch.setattr(_common, "REGISTERED", {"rms_norm": "custom_op"})
    monkeypatch.setattr(_common, "FAILED", {})
    monkeypatch.setattr(_common, "API", "custom_op")
    monkeypatch.setattr(torch.library, "custom_op", refuse)
    assert (
        _common.define_op("never_registered", lambda x: x, lambda x: x, reference=lambda x: x)
        is None
    )
    assert _common.REGISTERED == {"rms_norm": "custom_op", "never_registered": "autograd.Function"}
    assert _common.path_in_use() == (
        "autograd.Function for never_registered (registration failed: never_registered: "
        "TypeError: unsupported annotation; torch.compile breaks the graph there); "
        "custom ops for the rest"
    )
