"""Ceilings: the roofs the roofline is drawn with, and where they come from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from gpudoctor.core.records import as_dict
from gpudoctor.errors import CeilingsFileError, UnknownGpuError
from gpudoctor.hardware.specs import GpuSpec, find_spec, known_names

# PCIe link rates (per direction, after 128b/130b encoding): the host-copy roof when nothing was
# measured. PCI-SIG base specifications 4.0 and 5.0: 16 GT/s and 32 GT/s per lane, x16.
PCIE4_X16_BYTES_PER_S = 31.5e9
PCIE5_X16_BYTES_PER_S = 63.0e9
PCIE3_X16_BYTES_PER_S = 15.75e9  # 8 GT/s per lane, x16
_PCIE_BY_GEN = {"gen3": PCIE3_X16_BYTES_PER_S, "gen4": PCIE4_X16_BYTES_PER_S,
                "gen5": PCIE5_X16_BYTES_PER_S}


# fp16 matmuls this many times faster than bf16 ones: a card whose tensor cores take fp16 only.
# Where both have tensor cores their rates are one (datasheets) or within a few percent (measured).
FP16_ONLY_RATIO = 1.5


class Ceilings(msgspec.Struct, frozen=True):
    """What one GPU can reach. ``source`` says whether it was measured or read off a datasheet."""

    gpu: str
    matrix_flops: dict[str, float]  # dtype -> FLOP/s on the matrix units (fp32: CUDA-core FMA)
    vector_flops: float  # FLOP/s of non-matrix work
    hbm_bytes_per_s: float
    h2d_pinned_bytes_per_s: float
    memory_bytes: int
    source: str
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    def matrix(self, dtype: str) -> float:
        """Matrix FLOP/s for a dtype name (bf16, fp16, tf32, fp32, fp8...); fp32 when unknown."""
        return self.matrix_flops.get(dtype) or self.matrix_flops.get("fp32") or self.vector_flops

    @property
    def half_dtype(self) -> str:
        """The 16-bit type its tensor cores take best: bf16, or fp16 on a card without bf16 ones
        (V100, T4: no bf16 row in the datasheet, or bf16 measured at a fraction of fp16 by
        ``gpudoctor bench``, which runs bf16 matmuls without tensor cores there); bf16 where
        nothing is known."""
        bf16, fp16 = self.matrix_flops.get("bf16") or 0.0, self.matrix_flops.get("fp16") or 0.0
        return "fp16" if fp16 > FP16_ONLY_RATIO * bf16 else "bf16"

    @property
    def best_matrix_flops(self) -> float:
        """The 16-bit tensor-core roof: the reference for MFU and for "what a fix reaches"."""
        return self.matrix_flops.get(self.half_dtype) or self.vector_flops

    @property
    def available(self) -> bool:
        """Peak rates to draw a roofline with: False for a card with no datasheet row and nothing
        measured (``unavailable``), where only the host side and the idle causes can be judged."""
        return self.hbm_bytes_per_s > 0 and self.best_matrix_flops > 0

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self)


def from_spec(spec: GpuSpec) -> Ceilings:
    # the row's host link ("Gen5 x16"); Gen4 x16 when the datasheet does not say
    pcie = _PCIE_BY_GEN.get(spec.pcie.lower().split(" ")[0], PCIE4_X16_BYTES_PER_S) if spec.pcie else PCIE4_X16_BYTES_PER_S
    return Ceilings(
        gpu=spec.name,
        matrix_flops=dict(spec.matrix_flops),
        vector_flops=spec.vector_flops,
        hbm_bytes_per_s=spec.hbm_bytes_per_s,
        h2d_pinned_bytes_per_s=pcie,
        memory_bytes=spec.memory_bytes,
        source=f"datasheet: {spec.source}",
    )


def for_gpu_name(name: str) -> Ceilings:
    """Datasheet ceilings for a device name; a clear error listing the known rows otherwise."""
    spec = find_spec(name)
    if spec is None:
        raise UnknownGpuError(
            f"no datasheet row matches GPU {name!r}; pass --gpu with one of "
            f"{', '.join(known_names())}, or --ceilings FILE"
        )
    return from_spec(spec)


def unavailable(name: str) -> Ceilings:
    """No ceilings for a GPU the datasheet table does not know: zero rates (``available`` False),
    so that no roofline, MFU or peak-priced finding is made up. The host link keeps the Gen4 x16
    rate ``from_spec`` takes when a datasheet does not name one."""
    return Ceilings(gpu=name, matrix_flops={}, vector_flops=0.0, hbm_bytes_per_s=0.0,
                    h2d_pinned_bytes_per_s=PCIE4_X16_BYTES_PER_S, memory_bytes=0,
                    source=f"none: {name} is not in the datasheet table" if name else
                    "none: the trace names no GPU")


def unknown_card_note(name: str, skipped: tuple[str, ...] = ()) -> str:
    """The one-line warning of a report made with ``unavailable`` ceilings: what is missing, how to
    give it (an empty ``name``: the trace names no card)."""
    rules = f" ({', '.join(skipped)})" if skipped else ""
    if not name:
        return (f"the trace names no GPU: no roofline, MFU or peak-priced findings{rules}; for "
                "them, pass --gpu NAME, or --ceilings FILE (gpudoctor bench's JSON)")
    return (f"GPU {name!r} is not in the datasheet table: no roofline, MFU or peak-priced "
            f"findings{rules}; for them, run `gpudoctor bench` on that card, or pass --ceilings "
            "FILE (bench's JSON) or --gpu NAME")


_REQUIRED = ("matrix_flops", "hbm_bytes_per_s")


def load_file(path: str | Path) -> Ceilings:
    """Ceilings from a JSON file: {"gpu", "matrix_flops": {dtype: FLOP/s}, "hbm_bytes_per_s",
    ...}."""
    path = Path(path)
    hint = "pass a JSON file such as the profile `gpudoctor bench` saves, or --gpu NAME"
    # a folder, /dev/null, a FIFO (reading one waits forever)
    if path.exists() and not path.is_file():
        raise CeilingsFileError(f"ceilings file {path} is not a regular file; {hint}")
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise CeilingsFileError(
            f"cannot read ceilings file {path}: {exc.strerror or exc}; {hint}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CeilingsFileError(
            f"ceilings file {path} is not JSON; expected an object with {', '.join(_REQUIRED)}"
        ) from None
    if not isinstance(data, dict):
        raise CeilingsFileError(f"ceilings file {path} must hold a JSON object")
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        raise CeilingsFileError(
            f"ceilings file {path} lacks {', '.join(missing)}; expected keys: gpu, matrix_flops "
            "(dtype -> FLOP/s), hbm_bytes_per_s, optional vector_flops, h2d_pinned_bytes_per_s"
        )
    try:
        matrix = {str(k): float(v) for k, v in dict(data["matrix_flops"]).items()}
        hbm = float(data["hbm_bytes_per_s"])
        vector = float(data.get("vector_flops", matrix.get("fp32", 0.0)))
        pinned = float(data.get("h2d_pinned_bytes_per_s", PCIE4_X16_BYTES_PER_S))
        memory = int(data.get("memory_bytes", 0))
    except (TypeError, ValueError):
        raise CeilingsFileError(
            f"ceilings file {path} has a non-numeric rate; rates are numbers in FLOP/s or bytes/s"
        ) from None
    if hbm <= 0 or not matrix or min(matrix.values()) <= 0:
        raise CeilingsFileError(f"ceilings file {path} has a zero or negative rate")
    return Ceilings(
        gpu=str(data.get("gpu", "unknown GPU")),
        matrix_flops=matrix,
        vector_flops=vector or min(matrix.values()),
        hbm_bytes_per_s=hbm,
        h2d_pinned_bytes_per_s=pinned,
        memory_bytes=memory,
        source=str(data.get("source", f"file {path.name}")),
    )
