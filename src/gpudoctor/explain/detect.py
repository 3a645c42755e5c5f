"""What kind of artifact a file is, from its content (names lie; contents do not).

Kinds: ``ncu-csv`` (``ncu --csv --page details`` or ``--page raw``), ``ncu-rep`` (a binary report,
converted through ``ncu --import``), ``smi-q`` (``nvidia-smi -q``), ``smi-csv`` (``nvidia-smi
--query-gpu ... --format=csv``), ``rank-timings`` (``rank,step,step_ms``), ``collectives``
(``gpus,allreduce_ms[,bytes]``) and ``scenario`` (JSON/YAML with a ``scenario`` key).
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

from gpudoctor.core.inflate import GZIP_MAGIC
from gpudoctor.errors import InputError

ACCEPTED = ("an Nsight Compute CSV (ncu --csv --page details) or .ncu-rep, nvidia-smi -q text, "
            "nvidia-smi --query-gpu CSV, a rank,step,step_ms CSV, a gpus,allreduce_ms CSV, or a "
            "scenario JSON/YAML (docs/explain.md)")

_MAX_BYTES = 512 * 1024 * 1024


def read_text(path: Path) -> str:
    if not path.exists():
        raise InputError(f"{path}: no such file; give {ACCEPTED}")
    if path.is_dir():
        raise InputError(f"{path} is a directory; give a file: {ACCEPTED}")
    size = path.stat().st_size
    if size == 0:
        raise InputError(f"{path} is empty; give {ACCEPTED}")
    if size > _MAX_BYTES:
        raise InputError(
            f"{path} is {size / 1e9:.1f} GB; export fewer kernels or metrics (the limit is 512 MB)")
    raw = path.read_bytes()
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise InputError(f"{path}: a damaged gzip file ({exc})") from None
    return raw.decode("utf-8", errors="replace")


def kind_of(path: Path, text: str) -> str:
    if path.suffix == ".ncu-rep":
        return "ncu-rep"
    head = text.lstrip("\ufeff")[:4000]
    stripped = head.lstrip()
    if stripped.startswith("{") or path.suffix.lower() in (".json", ".yaml", ".yml"):
        return "scenario"
    if "NVSMI LOG" in head or ("Driver Version" in head and "Attached GPUs" in head):
        return "smi-q"
    header = _csv_header(head)
    low = [h.strip().lower() for h in header]
    if {"kernel name", "metric name", "metric value"} <= set(low) or ("kernel name" in low
                                                                      and "id" in low):
        return "ncu-csv"
    if any(h.startswith(("gpu__", "sm__", "dram__", "l1tex__", "smsp__")) for h in low) and "kernel name" in low:
        return "ncu-csv"
    if "rank" in low and any(h in low for h in ("step_ms", "step_time_ms", "ms")):
        return "rank-timings"
    if "gpus" in low and any("allreduce" in h or "all_reduce" in h or h.endswith("_ms")
                             for h in low):
        return "collectives"
    if low and (low[0].startswith("name") or any("[mib]" in h or "[mhz]" in h for h in low)) and any(
            "." in h for h in low):
        return "smi-csv"
    raise InputError(f"{path}: not a format explain knows; give {ACCEPTED}")


def _csv_header(text: str) -> list[str]:
    """The first line that looks like a CSV header, past the lines ncu prints before its CSV."""
    for line in text.splitlines()[:50]:
        if not line.strip() or line.startswith(("==", "#")):
            continue
        try:  # a tab-separated table (the rank and collective parsers read TSV too)
            row = next(csv.reader(io.StringIO(line),
                                  delimiter="\t" if "\t" in line and "," not in line else ","))
        except (csv.Error, StopIteration):
            continue
        if len(row) >= 2:
            return row
    return []
