"""One card-health judgement, whatever the card was read with.

A card's state arrives as NVML readings (``gpudoctor bench``, hardware/health.py; the capture's NVML
sampler) or as ``nvidia-smi`` text (``gpudoctor explain``, explain/smi.py). Each source has a thin
adapter to one neutral record, ``GpuRecord``; ``judge`` reads a record and says what is wrong with
the card, with one set of throttle-reason bits, one benign set and one threshold per check. How the
verdict is worded (bench's findings, explain's ranked hypotheses) stays with each caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# nvmlClocksEventReasons (formerly nvmlClocksThrottleReasons) bits, nvml.h; nvidia-smi prints the
# same reasons by name under "Clocks Event Reasons" (older drivers: "Clocks Throttle Reasons").
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Not a problem with the card. NVML API reference, nvmlClocksEventReasons: GpuIdle "nothing is
# running on the GPU and the clocks are dropping to Idle state"; ApplicationsClocksSetting "clocks
# are set to application-specific values"; SyncBoost (clocks held for the other GPUs of a sync-boost
# group); DisplayClockSetting "GPU clocks are limited by current setting of Display clocks". These
# are states and settings, not slowdowns; the power and thermal reasons (SW power cap, SW/HW
# thermal, HW slowdown, HW power brake) are. An application clock set low still shows as an SM clock
# below its maximum under load (the low-clock check). One set for bench and live capture (NVML) and
# explain (nvidia-smi), so the three read a card alike.
BENIGN = frozenset({"gpu_idle", "applications_clocks_setting", "sync_boost",
                    "display_clock_setting"})
# Asserted by the board or an external signal: "reducing the core clocks by a factor of 2 or more".
HARDWARE = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})

# The enforced power limit is a cap when below this share of the card's default limit (the limit
# "the power management algorithm uses when the user has not set a different limit",
# nvmlDeviceGetPowerManagementDefaultLimit; the maximum when the default is unknown). The maximum
# itself is the wrong reference: boards whose maximum exceeds the default would read as capped at
# their factory setting. 0.98, not 0.9: limits read back a few watts off (699.x of 700 W), while a
# 10% cut an administrator set is exactly what this check is for. (bench used 0.9 x the maximum.)
POWER_CAP_SHARE = 0.98
# Under load, an SM clock below this share of its maximum is held back (bench used 0.85, explain
# 0.8).
LOW_CLOCK_SHARE = 0.8
BUSY_PCT, IDLE_PCT = 30.0, 10.0  # utilization.gpu: % of time a kernel ran over the last sample
CHECKS = ("clocks", "throttle reasons", "utilization", "ECC", "PCIe", "power")


def reason_names(mask: int) -> frozenset[str]:
    """The reasons set in an NVML clocks-event-reasons bit mask."""
    return frozenset(name for bit, name in REASON_BITS.items() if mask & bit)


def problem_reasons(reasons: Iterable[str] | None) -> list[str]:
    """The active reasons that hold the clocks back (not BENIGN), sorted."""
    return sorted(set(reasons or ()) - BENIGN)


@dataclass(frozen=True)
class GpuRecord:
    """What one reading said about one GPU; None: the source does not say."""

    index: int
    bus_id: str = ""
    name: str = ""
    sm_mhz: float | None = None
    sm_max_mhz: float | None = None
    util_pct: float | None = None
    reasons: frozenset[str] | None = None  # active throttle/event reasons (REASON_BITS names)
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None  # enforced
    power_default_w: float | None = None
    power_max_w: float | None = None
    ecc_volatile_unc: int | None = None
    ecc_aggregate_unc: int | None = None
    ecc_volatile_corr: int | None = None
    ecc_aggregate_corr: int | None = None
    sram_threshold_exceeded: bool | None = None
    retired_pending: bool | None = None
    repair_pending: bool | None = None  # Channel / TPC Repair Pending (newer drivers)
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    remapped_unc: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None  # what GPU and host together allow
    pcie_host_max: int | None = None
    pcie_device_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    mig_current: str | None = None
    mig_pending: str | None = None
    reset_required: bool | None = None
    other_processes: int | None = None  # compute processes on the GPU (NVML only)
    source: str = "nvidia-smi -q"
    samples: int = 1

    @property
    def label(self) -> str:
        return f"GPU {self.index}" + (f" ({self.bus_id})" if self.bus_id else "")

    @property
    def missing(self) -> tuple[str, ...]:
        have = {"clocks": self.sm_mhz is not None and self.sm_max_mhz is not None,
                "throttle reasons": self.reasons is not None,
                "utilization": self.util_pct is not None,
                "ECC": self.ecc_volatile_unc is not None or self.ecc_aggregate_unc is not None
                or self.remap_pending is not None or self.retired_pending is not None,
                "PCIe": self.pcie_gen is not None or self.pcie_width is not None,
                "power": self.power_limit_w is not None}
        return tuple(c for c in CHECKS if not have[c])


def load_of(r: GpuRecord) -> str:
    """"busy", "light", "idle" or "unknown": from utilization, else from power draw over the
    limit."""
    if r.util_pct is not None:
        return "busy" if r.util_pct >= BUSY_PCT else "idle" if r.util_pct < IDLE_PCT else "light"
    if r.power_w is not None and r.power_limit_w:
        share = r.power_w / r.power_limit_w
        return "busy" if share >= 0.5 else "idle" if share < 0.2 else "light"
    return "unknown"


@dataclass(frozen=True)
class CardState:
    """What ``judge`` found wrong with one card (each check's facts, for a caller to word)."""

    load: str  # "busy", "light", "idle" or "unknown"
    bad_reasons: tuple[str, ...]  # active reasons that are not BENIGN, sorted
    clock_ratio: float | None  # SM clock / its maximum
    low_clock: bool  # under load, below LOW_CLOCK_SHARE of the maximum
    power_reference_w: float | None  # the default limit, else the maximum
    power_capped: bool  # enforced limit below POWER_CAP_SHARE x power_reference_w
    pending: bool  # a row remap, page retirement or repair waits for the next reset
    pcie_gen_down: bool
    pcie_width_down: bool
    mig: bool
    shared: bool  # other compute processes on the GPU

    @property
    def hardware(self) -> bool:
        return bool(set(self.bad_reasons) & HARDWARE)


def judge(r: GpuRecord, load: str | None = None) -> CardState:
    """The one health judgement of a card. ``load``: what the caller knows of it (bench: "busy"
    while its probes run); by default read from the record (``load_of``)."""
    load = load_of(r) if load is None else load
    ratio = r.sm_mhz / r.sm_max_mhz if r.sm_mhz and r.sm_max_mhz else None
    reference = r.power_default_w or r.power_max_w
    return CardState(
        load=load, bad_reasons=tuple(problem_reasons(r.reasons)), clock_ratio=ratio,
        low_clock=ratio is not None and ratio < LOW_CLOCK_SHARE and load == "busy",
        power_reference_w=reference,
        power_capped=r.power_limit_w is not None and bool(reference)
        and r.power_limit_w < POWER_CAP_SHARE * reference,
        pending=bool(r.remap_pending or r.retired_pending or r.repair_pending),
        pcie_gen_down=r.pcie_gen is not None and r.pcie_gen_max is not None and r.pcie_gen < r.pcie_gen_max,
        pcie_width_down=r.pcie_width is not None and r.pcie_width_max is not None and r.pcie_width < r.pcie_width_max,
        mig=(r.mig_current or "").lower() == "enabled", shared=(r.other_processes or 0) > 1)
