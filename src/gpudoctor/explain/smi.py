"""Card health from ``nvidia-smi -q`` text or ``nvidia-smi --query-gpu=... --format=csv`` output.

A sudden MFU drop with no code change is almost always one degraded node, and ``nvidia-smi`` says
which: throttle (event) reasons, ECC errors and pending remaps, a PCIe link below its capability, a
lowered power limit. ``parse`` turns the text into one ``GpuRecord`` per GPU (what the artifact does
not say stays ``None`` and is listed in ``missing``; the record and the judgement of it, ``judge``,
are core/card.py's, shared with NVML); ``card_hypotheses`` turns the records into ranked hypotheses.
Pure functions: text in, findings out.
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from typing import Any

import msgspec

from gpudoctor.core.card import CHECKS, CardState, GpuRecord, judge, load_of, reason_names
from gpudoctor.core.finding import Finding, Fix, make_hypothesis
from gpudoctor.errors import InputError

REASON_TEXT = {
    "sw_power_cap": "SW power cap (the driver lowers clocks to stay under the power limit)",
    "hw_slowdown": "HW slowdown (the board asserted slowdown: over-temperature or an external "
                   "power brake)",
    "hw_thermal_slowdown": "HW thermal slowdown (the GPU or its memory is too hot)",
    "hw_power_brake_slowdown": "HW power brake (an external signal: the PSU or chassis is short "
                               "of power)",
    "sw_thermal_slowdown": "SW thermal slowdown (above the max operating temperature)",
}
SMI_CMD = "nvidia-smi -q -d PERFORMANCE,CLOCK,ECC,PCIE"
UNCHECKED = "gpu-unchecked"  # no health check could run: not a hypothesis, not health
_GPU_HEAD = re.compile(
    r"^(\s*)GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_KV = re.compile(r"^(\S.*?)\s*:(?:\s+(.*))?$")
_NUM = re.compile(r"^[-+]?\d+(?:\.\d+)?")
_ACCEPTED = ("expected `nvidia-smi -q` text (a 'GPU 00000000:18:00.0' section per GPU) or "
             "`nvidia-smi --query-gpu=... --format=csv` output with its header line")


def parse(text: str) -> list[GpuRecord]:
    """``nvidia-smi -q`` or ``--query-gpu`` CSV text -> one record per GPU (InputError
    otherwise)."""
    return read(text)[0]


def read(text: str) -> tuple[list[GpuRecord], list[str]]:
    """(records, notes): the notes say what a cut or partial artifact lacks (GPUs, sections, a last
    line)."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"empty nvidia-smi output; {_ACCEPTED}")
    # any line ends
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n").expandtabs(4)
    if any(_GPU_HEAD.match(line) for line in text.splitlines()):
        return _read_q(text)
    if "NVSMI LOG" in text or re.search(r"^\s*Attached GPUs\s*:", text, re.MULTILINE):
        raise InputError("the nvidia-smi -q text has no GPU section (a 'GPU 00000000:18:00.0' line "
                         "and what follows): it stops after the banner (a cut copy?); give the "
                         "whole output")
    return _read_csv(text)


def _cut(text: str) -> tuple[str, bool]:
    """A copy that stops mid-line (no line end after the last line): that line is not data ("1980
    MHz" cut to "19" still reads as a number)."""
    if text.endswith(("\n", "\r")) or not text.rstrip(" \t").count("\n"):
        return text, False
    head, _, last = text.rpartition("\n")
    return (head + "\n", True) if last.strip() else (text, False)


# -- nvidia-smi -q
# ----------------------------------------------------------------------------------

_CUT_Q = "the text stops mid-line (a cut copy): its last line is not used"
_READ_SECTIONS = frozenset({  # the top-level sections _record_q reads
    "ecc errors", "remapped rows", "retired pages", "pci", "gpu power readings", "power readings",
    "clocks event reasons", "clocks throttle reasons", "gpu reset status", "clocks", "max clocks",
    "utilization", "temperature", "mig mode"})


def parse_q(text: str) -> list[GpuRecord]:
    return _read_q(text)[0]


def _read_q(text: str) -> tuple[list[GpuRecord], list[str]]:
    text, cut = _cut(text)
    notes = [_CUT_Q] if cut else []
    blocks: list[tuple[str, dict[str, Any]]] = []
    stack: list[tuple[int, dict[str, Any]]] = []
    names: list[str] = []  # the sections open at the current line, outermost first
    attached = None
    for raw in text.splitlines():
        head = _GPU_HEAD.match(raw)
        if head:
            tree: dict[str, Any] = {}
            blocks.append((head.group(2), tree))
            stack = [(len(head.group(1)), tree)]
            names = []
            continue
        if not blocks and attached is None:
            kv = _KV.match(raw.strip())
            if kv and kv.group(1).lower() == "attached gpus":
                attached = _int(kv.group(2))
        line = raw.rstrip()
        if not stack or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
            names.pop()
        if indent <= stack[0][0]:  # back at the top level: the GPU section ended
            stack, names = [], []
            continue
        kv = _KV.match(line.strip())
        if kv and kv.group(2):  # keys lower-cased: drivers differ in case ("Gpu" vs "GPU")
            stack[-1][1].setdefault(kv.group(1).lower(), kv.group(2).strip())
        else:
            node: dict[str, Any] = {}
            key = (kv.group(1) if kv else line.strip()).lower()
            parent = stack[-1][1]
            if isinstance(parent.get(key), dict):
                node = parent[key]
            else:
                parent[key] = node
            stack.append((indent, node))
            names.append(kv.group(1) if kv else line.strip())
    if not blocks:
        raise InputError(f"no GPU section in the nvidia-smi -q text; {_ACCEPTED}")
    # `-i` prints fewer too: a note, not proof of a cut
    if attached is not None and attached > len(blocks):
        notes.append(f"{attached - len(blocks)} of the {attached} attached GPUs are not in the "
                     "text (left out with -i, or the copy stops early)")
    last_bus, last = blocks[-1]
    # a full `nvidia-smi -q` (Product Name first) ends each GPU with Processes: without it, the copy
    # stops early
    stops_early = "product name" in last and "processes" not in last
    if stops_early:
        notes.append(
            f"GPU {len(blocks) - 1} ({last_bus})'s section stops before its end (no Processes)")
    if (cut or stops_early) and names and stack and names[0].lower() in _READ_SECTIONS:
        # the section the text stops in was not read whole: a half-read section is no check
        last.pop(names[0].lower(), None)
        notes.append(f"GPU {len(blocks) - 1}'s '{' > '.join(names)}' section is cut: not used")
    return [_record_q(i, bus, tree) for i, (bus, tree) in enumerate(blocks)], notes


def _record_q(index: int, bus: str, t: dict[str, Any]) -> GpuRecord:
    ecc = _sub(t, "ECC Errors")
    remap = _sub(t, "Remapped Rows")
    retired = _sub(t, "Retired Pages")
    gen = _sub(t, "PCI", "GPU Link Info", "PCIe Generation")
    width = _sub(t, "PCI", "GPU Link Info", "Link Width")
    power = _sub(t, "GPU Power Readings") or _sub(t, "Power Readings")
    reasons = _sub(t, "Clocks Event Reasons") or _sub(t, "Clocks Throttle Reasons")
    reset = _sub(t, "GPU Reset Status")
    host_max, dev_max = _int(_v(gen, "Host Max")), _int(_v(gen, "Device Max"))
    gen_max = _int(_v(gen, "Max"))
    if gen_max is None and host_max is not None and dev_max is not None:
        gen_max = min(host_max, dev_max)
    vol, agg = _sub(ecc, "Volatile"), _sub(ecc, "Aggregate")
    return GpuRecord(
        index=index, bus_id=bus, name=str(_v(t, "Product Name") or ""),
        sm_mhz=_num(_v(_sub(t, "Clocks"), "SM")), sm_max_mhz=_num(_v(_sub(t, "Max Clocks"), "SM")),
        util_pct=_num(_v(_sub(t, "Utilization"), "Gpu")),
        reasons=_reasons_q(reasons),
        temp_c=_num(_v(_sub(t, "Temperature"), "GPU Current Temp")),
        power_w=_num(_first(power, "Power Draw", "Average Power Draw", "Instantaneous Power Draw")),
        power_limit_w=_num(_first(power, "Enforced Power Limit", "Current Power Limit",
                                  "Power Limit")),
        power_default_w=_num(_v(power, "Default Power Limit")),
        power_max_w=_num(_v(power, "Max Power Limit")),
        ecc_volatile_unc=_ecc_sum(vol, uncorrectable=True),
        ecc_aggregate_unc=_ecc_sum(agg, uncorrectable=True),
        ecc_volatile_corr=_ecc_sum(vol, uncorrectable=False),
        ecc_aggregate_corr=_ecc_sum(agg, uncorrectable=False),
        sram_threshold_exceeded=_yes(_v(agg, "SRAM Threshold Exceeded")),
        retired_pending=_yes(_first(retired, "Pending Page Blacklist", "Pending")),
        repair_pending=_any_yes(_v(ecc, "Channel Repair Pending"), _v(ecc, "TPC Repair Pending")),
        remap_pending=_yes(_v(remap, "Pending")),
        remap_failure=_yes(_v(remap, "Remapping Failure Occurred")),
        remapped_unc=_int(_v(remap, "Uncorrectable Error")),
        pcie_gen=_int(_v(gen, "Current")), pcie_gen_max=gen_max, pcie_host_max=host_max,
        pcie_device_max=dev_max,
        pcie_width=_int(_v(width, "Current")), pcie_width_max=_int(_v(width, "Max")),
        mig_current=_text(_v(_sub(t, "MIG Mode"), "Current")),
        mig_pending=_text(_v(_sub(t, "MIG Mode"), "Pending")),
        reset_required=_any_yes(_v(reset, "Reset Required"),
                                _v(reset, "Drain and Reset Recommended")),
    )


def _reasons_q(section: dict[str, Any]) -> frozenset[str] | None:
    """Active reasons; None when no reason reads Active or Not Active (N/A: not supported)."""
    active, read = set(), False
    for key, value in section.items():
        flag = _yes(value) if isinstance(value, str) else None
        read = read or flag is not None
        if flag:
            name = re.sub(r"\W+", "_", key.strip().lower()).strip("_")
            active.add("gpu_idle" if name == "idle" else name)
    return frozenset(active) if read else None


def _ecc_sum(section: dict[str, Any], uncorrectable: bool) -> int | None:
    """Sum SRAM/DRAM (un)correctable counts; older drivers: Single Bit / Double Bit > Total."""
    old = section.get("double bit" if uncorrectable else "single bit")
    if isinstance(old, dict):
        return _int(old.get("total"))
    counts = [_int(v) for k, v in section.items() if isinstance(v, str)
              and "correctable" in k.lower() and ("uncorrectable" in k.lower()) == uncorrectable]
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def _sub(tree: dict[str, Any], *path: str) -> dict[str, Any]:
    for key in path:
        node = tree.get(key.lower())
        if not isinstance(node, dict):
            return {}
        tree = node
    return tree


def _v(section: dict[str, Any], key: str) -> Any:
    value = section.get(key.lower())
    return value if isinstance(value, str) else None


def _first(section: dict[str, Any], *keys: str) -> Any:
    return next((_v(section, k) for k in keys
                 if _num(_v(section, k)) is not None or _text(_v(section, k))), None)


def _num(value: Any) -> float | None:
    m = _NUM.match(value.strip()) if isinstance(value, str) else None
    return float(m.group(0)) if m and float(m.group(0)) not in (float("inf"), float("-inf")) else None


def _int(value: Any) -> int | None:
    m = _NUM.match(value.strip()) if isinstance(value, str) else None
    return int(m.group(0).split(".")[0]) if m else None


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or value.strip().strip("[]").lower() in ("n/a",
                                                                           "not supported", ""):
        return None
    return value.strip()


def _yes(value: Any) -> bool | None:
    v = value.strip().lower() if isinstance(value, str) else ""
    return True if v in ("yes", "active", "enabled", "1") else False if v in ("no", "not active", "disabled", "0") else None


def _any_yes(*values: Any) -> bool | None:
    flags = [_yes(v) for v in values]
    return True if True in flags else False if False in flags else None


# -- nvidia-smi --query-gpu --format=csv
# --------------------------------------------------------------

_CSV_FIELDS = {  # query-gpu field (as the header prints it, unit stripped) -> GpuRecord field
    "index": "index", "name": "name", "pci.bus_id": "bus_id", "temperature.gpu": "temp_c",
    "utilization.gpu": "util_pct", "clocks.sm": "sm_mhz", "clocks.current.sm": "sm_mhz",
    "clocks.max.sm": "sm_max_mhz", "power.draw": "power_w", "power.draw.average": "power_w",
    "power.limit": "power_limit_w", "enforced.power.limit": "power_limit_w",
    "power.default_limit": "power_default_w", "power.max_limit": "power_max_w",
    "ecc.errors.uncorrected.volatile.total": "ecc_volatile_unc",
    "ecc.errors.uncorrected.aggregate.total": "ecc_aggregate_unc",
    "ecc.errors.corrected.volatile.total": "ecc_volatile_corr",
    "ecc.errors.corrected.aggregate.total": "ecc_aggregate_corr",
    "retired_pages.pending": "retired_pending", "remapped_rows.pending": "remap_pending",
    "remapped_rows.failure": "remap_failure", "remapped_rows.uncorrectable": "remapped_unc",
    "pcie.link.gen.current": "pcie_gen", "pcie.link.gen.max": "pcie_gen_max",
    "pcie.link.gen.hostmax": "pcie_host_max", "pcie.link.gen.gpumax": "pcie_device_max",
    "pcie.link.width.current": "pcie_width", "pcie.link.width.max": "pcie_width_max",
    "mig.mode.current": "mig_current", "mig.mode.pending": "mig_pending",
}
_TEXT_FIELDS = ("name", "bus_id", "mig_current", "mig_pending")
_BOOL_FIELDS = ("retired_pending", "remap_pending", "remap_failure")
_COUNT_FIELDS = ("ecc_volatile_unc", "ecc_aggregate_unc", "ecc_volatile_corr", "ecc_aggregate_corr",
                 "remapped_unc", "pcie_gen", "pcie_gen_max", "pcie_host_max", "pcie_device_max",
                 "pcie_width", "pcie_width_max")


def parse_csv(text: str) -> list[GpuRecord]:
    return _read_csv(text)[0]


def _read_csv(text: str) -> tuple[list[GpuRecord], list[str]]:
    whole, (text, cut) = text, _cut(text)
    header_line = next((line for line in text.splitlines() if line.strip()), "")
    if cut and _row_is_whole(header_line, whole.rpartition("\n")[2]):
        text, cut = whole, False
    notes = ["the CSV stops mid-row (a cut copy): its last row is not used"] if cut else []
    try:
        rows = [[c.strip() for c in row] for row in csv.reader(io.StringIO(text))
                if any(c.strip() for c in row)]
    except csv.Error as exc:
        raise InputError(f"unreadable nvidia-smi CSV ({exc}); {_ACCEPTED}") from None
    if not rows:
        raise InputError(f"empty nvidia-smi output; {_ACCEPTED}")
    header = [re.sub(r"\s*\[.*?\]\s*$", "", h).strip().lower() for h in rows[0]]
    known = [h for h in header if h in _CSV_FIELDS or _reason_column(h)]
    if len(known) < 2 or ("name" not in header and "index" not in header
                          and "pci.bus_id" not in header):
        raise InputError("no nvidia-smi --query-gpu header (name or index, plus fields such as "
                         f"clocks.sm); {_ACCEPTED}")
    by_gpu: dict[str, list[dict[str, Any]]] = {}
    for n, row in enumerate(rows[1:]):
        values = _csv_row(header, row)
        key = next((str(values[k]) for k in ("bus_id", "index")
                    if values.get(k) is not None), f"row {n}")
        by_gpu.setdefault(key, []).append(values)
    if not by_gpu:
        why = "no whole GPU row: the last one stops mid-row (a cut copy?)" if cut else "no GPU rows"
        raise InputError(f"the nvidia-smi CSV has a header but {why}; {_ACCEPTED}")
    short = sum(len(row) < len(header) for row in rows[1:])
    if short:
        notes.append(f"{short} row(s) with fewer cells than the header")
    return [_merge(i, samples) for i, samples in enumerate(by_gpu.values())], notes


def _row_is_whole(header_line: str, line: str) -> bool:
    """A last row with no line end is whole when it has every cell and its last cell ends in the
    unit its header names ("143771 MiB" under "memory.total [MiB]") or is N/A; else it may be cut
    short."""
    try:
        header, cells = next(csv.reader([header_line]), []), next(csv.reader([line]), [])
    except csv.Error:
        return False
    unit = re.search(r"\[(.+?)\]\s*$", header[-1]) if header else None
    last = cells[-1].strip() if cells else ""
    return (len(cells) == len(header) and unit is not None and bool(last)
            and (last.endswith(unit.group(1)) or last.strip("[]").lower() in ("n/a",
                                                                              "not supported")))


def _reason_column(h: str) -> str | None:
    m = re.match(r"^clocks_(?:throttle|event)_reasons\.(\w+)$", h)
    return m.group(1) if m and m.group(1) != "supported" else None


def _csv_row(header: list[str], row: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    reasons: set[str] | None = None
    for h, cell in zip(header, row):
        field, reason = _CSV_FIELDS.get(h), _reason_column(h)
        if reason == "active":
            mask = _hex(cell)
            if mask is not None:
                reasons = (reasons or set()) | reason_names(mask)
        elif reason is not None and _yes(cell) is not None:
            reasons = reasons or set()
            if _yes(cell):
                reasons.add("gpu_idle" if reason == "idle" else reason)
        elif field in _TEXT_FIELDS:
            values[field] = _text(cell)
        elif field in _BOOL_FIELDS:
            values[field] = _yes(cell)
        elif field in _COUNT_FIELDS:
            values[field] = _int(cell)
        elif field == "index":
            values["index"] = _int(cell)
        elif field is not None:
            values[field] = _num(cell)
    if reasons is not None:
        values["reasons"] = frozenset(reasons)
    return values


def _hex(cell: str) -> int | None:
    try:
        return int(cell, 16) if cell.lower().startswith("0x") else int(cell) if cell.isdigit() else None
    except ValueError:
        return None


def _merge(position: int, samples: list[dict[str, Any]]) -> GpuRecord:
    """Repeated rows (``-l``) of one GPU: numbers -> median, counts -> max, reasons -> any
    sample."""
    merged: dict[str, Any] = {}
    for key in {k for s in samples for k in s}:
        vals = [s[key] for s in samples if s.get(key) is not None]
        if not vals:
            continue
        if key == "reasons":
            merged[key] = frozenset().union(*vals)
        elif key in _TEXT_FIELDS or key == "index":
            merged[key] = vals[-1]
        elif key in _BOOL_FIELDS:
            merged[key] = any(vals)
        elif key in _COUNT_FIELDS:
            merged[key] = max(vals)
        else:
            merged[key] = statistics.median(vals)
    index = merged.pop("index", None)
    return GpuRecord(index=position if index is None else index, source="nvidia-smi --query-gpu",
                     samples=len(samples), **merged)


# -- hypotheses
# ---------------------------------------------------------------------------------------


def card_hypotheses(records: list[GpuRecord]) -> list[Finding]:
    """Every anomaly of every GPU, then one ``gpu-healthy`` per GPU with none; ranked."""
    states = [judge(r) for r in records]
    busy_clocks = [r.sm_mhz for r, st in zip(records, states) if r.sm_mhz and st.load == "busy"]
    peer = statistics.median(busy_clocks) if len(busy_clocks) >= 3 else None
    out: list[Finding] = []
    for r, st in zip(records, states):
        found = [f
                 for f in (_throttle(r, st, peer), _power_cap(r, st), _ecc(r, st), _pcie(r, st), _reset(r)) if f]
        out.extend(found)
        if not any((f.confidence or 0) >= 0.3 for f in found):
            out.append(_healthy(r, found))
        if st.mig:
            out.append(_mig(r))
    tier = {"gpu-healthy": 1, "mig-enabled": 2}
    return sorted(out,
                  key=lambda f: (tier.get(f.id, 0 if (f.confidence or 0) >= 0.3 else 2),
                                 -(f.confidence or 0)))


def _load_text(r: GpuRecord) -> str:
    if r.util_pct is not None:
        return f"utilization {r.util_pct:.0f}%"
    if r.power_w is not None and r.power_limit_w:
        return f"drawing {r.power_w:.0f} of {r.power_limit_w:.0f} W"
    return "load unknown (no utilization in the artifact)"


def _throttle(r: GpuRecord, st: CardState, peer: float | None) -> Finding | None:
    bad, load, ratio = list(st.bad_reasons), st.load, st.clock_ratio
    behind_peers = peer is not None and r.sm_mhz is not None and load == "busy" and r.sm_mhz < 0.9 * peer
    if not bad and not st.low_clock and not behind_peers:
        return None  # an idle card at low clocks, "Idle: Active": nothing wrong
    if st.hardware:
        conf = 0.9 if load != "idle" else 0.8
    elif "sw_thermal_slowdown" in bad:
        conf = 0.8
    # SW power cap: at the limit under dense GEMMs is normal, unless this card lags the others
    elif bad:
        conf = 0.45 if load == "busy" else 0.3
    else:
        conf = 0.5 if r.reasons is None else 0.35
    if behind_peers:
        conf = min(conf + 0.25, 0.95)
    what = "; ".join(REASON_TEXT.get(b, b.replace("_", " ")) for b in bad) or "no reason reported"
    clocks = (f"SM clock {r.sm_mhz:.0f} of {r.sm_max_mhz:.0f} MHz ({100 * ratio:.0f}%)"
              if ratio is not None
              else "SM clock not in the artifact")
    peers = f"; the other busy GPUs run at {peer:.0f} MHz (median)" if behind_peers and peer else ""
    thermal = any("thermal" in b for b in bad)
    numbers = {"active_reasons": bad, "sm_clock_mhz": r.sm_mhz, "sm_clock_max_mhz": r.sm_max_mhz,
               "utilization_pct": r.util_pct, "temperature_c": r.temp_c, "power_draw_w": r.power_w,
               "power_limit_w": r.power_limit_w}
    if peer is not None:
        numbers["busy_gpus_median_sm_clock_mhz"] = peer
    fixes = (
        Fix("Drain the node and reschedule the job on healthy nodes (one slow GPU paces every rank)",
            "scontrol update NodeName=<node> State=DRAIN Reason=\"gpu clock throttle\""),
        Fix("Check cooling and airflow (fans, inlet temperature, blanking panels)"
            if thermal or not bad
            else "Check power delivery: PSUs, power-brake signal, the power limit",
            "nvidia-smi -q -d TEMPERATURE,POWER,PERFORMANCE"),
        Fix("Reseat or replace the GPU; run DCGM diagnostics before returning the node",
            "dcgmi diag -r 3"),
    )
    return make_hypothesis(
        "clock-throttle", f"{r.label} runs below its clocks", conf,
        f"{r.label}: {clocks} with {_load_text(r)}; active reasons: {what}{peers}. A throttled "
        "card looks like slow code, and in synchronous training every rank waits for it.",
        numbers, fixes, subject=r.label, partial=r.reasons is None,
        check_next=(f"`{SMI_CMD}` again under load, a few times (reasons change within seconds)",
                    ("`nvidia-smi dmon -s pucv -d 1` while the job runs: clocks, power and "
                     "temperature per second"),
                    "Compare with the other GPUs of the node and of the job",
                    "`dcgmi diag -r 3` on the node"),
        wrong_fix="Tuning the code (kernels, batch size, sharding): the same code runs at full "
                  "clocks on a healthy card.")


def _power_cap(r: GpuRecord, st: CardState) -> Finding | None:
    full, load = st.power_reference_w, st.load
    if not st.power_capped or r.power_limit_w is None or not full:
        return None
    capping = "sw_power_cap" in (r.reasons or frozenset())
    conf = 0.85 if load == "busy" and capping else 0.6 if load == "busy" else 0.35 if load == "idle" else 0.5
    return make_hypothesis(
        "power-cap", f"{r.label}'s power limit is set below its default", conf,
        f"{r.label}: enforced power limit {r.power_limit_w:.0f} W of a default {full:.0f} W "
        f"({100 * r.power_limit_w / full:.0f}%), {_load_text(r)}"
        + ("; SW power cap is active: the clocks are held down by it." if capping else "."),
        {"power_limit_w": r.power_limit_w, "default_power_limit_w": r.power_default_w,
         "max_power_limit_w": r.power_max_w, "power_draw_w": r.power_w,
         "sw_power_cap_active": capping},
        (Fix("Restore the default limit if the cap is not intended",
             "sudo nvidia-smi -i <gpu> -pl <default W>"),
         Fix("Ask the administrator: a rack power budget may set it on purpose (then plan for the "
             "lower clocks)", "")),
        subject=r.label,
        check_next=("`nvidia-smi -q -d POWER`: Requested vs Enforced vs Default Power Limit",
                    ("Power draw under load against the limit: at the limit means the cap is what "
                     "slows it")),
        wrong_fix="Code changes: the card's power budget, not the program, sets the clocks.")


def _ecc(r: GpuRecord, st: CardState) -> Finding | None:
    vu, au = r.ecc_volatile_unc or 0, r.ecc_aggregate_unc or 0
    corr = max(r.ecc_volatile_corr or 0, r.ecc_aggregate_corr or 0)
    pending = st.pending
    # past uncorrectable errors the driver already handled: SRAM threshold not reached, nothing
    # pending
    handled = r.sram_threshold_exceeded is False and not pending and not r.remap_failure
    problems = [(0.95, "row remapping failed: the card has run out of spare rows")
                if r.remap_failure else None,
                (0.9, f"{vu} uncorrectable ECC errors since the driver loaded") if vu else None,
                (0.85,
                 ("a row remap, page retirement or repair is pending: it takes effect at the next "
                  "GPU reset"))
                if pending else None,
                (0.8, "the SRAM error threshold is exceeded")
                if r.sram_threshold_exceeded else None,
                (0.2 if handled else 0.45,
                 f"{au} uncorrectable ECC error(s) over the card's life, none since the "
                 "driver loaded"
                 + ("; the SRAM threshold is not exceeded and no remap or repair is pending: "
                                    "handled, watch the count" if handled else ""))
                if au and not vu else None,
                (0.25,
                 (f"{corr} correctable ECC errors only (corrected in hardware; a rising count is a "
                  "warning)"))
                if corr else None]
    found = [p for p in problems if p]
    if not found:
        return None
    return make_hypothesis(
        "ecc-errors", f"{r.label} reports memory errors", max(c for c, _ in found),
        f"{r.label}: " + "; ".join(t for _, t in found) + ".",
        {"volatile_uncorrectable": r.ecc_volatile_unc,
         "aggregate_uncorrectable": r.ecc_aggregate_unc,
         "volatile_correctable": r.ecc_volatile_corr, "aggregate_correctable": r.ecc_aggregate_corr,
         "remapped_rows_uncorrectable": r.remapped_unc, "remap_pending": r.remap_pending,
         "remap_failure": r.remap_failure, "retired_pages_pending": r.retired_pending,
         "repair_pending": r.repair_pending, "sram_threshold_exceeded": r.sram_threshold_exceeded},
        (Fix("Drain the node and reschedule the job elsewhere",
             "scontrol update NodeName=<node> State=DRAIN Reason=\"gpu ECC\""),
         Fix("Reset the GPU to apply pending remaps/retirements (no process may hold it)",
             "sudo nvidia-smi -r -i <gpu>"),
         Fix("Run DCGM diagnostics; replace the card if they fail or remapping failed",
             "dcgmi diag -r 3")),
        subject=r.label,
        check_next=("`nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER`",
                    "Kernel log for Xid 48/63/64/94/95: `sudo dmesg -T | grep -i xid`",
                    "`dcgmi diag -r 3` on the node"),
        wrong_fix="Restarting the job on the same GPU, or changing batch size or code: memory "
                  "errors are hardware.")


def _pcie(r: GpuRecord, st: CardState) -> Finding | None:
    gen_down, width_down, load = st.pcie_gen_down, st.pcie_width_down, st.load
    if not gen_down and not width_down:
        return None
    conf = {"busy": 0.7, "light": 0.5, "idle": 0.15, "unknown": 0.35}[load] if gen_down else 0.0
    if width_down:  # link width does not drop to save power
        conf = max(conf, {"busy": 0.8, "light": 0.7, "idle": 0.5, "unknown": 0.65}[load])
    idle_gen = load == "idle" and gen_down and not width_down
    effect = ("idle cards drop the link generation to save power: read it again under load" if idle_gen
              else "host-device copies (and NCCL traffic through PCIe) are capped")
    note = ""
    if r.pcie_host_max is not None and r.pcie_device_max is not None and r.pcie_host_max < r.pcie_device_max:
        note += f" The host slot allows only gen {r.pcie_host_max}: a platform limit, not a fault."
    return make_hypothesis(
        "pcie-downgrade", f"{r.label}'s PCIe link runs below its capability", conf,
        f"{r.label}: PCIe gen {r.pcie_gen} x{r.pcie_width} of gen {r.pcie_gen_max} "
        f"x{r.pcie_width_max} with {_load_text(r)}: {effect}.{note}",
        {"pcie_gen": r.pcie_gen, "pcie_gen_max": r.pcie_gen_max, "pcie_width": r.pcie_width,
         "pcie_width_max": r.pcie_width_max, "pcie_host_max": r.pcie_host_max,
         "utilization_pct": r.util_pct},
        (Fix("Drain the node if the link stays down under load",
             "scontrol update NodeName=<node> State=DRAIN Reason=\"pcie downgrade\""),
         Fix("Reseat the card (and riser/cable); check the slot's BIOS link settings",
             "sudo lspci -vvv -s <bus id>"),
         Fix("Replace the riser, cable or card if it persists; `dcgmi diag -r 2` checks PCIe "
             "bandwidth", "dcgmi diag -r 2")),
        subject=r.label,
        check_next=("`nvidia-smi -q -d PCIE` while the GPU is busy: Current should reach Max",
                    "`sudo lspci -vvv -s <bus id> | grep -E 'LnkCap|LnkSta'`",
                    ("Replays Since Reset in `nvidia-smi -q -d PCIE`: a growing count means "
                     "link errors")),
        wrong_fix="Tuning data loading or pinned copies first: the link itself is slow.")


def _reset(r: GpuRecord) -> Finding | None:
    if not r.reset_required:
        return None
    return make_hypothesis(
        "reset-required", f"{r.label} asks for a reset", 0.85,
        f"{r.label}: nvidia-smi's GPU Reset Status says Reset Required or Drain and Reset "
        "Recommended.",
        {"reset_required": True},
        (Fix("Drain the node, then reset the GPU", "sudo nvidia-smi -r -i <gpu>"),
         Fix("Run DCGM diagnostics before returning it to service", "dcgmi diag -r 3")),
        subject=r.label,
        check_next=("`sudo dmesg -T | grep -i xid`: which error asked for the reset",),
        wrong_fix="Keeping jobs on the card: it stays degraded until reset.")


def _mig(r: GpuRecord) -> Finding:
    pending = (f"; pending: {r.mig_pending} (applies at the next reset)" if r.mig_pending
               and r.mig_pending.lower() != (r.mig_current or "").lower() else "")
    f = make_hypothesis(
        "mig-enabled", f"{r.label} is partitioned (MIG)", 0.2,
        f"{r.label}: MIG mode is Enabled{pending}; a process sees one slice, with that slice's "
        "SMs, memory and bandwidth, not the whole card.",
        {"mig_current": r.mig_current, "mig_pending": r.mig_pending},
        (Fix("Compare against the slice's ceilings, or disable MIG for whole-card jobs",
             "sudo nvidia-smi -i <gpu> -mig 0"),),
        subject=r.label, check_next=("`nvidia-smi mig -lgi`: which instance profiles exist",))
    return msgspec.structs.replace(f, severity="info")


def _healthy(r: GpuRecord, notes: list[Finding]) -> Finding:
    missing = r.missing
    checked = [c for c in CHECKS if c not in missing]
    if not checked:
        return _unchecked(r, notes)
    clocks = (f"SM {r.sm_mhz:.0f}/{r.sm_max_mhz:.0f} MHz"
              if r.sm_mhz is not None and r.sm_max_mhz else "")
    link = f"PCIe gen {r.pcie_gen} x{r.pcie_width}" if r.pcie_gen is not None else ""
    facts = ", ".join(x for x in (clocks, link, _load_text(r)) if x)
    minor = f" Low-confidence notes: {'; '.join(n.title for n in notes)}." if notes else ""
    # a clean bill of health is only as good as what it covers: 0.9 with every check, less with
    # fewer
    conf = 0.9 if not missing else round(0.3 + 0.4 * len(checked) / len(CHECKS), 2)
    title = (f"{r.label} looks healthy" if not missing else
             f"{r.label}: no problem in the {len(checked)} of {len(CHECKS)} checks the "
             "artifact allows")
    f = make_hypothesis(
        "gpu-healthy", title, conf,
        f"{r.label}{', ' + r.name if r.name else ''}: no active throttling, new or pending memory "
        f"errors, link downgrade or power cap in what was checked ({', '.join(checked)}); {facts}."
        + (f" Not in the artifact: {', '.join(missing)}." if missing else "") + minor,
        {"checked": checked, "not_checked": list(missing), "sm_clock_mhz": r.sm_mhz,
         "sm_clock_max_mhz": r.sm_max_mhz, "utilization_pct": r.util_pct,
         "active_reasons": sorted(r.reasons or ()), "pcie_gen": r.pcie_gen,
         "pcie_width": r.pcie_width},
        (),
        subject=r.label, partial=bool(missing),
        check_next=(f"`{SMI_CMD}` under load, if the job is slow",) if load_of(r) != "busy" else ())
    return msgspec.structs.replace(f, severity="info")


def _unchecked(r: GpuRecord, notes: list[Finding]) -> Finding:
    """The artifact says nothing a health check reads (a cut copy, a query of other fields): say so,
    and claim no health."""
    minor = f" Low-confidence notes: {'; '.join(n.title for n in notes)}." if notes else ""
    f = make_hypothesis(
        UNCHECKED, f"{r.label}: nothing in the artifact to check its health with", 0.0,
        f"{r.label}{', ' + r.name if r.name else ''}: the artifact has none of "
        f"{', '.join(CHECKS)}, so no health check ran and nothing is claimed about this GPU.{minor}",
        {"checked": [], "not_checked": list(CHECKS)}, (),
        subject=r.label, partial=True,
        check_next=(f"`{SMI_CMD}` (whole, not cut), or `nvidia-smi -q` for every section",))
    return msgspec.structs.replace(f, severity="info")
