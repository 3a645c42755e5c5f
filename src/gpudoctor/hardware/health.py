"""Card health from NVML: clocks, throttling, power, temperature, ECC, retired pages, PCIe, MIG.

A throttled or degraded card looks like slow code (seed 004: "training got 20% slower with no
code change"). Each anomaly becomes a Finding (same type as the doctor's, saving unknown: 0);
what NVML could not read is listed, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpudoctor.capture.nvml import THROTTLE_REASONS
from gpudoctor.core.finding import Evidence, Finding, Fix

# reasons that are not a problem: an idle card, or boost held for another GPU of a sync group
BENIGN_REASONS = frozenset({"gpu_idle", "sync_boost", "applications_clocks_setting"})


@dataclass
class HealthReading:
    """What NVML said about one GPU (None: could not be read)."""

    readings: dict[str, Any] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)
    error: str = ""


def read_health(device_index: int = 0) -> HealthReading:
    health = HealthReading()
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(device_index)
    except Exception as exc:  # noqa: BLE001 - NVML is optional: reported as unreadable
        health.error = f"NVML unavailable ({type(exc).__name__}: {exc}); probes still ran"
        return health
    r = health.readings
    queries = {
        "name": lambda: _text(pynvml.nvmlDeviceGetName(h)),
        "uuid": lambda: _text(pynvml.nvmlDeviceGetUUID(h)),
        "driver": lambda: _text(pynvml.nvmlSystemGetDriverVersion()),
        "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        "sm_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
        "mem_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
        "mem_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
        "throttle_reasons": lambda: sorted(
            name for bit, name in THROTTLE_REASONS.items() if pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h) & bit
        ),
        "power_w": lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
        "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
        "power_limit_max_w": lambda: pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)[1] / 1000.0,
        "temperature_c": lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "ecc_uncorrected_volatile": lambda: pynvml.nvmlDeviceGetTotalEccErrors(
            h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
        "ecc_corrected_volatile": lambda: pynvml.nvmlDeviceGetTotalEccErrors(
            h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC),
        "remapped_rows": lambda: _remapped(pynvml, h),
        "pcie_gen": lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
        "pcie_gen_max": lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h),
        "pcie_width": lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(h),
        "pcie_width_max": lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(h),
        "mig_mode": lambda: pynvml.nvmlDeviceGetMigMode(h)[0],
        "other_processes": lambda: len(pynvml.nvmlDeviceGetComputeRunningProcesses(h)),
    }
    for key, query in queries.items():
        try:
            r[key] = query()
        except Exception:  # noqa: BLE001 - not supported on this card, or no permission
            health.unreadable.append(key)
    return health


def _remapped(pynvml: Any, h: Any) -> dict[str, int]:
    corr, unc, pending, failure = pynvml.nvmlDeviceGetRemappedRows(h)
    return {"correctable": corr, "uncorrectable": unc, "pending": int(pending), "failure": int(failure)}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def health_findings(health: HealthReading, under_load: bool = False) -> list[Finding]:
    """Each anomaly as a Finding. ``under_load``: the reading was taken while probes ran."""
    r = health.readings
    out: list[Finding] = []

    def add(fid: str, title: str, severity: str, summary: str, numbers: dict[str, Any], fixes: tuple[Fix, ...]) -> None:
        out.append(Finding(fid, title, severity, 0.0, 1.0, summary, Evidence(numbers=numbers), fixes))

    bad = [x for x in r.get("throttle_reasons", []) if x not in BENIGN_REASONS]
    if bad:
        severe = any("thermal" in x or "hw_" in x for x in bad)
        add("clock-throttle", "The GPU's clocks are held back", "critical" if severe else "major",
            f"NVML reports clock throttle reasons: {', '.join(bad)}.",
            {"reasons": bad, "sm_clock_mhz": r.get("sm_clock_mhz"), "sm_clock_max_mhz": r.get("sm_clock_max_mhz")},
            (Fix("Check cooling and power delivery; compare with the other GPUs of the node", "nvidia-smi -q -d PERFORMANCE"),))
    if under_load and r.get("sm_clock_max_mhz") and r.get("sm_clock_mhz", 0) < 0.85 * r["sm_clock_max_mhz"]:
        add("low-clocks", "SM clock below 85% of its maximum under load", "major",
            f"SM clock {r['sm_clock_mhz']} MHz of {r['sm_clock_max_mhz']} MHz while the probes ran.",
            {"sm_clock_mhz": r["sm_clock_mhz"], "sm_clock_max_mhz": r["sm_clock_max_mhz"]},
            (Fix("Look for power or thermal limits and application clock settings", "nvidia-smi -q -d CLOCK"),))
    limit, top = r.get("power_limit_w"), r.get("power_limit_max_w")
    if limit and top and limit < 0.9 * top:
        add("power-cap", "The power limit is set below the card's maximum", "major",
            f"Enforced power limit {limit:.0f} W of a possible {top:.0f} W.",
            {"power_limit_w": limit, "power_limit_max_w": top},
            (Fix("Ask the administrator whether the cap is intended", "nvidia-smi -q -d POWER"),))
    if (r.get("ecc_uncorrected_volatile") or 0) > 0:
        add("ecc-errors", "Uncorrected ECC errors since the driver loaded", "critical",
            f"{r['ecc_uncorrected_volatile']} uncorrected ECC errors: the card's memory is failing.",
            {"uncorrected": r["ecc_uncorrected_volatile"], "corrected": r.get("ecc_corrected_volatile")},
            (Fix("Drain the node and have the GPU checked", "nvidia-smi -q -d ECC"),))
    rows = r.get("remapped_rows") or {}
    if rows.get("failure") or rows.get("pending") or rows.get("uncorrectable", 0) > 0:
        add("remapped-rows", "Memory rows remapped or pending remap", "critical" if rows.get("failure") else "major",
            f"Row remapping: {rows}.", dict(rows),
            (Fix("A pending remap needs a GPU reset; a failure needs the card replaced", "nvidia-smi -q -d ROW_REMAPPER"),))
    gen, gmax, width, wmax = (r.get(k) for k in ("pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max"))
    if (gen and gmax and gen < gmax and under_load) or (width and wmax and width < wmax):
        add("pcie-downgrade", "The PCIe link runs below its capability", "major",
            f"PCIe gen {gen} x{width} of gen {gmax} x{wmax}: host copies are capped accordingly.",
            {"gen": gen, "gen_max": gmax, "width": width, "width_max": wmax},
            (Fix("Reseat the card or check the slot and BIOS link settings", "nvidia-smi -q -d PCIE"),))
    if r.get("mig_mode") == 1:
        add("mig-enabled", "MIG is on: this process sees a slice of the GPU", "info",
            "MIG mode is enabled; ceilings are those of the slice, not the whole card.", {"mig_mode": 1}, ())
    if (r.get("other_processes") or 0) > 1:
        add("gpu-shared", "Other processes are using this GPU", "major",
            f"{r['other_processes']} compute processes on the GPU: measured figures may be low.",
            {"processes": r["other_processes"]}, (Fix("Run bench on an idle GPU", "nvidia-smi"),))
    return out
