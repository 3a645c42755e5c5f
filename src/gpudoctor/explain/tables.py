"""Reading the timing tables `explain` takes: CSV cells to checked numbers, one-line errors."""

from __future__ import annotations

import csv
import math
from typing import Any

import numpy as np

from gpudoctor.errors import InputError

Z_FLAG = 3.5  # modified z-score threshold (Iglewicz & Hoaglin, 1993)
JITTER = 0.005  # timer jitter floor on the spread: 0.5% of the median step
CLIFF = 1.5  # measured / expected time (ring fit or scaled plan model) from which a GPU count is a cliff
GPUS_PER_NODE = 8
MS_RANGE = (1e-6, 1e9)  # 1 ns to 11 days: times outside are not timings
MAX_BYTES, MAX_COUNT = 1e15, 1e7  # per-rank message size; GPUs, stages, micro-batches
RANKS_EXPECTED = ("a CSV whose header names rank, step and step_ms (any order; extra columns and "
                  "an optional time column are ignored), one row per rank and step")
COLL_EXPECTED = ("a CSV whose header names gpus and the all-reduce time in ms (allreduce_ms), "
                 "optional bytes (per-rank message size), algo, and the machine: gpu, fabric, "
                 "gpus_per_node; one row per GPU count")
SMI_CHECK = "nvidia-smi -q -d PERFORMANCE,CLOCK,ECC,PCIE"
NODE_FIRST_WRONG = ("Code-level changes (different sharding, recompute policy, bucket sizes) "
                    "before checking the hardware: nothing in the code changed.")



# -- reading a table
# ------------------------------------------------------------------------------------

CUT_NOTE = "the last line has no line end (the file may be cut mid-row): not used"


def cut_last_line(text: str) -> tuple[str, str]:
    """(text, note): a file whose last line has no line end may be a copy cut mid-row, and a cell
    cut short still reads as a number ("101.0" -> "10"); that line is left out and the note says so.
    A file of one line is left whole (a header alone: the parser names what is missing)."""
    if not isinstance(text, str) or not text.strip() or text.endswith(("\n", "\r")):
        return text, ""
    head, sep, last = text.rpartition("\n")
    # one line; blanks; a comment
    if not sep or not head.strip() or not last.strip() or last.lstrip().startswith("#"):
        return text, ""
    return head + sep, CUT_NOTE


def read_table(text: Any, what: str, expected: str) -> tuple[list[str],
                                                             list[tuple[int, list[str]]]]:
    """(lower-case header, [(line number, cells)]) from CSV, TSV or whitespace-separated text."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"empty {what} table; expected {expected}")
    lines = [(n, line) for n, line in enumerate(text.lstrip("\ufeff").splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise InputError(f"{what}: only comment lines; expected {expected}")
    head = lines[0][1]
    delim = "," if "," in head else "\t" if "\t" in head else None
    try:
        split = csv.reader([line for _, line in lines], delimiter=delim) if delim else (
            line.split() for _, line in lines)
        rows = [(n, [c.strip() for c in cells]) for (n, _), cells in zip(lines, split)]
    except csv.Error as exc:
        raise InputError(f"unreadable {what} table ({exc}); expected {expected}") from None
    header = [h.lower().strip().strip('"') for h in rows[0][1]]
    return header, rows[1:]


def find_column(header: list[str], names: tuple[str, ...], what: str, expected: str,
                required: bool = True) -> int | None:
    for name in names:
        if name in header:
            return header.index(name)
    if required:
        raise InputError(f"{what}: no {names[0]!r} column in the header "
                         f"({', '.join(header[:8]) or 'empty'}); expected {expected}")
    return None


def cell_at(cells: list[str], index: int | None) -> str:
    return cells[index] if index is not None and index < len(cells) else ""


def parse_number(cell: str, name: str, line: int, expected: str) -> float | None:
    """A finite float; None for an empty cell or nan/inf (missing); InputError for text."""
    if cell == "" or cell.lower() in ("nan", "n/a", "na", "-"):
        return None
    try:
        value = float(cell)
    except ValueError:
        raise InputError(
            f"line {line}: {name} {cell[:30]!r} is not a number; expected {expected}") from None
    return value if math.isfinite(value) else None


# -- per-rank step times
# --------------------------------------------------------------------------------


def whole_number(value: Any, name: str, least: int) -> int:
    number = real_number(value, name)
    if number != int(number) or not least <= number <= MAX_COUNT:
        raise InputError(f"{name} {value!r}: expected a whole number from {least} to {MAX_COUNT:g}")
    return int(number)


def real_number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"{name} {value!r}: expected a number")
    try:
        number = float(value)
    except ValueError:
        raise InputError(f"{name} {value!r}: expected a number") from None
    if not math.isfinite(number) or not 0 <= number <= MS_RANGE[1]:
        raise InputError(f"{name} {value!r}: expected a number from 0 to {MS_RANGE[1]:g}")
    return number


def stage_times(stage_ms: Any, p: int, v: int) -> tuple[np.ndarray | None, str]:
    """Per physical stage time (chunk j of pp x v lives on stage j mod pp); None entries are
    missing."""
    if stage_ms is None:
        return None, ""
    if not isinstance(stage_ms, (list, tuple)) or len(stage_ms) not in (p, p * v):
        raise InputError(
            f"stage_ms: expected a list of {p} per-stage times (or {p * v} per chunk), got "
            f"{stage_ms!r}"[:200])
    vals = [None if x is None else real_number(x, "stage_ms") for x in stage_ms]
    missing = sum(x is None for x in vals)
    per_stage = np.zeros(p)
    seen = np.zeros(p, dtype=bool)
    for j, x in enumerate(vals):
        if x is not None:
            per_stage[j % p] += x
            seen[j % p] = True
    if not seen.any() or per_stage[seen].sum() <= 0:
        return None, "no stage time given" if missing else ""
    partial = f"{missing} of {len(vals)} stage times missing" if missing else ""
    return per_stage[seen], partial
