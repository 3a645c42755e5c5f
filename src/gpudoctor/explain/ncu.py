"""Nsight Compute CSV exports -> ``KernelMetrics`` per profiled kernel.

Two layouts are read: ``--page details`` (one row per kernel x metric, with "Section Name",
"Metric Name", "Metric Unit", "Metric Value", and in recent versions the rule results with their
text) and ``--page raw`` (one row per kernel, one column per raw metric, a units row under the
header). The lines ncu prints before the CSV (``==PROF==``, warnings) are skipped, thousands
separators in numbers are tolerated, and what a section did not export is listed in
``KernelMetrics.missing`` so the conclusions say they are partial.

Metric names were checked against real exports (tests/data/explain, ncu 2025.3 on an H200) and the
Nsight Compute profiling guide's metric tables.
"""

from __future__ import annotations

import csv
import io
import math
import re
import shutil
import subprocess
from pathlib import Path

from gpudoctor.errors import InputError
from gpudoctor.explain.kernel import FMA_PIPES, KernelMetrics

# details page: (section prefix or "", metric name) -> canonical field. Units are handled below.
_DETAILS = {
    "Duration": "duration_us",
    "Compute (SM) Throughput": "sm_throughput_pct",
    "DRAM Throughput": "dram_throughput_pct",
    "SM Busy": "sm_busy_pct",
    "Achieved Occupancy": "achieved_occupancy_pct",
    "Theoretical Occupancy": "theoretical_occupancy_pct",
    "Registers Per Thread": "registers_per_thread",
    "Block Size": "block_size",
    "Grid Size": "grid_size",
    "Waves Per SM": "waves_per_sm",
    "# SMs": "sm_count",
    "Block Limit Registers": "block_limit_registers",
    "Block Limit Shared Mem": "block_limit_shared_mem",
    "Block Limit Warps": "block_limit_warps",
    "Block Limit SM": "block_limit_sm",
    "L1/TEX Hit Rate": "l1_hit_rate_pct",
}
_SHARED = ("Static Shared Memory Per Block", "Dynamic Shared Memory Per Block",
           "Driver Shared Memory Per Block")

# raw page: metric -> canonical field (first match wins; Hopper's GMMA pipe and earlier HMMA)
_RAW = {
    "gpu__time_duration.sum": "duration_us",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "sm__instruction_throughput.avg.pct_of_peak_sustained_active": "sm_busy_pct",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_pct",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_pct",
    "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active": "tensor_pipe_pct",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "fma_pipe_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__block_size": "block_size",
    "launch__grid_size": "grid_size",
    "launch__waves_per_multiprocessor": "waves_per_sm",
    "device__attribute_multiprocessor_count": "sm_count",
    "launch__occupancy_limit_registers": "block_limit_registers",
    "launch__occupancy_limit_shared_mem": "block_limit_shared_mem",
    "launch__occupancy_limit_warps": "block_limit_warps",
    "launch__occupancy_limit_blocks": "block_limit_sm",
    "l1tex__t_sector_hit_rate.pct": "l1_hit_rate_pct",
    "smsp__warps_issue_stalled_long_scoreboard_per_warp_active.pct": "stall_long_scoreboard_pct",
}
_RAW_LOCAL = ("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
              "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum")
_RAW_LOCAL_SECTORS = ("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
                      "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum")
_RAW_STALL = {
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": "stall_long_scoreboard",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio": "stall_mio_throttle",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio": "stall_short_scoreboard",
}
_RAW_CPI = "smsp__average_warp_latency_per_inst_issued.ratio"
_RAW_GLOBAL_EXCESS = "derived__memory_l2_theoretical_sectors_global_excessive"
_RAW_GLOBAL_SECTORS = ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                       "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum")
_RAW_BANK_CONFLICTS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                       "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")
_RAW_BANK_WAVEFRONTS = ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum")

# rule texts (details page) that carry what no metric row does
_RULE_PATTERNS = [
    # "... uncoalesced global accesses resulting in a total of N excessive sectors (P% of the total
    # M sectors)"
    (re.compile(
        r"uncoalesced global accesses resulting in a total of [\d,]+ excessive sectors "
        r"\((\d+(?:\.\d+)?)%"),
     "uncoalesced_excess_pct"),
    # "... a 32.3 - way bank conflict ... This results in N bank conflicts,  which represent P% of
    # the overall ..."
    (re.compile(r"bank conflicts,\s+which represent (\d+(?:\.\d+)?)% of the overall"),
     "bank_conflict_pct"),
    (re.compile(
        r"uncoalesced shared accesses resulting in a total of [\d,]+ excessive wavefronts "
        r"\((\d+(?:\.\d+)?)%"),
     "bank_conflict_pct"),
]
# CPIStall: "each warp of this workload spends 6.9 cycles being stalled waiting for the MIO ..."
# (cycles, turned into a share of "Warp Cycles Per Issued Instruction")
_STALL_PATTERNS = [
    (re.compile(
        r"spends (\d+(?:\.\d+)?) cycles being stalled waiting for a scoreboard dependency "
        r"on a L1TEX"),
     "stall_long_scoreboard_pct"),
    (re.compile(r"spends (\d+(?:\.\d+)?) cycles being stalled waiting for the MIO"),
     "stall_mio_throttle_pct"),
    (re.compile(
        r"spends (\d+(?:\.\d+)?) cycles being stalled waiting for a scoreboard dependency on a MIO"),
     "stall_short_scoreboard_pct"),
]
# HighPipeUtilization: "Tensor is the highest-utilized pipeline (90.4%) ..." / "FMA is the
# highest-utilized ..."
_HIGH_PIPE = re.compile(r"^(.{1,40}?) is the highest-utilized pipeline \((\d+(?:\.\d+)?)%\)")
_SPILL_RULE = re.compile(r"local memory|spill", re.IGNORECASE)

_TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "nanosecond": 1e-3, "us": 1.0, "usecond": 1.0,
               "microsecond": 1.0,
               "ms": 1e3, "msecond": 1e3, "millisecond": 1e3, "s": 1e6, "second": 1e6}
_BYTE_UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "kibyte": 1024,
               "mibyte": 1024**2, "b": 1}

EXPECTED = ("an Nsight Compute CSV: `ncu --csv --page details` (columns Kernel Name, Section Name, "
            "Metric Name, Metric Unit, Metric Value) or `--page raw`")


def number(text: str) -> float | None:
    """'1,234.5' -> 1234.5; '(256, 1, 1)' -> 256; 'n/a', '' -> None."""
    t = str(text).strip().strip('"')
    if not t or t.lower() in ("n/a", "nan", "-", "none"):
        return None
    if t.startswith("("):  # a dim3: the product is what counts
        parts = [number(p) for p in t.strip("()").split(",")]
        if parts and all(p is not None for p in parts):
            prod = 1.0
            for p in parts:
                prod *= p  # type: ignore[operator]
            return prod
        return None
    t = t.replace(",", "").replace("%", "")
    try:
        value = float(t)
    except ValueError:
        return None
    # "inf", "1e400": no measurement (and no Infinity in --json)
    return value if math.isfinite(value) else None


def _rows(text: str, where: str) -> tuple[list[str], list[list[str]]]:
    lines = text.lstrip("\ufeff").splitlines()
    if lines and not text.endswith(("\n", "\r")):
        lines = lines[:-1]  # the file ends mid-row (a truncated copy): the partial row is not data
    start = next((i for i, line in enumerate(lines) if line.startswith(('"ID"', "ID,"))), None)
    if start is None:
        raise InputError(f"{where}: no CSV header with an ID column; expected {EXPECTED}")
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    try:
        header = next(reader)
    except (StopIteration, csv.Error):
        raise InputError(f"{where}: empty CSV; expected {EXPECTED}") from None
    rows = []
    for row in reader:
        # metric rows end with a trailing comma: the rule columns are absent
        if len(row) < len(header):
            row = row + [""] * (len(header) - len(row))
        if len(row) == len(header):
            rows.append(row)
    if not rows:
        raise InputError(f"{where}: the CSV has a header but no kernel rows; expected {EXPECTED}")
    return header, rows


def parse_ncu_csv(text: str, where: str = "ncu csv") -> list[KernelMetrics]:
    header, rows = _rows(text, where)
    cols = {name.strip(): i for i, name in enumerate(header)}
    if "Kernel Name" not in cols:
        raise InputError(f"{where}: no 'Kernel Name' column; expected {EXPECTED}")
    kernels = _details(cols, rows, where) if {"Metric Name", "Metric Value"} <= set(cols) else _raw(
        cols, rows, where)
    if text and not text.endswith(("\n", "\r")) and kernels:
        kernels[-1].missing.append("the end of the file (it stops mid-row)")
    return kernels


def _details(cols: dict[str, int], rows: list[list[str]], where: str) -> list[KernelMetrics]:
    """Rows of one kernel are gathered (labels with their units, raw metric names given with
    --metrics, rule texts), then turned into fields."""
    per: dict[str, dict] = {}
    rule_col = cols.get("Rule Description")
    for row in rows:
        kid = row[cols["ID"]]
        item = per.setdefault(kid,
                              {"name": row[cols["Kernel Name"]], "labels": {}, "raw": {},
                               "rules": []})
        section = row[cols["Section Name"]].strip() if "Section Name" in cols else ""
        name = row[cols["Metric Name"]].strip()
        unit = row[cols["Metric Unit"]].strip().lower() if "Metric Unit" in cols else ""
        if rule_col is not None and row[rule_col].strip():
            item["rules"].append(row[rule_col])
        if not name:
            continue
        value = number(row[cols["Metric Value"]])
        if "__" in name:  # a raw metric name, as --metrics adds them
            item["raw"][name] = value
        else:
            item["labels"].setdefault((section, name), (value, unit))
    return [_from_details(item) for item in per.values()]


def _from_details(item: dict) -> KernelMetrics:
    k = KernelMetrics(name=item["name"])
    labels: dict = item["labels"]
    shared = 0.0
    for (_section, name), (value, unit) in labels.items():
        if value is None:
            continue
        if name == "Memory Throughput":
            if unit == "%":
                k.memory_throughput_pct = value
        elif name in _SHARED:
            shared += value * _BYTE_UNITS.get(unit.split("/")[0], 1)
        elif name == "Local Memory Spilling Requests":
            k.local_memory_bytes = value * 32  # requests of one 32-byte sector at least
            if value > 0:
                k.spill_note = f"{value:,.0f} local-memory spilling requests."
        elif name in _DETAILS and getattr(k, _DETAILS[name]) is None:
            if _DETAILS[name] == "duration_us":
                # auto-scaled per row; nanoseconds in base units
                value *= _TIME_UNITS.get(unit, 1e-3)
            setattr(k, _DETAILS[name], value)
    if shared:
        k.shared_mem_per_block = shared
    _apply_raw(k, item["raw"], None)
    cpi = next((v for (sec, n), (v, _) in labels.items()
                if n == "Warp Cycles Per Issued Instruction"), None)
    for text in item["rules"]:
        _apply_rule(k, text, cpi)
    k.missing = _missing(k, set())
    return k


def _apply_rule(k: KernelMetrics, text: str, cpi: float | None) -> None:
    for pattern, field in _RULE_PATTERNS:
        m = pattern.search(text)
        if m and getattr(k, field) is None:
            setattr(k, field, float(m.group(1)))
    if cpi:
        for pattern, field in _STALL_PATTERNS:
            m = pattern.search(text)
            if m and getattr(k, field) is None:
                setattr(k, field, 100 * float(m.group(1)) / cpi)
    m = _HIGH_PIPE.search(text.strip())
    if m:
        pipe, pct = m.group(1).strip().lower(), float(m.group(2))
        k.top_pipe = pipe
        if "tensor" in pipe and k.tensor_pipe_pct is None:
            k.tensor_pipe_pct = pct
        elif pipe in FMA_PIPES and k.fma_pipe_pct is None:
            k.fma_pipe_pct = pct


def _missing(k: KernelMetrics, sections: set[str]) -> list[str]:
    missing = []
    if k.sm_throughput_pct is None and k.memory_throughput_pct is None:
        missing.append("GPU Speed Of Light Throughput")
    if k.achieved_occupancy_pct is None:
        missing.append("Occupancy")
    if k.registers_per_thread is None:
        missing.append("Launch Statistics")
    return missing


def _raw(cols: dict[str, int], rows: list[list[str]], where: str) -> list[KernelMetrics]:
    known = (set(_RAW) | set(_RAW_LOCAL) | set(_RAW_LOCAL_SECTORS) | set(_RAW_STALL) | {_RAW_CPI}
             | {_RAW_GLOBAL_EXCESS} | set(_RAW_BANK_CONFLICTS))
    if not known & set(cols):
        raise InputError(f"{where}: none of the raw metrics explain reads are in this CSV (renamed "
                         f"in another ncu version?); expected {EXPECTED}, e.g. with `--set full`")
    units = rows[0] if rows and not rows[0][cols["ID"]].strip().isdigit() else None
    data = rows[1:] if units else rows
    out = []
    for row in data:
        k = KernelMetrics(name=row[cols["Kernel Name"]])
        values = {m: number(row[i]) for m, i in cols.items() if "__" in m}
        unit_of = {m: units[i].strip().lower() for m, i in cols.items()} if units else None
        _apply_raw(k, values, unit_of)
        k.missing = _missing(k, set())
        out.append(k)
    return out


def _apply_raw(k: KernelMetrics, values: dict[str, float | None],
               units: dict[str, str] | None) -> None:
    """Fields from raw metric names (the raw page, or --metrics on the details page)."""
    for metric, field in _RAW.items():
        v = values.get(metric)
        if v is None or getattr(k, field) is not None:
            continue
        if field == "duration_us":
            v *= _TIME_UNITS.get((units or {}).get(metric, "ns"), 1e-3)
        setattr(k, field, v)
    local_sectors = [values.get(m) for m in _RAW_LOCAL_SECTORS]
    local = [values.get(m) for m in _RAW_LOCAL]
    if any(v for v in local_sectors) and k.local_memory_bytes is None:
        k.local_memory_bytes = 32 * sum(v or 0.0 for v in local_sectors)
    elif any(v for v in local) and k.local_memory_bytes is None:
        k.local_memory_bytes = sum(v or 0.0 for v in local)
    cpi = values.get(_RAW_CPI)
    for metric, field in _RAW_STALL.items():
        v = values.get(metric)
        if v is not None and cpi and getattr(k, field + "_pct") is None:
            setattr(k, field + "_pct", 100 * v / cpi)
    # Sectors per request cannot tell coalescing (a 16-byte vector load needs 16 sectors per
    # request, a 4-byte one 4): only ncu's own count of excessive sectors can. ncu's
    # UncoalescedGlobalAccess rule: excessive sectors over all global load + store sectors
    excess = values.get(_RAW_GLOBAL_EXCESS)
    total = sum(values.get(m) or 0.0 for m in _RAW_GLOBAL_SECTORS)
    if excess is not None and total and k.uncoalesced_excess_pct is None:
        k.uncoalesced_excess_pct = 100 * excess / total
    conflicts = sum(values.get(m) or 0.0 for m in _RAW_BANK_CONFLICTS)
    wavefronts = sum(values.get(m) or 0.0 for m in _RAW_BANK_WAVEFRONTS)
    if wavefronts and k.bank_conflict_pct is None and any(
        values.get(m) is not None for m in _RAW_BANK_CONFLICTS):
        k.bank_conflict_pct = 100 * conflicts / wavefronts


def import_report(path: Path) -> str:
    """A .ncu-rep through `ncu --import ... --csv --page details` (needs ncu on the PATH)."""
    exe = shutil.which("ncu")
    if exe is None:
        raise InputError(f"{path}: reading a .ncu-rep needs `ncu` on the PATH; or export it where "
                         f"ncu is: ncu --import {path.name} --csv --page details > kernels.csv")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    proc = subprocess.run([exe, "--import", str(path), "--csv", "--page", "details"],
                          capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"{path}: ncu --import failed: {err}")
    return proc.stdout
