"""What every ``gpudoctor plan`` command shares: the bounds on its inputs, the exit code of a plan
that found nothing that fits, and the 16-bit tensor-core peak a card is priced at."""

from __future__ import annotations

from gpudoctor.errors import InputError

# A plan ran and nothing fits (no training layout, no serving TP degree): the command prints why and
# exits with this code, so a CI job can tell it from a plan (0), bad input (2) or a crash (1).
NO_FIT_EXIT_CODE = 3

# The largest GPU count a plan accepts: the largest single training jobs reported run on tens of
# thousands of GPUs (Llama 3: 16,384 H100s); a count above this is a typo, not a cluster.
MAX_GPUS = 100_000
# The largest --gpus-per-node (one NVLink / NVSwitch domain) a plan accepts: GB200 NVL72 holds 72,
# the largest announced 576.
MAX_GPUS_PER_NODE = 1024


def check_gpus(value: object, name: str = "gpus", low: int = 1) -> int:
    """``value`` if it is a whole number from ``low`` to MAX_GPUS, else a one-line InputError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"--{name} must be a whole number >= {low}, got {value!r}")
    if name == "gpus-per-node" and value > MAX_GPUS_PER_NODE:
        raise InputError(f"--gpus-per-node {value} is more GPUs than any node or NVLink domain "
                         "holds (72 in a GB200 NVL72, 576 announced); plans take at most "
                         f"{MAX_GPUS_PER_NODE:,}: check the number")
    if value > MAX_GPUS:
        raise InputError(f"--{name} {value} is more GPUs than any single job runs; plans take "
                         f"at most {MAX_GPUS:,} GPUs (the largest reported training jobs use tens "
                         f"of thousands): check the number")
    return value


def half_precision(hw) -> tuple[str, float, str | None]:
    """(dtype, dense FLOP/s, note) of the 16-bit tensor-core rate a plan prices matmuls at: bf16
    where the card has it, else fp16 (Volta: V100 has fp16 tensor cores and no bf16), with a note
    saying so; a one-line InputError for a row with neither (no tensor-core figure in its
    datasheet)."""
    flops = hw.matrix_flops
    if "bf16" in flops:
        return "bf16", flops["bf16"], None
    if "fp16" in flops:
        return "fp16", flops["fp16"], (
            f"the {hw.name} has no bf16 tensor cores: matmuls are priced at its fp16 "
            f"tensor-core peak ({flops['fp16'] / 1e12:,.0f} TFLOP/s), as run in fp16 with loss "
            f"scaling (training) or fp16 weights (serving; the same 2 bytes per value as bf16)")
    raise InputError(f"--gpu {hw.key!r}: its datasheet row has no bf16 or fp16 tensor-core peak "
                     "(no figure confirmed), so matmul time cannot be priced; choose a --gpu whose "
                     "row has one")


def gib(n: float) -> str:
    """Bytes in GiB (2^30), the unit every plan prints sizes in: "80 GiB", "94.5 GiB", "1,052
    GiB"."""
    v = n / 2**30
    if v >= 100:
        return f"{v:,.0f} GiB"
    return f"{v:.1f}".removesuffix(".0") + " GiB"


def plural(n: int, word: str) -> str:
    """ "1 GPU", "8 GPUs" (thousands separated)."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")
