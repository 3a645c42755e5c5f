"""The dry run of a ``module:factory`` model: exact bytes on hand-counted models, the same saved
bytes as a real CPU step, and every bad factory answered by one InputError line.

A "real" step here runs on the CPU with ``saved_tensors_hooks`` counting the unique storages that
autograd keeps, beside the weights. Where the CPU picks the kernel CUDA picks (flash attention
without dropout, no dropout at all) the dry run must match it byte for byte.
"""

from __future__ import annotations

import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gpudoctor.errors import InputError
from gpudoctor.memory.dryrun import DryRun, Loaded, _cuda_kernels, dry_run, load_factory

# --- hand-counted models ---------------------------------------------------------------------


def mlp() -> nn.Module:
    with torch.device("meta"):
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))


def test_mlp_bytes_are_exact() -> None:
    """Batch 16, fp32. x: 16x64x4 = 4096; h = Linear1(x): 8192; r = relu(h): 8192; out: 2048.

    addmm saves its input (x, then r); relu saves its output r; h is freed once r exists, out once
    the loss is taken. The backward peaks in the first layer's addmm backward: x, the loss and its
    grad (4 + 4), every gradient (49792) and relu's input grad (8192).
    """
    r = dry_run(mlp(), torch.empty(16, 64, device="meta"), batch=16, seq=1, params_dtype="fp32")
    assert r.n_params == 64 * 128 + 128 + 128 * 32 + 32 == 12448
    assert r.param_bytes == r.grad_bytes == 12448 * 4
    assert r.buffer_bytes == 0
    assert r.saved_bytes == 4096 + 8192
    assert r.forward_peak_bytes == 4096 + 8192 + 8192
    assert r.backward_peak_bytes == 4096 + 4 + 4 + 49792 + 8192
    assert not r.checkpointed


def test_mlp_under_autocast_saves_bf16_copies_as_cuda_does() -> None:
    """fp32 weights, bf16 autocast. Saved: x (fp32, 4096), its bf16 cast (2048), r in bf16 (4096)
    and the bf16 copy of W2 (8192) that the second addmm keeps for r's gradient. W1's copy is not
    saved (x needs no gradient) and is freed when autocast's cache is cleared."""
    r = dry_run(mlp(), torch.empty(16, 64), batch=16, seq=1, params_dtype="fp32", autocast="bf16")
    assert r.saved_bytes == 4096 + 2048 + 4096 + 8192


def test_params_dtype_halves_the_weights() -> None:
    r = dry_run(mlp(), torch.empty(16, 64), batch=16, seq=1, params_dtype="bf16")
    assert r.param_bytes == r.grad_bytes == 12448 * 2
    assert r.saved_bytes == (4096 + 8192) // 2  # the floating input takes the params' dtype too


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.head = nn.Linear(16, 100, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(ids))


def test_tied_weights_count_once_and_stay_tied() -> None:
    with torch.device("meta"):
        model = Tied()
    r = dry_run(model, torch.zeros(2, 8, dtype=torch.long), batch=2, seq=8, params_dtype="fp32")
    assert r.n_params == 1600
    assert r.param_bytes == r.grad_bytes == 6400
    assert model.head.weight is model.emb.weight


def test_dropout_saves_a_bool_mask_as_cuda_does() -> None:
    """CUDA's fused dropout keeps one byte per element; the CPU's would keep four (fp32)."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.1), nn.Linear(64, 8))
    r = dry_run(model, torch.empty(16, 64), batch=16, seq=1, params_dtype="fp32")
    x, dropped, mask = 16 * 64 * 4, 16 * 64 * 4, 16 * 64
    assert r.saved_bytes == x + dropped + mask


class Attention(nn.Module):
    def __init__(self, dropout: float, heads: int = 4, kv_heads: int = 4, dim: int = 64) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = (
            self.kv(x).view(b, s, 2 * self.kv_heads, self.head_dim).transpose(1, 2).chunk(2, dim=1)
        )
        gqa = {"enable_gqa": True} if self.kv_heads != self.heads else {}
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout, is_causal=True, **gqa)
        return out.transpose(1, 2).reshape(b, s, -1)


def test_attention_with_dropout_keeps_no_seq_by_seq_matrix() -> None:
    """bf16 attention with dropout runs on CUDA's flash kernel: q, k, v, the output and a
    log-sum-exp per row are kept, never the (seq x seq) probabilities the CPU's math path keeps."""
    b, s = 2, 256
    with torch.device("meta"):
        model = Attention(dropout=0.1)
    r = dry_run(model, torch.empty(b, s, 64), batch=b, seq=s, params_dtype="bf16")
    x = q = out = b * s * 64 * 2  # q, k and v are views of the two projections' outputs
    kv = b * s * 128 * 2
    lse = b * 4 * s * 4  # fp32, one per (head, row)
    assert r.saved_bytes == x + q + kv + out + lse
    assert r.saved_bytes < b * 4 * s * s * 2  # the probabilities alone would be larger


def test_fp32_grouped_attention_falls_back_to_math_as_cuda_does() -> None:
    """No fused CUDA kernel takes fp32 with GQA: math keeps the probabilities."""
    b, s = 1, 128
    with torch.device("meta"):
        model = Attention(dropout=0.0, heads=4, kv_heads=2)
    r = dry_run(model, torch.empty(b, s, 64), batch=b, seq=s, params_dtype="fp32")
    assert r.saved_bytes > b * 4 * s * s * 4


def test_cuda_autocast_policy_runs_fp32_ops_in_fp32_and_goes_away() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(4, 8, dtype=torch.bfloat16)
        with _cuda_kernels(True), torch.autocast("cpu", dtype=torch.bfloat16):
            assert F.layer_norm(x, (8,)).dtype == torch.float32
            assert torch.softmax(x, -1).dtype == torch.float32
            assert x.pow(2).dtype == torch.float32
            assert x.sum().dtype == torch.float32
            assert x.sum(dtype=torch.bfloat16).dtype == torch.bfloat16  # a given dtype is kept
            assert x.relu().dtype == torch.bfloat16  # not on the list
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.softmax(x, -1).dtype == torch.bfloat16  # the CPU's own policy again


# --- a tiny transformer: dry run against a real CPU step --------------------------------------


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (
            self.qkv(self.norm1(x))
            .view(b, s, 3, self.heads, d // self.heads)
            .permute(2, 0, 3, 1, 4)
        )
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.out(F.gelu(self.fc(self.norm2(x))))


class TinyLM(nn.Module):
    """Looks like a Hugging Face causal LM to the dry run: ``config.vocab_size``, ``labels``, ``.loss``."""

    def __init__(self, vocab: int = 128, dim: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.config = SimpleNamespace(vocab_size=vocab)
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.checkpointing = False

    def gradient_checkpointing_enable(
        self, gradient_checkpointing_kwargs: dict | None = None
    ) -> None:
        self.checkpointing = True

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> SimpleNamespace:
        x = self.emb(input_ids)
        for block in self.blocks:
            if self.checkpointing:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.head(self.norm(x)).float()
        loss = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
        )
        return SimpleNamespace(loss=loss, logits=logits)


def real_saved_bytes(model: nn.Module, dtype: torch.dtype, **inputs: torch.Tensor) -> int:
    """Unique storages that autograd keeps after a real CPU forward, beside the weights."""
    model = model.to(dtype).train()
    weights = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in weights:
            saved[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(**inputs)
    return sum(saved.values())


@pytest.mark.parametrize("params_dtype", ["fp32", "bf16"])
def test_tiny_transformer_saves_what_a_real_step_saves(params_dtype: str) -> None:
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[params_dtype]
    torch.manual_seed(0)
    real = TinyLM()
    ids = torch.randint(0, 128, (2, 32))
    expected = real_saved_bytes(real, dtype, input_ids=ids, labels=ids)
    with torch.device("meta"):
        model = TinyLM()
    r = dry_run(model, batch=2, seq=32, params_dtype=params_dtype)
    assert r.saved_bytes == expected
    assert r.n_params == sum(p.numel() for p in real.parameters())
    assert r.forward_peak_bytes >= r.saved_bytes
    assert r.backward_peak_bytes >= max(r.saved_bytes, r.grad_bytes)


def test_checkpointing_keeps_only_the_block_inputs() -> None:
    with torch.device("meta"):
        plain, ckpt = TinyLM(), TinyLM()
    a = dry_run(plain, batch=2, seq=32, params_dtype="bf16")
    b = dry_run(ckpt, batch=2, seq=32, params_dtype="bf16", checkpointing=True)
    assert b.checkpointed and not a.checkpointed
    assert b.saved_bytes < a.saved_bytes
    assert b.grad_bytes == a.grad_bytes


def test_a_model_far_larger_than_memory_dry_runs_without_allocating_it(
    tmp_path, monkeypatch
) -> None:
    """8.6B parameters (34 GB in fp32), built by a factory on meta: nothing of it is allocated (the
    process's peak resident memory grows by far less than one of its layers, 17 GB)."""
    (tmp_path / "huge.py").write_text(
        textwrap.dedent("""
        import torch
        from torch import nn

        def build():
            model = nn.Sequential(nn.Linear(65536, 65536), nn.GELU(), nn.Linear(65536, 65536))
            return model, torch.empty(4, 65536)
    """)
    )
    peak = _peak_rss_bytes()
    loaded = load_factory(f"{tmp_path / 'huge.py'}:build")
    r = dry_run(*loaded, batch=4, seq=1, params_dtype="fp32")
    assert _peak_rss_bytes() - peak < 1 << 30
    assert r.n_params == 2 * (65536 * 65536 + 65536)
    assert r.param_bytes == r.grad_bytes == 4 * r.n_params


# --- dry_run's own errors ----------------------------------------------------------------------


def test_no_example_and_not_a_language_model() -> None:
    with pytest.raises(
        InputError, match=r"not a Hugging Face causal LM .* return \(module, example_input\)"
    ):
        dry_run(mlp(), batch=1, seq=8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"params_dtype": "int8"}, "params_dtype 'int8' is not one of fp32, bf16, fp16"),
        ({"autocast": "fp8"}, "autocast 'fp8' is not one of none, bf16, fp16"),
        ({"loss": "mean"}, "loss 'mean' is not 'auto' or a callable"),
    ],
)
def test_bad_options(kwargs: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        dry_run(mlp(), torch.empty(2, 64), batch=2, seq=1, **kwargs)


class ReadsValues(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return y * 2 if y.sum() > 0 else y


def test_a_model_that_reads_tensor_values_is_an_input_error() -> None:
    with torch.device("meta"):
        model = ReadsValues()
    with pytest.raises(InputError, match=r"dry run of ReadsValues failed: .*reads tensor values"):
        dry_run(model, torch.empty(2, 8), batch=2, seq=1)


# --- load_factory ------------------------------------------------------------------------------

FACTORIES = '''
import torch
from torch import nn

def build():
    return nn.Linear(4, 4)

def build_with_input():
    return nn.Linear(4, 4), torch.zeros(2, 4)

def build_with_dict():
    return nn.Linear(4, 4), {"input": torch.zeros(2, 4)}

def build_real():
    return nn.Linear(4, 4, device="cpu"), torch.zeros(2, 4, device="cpu")

def build_and_tell_device():
    model = nn.Linear(4, 4)
    model.built_on = torch.empty(1).device.type
    return model

def broken():
    raise ValueError("boom")

def wrong_type():
    return 42

def wrong_example():
    return nn.Linear(4, 4), "text"

MODEL = nn.Linear(4, 4)
NOT_CALLABLE = 3
'''


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "gd_factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("gd_factories", None)


def test_load_module_factory_on_meta(factories) -> None:
    loaded = load_factory("gd_factories:build")
    assert isinstance(loaded, Loaded) and loaded.example_input is None
    assert type(loaded.module) is nn.Linear and loaded.module.weight.shape == (
        4,
        4,
    )  # build(): nn.Linear(4, 4)
    assert loaded.module.weight.device.type == "meta" and loaded.module.bias.device.type == "meta"


def test_factory_runs_under_the_meta_device(factories) -> None:
    assert load_factory("gd_factories:build_and_tell_device").module.built_on == "meta"


def test_load_with_example_input(factories) -> None:
    _, example = load_factory("gd_factories:build_with_input")
    assert isinstance(example, torch.Tensor) and example.device.type == "meta"
    _, example = load_factory("gd_factories:build_with_dict")
    assert isinstance(example, dict) and example["input"].shape == (2, 4)


def test_real_tensors_are_moved_to_meta(factories) -> None:
    module, example = load_factory("gd_factories:build_real")
    assert module.weight.device.type == "meta" and example.device.type == "meta"


def test_a_module_instance_is_taken_as_is(factories) -> None:
    import gd_factories

    module, example = load_factory("gd_factories:MODEL")
    # not called (an nn.Module is callable): the instance itself, its real tensors moved to meta
    assert module is gd_factories.MODEL and example is None
    assert module.weight.shape == (4, 4) and module.weight.device.type == "meta"


def test_a_file_path_spec(factories) -> None:
    module, example = load_factory(f"{factories / 'gd_factories.py'}:build")
    # the file's build(): nn.Linear(4, 4), made on meta, no example
    assert type(module) is nn.Linear and (module.in_features, module.out_features) == (4, 4)
    assert module.weight.device.type == "meta" and example is None
    module, example = load_factory(f"{factories / 'gd_factories.py'}:build_with_input")
    assert example.shape == (2, 4) and example.device.type == "meta"


def test_the_current_directory_is_importable(tmp_path, monkeypatch) -> None:
    (tmp_path / "gd_here.py").write_text(
        "from torch import nn\ndef build():\n    return nn.Linear(2, 2)\n"
    )
    monkeypatch.chdir(tmp_path)
    try:
        module = load_factory("gd_here:build").module
        assert type(module) is nn.Linear and (module.in_features, module.out_features) == (2, 2)
        assert module.weight.device.type == "meta"
    finally:
        sys.modules.pop("gd_here", None)


def test_a_loaded_factory_dry_runs(factories) -> None:
    """nn.Linear(4, 4) on its example zeros(2, 4), fp32: 16 + 4 = 20 parameters, 80 bytes. x and the
    output are 2x4x4 = 32 bytes each, the loss (output.sum()) 4. addmm saves x (for the weight's
    gradient): 32 saved. The forward peaks once the loss exists: x + output + loss = 68. The backward
    holds x, the loss and its gradient (4 + 4) and the two gradients (80): 120; the output's gradient
    is a view of the loss's (expand), no storage of its own."""
    r = dry_run(*load_factory("gd_factories:build_with_input"), batch=2, seq=1, params_dtype="fp32")
    assert r == DryRun(
        n_params=20,
        param_bytes=80,
        buffer_bytes=0,
        grad_bytes=80,
        saved_bytes=32,
        forward_peak_bytes=32 + 32 + 4,
        backward_peak_bytes=32 + 4 + 4 + 80,
        checkpointed=False,
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "gd_factories",
            r"'gd_factories' is not a model factory: no 'module:attribute' \(accepted: 'pkg.module:factory'",
        ),
        (
            "gd_no_such_module:build",
            r"cannot import module 'gd_no_such_module' \(No module named 'gd_no_such_module'\)",
        ),
        ("gd_factories:nothing", r"'gd_factories' has no attribute 'nothing'"),
        ("gd_factories:broken", r"'gd_factories:broken': the factory raised ValueError: boom"),
        (
            "gd_factories:wrong_type",
            r"returned int 42; expected an nn.Module or a tuple \(module, example_input\)",
        ),
        (
            "gd_factories:wrong_example",
            r"returned a tuple of \(Linear, str\); expected an nn.Module",
        ),
        ("gd_factories:NOT_CALLABLE", r"is int 3, not a callable that returns an nn.Module"),
        ("no/such/file.py:build", r"no file 'no/such/file.py'"),
        (":build", r"no 'module:attribute'"),
    ],
)
def test_load_factory_errors(factories, spec: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as err:
        load_factory(spec)
    assert "\n" not in str(err.value)


# --- Hugging Face models (skipped where transformers is absent, as in CI) ----------------------


def hf_cases():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    llama = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
    )
    llama_mha = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=256,
    )
    # No dropout: with it the CPU runs math attention and float masks, CUDA (and the dry run) not.
    gpt2 = transformers.GPT2Config(
        n_embd=64,
        n_layer=2,
        n_head=4,
        vocab_size=256,
        n_positions=128,
        attn_pdrop=0.0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
    )
    return {
        # fp32 with GQA: the CPU runs flash, CUDA (and the dry run) math; so GQA only in bf16.
        "llama-gqa-bf16": (transformers.LlamaForCausalLM, llama, "bf16"),
        "llama-fp32": (transformers.LlamaForCausalLM, llama_mha, "fp32"),
        "gpt2-fp32": (transformers.GPT2LMHeadModel, gpt2, "fp32"),
        "gpt2-bf16": (transformers.GPT2LMHeadModel, gpt2, "bf16"),
    }


@pytest.mark.parametrize("case", ["llama-gqa-bf16", "llama-fp32", "gpt2-fp32", "gpt2-bf16"])
def test_hf_model_saves_what_a_real_step_saves(case: str) -> None:
    cls, config, params_dtype = hf_cases()[case]
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[params_dtype]
    torch.manual_seed(0)
    real = cls(config)
    ids = torch.randint(0, config.vocab_size, (2, 32))
    expected = real_saved_bytes(real, dtype, input_ids=ids, labels=ids, use_cache=False)
    with torch.device("meta"):
        model = cls(config)
    r = dry_run(model, batch=2, seq=32, params_dtype=params_dtype)
    assert r.saved_bytes == expected
    assert r.n_params == sum(p.numel() for p in real.parameters())  # GPT-2's tied head once


def test_hf_masking_is_left_as_it_was() -> None:
    pytest.importorskip("transformers")
    from transformers import masking_utils

    cls, config, _ = hf_cases()["llama-gqa-bf16"]
    before = masking_utils.find_packed_sequence_indices
    with torch.device("meta"):
        model = cls(config)
    dry_run(model, batch=1, seq=16)
    assert masking_utils.find_packed_sequence_indices is before


def test_llama_8b_dry_runs_on_meta() -> None:
    """Llama-3.1-8B's shape at batch 1 x 4096: 8,030,261,248 parameters, none of them allocated (a
    couple of seconds; the process's peak resident memory grows by far less than its 16 GB of bf16)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        max_position_embeddings=131072,
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    peak = _peak_rss_bytes()
    r = dry_run(model, batch=1, seq=4096, params_dtype="bf16")
    assert _peak_rss_bytes() - peak < 1 << 30
    assert r.n_params == 8_030_261_248
    measured_on_h200 = (
        28_562_277_376  # torch.cuda.memory_allocated after the forward, less the weights
    )
    assert abs(r.saved_bytes - measured_on_h200) < 0.01 * measured_on_h200


def test_cuda_sdpa_takes_a_value_narrower_than_query_and_key():
    # MLA (DeepSeek): q and k of 192, v of 128; CUDA's memory-efficient kernel runs it, so the dry
    # run must too, with the output at v's width and the values of plain attention
    from gpudoctor.memory.dryrun import _cuda_sdpa

    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 2, 8, 192, generator=g, dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(1, 2, 8, 128, generator=g, dtype=torch.bfloat16)
    out = _cuda_sdpa(q, k, v, is_causal=True)
    assert out.shape == (1, 2, 8, 128)
    ref = torch.ops.aten._scaled_dot_product_attention_math(
        q.float(), k.float(), v.float(), None, 0.0, True
    )[0]
    assert torch.allclose(out.float(), ref, atol=3e-2)


def _peak_rss_bytes() -> int:
    """This process's peak resident memory so far (Linux reports ru_maxrss in KiB, macOS in bytes)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024
