"""Card health from NVML: clocks, throttling, power, temperature, ECC, retired pages, PCIe, MIG.

A throttled or degraded card looks like slow code (training got slower with no code change).
``read_health`` reads NVML; ``nvml_record`` turns the readings into the neutral ``GpuRecord`` that
core/card.py's ``judge`` reads (as it reads ``nvidia-smi`` text, explain/smi.py);
``health_findings`` words the verdict: each anomaly a Finding (same type as the doctor's, saving
unknown: 0). What NVML could not read is listed, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpudoctor.core.card import LOW_CLOCK_SHARE, GpuRecord, judge, reason_names
from gpudoctor.core.finding import Evidence, Finding, Fix


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
            reason_names(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))),
        "power_w": lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
        "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
        "power_limit_max_w": lambda: pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)[1] / 1000.0,
        "power_limit_default_w": lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0,
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
    return {"correctable": corr, "uncorrectable": unc, "pending": int(pending),
            "failure": int(failure)}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_record(health: HealthReading, index: int = 0) -> GpuRecord:
    """The NVML readings as the neutral record ``judge`` reads (None where NVML said nothing)."""
    r = health.readings
    rows = r.get("remapped_rows") or {}
    mig = r.get("mig_mode")
    return GpuRecord(
        index=index, name=str(r.get("name") or ""), sm_mhz=r.get("sm_clock_mhz"),
        sm_max_mhz=r.get("sm_clock_max_mhz"),
        reasons=frozenset(r["throttle_reasons"]) if "throttle_reasons" in r else None,
        temp_c=r.get("temperature_c"), power_w=r.get("power_w"),
        power_limit_w=r.get("power_limit_w"), power_default_w=r.get("power_limit_default_w"),
        power_max_w=r.get("power_limit_max_w"), ecc_volatile_unc=r.get("ecc_uncorrected_volatile"),
        ecc_volatile_corr=r.get("ecc_corrected_volatile"),
        remap_pending=bool(rows["pending"]) if "pending" in rows else None,
        remap_failure=bool(rows["failure"]) if "failure" in rows else None,
        remapped_unc=rows.get("uncorrectable"), pcie_gen=r.get("pcie_gen"),
        pcie_gen_max=r.get("pcie_gen_max"), pcie_width=r.get("pcie_width"),
        pcie_width_max=r.get("pcie_width_max"),
        mig_current=None if mig is None else "Enabled" if mig == 1 else "Disabled",
        other_processes=r.get("other_processes"), source="NVML")


def health_findings(health: HealthReading, under_load: bool = False) -> list[Finding]:
    """Each anomaly ``judge`` finds, as a Finding. ``under_load``: the reading was taken while
    probes ran."""
    rec = nvml_record(health)
    st = judge(rec, "busy" if under_load else "unknown")
    out: list[Finding] = []

    def add(fid: str, title: str, severity: str, summary: str, numbers: dict[str, Any],
            fixes: tuple[Fix, ...]) -> None:
        out.append(Finding(fid, title, severity, 0.0, 1.0, summary,
                           Evidence(numbers=numbers), fixes))

    bad = list(st.bad_reasons)
    if bad:
        severe = any("thermal" in x or "hw_" in x for x in bad)
        add("clock-throttle", "The GPU's clocks are held back", "critical" if severe else "major",
            f"NVML reports clock throttle reasons: {', '.join(bad)}.",
            {"reasons": bad, "sm_clock_mhz": rec.sm_mhz, "sm_clock_max_mhz": rec.sm_max_mhz},
            (Fix("Check cooling and power delivery; compare with the other GPUs of the node",
                 "nvidia-smi -q -d PERFORMANCE"),))
    if st.low_clock:
        add("low-clocks",
            f"SM clock below {LOW_CLOCK_SHARE:.0%} of its maximum under load", "major",
            f"SM clock {rec.sm_mhz} MHz of {rec.sm_max_mhz} MHz while the probes ran.",
            {"sm_clock_mhz": rec.sm_mhz, "sm_clock_max_mhz": rec.sm_max_mhz},
            (Fix("Look for power or thermal limits and application clock settings",
                 "nvidia-smi -q -d CLOCK"),))
    if st.power_capped:
        limit, ref = rec.power_limit_w, st.power_reference_w
        of = "default" if rec.power_default_w else "maximum"
        add("power-cap", f"The power limit is set below the card's {of}", "major",
            f"Enforced power limit {limit:.0f} W of a {of} {ref:.0f} W.",
            {"power_limit_w": limit, "power_limit_max_w": rec.power_max_w,
             "power_limit_default_w": rec.power_default_w},
            (Fix("Ask the administrator whether the cap is intended", "nvidia-smi -q -d POWER"),))
    if (rec.ecc_volatile_unc or 0) > 0:
        add("ecc-errors", "Uncorrected ECC errors since the driver loaded", "critical",
            f"{rec.ecc_volatile_unc} uncorrected ECC errors: the card's memory is failing.",
            {"uncorrected": rec.ecc_volatile_unc, "corrected": rec.ecc_volatile_corr},
            (Fix("Drain the node and have the GPU checked", "nvidia-smi -q -d ECC"),))
    rows = health.readings.get("remapped_rows") or {}
    if rec.remap_failure or st.pending or (rec.remapped_unc or 0) > 0:
        add("remapped-rows", "Memory rows remapped or pending remap",
            "critical" if rec.remap_failure else "major", f"Row remapping: {rows}.", dict(rows),
            (Fix("A pending remap needs a GPU reset; a failure needs the card replaced",
                 "nvidia-smi -q -d ROW_REMAPPER"),))
    # an idle link drops its generation to save power
    if (st.pcie_gen_down and under_load) or st.pcie_width_down:
        add("pcie-downgrade", "The PCIe link runs below its capability", "major",
            f"PCIe gen {rec.pcie_gen} x{rec.pcie_width} of gen {rec.pcie_gen_max} "
            f"x{rec.pcie_width_max}: host copies are capped accordingly.",
            {"gen": rec.pcie_gen, "gen_max": rec.pcie_gen_max, "width": rec.pcie_width,
             "width_max": rec.pcie_width_max},
            (Fix("Reseat the card or check the slot and BIOS link settings",
                 "nvidia-smi -q -d PCIE"),))
    if st.mig:
        add("mig-enabled", "MIG is on: this process sees a slice of the GPU", "info",
            "MIG mode is enabled; ceilings are those of the slice, not the whole card.",
            {"mig_mode": 1}, ())
    if st.shared:
        add("gpu-shared", "Other processes are using this GPU", "major",
            f"{rec.other_processes} compute processes on the GPU: measured figures may be low.",
            {"processes": rec.other_processes}, (Fix("Run bench on an idle GPU", "nvidia-smi"),))
    return out
