"""patch(model): recognises norms, gated MLPs and the causal-LM head by structure, matches eager,
and unpatch restores the model exactly. Runs under TRITON_INTERPRET=1 on the CPU."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
from torch import nn
from torch.nn import functional as F

pytest.importorskip("triton")

from gpudoctor.errors import InputError
from gpudoctor.kernels import patch, unpatch


class LlamaStyleRMSNorm(nn.Module):
    def __init__(self, h: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(h) + 0.5)
        self.variance_epsilon = eps

    def forward(self, x):
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * xf.to(dtype)


class GemmaStyleRMSNorm(nn.Module):
    def __init__(self, h: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(h) * 0.1)
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class ScaledNorm(nn.Module):
    """Looks like a norm (1-D weight, eps) but computes something else: must be left alone."""

    def __init__(self, h: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = 1e-6

    def forward(self, x):
        return x * self.weight * 2


class GatedMLP(nn.Module):
    def __init__(self, h: int, i: int, act) -> None:
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = (
            nn.Linear(h, i, bias=False),
            nn.Linear(h, i, bias=False),
            nn.Linear(i, h, bias=False),
        )
        self.act_fn = act

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Out:
    def __init__(self, h):
        self.last_hidden_state = h


class Base(nn.Module):
    def __init__(self, vocab: int, h: int, norm) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, h)
        self.mlp = GatedMLP(h, 3 * h, nn.SiLU())
        self.norm = norm

    def forward(self, input_ids=None, attention_mask=None, **kw):
        x = self.embed(input_ids)
        return Out(self.norm(x + self.mlp(x)))


class TinyCausalLM(nn.Module):
    def __init__(self, vocab=97, h=24, norm_cls=LlamaStyleRMSNorm) -> None:
        super().__init__()
        self.model = Base(vocab, h, norm_cls(h))
        self.lm_head = nn.Linear(h, vocab, bias=False)

    def forward(self, input_ids=None, attention_mask=None, labels=None, logits_to_keep=0, **kw):
        out = self.model(input_ids=input_ids)
        logits = self.lm_head(out.last_hidden_state)
        loss = None
        if labels is not None:
            shift = F.pad(labels, (0, 1), value=-100)[..., 1:]
            loss = F.cross_entropy(
                logits.float().view(-1, logits.shape[-1]), shift.reshape(-1), ignore_index=-100
            )
        return type("O", (), {"loss": loss, "logits": logits})()


def test_patch_matches_eager_and_unpatch_restores():
    torch.manual_seed(0)
    model = TinyCausalLM()
    ids = torch.randint(0, 97, (2, 9))
    ref = model(input_ids=ids, labels=ids).loss
    ref.backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    report = patch(model)
    assert report.replaced == {"causal-LM loss": 1, "gated MLP": 1, "RMSNorm": 1}
    out = model(input_ids=ids, labels=ids)
    assert out.logits is None
    torch.testing.assert_close(out.loss, ref, atol=1e-5, rtol=1e-5)
    out.loss.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, ref_grads[n], atol=1e-5, rtol=1e-4)
    assert unpatch(model) == 3
    assert "forward" not in vars(model) and "forward" not in vars(model.model.norm)
    again = model(input_ids=ids, labels=ids)
    torch.testing.assert_close(again.loss, ref)


def test_gemma_norm_and_gelu_mlp_recognised():
    norm = GemmaStyleRMSNorm(16)
    mlp = GatedMLP(16, 40, lambda x: F.gelu(x, approximate="tanh"))
    model = nn.Sequential(norm, mlp)
    x = torch.randn(3, 16)
    ref = model(x)
    report = patch(model)
    assert report.replaced == {"RMSNorm": 1, "gated MLP": 1}
    torch.testing.assert_close(model(x), ref, atol=1e-5, rtol=1e-5)


def test_compiled_path_is_reported_per_kind_and_checked():
    """PatchReport says what each kind of patched module runs under torch.compile; a bad ``compiled`` is a
    one-line InputError naming the choices, before anything is patched."""
    model = TinyCausalLM()
    report = patch(model, compiled="op")
    assert report.compiled == {
        "causal-LM loss": "gpudoctor::linear_cross_entropy",
        "gated MLP": "gpudoctor::glu",
        "RMSNorm": "gpudoctor::rms_norm",
    }
    unpatch(model)
    with pytest.raises(
        InputError, match=r"^compiled must be one of 'native', 'op', got 'inductor'$"
    ):
        patch(model, compiled="inductor")
    assert "forward" not in vars(model.model.norm)
    report = patch(nn.Sequential(LlamaStyleRMSNorm(8)))
    assert str(report).startswith(
        "gpudoctor.kernels.patch: replaced 1 RMSNorm; under torch.compile: RMSNorm its "
        "own forward; path: "
    )


def test_unknown_modules_are_left_alone_and_said_so():
    model = nn.Sequential(ScaledNorm(8), nn.Linear(8, 8))
    report = patch(model)
    assert report.total == 0
    assert "nothing replaced" in str(report)
    assert report.skipped and "matches no RMSNorm variant" in report.skipped[0][1]
    assert "forward" not in vars(model[0])


def test_real_transformers_llama_if_available():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=101,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    ids = torch.randint(0, 101, (2, 12))
    ref = model(input_ids=ids, labels=ids).loss
    report = patch(model)
    assert report.replaced == {"RMSNorm": 5, "gated MLP": 2, "causal-LM loss": 1}
    torch.testing.assert_close(model(input_ids=ids, labels=ids).loss, ref, atol=1e-5, rtol=1e-5)
