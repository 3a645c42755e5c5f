"""How much of a card one process can use: the figure ``memory`` fits an estimate against."""

from __future__ import annotations

from gpudoctor.hardware.specs import require_spec

# The memory CUDA reports for the card (torch.cuda.get_device_properties(0).total_memory), the
# most one process can have, where it was measured: less than the datasheet's on an H100 "80GB"
# (79.18 GiB, not 80), more than the datasheet row's "141 GB" on an H200 (139.80 GiB, not 131.32).
# Measured by `gpudoctor bench` (benchmarks/results/bench-h100-2026-11-22.json and
# bench-h200-2026-11-22.json, ceilings.memory_bytes). Other cards: the datasheet figure.
CUDA_TOTAL_BYTES = {"h100-sxm": 85_017_493_504, "h200": 150_109_880_320}


def capacity_of(gpu: str) -> tuple[str, int]:
    """The card's name and the bytes one process can have on it (before its CUDA context)."""
    spec = require_spec(gpu)
    return spec.name, CUDA_TOTAL_BYTES.get(spec.key, spec.memory_bytes)


def capacity_source(gpu: str) -> str:
    """Where ``capacity_of``'s figure comes from, in words."""
    spec = require_spec(gpu)
    if spec.key in CUDA_TOTAL_BYTES:
        return f"as CUDA reports it, measured; the datasheet says {spec.memory_bytes / 1024**3:,.2f} GiB"
    return "the datasheet's figure; CUDA reports a little less (79.18 of 80 GiB on an H100)"
