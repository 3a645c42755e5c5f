"""``patch(model)``: swap a Hugging Face-style model's norms, gated MLPs and causal-LM loss for the
fused kernels, by structure, reversibly.

No table per model family: a module is recognised by what it has and what it computes.

* A norm is a module with a 1-D ``weight`` and an epsilon (``variance_epsilon`` or ``eps``) and
  no bias; it is run once on a probe input and its output compared with the RMSNorm variants the
  kernels implement (Llama: ``w * x_hat.to(dtype)``; Gemma: ``(x_hat * (1 + w)).to(dtype)``). It is
  replaced only if one matches.
* A gated MLP is a module with ``gate_proj``, ``up_proj`` and ``down_proj`` linears and an
  ``act_fn`` that computes SiLU or tanh-GELU on a probe.
* A causal LM is a module with an ``lm_head`` linear and a base ``model`` returning
  ``last_hidden_state``: with ``labels``, its loss is computed by ``linear_cross_entropy`` on the
  hidden states (the logits are never materialized; ``logits`` in the output is None).

Each replacement sets an instance ``forward`` (the class is untouched), so ``unpatch`` deletes it
and the module is exactly what it was.

Under ``torch.compile`` (``compiled=``): with ``"native"`` (the default) a patched norm or gated MLP
traces into its class's own forward, so the compiler sees the model it would have seen unpatched and
Inductor fuses the norm and the activation with their neighbours (the residual add before a norm,
the casts around it), which an op cannot offer; the kernels serve eager calls (every patched module
an op made a compiled Llama-style step slower than unpatched: benchmarks/BENCHMARKS-kernels.md
"Evidence moved from the source: kernel constants"). With ``"op"`` each traces into its
``gpudoctor::`` op. The loss is the ``gpudoctor::linear_cross_entropy`` op with ``"op"``, and with
``"native"`` wherever its logits would hold more than ``NATIVE_LOSS_MAX_LOGITS`` elements: it is
about memory (the logits are never whole), which Inductor's fusion of the plain loss does not give.
Smaller, the class's own loss is traced: there the op saved nothing and cost time
(``benchmarks/probes/probe_ce_compiled.py``; benchmarks/BENCHMARKS-kernels.md "Evidence moved from
the source: kernel constants").
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from gpudoctor.errors import InputError

_MARK = "_gpudoctor_patched"
COMPILED = ("native", "op")
# Under torch.compile with compiled="native", a loss whose logits (tokens x vocabulary) would hold
# at most this many elements traces as the class's own loss (the module docstring has the
# measurements: 2048 x 32000 = 65.5M, under it, was faster plain; 8192 x 32000 = 262M faster as the
# op).
NATIVE_LOSS_MAX_LOGITS = 1 << 26
# what each kind of patched module runs under torch.compile, per ``compiled=``
_UNDER_COMPILE = {
    "native": {"RMSNorm": "its own forward", "gated MLP": "its own forward",
               "causal-LM loss": f"its own forward up to {NATIVE_LOSS_MAX_LOGITS:,} logits, "
                                 "gpudoctor::linear_cross_entropy above"},
    "op": {"RMSNorm": "gpudoctor::rms_norm", "gated MLP": "gpudoctor::glu",
           "causal-LM loss": "gpudoctor::linear_cross_entropy"},
}


@dataclass
class PatchReport:
    replaced: dict[str, int] = field(default_factory=dict)  # kind -> modules
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (module name, why)
    names: list[str] = field(default_factory=list)
    path: str = ""  # how the fused ops reach torch.compile (custom ops, or autograd.Function where torch has none)
    compiled: dict[str, str] = field(default_factory=dict)  # kind -> what it runs under torch.compile

    @property
    def total(self) -> int:
        return sum(self.replaced.values())

    def __str__(self) -> str:
        if not self.total:
            why = f" ({self.skipped[0][0]}: {self.skipped[0][1]})" if self.skipped else ""
            return ("gpudoctor.kernels.patch: nothing replaced: no RMSNorm, gated MLP or causal-LM "
                    "head recognised"
                    + why)
        parts = ", ".join(f"{n} {kind}" for kind, n in self.replaced.items())
        return (f"gpudoctor.kernels.patch: replaced {parts}"
                + (f"; skipped {len(self.skipped)}" if self.skipped else "")
                + (f"; under torch.compile: {self.under_compile()}" if self.compiled else "")
                + (f"; path: {self.path}" if self.path else ""))

    def under_compile(self) -> str:
        """What each kind of replaced module runs under torch.compile, kinds with the same path
        together."""
        by_path: dict[str, list[str]] = {}
        # norms, MLPs, the loss
        for kind in sorted(self.compiled, key=list(_UNDER_COMPILE["op"]).index):
            by_path.setdefault(self.compiled[kind], []).append(kind)
        return ", ".join(f"{' and '.join(kinds)} {path}" for path, kinds in by_path.items())


def patch(model: nn.Module, *, norms: bool = True, mlps: bool = True, loss: bool = True,
          compiled: str = "native", verbose: bool = False) -> PatchReport:
    """Replace what is recognised; return what was replaced and what was skipped (and why).

    ``compiled``: what the norms, gated MLPs and small losses run under torch.compile: ``"native"``,
    their own forward (Inductor fuses it), or ``"op"``, the ``gpudoctor::`` ops (see the module
    docstring)."""
    if compiled not in COMPILED:
        raise InputError(
            f"compiled must be one of {', '.join(map(repr, COMPILED))}, got {compiled!r}")
    native = compiled == "native"
    report = PatchReport()
    for name, module in model.named_modules():
        if getattr(module, _MARK, None):
            continue
        kind = None
        if norms and _looks_like_norm(module):
            variant = _norm_variant(module)
            if variant is None:
                report.skipped.append((name, "a norm whose output matches no RMSNorm variant"))
                continue
            _set_forward(module, _norm_forward(variant, type(module).forward if native else None))
            kind = "RMSNorm"
        elif mlps and _looks_like_gated_mlp(module):
            act = _activation(module.act_fn)
            if act is None:
                report.skipped.append((name,
                                       "a gated MLP whose activation is neither SiLU nor tanh-GELU"))
                continue
            _set_forward(module, _mlp_forward(act, type(module).forward if native else None))
            kind = "gated MLP"
        elif loss and _looks_like_causal_lm(module):
            if getattr(getattr(module, "config", None), "final_logit_softcapping", None):
                report.skipped.append((name, "logit soft-capping is not fused"))
                continue
            _set_forward(module, _causal_lm_forward(type(module).forward, native))
            kind = "causal-LM loss"
        if kind:
            report.replaced[kind] = report.replaced.get(kind, 0) + 1
            report.names.append(name or type(module).__name__)
            report.compiled[kind] = _UNDER_COMPILE[compiled][kind]
    if report.total:
        report.path = _path()
    if verbose:
        print(report)
    return report


def _path() -> str:
    # the kernel modules register their ops when imported: import those a patched forward calls
    from gpudoctor.kernels import _rms_norm, cross_entropy, glu  # noqa: F401
    from gpudoctor.kernels._common import path_in_use

    return path_in_use()


def unpatch(model: nn.Module) -> int:
    """Undo ``patch``: every replaced module gets its class's forward back. Returns how many."""
    n = 0
    for module in model.modules():
        if getattr(module, _MARK, None):
            del module.forward
            delattr(module, _MARK)
            n += 1
    return n


def _set_forward(module: nn.Module, fn) -> None:
    module.forward = types.MethodType(fn, module)
    setattr(module, _MARK, True)


# -- recognising
# ---------------------------------------------------------------------------------------


def _eps(module: nn.Module) -> float | None:
    for attr in ("variance_epsilon", "eps", "epsilon"):
        value = getattr(module, attr, None)
        if isinstance(value, float):
            return value
    return None


def _looks_like_norm(m: nn.Module) -> bool:
    w = getattr(m, "weight", None)
    return (isinstance(w, torch.Tensor) and w.dim() == 1 and getattr(m, "bias", None) is None
            and _eps(m) is not None and not list(m.children()) and w.device.type != "meta")


def _norm_variant(m: nn.Module) -> str | None:
    """Which RMSNorm the module computes, from its output on a probe (None: not an RMSNorm)."""
    w = m.weight
    eps = _eps(m)
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(2, w.numel(), generator=g).to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        try:
            out = m(x)
        except Exception:  # noqa: BLE001 - a module that cannot run on a probe is left alone
            return None
        xf = x.float()
        x_hat = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        variants = {"llama": w * x_hat.to(x.dtype),
                    "gemma": (x_hat * (1.0 + w.float())).to(x.dtype)}
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        return None
    tol = 1e-5 if w.dtype == torch.float32 else 2e-2
    for name, ref in variants.items():
        if torch.allclose(out.float(), ref.float(), atol=tol, rtol=tol):
            return name
    return None


def _looks_like_gated_mlp(m: nn.Module) -> bool:
    return all(isinstance(getattr(m, a, None), nn.Linear) for a in ("gate_proj", "up_proj", "down_proj")) and callable(
        getattr(m, "act_fn", None))


def _activation(act) -> str | None:
    x = torch.linspace(-6, 6, 97)
    with torch.no_grad():
        try:
            y = act(x)
        except Exception:  # noqa: BLE001
            return None
    if torch.allclose(y, F.silu(x), atol=1e-6):
        return "silu"
    if torch.allclose(y, F.gelu(x, approximate="tanh"), atol=1e-6):
        return "gelu_tanh"
    if torch.allclose(y, F.gelu(x), atol=1e-6):
        return "gelu"
    return None


def _looks_like_causal_lm(m: nn.Module) -> bool:
    return isinstance(getattr(m, "lm_head", None), nn.Linear) and isinstance(
        getattr(m, "model", None), nn.Module)


# -- the replacement forwards
# ----------------------------------------------------------------------------


def _norm_forward(variant: str, native=None):
    """The patched norm's forward; under torch.compile ``native`` (the class's forward) where
    given."""
    from gpudoctor.kernels._rms_norm import rms_norm

    offset, casting = (1.0, "gemma") if variant == "gemma" else (0.0, "llama")

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if native is not None and torch.compiler.is_compiling():
            return native(self, hidden_states)
        return rms_norm(hidden_states, self.weight, _eps(self), offset=offset, casting=casting)

    return forward


def _mlp_forward(act: str, native=None):
    """The patched gated MLP's forward; under torch.compile ``native`` (the class's forward) where
    given."""
    from gpudoctor.kernels.glu import geglu, swiglu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if native is not None and torch.compiler.is_compiling():
            return native(self, x)
        gate, up = self.gate_proj(x), self.up_proj(x)
        if act == "silu":
            h = swiglu(gate, up)
        else:
            h = geglu(gate, up, approximate="tanh" if act == "gelu_tanh" else "none")
        return self.down_proj(h)

    return forward


def _causal_lm_forward(original, native: bool = False):
    """The patched causal LM's forward: the loss without the logits; under torch.compile, with
    ``native``, the class's own forward where the logits are small (NATIVE_LOSS_MAX_LOGITS)."""
    from gpudoctor.kernels.cross_entropy import linear_cross_entropy

    def forward(self, input_ids=None, attention_mask=None, labels=None, logits_to_keep=0, **kwargs):
        if labels is None or (native and torch.compiler.is_compiling()
                              and labels.numel()
                              * self.lm_head.out_features <= NATIVE_LOSS_MAX_LOGITS):
            return original(self, input_ids=input_ids, attention_mask=attention_mask, labels=labels,
                            logits_to_keep=logits_to_keep, **kwargs)
        num_items = kwargs.pop("num_items_in_batch", None)
        shift_labels = kwargs.pop("shift_labels", None)
        ignore_index = kwargs.pop("ignore_index", -100)
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        hidden = outputs.last_hidden_state if hasattr(outputs, "last_hidden_state") else outputs[0]
        if shift_labels is None:  # as ForCausalLMLoss: tokens < n predict n
            shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
        h = hidden.reshape(-1, hidden.shape[-1])
        target = shift_labels.reshape(-1).to(h.device)
        head = self.lm_head
        if num_items is not None:
            total = linear_cross_entropy(h, head.weight, target, bias=head.bias,
                                         ignore_index=ignore_index, reduction="sum")
            loss = total / (num_items.to(total.device) if isinstance(num_items, torch.Tensor)
                            else num_items)
        else:
            loss = linear_cross_entropy(h, head.weight, target, bias=head.bias,
                                        ignore_index=ignore_index)
        fields = {"loss": loss, "logits": None,
                  "past_key_values": getattr(outputs, "past_key_values", None),
                  "hidden_states": getattr(outputs, "hidden_states", None),
                  "attentions": getattr(outputs, "attentions", None)}
        try:
            from transformers.modeling_outputs import CausalLMOutputWithPast
        except ImportError:  # a causal LM built without transformers: a plain namespace does
            return types.SimpleNamespace(**fields)
        return CausalLMOutputWithPast(**fields)

    return forward

