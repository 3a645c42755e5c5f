"""What the user asks `gpudoctor memory` about, checked against the model before anything is priced.

Contradictions (TP not dividing the heads, ZeRO without data parallelism, a pipeline deeper than
the model) are refused with one line naming the option and what it accepts, never priced into a
silently wrong number.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpudoctor.core.layout import CHECKPOINTING
from gpudoctor.core.spec import ModelSpec
from gpudoctor.errors import InputError

PARAM_DTYPES = ("bf16", "fp16", "fp32")
AUTOCAST = ("none", "bf16", "fp16")
OPTIMIZERS = ("adamw", "adamw8bit", "sgd", "sgd-momentum", "adafactor")
ATTENTION = ("sdpa", "flash", "eager")
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")
KV_DTYPES = ("bf16", "fp16", "fp8", "int8")
LOSSES = ("standard", "chunked")

_MAX_TOKENS = 1 << 40  # far beyond any real batch x sequence; above it a number is a typo


@dataclass(frozen=True)
class TrainOptions:
    batch: int = 1  # micro-batch per GPU (per data-parallel rank)
    seq: int = 2048
    params_dtype: str = "bf16"
    autocast: str = "none"
    optimizer: str = "adamw"
    master_weights: bool = False
    checkpointing: str = "none"
    attention: str = "sdpa"
    loss: str = "standard"
    dp: int = 1
    zero: int = 0
    fsdp: bool = False
    tp: int = 1
    sp: bool = False
    pp: int = 1
    virtual_stages: int = 1  # interleaved 1F1B: model chunks per pipeline rank
    cp: int = 1
    microbatches: int = 1  # gradient accumulation steps (the pipeline's micro-batches under PP)

    @property
    def shard_degree(self) -> int:
        """Data-parallel ranks that states are split over (ZeRO / FSDP)."""
        return self.dp if (self.zero or self.fsdp) else 1

    @property
    def zero_stage(self) -> int:
        return 3 if self.fsdp else self.zero


@dataclass(frozen=True)
class InferOptions:
    batch: int = 1
    prompt: int = 1024
    new: int = 256
    weights_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    attention: str = "sdpa"
    tp: int = 1
    group_size: int = 128  # int4 quantization group
    paged_block: int = 0  # 0: Hugging Face DynamicCache; N: paged KV in blocks of N tokens
    prefill_chunk: int = 0  # 0: the whole prompt at once

    @property
    def context(self) -> int:
        return self.prompt + self.new


def _choice(field: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InputError(
            f"--{field.replace('_', '-')} {value!r} is not one of: {', '.join(allowed)}")


def _positive(field: str, value: int, upper: int = _MAX_TOKENS) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1 or value > upper:
        raise InputError(
            f"--{field.replace('_', '-')} must be a whole number from 1 to {upper}, got {value!r}")


def _check_tp(spec: ModelSpec, tp: int) -> None:
    if spec.heads % tp:
        raise InputError(f"--tp {tp} does not divide the model's {spec.heads} attention heads; "
                         f"use a divisor of {spec.heads}")
    if spec.kv_heads % tp and tp % spec.kv_heads:
        raise InputError(
            f"--tp {tp} and the model's {spec.kv_heads} KV heads: one must divide the other")


def validate_train(spec: ModelSpec, o: TrainOptions) -> TrainOptions:
    o = check_common_train(o)
    _check_tp(spec, o.tp)
    if o.pp > spec.layers:
        raise InputError(f"--pp {o.pp} is deeper than the model's {spec.layers} layers")
    if o.virtual_stages > 1 and (o.pp < 2 or spec.layers % (o.pp * o.virtual_stages)):
        raise InputError(f"--virtual-stages {o.virtual_stages} needs --pp 2 or more and the "
                         f"{spec.layers} layers divisible by pp x virtual stages")
    return o


def check_common_train(o: TrainOptions) -> TrainOptions:
    """Checks that need no model: ranges, choices and contradictions between options."""
    for name in ("batch", "seq", "dp", "tp", "pp", "cp", "microbatches", "virtual_stages"):
        _positive(name, getattr(o, name))
    if o.batch * o.seq > _MAX_TOKENS:
        raise InputError(
            f"--batch x --seq = {o.batch * o.seq} tokens is beyond any GPU; check the numbers")
    _choice("params_dtype", o.params_dtype, PARAM_DTYPES)
    _choice("autocast", o.autocast, AUTOCAST)
    _choice("optimizer", o.optimizer, OPTIMIZERS)
    _choice("checkpointing", o.checkpointing, CHECKPOINTING)
    _choice("attention", o.attention, ATTENTION)
    _choice("loss", o.loss, LOSSES)
    if o.zero not in (0, 1, 2, 3):
        raise InputError(f"--zero {o.zero!r} is not one of: 0, 1, 2, 3")
    if (o.zero or o.fsdp) and o.dp < 2:
        raise InputError("--zero/--fsdp shard over data-parallel ranks: give --dp 2 or more")
    if o.fsdp and o.zero:
        raise InputError("--fsdp and --zero are two names for sharding; give one of them")
    if o.sp and o.tp < 2:
        raise InputError("--sp (sequence parallelism) needs --tp 2 or more")
    if o.seq % o.cp:
        raise InputError(f"--cp {o.cp} does not divide --seq {o.seq}")
    if o.autocast != "none" and o.params_dtype != "fp32":
        # autocast over 16-bit parameters changes nothing that memory sees; accept it as given
        o = replace(o, autocast="none") if o.autocast == o.params_dtype else o
    if o.master_weights and o.params_dtype == "fp32":
        o = replace(o, master_weights=False)  # fp32 parameters are their own master copy
    return o


def master_weights_note(o: TrainOptions) -> str | None:
    """The line that says --master-weights was ignored: fp32 parameters need no fp32 copy."""
    if o.master_weights and o.params_dtype == "fp32":
        return ("--master-weights ignored: with --params-dtype fp32 the weights are already fp32, "
                "so there is no separate master copy to count")
    return None


def precision_summary(o: TrainOptions) -> str:
    """What a parameter costs before sharding, in words and bytes: the assumption `memory` and
    `plan train` print with every training estimate (e.g. "bf16 weights and gradients, fp32 AdamW
    states + fp32 master weights: 16 bytes/parameter")."""
    sname = "fp32" if o.master_weights else o.params_dtype
    head = f"{o.params_dtype} weights and gradients"
    if o.autocast != "none" and o.autocast != o.params_dtype:
        head += f" (compute under {o.autocast} autocast)"
    states = {"adamw": f"{sname} AdamW states (2 per parameter)",
              "adamw8bit": "8-bit AdamW states (bitsandbytes)",
              "sgd": "SGD (no optimizer state)",
              "sgd-momentum": f"{sname} SGD momentum",
              "adafactor": "Adafactor's factored states (a row and a column per matrix, not per "
                           "parameter)",
              }[o.optimizer]
    total = bytes_per_param(o)
    master = " + fp32 master weights" if o.master_weights else ", no master copy"
    approx = "~" if o.optimizer in ("adamw8bit", "adafactor") else ""
    return f"{head}, {states}{master}: {approx}{total:.3g} bytes/parameter before sharding"


def bytes_per_param(o: TrainOptions) -> float:
    """Weights, gradients, optimizer states and master weights per parameter, before sharding
    (Adafactor's factored states, a row and a column per matrix, are left out: they are not per
    parameter)."""
    pb = _BYTES[o.params_dtype]
    state = 4 if o.master_weights else pb
    states = {"adamw": 2 * state, "adamw8bit": 2 * (1 + 4 / 256), "sgd": 0.0,
              "sgd-momentum": float(state), "adafactor": 0.0}[o.optimizer]
    return 2 * pb + states + (4 if o.master_weights else 0)


_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def validate_infer(spec: ModelSpec, o: InferOptions) -> InferOptions:
    for name in ("batch", "prompt", "tp", "group_size"):
        _positive(name, getattr(o, name))
    if not isinstance(o.new, int) or o.new < 0 or o.new > _MAX_TOKENS:
        raise InputError(f"--new must be a whole number from 0 to {_MAX_TOKENS}, got {o.new!r}")
    if o.paged_block < 0 or o.prefill_chunk < 0:
        raise InputError(
            "--paged-block and --prefill-chunk must be 0 (off) or a positive number of tokens")
    _choice("weights_dtype", o.weights_dtype, WEIGHT_DTYPES)
    _choice("kv_dtype", o.kv_dtype, KV_DTYPES)
    _choice("attention", o.attention, ATTENTION)
    _check_tp(spec, o.tp)
    return o


def check_context(spec: ModelSpec, o: TrainOptions | InferOptions,
                  policy: str = "note") -> str | None:
    """A sequence beyond the model's positions: refused, or priced with a note (returned).

    ``policy``: ``"refuse"`` (``gpudoctor memory`` without ``--allow-long-context``), ``"extend"``
    (with it: a RoPE model run past its trained length, e.g. with rope scaling, is priced; a learned
    table is still refused) or ``"note"`` (callers that report the positions themselves, as plan
    train). A learned position table (GPT-2's ``wpe``, ``n_positions`` rows) cannot be extended by a
    flag: a longer sequence indexes past it and the forward fails. Rotary positions are computed, so
    the forward runs at any length; past ``max_position_embeddings`` the model was not trained,
    which is the user's call to make, explicitly.
    """
    if policy not in ("refuse", "extend", "note"):
        raise ValueError(f"policy {policy!r} is not refuse, extend or note")
    limit = spec.max_positions
    if isinstance(o, InferOptions):
        tokens, given = o.context, f"--prompt {o.prompt} + --new {o.new} = {o.context:,} tokens"
        fix = f"keep --prompt + --new at {limit} or less"
    else:
        tokens, given = o.seq, f"--seq {o.seq}"
        fix = f"use --seq {limit} or less"
    if not limit or tokens <= limit:
        return None
    if spec.learned_positions and policy != "note":
        raise InputError(f"{given} is beyond {spec.name}'s {limit:,} positions: its position "
                         f"embeddings are a learned table of {limit:,} rows, which no flag "
                         f"extends; {fix}")
    if policy == "refuse":
        raise InputError(f"{given} is beyond {spec.name}'s {limit:,} positions "
                         f"(max_position_embeddings); {fix}, or add --allow-long-context to price "
                         "a run past its trained length (e.g. with RoPE scaling)")
    if spec.learned_positions:
        return f"{tokens:,} tokens is beyond the model's {limit:,} learned positions: it cannot run at this length"
    return (f"{tokens:,} tokens is beyond the model's {limit:,} positions: "
            f"priced as given; quality past the trained length is not")
