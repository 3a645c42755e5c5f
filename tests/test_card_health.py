"""One card-health judgement: NVML readings and nvidia-smi text reach the same verdict."""

from __future__ import annotations

from gpudoctor.core.card import BENIGN, REASON_BITS, GpuRecord, judge, reason_names
from gpudoctor.explain import smi
from gpudoctor.hardware.health import HealthReading, health_findings, nvml_record


def test_reason_bits_and_benign_set() -> None:
    assert reason_names(0x1 | 0x40) == {"gpu_idle", "hw_thermal_slowdown"}
    assert set(REASON_BITS.values()) >= BENIGN
    st = judge(
        GpuRecord(
            0,
            reasons=frozenset(
                {"display_clock_setting", "applications_clocks_setting", "sw_power_cap"}
            ),
        )
    )
    assert st.bad_reasons == ("sw_power_cap",)


def test_power_cap_is_judged_against_the_default_limit() -> None:
    # at its factory default (300 W) on a board that allows 350 W: not a cap
    assert not judge(
        GpuRecord(0, power_limit_w=300, power_default_w=300, power_max_w=350)
    ).power_capped
    assert judge(GpuRecord(0, power_limit_w=280, power_default_w=300, power_max_w=350)).power_capped
    assert not judge(
        GpuRecord(0, power_limit_w=699.5, power_max_w=700)
    ).power_capped  # read-back rounding


def test_nvml_and_smi_agree() -> None:
    readings = {
        "throttle_reasons": ["display_clock_setting", "sw_thermal_slowdown"],
        "power_limit_w": 300.0,
        "power_limit_default_w": 300.0,
        "power_limit_max_w": 350.0,
        "sm_clock_mhz": 1400,
        "sm_clock_max_mhz": 1980,
    }
    nvml = {f.id for f in health_findings(HealthReading(readings))}
    rec = nvml_record(HealthReading(readings))
    assert (
        rec.reasons == {"display_clock_setting", "sw_thermal_slowdown"}
        and rec.power_default_w == 300.0
    )
    text = (
        "index, clocks.sm [MHz], clocks.max.sm [MHz], power.limit [W], power.default_limit [W], "
        "power.max_limit [W], clocks_event_reasons.active\n0, 1400 MHz, 1980 MHz, 300.00 W, 300.00 W, 350.00 W, 0x120\n"
    )
    explain = {f.id for f in smi.card_hypotheses(smi.parse(text))}
    assert nvml == {"clock-throttle"} and "clock-throttle" in explain and "power-cap" not in explain
