"""Check plan/traffic.py's op-by-op count of Hugging Face eager traffic against the real op stream.

Runs a forward + backward of a small random Llama (transformers, bf16, SDPA) on the CPU under a
TorchDispatchMode and adds up, for every aten op that is not a view, a matmul or the attention core,
the bytes of its inputs (unique elements: broadcast operands count once) and outputs, with what the
CUDA kernels do where it differs: ``embedding`` reads only the gathered rows, ``nll_loss`` reads only
the target logits, ``slice_backward`` zero-fills its output and copies the slice in. Prints the
dispatched bytes beside ``hf_layer_bytes`` x layers + ``hf_head_bytes``. No GPU needed:
``python benchmarks/count_hf_traffic.py``.
"""

from __future__ import annotations

CONFIG = {
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 3000,
    "max_position_embeddings": 1024,
}
BATCH, SEQ = 4, 128
_SKIP = (
    "aten.mm",
    "aten.addmm",
    "aten.bmm",
    "aten._scaled_dot_product",
    "aten._flash",
    "aten._efficient",
    "aten._cudnn",
)


def _unique_bytes(t) -> int:
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        n *= size if stride else 1
    return n * t.element_size()


def dispatched_bytes() -> float:
    """Bytes the non-matmul ops of one forward + backward read and write, counted from the op stream."""
    import torch
    import transformers
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Count(TorchDispatchMode):
        total = 0.0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = str(func)
            ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
            outs = [a for a in tree_flatten(out)[0] if isinstance(a, torch.Tensor)]
            storages = {a.untyped_storage().data_ptr() for a in ins}
            if name.startswith(_SKIP) or any(
                o.untyped_storage().data_ptr() in storages for o in outs
            ):
                return out  # a matmul, the attention core, or a view
            written = sum(_unique_bytes(o) for o in outs)
            if "embedding.default" in name:
                read = written  # the gathered rows
            elif "nll_loss" in name:
                read = _unique_bytes(ins[-1]) if "backward" not in name else 0  # targets only
            elif "slice_backward" in name:
                read = 2 * _unique_bytes(ins[0])  # zero-fill of the output, then copy of the slice
            else:
                seen, read = set(), 0
                for a in ins:
                    key = (
                        a.untyped_storage().data_ptr(),
                        a.storage_offset(),
                        tuple(a.shape),
                        tuple(a.stride()),
                    )
                    if key not in seen:
                        seen.add(key)
                        read += _unique_bytes(a)
            self.total += read + written
            return out

    cfg = transformers.LlamaConfig(**CONFIG)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ))
    mode = Count()
    with mode:
        model(input_ids=ids, labels=ids).loss.backward()
    return mode.total


def counted_bytes() -> float:
    from gpudoctor.core.hf_config import from_hf_config
    from gpudoctor.plan.traffic import hf_head_bytes, hf_layer_bytes, widths

    spec = from_hf_config({"model_type": "llama", **CONFIG}, name="count-llama")
    w = widths(spec, BATCH * SEQ)
    return spec.layers * hf_layer_bytes(spec, w) + hf_head_bytes(spec, w)


if __name__ == "__main__":
    d, c = dispatched_bytes(), counted_bytes()
    print(
        f"dispatched {d / 1e6:.2f} MB, plan/traffic.py {c / 1e6:.2f} MB, difference {c / d - 1:+.2%}"
    )
