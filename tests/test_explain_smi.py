"""nvidia-smi -q text and --query-gpu CSV -> per-GPU records -> ranked card hypotheses.

The -q fixture follows the layout of driver 550 on an H100 SXM (section names, nesting, units,
N/A fields); each test changes the few fields it is about.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoctor.errors import InputError
from gpudoctor.explain import smi

REAL_Q = Path(__file__).parent / "data" / "explain" / "nvidia_smi_q.txt"
REAL_CSV = Path(__file__).parent / "data" / "explain" / "nvidia_smi_query.csv"

HEADER = """
==============NVSMI LOG==============

Timestamp                                 : Sun Nov 22 03:50:12 2026
Driver Version                            : 550.127.05
CUDA Version                              : 12.4

Attached GPUs                             : {n}
"""

GPU = """GPU 00000000:{bus:02X}:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Product Brand                         : NVIDIA
    Product Architecture                  : Hopper
    Display Mode                          : Disabled
    Display Active                        : Disabled
    Persistence Mode                      : Enabled
    Addressing Mode                       : None
    MIG Mode
        Current                           : {mig}
        Pending                           : {mig}
    Accounting Mode                       : Disabled
    Accounting Mode Buffer Size           : 4000
    Driver Model
        Current                           : N/A
        Pending                           : N/A
    Serial Number                         : 165232100{bus:04d}
    GPU UUID                              : GPU-5c8e2a1b-7f3d-4e6a-9b1c-0d2e3f4a5b{bus:02x}
    Minor Number                          : {index}
    VBIOS Version                         : 96.00.99.00.01
    MultiGPU Board                        : No
    Board ID                              : 0x{bus:x}00
    Board Part Number                     : 692-2G520-0200-000
    GPU Part Number                       : 2330-885-A1
    FRU Part Number                       : N/A
    Module ID                             : {module}
    Inforom Version
        Image Version                     : G520.0200.00.05
        OEM Object                        : 2.1
        ECC Object                        : 7.16
        Power Management Object           : N/A
    Inforom BBX Object Flush
        Latest Timestamp                  : N/A
        Latest Duration                   : N/A
    GPU Operation Mode
        Current                           : N/A
        Pending                           : N/A
    GPU C2C Mode                          : Disabled
    GPU Virtualization Mode
        Virtualization Mode               : None
        Host VGPU Mode                    : N/A
        vGPU Heterogeneous Mode           : N/A
    GPU Reset Status
        Reset Required                    : {reset}
        Drain and Reset Recommended       : No
    GSP Firmware Version                  : 550.127.05
    IBMNPU
        Relaxed Ordering Mode             : N/A
    PCI
        Bus                               : 0x{bus:02X}
        Device                            : 0x00
        Domain                            : 0x0000
        Base Classcode                    : 0x3
        Sub Classcode                     : 0x2
        Device Id                         : 0x233010DE
        Bus Id                            : 00000000:{bus:02X}:00.0
        Sub System Id                     : 0x16C110DE
        GPU Link Info
            PCIe Generation
                Max                       : 5
                Current                   : {gen}
                Device Current            : {gen}
                Device Max                : 5
                Host Max                  : 5
            Link Width
                Max                       : 16x
                Current                   : {width}x
        Bridge Chip
            Type                          : N/A
            Firmware                      : N/A
        Replays Since Reset               : 0
        Replay Number Rollovers           : 0
        Tx Throughput                     : 562 KB/s
        Rx Throughput                     : 1377 KB/s
        Atomic Caps Inbound               : N/A
        Atomic Caps Outbound              : N/A
    Fan Speed                             : N/A
    Performance State                     : P0
    Clocks Event Reasons
        Idle                              : {idle}
        Applications Clocks Setting       : Not Active
        SW Power Cap                      : {sw_power}
        HW Slowdown                       : {hw}
            HW Thermal Slowdown           : {hw_thermal}
            HW Power Brake Slowdown       : Not Active
        Sync Boost                        : Not Active
        SW Thermal Slowdown               : {sw_thermal}
        Display Clock Setting             : Not Active
    Clocks Event Reasons Counters
        SW Power Capping                  : 10238461 us
        Sync Boost                        : 0 us
        SW Thermal Slowdown               : 0 us
        HW Thermal Slowdown               : 0 us
        HW Power Braking                  : 0 us
    Sparse Operation Mode                 : N/A
    FB Memory Usage
        Total                             : 81559 MiB
        Reserved                          : 328 MiB
        Used                              : 71203 MiB
        Free                              : 10028 MiB
    BAR1 Memory Usage
        Total                             : 131072 MiB
        Used                              : 37 MiB
        Free                              : 131035 MiB
    Conf Compute Protected Memory Usage
        Total                             : 0 MiB
        Used                              : 0 MiB
        Free                              : 0 MiB
    Compute Mode                          : Default
    Utilization
        Gpu                               : {util} %
        Memory                            : 41 %
        Encoder                           : 0 %
        Decoder                           : 0 %
        JPEG                              : 0 %
        OFA                               : 0 %
    Encoder Stats
        Active Sessions                   : 0
        Average FPS                       : 0
        Average Latency                   : 0
    FBC Stats
        Active Sessions                   : 0
        Average FPS                       : 0
        Average Latency                   : 0
    ECC Mode
        Current                           : Enabled
        Pending                           : Enabled
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable Parity     : 0
            SRAM Uncorrectable SEC-DED    : 0
            DRAM Correctable              : {dram_corr}
            DRAM Uncorrectable            : {dram_unc}
        Aggregate
            SRAM Correctable              : 0
            SRAM Uncorrectable Parity     : 0
            SRAM Uncorrectable SEC-DED    : 0
            DRAM Correctable              : {dram_corr}
            DRAM Uncorrectable            : {dram_unc}
            SRAM Threshold Exceeded       : No
        Aggregate Uncorrectable SRAM Sources
            SRAM L2                       : 0
            SRAM SM                       : 0
            SRAM Microcontroller          : 0
            SRAM PCIE                     : 0
            SRAM Other                    : 0
    Retired Pages
        Single Bit ECC                    : N/A
        Double Bit ECC                    : N/A
        Pending Page Blacklist            : N/A
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : {remap_unc}
        Pending                           : {remap_pending}
        Remapping Failure Occurred        : No
        Bank Remap Availability Histogram
            Max                           : 2559 bank(s)
            High                          : 0 bank(s)
            Partial                       : 0 bank(s)
            Low                           : 0 bank(s)
            None                          : 0 bank(s)
    Temperature
        GPU Current Temp                  : {temp} C
        GPU T.Limit Temp                  : {tlimit} C
        GPU Shutdown T.Limit Temp         : -8 C
        GPU Slowdown T.Limit Temp         : -2 C
        GPU Max Operating T.Limit Temp    : 0 C
        GPU Target Temperature            : N/A
        Memory Current Temp               : 52 C
        Memory Max Operating T.Limit Temp : 0 C
    GPU Power Readings
        Power Draw                        : {power:.2f} W
        Current Power Limit               : {limit:.2f} W
        Requested Power Limit             : {limit:.2f} W
        Default Power Limit               : 700.00 W
        Min Power Limit                   : 200.00 W
        Max Power Limit                   : 700.00 W
    GPU Memory Power Readings
        Power Draw                        : 91.42 W
    Module Power Readings
        Power Draw                        : N/A
        Current Power Limit               : N/A
        Requested Power Limit             : N/A
        Default Power Limit               : N/A
        Min Power Limit                   : N/A
        Max Power Limit                   : N/A
    Clocks
        Graphics                          : {sm} MHz
        SM                                : {sm} MHz
        Memory                            : 2619 MHz
        Video                             : 1545 MHz
    Applications Clocks
        Graphics                          : 1980 MHz
        Memory                            : 2619 MHz
    Default Applications Clocks
        Graphics                          : 1980 MHz
        Memory                            : 2619 MHz
    Deferred Clocks
        Memory                            : N/A
    Max Clocks
        Graphics                          : 1980 MHz
        SM                                : 1980 MHz
        Memory                            : 2619 MHz
        Video                             : 1545 MHz
    Max Customer Boost Clocks
        Graphics                          : 1980 MHz
    Clock Policy
        Auto Boost                        : N/A
        Auto Boost Default                : N/A
    Voltage
        Graphics                          : 1050.000 mV
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : 4026531839
        ClusterUUID                       : 8f2c1d3e-0000-0000-0000-000000000000
        Health
            Bandwidth                     : Full
    Processes
        GPU instance ID                   : N/A
        Compute instance ID               : N/A
        Process ID                        : 2241{index}
            Type                          : C
            Name                          : /usr/bin/python3
            Used GPU Memory               : 70862 MiB

"""

BUSY = {
    "mig": "Disabled",
    "reset": "No",
    "gen": 5,
    "width": 16,
    "idle": "Not Active",
    "sw_power": "Not Active",
    "hw": "Not Active",
    "hw_thermal": "Not Active",
    "sw_thermal": "Not Active",
    "util": 98,
    "dram_corr": 0,
    "dram_unc": 0,
    "remap_unc": 0,
    "remap_pending": "No",
    "temp": 62,
    "tlimit": 26,
    "power": 655.3,
    "limit": 700.0,
    "sm": 1980,
}
IDLE = dict(BUSY, idle="Active", util=0, gen=1, temp=31, tlimit=57, power=71.6, sm=345)


def q_text(*gpus: dict) -> str:
    buses = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]
    body = "".join(GPU.format(index=i, bus=buses[i], module=i + 1, **g) for i, g in enumerate(gpus))
    return HEADER.format(n=len(gpus)) + body


def ids(findings) -> list[str]:
    return [f.id for f in findings]


# -- parsing -------------------------------------------------------------------------------------------


def test_q_parses_every_field_of_a_busy_h100():
    (r,) = smi.parse(q_text(BUSY))
    assert (r.index, r.bus_id, r.name) == (0, "00000000:18:00.0", "NVIDIA H100 80GB HBM3")
    assert (r.sm_mhz, r.sm_max_mhz, r.util_pct, r.temp_c) == (1980.0, 1980.0, 98.0, 62.0)
    assert r.reasons == frozenset()
    assert (r.power_w, r.power_limit_w, r.power_default_w, r.power_max_w) == (
        655.3,
        700.0,
        700.0,
        700.0,
    )
    assert (r.ecc_volatile_unc, r.ecc_aggregate_unc, r.ecc_volatile_corr, r.ecc_aggregate_corr) == (
        0,
        0,
        0,
        0,
    )
    assert (r.remap_pending, r.remap_failure, r.remapped_unc, r.retired_pending) == (
        False,
        False,
        0,
        None,
    )
    assert (r.pcie_gen, r.pcie_gen_max, r.pcie_host_max, r.pcie_device_max) == (5, 5, 5, 5)
    assert (r.pcie_width, r.pcie_width_max) == (16, 16)
    assert (r.mig_current, r.mig_pending, r.reset_required) == ("Disabled", "Disabled", False)
    assert r.missing == ()


def test_q_reads_several_gpus_and_nested_reasons():
    hot = dict(BUSY, hw="Active", hw_thermal="Active", sm=1395, temp=91)
    recs = smi.parse(q_text(BUSY, hot, IDLE))
    assert [r.index for r in recs] == [0, 1, 2]
    assert [r.bus_id for r in recs] == ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0"]
    assert recs[1].reasons == frozenset({"hw_slowdown", "hw_thermal_slowdown"})
    assert recs[2].reasons == frozenset({"gpu_idle"})
    assert recs[2].pcie_gen == 1


def test_q_older_driver_layout():
    text = """GPU 00000000:07:00.0
    Product Name                    : NVIDIA A100-SXM4-80GB
    Clocks Throttle Reasons
        Idle                        : Not Active
        Applications Clocks Setting : Not Active
        SW Power Cap                : Active
        HW Slowdown                 : Not Active
    Utilization
        Gpu                         : 100 %
    Power Readings
        Power Management            : Supported
        Power Draw                  : 249.10 W
        Power Limit                 : 250.00 W
        Default Power Limit         : 400.00 W
        Enforced Power Limit        : 250.00 W
        Max Power Limit             : 400.00 W
    ECC Errors
        Volatile
            Single Bit
                Device Memory       : 3
                Total               : 3
            Double Bit
                Device Memory       : 2
                Total               : 2
    Retired Pages
        Single Bit ECC              : 1
        Double Bit ECC              : 2
        Pending Page Blacklist      : Yes
    Clocks
        SM                          : 1275 MHz
    Max Clocks
        SM                          : 1410 MHz
    Processes                       : None
"""
    (r,) = smi.parse(text)
    assert r.reasons == frozenset({"sw_power_cap"})
    assert (r.power_limit_w, r.power_default_w) == (250.0, 400.0)
    assert (r.ecc_volatile_unc, r.ecc_volatile_corr, r.retired_pending) == (2, 3, True)
    assert r.missing == ("PCIe",)
    top = smi.card_hypotheses([r])
    assert ids(top)[:2] == ["ecc-errors", "power-cap"]
    assert top[0].confidence == 0.9
    assert top[1].confidence == 0.85  # busy, capped below default, SW power cap active
    assert "250 W of a default 400 W (62%)" in top[1].summary


CSV = """name, index, pci.bus_id, utilization.gpu [%], temperature.gpu, clocks.current.sm [MHz], clocks.max.sm [MHz], \
clocks_throttle_reasons.active, pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, \
pcie.link.width.max, power.draw [W], power.limit [W], power.default_limit [W], \
ecc.errors.uncorrected.volatile.total, mig.mode.current
NVIDIA H100 80GB HBM3, 0, 00000000:18:00.0, 99 %, 64, 1980 MHz, 1980 MHz, 0x0000000000000000, 5, 5, 16, 16, \
662.41 W, 700.00 W, 700.00 W, 0, Disabled
NVIDIA H100 80GB HBM3, 1, 00000000:2A:00.0, 99 %, 88, 1410 MHz, 1980 MHz, 0x0000000000000060, 5, 5, 16, 16, \
540.12 W, 700.00 W, 700.00 W, 0, Disabled
NVIDIA H100 80GB HBM3, 2, 00000000:3A:00.0, 98 %, 63, 1980 MHz, 1980 MHz, 0x0000000000000000, 4, 5, 8, 16, \
650.00 W, 700.00 W, 700.00 W, [N/A], Disabled
NVIDIA H100 80GB HBM3, 3, 00000000:5D:00.0, 0 %, 30, 345 MHz, 1980 MHz, 0x0000000000000001, 1, 5, 16, 16, \
70.00 W, 700.00 W, 700.00 W, 0, Disabled
"""


def test_csv_bitmask_and_units():
    recs = smi.parse(CSV)
    assert [r.index for r in recs] == [0, 1, 2, 3]
    assert recs[1].reasons == frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})
    assert (recs[1].sm_mhz, recs[1].util_pct, recs[1].temp_c) == (1410.0, 99.0, 88.0)
    assert recs[2].ecc_volatile_unc is None
    assert recs[3].reasons == frozenset({"gpu_idle"})
    assert recs[0].source == "nvidia-smi --query-gpu"


def test_csv_hypotheses_rank_the_throttled_gpu_first():
    found = smi.card_hypotheses(smi.parse(CSV))
    top = found[0]
    assert (top.id, top.subject, top.confidence) == (
        "clock-throttle",
        "GPU 1 (00000000:2A:00.0)",
        0.95,
    )
    assert "HW thermal slowdown" in top.summary and "SW thermal slowdown" in top.summary
    assert "1410 of 1980 MHz (71%)" in top.summary and "1980 MHz (median)" in top.summary
    assert top.evidence.numbers["active_reasons"] == ["hw_thermal_slowdown", "sw_thermal_slowdown"]
    assert [f.title.split(" (")[0] for f in top.fixes][:2] == [
        "Drain the node and reschedule the job on healthy nodes",
        "Check cooling and airflow",
    ]
    assert any("PERFORMANCE,CLOCK,ECC,PCIE" in c for c in top.check_next)
    assert any("dcgmi diag -r 3" in c for c in top.check_next)
    assert "code" in top.wrong_fix
    pcie = next(f for f in found if f.id == "pcie-downgrade")
    assert (pcie.subject, pcie.confidence) == ("GPU 2 (00000000:3A:00.0)", 0.8)
    assert "gen 4 x8 of gen 5 x16" in pcie.summary
    # GPU 3 is idle at 345 MHz with gen 1: not a problem, reported healthy with a low-confidence note
    assert not any(f.id == "clock-throttle" and f.subject.startswith("GPU 3") for f in found)
    idle_link = next(f for f in found if f.id == "pcie-downgrade" and f.subject.startswith("GPU 3"))
    assert (
        idle_link.confidence == 0.15 and "idle cards drop the link generation" in idle_link.summary
    )
    healthy = [f.subject.split(" (")[0] for f in found if f.id == "gpu-healthy"]
    assert healthy == ["GPU 0", "GPU 3"]
    assert ids(found).index("gpu-healthy") > ids(found).index("pcie-downgrade")


def test_csv_repeated_samples_merge_per_gpu():
    text = (
        "index, utilization.gpu [%], clocks.sm [MHz], clocks.max.sm [MHz], clocks_event_reasons.sw_power_cap\n"
        "0, 97 %, 1755 MHz, 1980 MHz, Active\n0, 99 %, 1980 MHz, 1980 MHz, Not Active\n"
        "0, 98 %, 1830 MHz, 1980 MHz, Not Active\n"
    )
    (r,) = smi.parse(text)
    assert (r.samples, r.sm_mhz, r.util_pct, r.reasons) == (
        3,
        1830.0,
        98.0,
        frozenset({"sw_power_cap"}),
    )
    (f,) = smi.card_hypotheses([r])
    assert (f.id, f.confidence) == (
        "clock-throttle",
        0.45,
    )  # at the power limit under load: often normal


# -- hypotheses ------------------------------------------------------------------------------------------


def test_healthy_busy_gpu():
    (f,) = smi.card_hypotheses(smi.parse(q_text(BUSY)))
    assert (f.id, f.confidence, f.severity, f.partial) == ("gpu-healthy", 0.9, "info", False)
    assert f.evidence.numbers["checked"] == list(smi.CHECKS)
    assert "SM 1980/1980 MHz, PCIe gen 5 x16, utilization 98%" in f.summary


def test_idle_gpu_at_low_clocks_is_not_throttled():
    found = smi.card_hypotheses(smi.parse(q_text(IDLE)))
    assert ids(found) == ["gpu-healthy", "pcie-downgrade"]
    assert found[1].confidence == 0.15


def test_busy_gpu_below_max_clock_without_reason():
    (f,) = [
        x
        for x in smi.card_hypotheses(smi.parse(q_text(dict(BUSY, sm=1305))))
        if x.id != "gpu-healthy"
    ]
    assert (f.id, f.confidence) == ("clock-throttle", 0.35)
    assert "1305 of 1980 MHz (66%)" in f.summary and "no reason reported" in f.summary


def test_hw_power_brake_names_power_delivery():
    recs = smi.parse(q_text(dict(BUSY, hw="Active", sm=1100)))
    (f,) = smi.card_hypotheses(recs)
    assert (f.id, f.confidence) == ("clock-throttle", 0.9)
    assert f.fixes[1].title.startswith("Check power delivery")


def test_ecc_uncorrectable_and_pending_remap():
    found = smi.card_hypotheses(
        smi.parse(q_text(dict(BUSY, dram_unc=4, remap_unc=2, remap_pending="Yes")))
    )
    f = found[0]
    assert (f.id, f.confidence) == ("ecc-errors", 0.9)
    assert "4 uncorrectable ECC errors since the driver loaded" in f.summary
    assert "pending" in f.summary
    assert f.evidence.numbers["remapped_rows_uncorrectable"] == 2
    assert [x.code for x in f.fixes][2] == "dcgmi diag -r 3"
    assert "gpu-healthy" not in ids(found)


def test_correctable_ecc_alone_is_low_confidence():
    found = smi.card_hypotheses(smi.parse(q_text(dict(BUSY, dram_corr=12))))
    assert ids(found) == ["gpu-healthy", "ecc-errors"]
    assert found[1].confidence == 0.25
    assert "12 correctable ECC errors only" in found[1].summary
    assert (
        "Low-confidence notes: GPU 0 (00000000:18:00.0) reports memory errors." in found[0].summary
    )


def test_pcie_width_downgrade_under_load():
    found = smi.card_hypotheses(smi.parse(q_text(dict(BUSY, width=8))))
    assert (found[0].id, found[0].confidence) == ("pcie-downgrade", 0.8)


def test_reset_required_and_mig():
    found = smi.card_hypotheses(
        smi.parse(q_text(dict(BUSY, reset="Yes"), dict(BUSY, mig="Enabled", util=0)))
    )
    assert ids(found)[0] == "reset-required"
    mig = next(f for f in found if f.id == "mig-enabled")
    assert (mig.subject, mig.severity) == ("GPU 1 (00000000:2A:00.0)", "info")
    assert ids(found)[-1] == "mig-enabled"


def test_power_cap_below_default():
    found = smi.card_hypotheses(
        smi.parse(q_text(dict(BUSY, limit=500.0, sw_power="Active", sm=1650)))
    )
    assert ids(found)[:2] == ["power-cap", "clock-throttle"]
    assert found[0].confidence == 0.85


def test_partial_output_says_what_was_not_checked():
    text = """GPU 00000000:18:00.0
    Clocks
        SM                                : 1980 MHz
    Max Clocks
        SM                                : 1980 MHz
"""
    (f,) = smi.card_hypotheses(smi.parse(text))
    # one check of six: a clean bill of health worth less than a whole one (0.9)
    assert (f.id, f.partial, f.confidence) == ("gpu-healthy", True, 0.37)
    assert f.title.endswith("no problem in the 1 of 6 checks the artifact allows")
    assert "Not in the artifact: throttle reasons, utilization, ECC, PCIe, power." in f.summary


@pytest.mark.skipif(not REAL_Q.exists(), reason="no recorded nvidia-smi -q from an H100/H200 yet")
def test_real_h200_nvidia_smi_q_is_healthy():
    """Driver 580 on an idle H200 (tests/data/explain/README.md): "GPU" not "Gpu" under Utilization,
    Host Max N/A, and one historical SRAM parity error the driver counts as handled."""
    (r,) = smi.parse(REAL_Q.read_text())
    assert (r.name, r.bus_id, r.sm_mhz, r.sm_max_mhz, r.util_pct) == (
        "NVIDIA H200",
        "00000000:00:06.0",
        345.0,
        1980.0,
        0.0,
    )
    assert r.reasons == frozenset({"gpu_idle"}) and (r.pcie_gen, r.pcie_gen_max, r.pcie_width) == (
        5,
        5,
        16,
    )
    assert (
        r.ecc_volatile_unc,
        r.ecc_aggregate_unc,
        r.sram_threshold_exceeded,
        r.repair_pending,
    ) == (0, 1, False, False)
    assert (r.power_w, r.power_limit_w, r.missing) == (88.31, 700.0, ())
    found = smi.card_hypotheses([r])
    assert [(f.id, f.confidence) for f in found] == [("gpu-healthy", 0.9), ("ecc-errors", 0.2)]
    assert "handled, watch the count" in found[1].summary


@pytest.mark.skipif(not REAL_CSV.exists(), reason="no recorded nvidia-smi --query-gpu CSV yet")
def test_real_h200_query_csv_is_healthy():
    (r,) = smi.parse(REAL_CSV.read_text())
    assert (r.sm_mhz, r.sm_max_mhz, r.reasons, r.ecc_volatile_unc, r.retired_pending) == (
        345.0,
        1980.0,
        frozenset({"gpu_idle"}),
        0,
        None,
    )
    assert [f.id for f in smi.card_hypotheses([r])] == ["gpu-healthy"]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        "hello world",
        "a,b,c\n1,2,3\n",
        "name\nH100\n",
        "clocks.sm [MHz], clocks.max.sm [MHz]\n1980, 1980\n",
    ],
)
def test_bad_input_is_an_input_error(text):
    with pytest.raises(InputError) as err:
        smi.parse(text)
    assert "\n" not in str(err.value) and "nvidia-smi" in str(err.value)


# -- fuzz ---------------------------------------------------------------------------------------------

_LINES = st.sampled_from(
    [
        "GPU 00000000:18:00.0",
        "    Clocks",
        "        SM : 1980 MHz",
        "    Max Clocks",
        "    Clocks Event Reasons",
        "        HW Slowdown : Active",
        "        Idle : [N/A]",
        "    PCI",
        "        GPU Link Info",
        "            PCIe Generation",
        "                Max : 5",
        "                Current : 99999999999999999999999",
        "    ECC Errors",
        "        Volatile",
        "            DRAM Uncorrectable : 1e400",
        "    Utilization",
        "        Gpu : -5 %",
        "name, clocks.sm [MHz], index",
        "H100, 1980 MHz, 0",
        "x, 0xZZ, 1",
        "\t\t: :",
        "",
    ]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.text(max_size=400),
        st.lists(st.one_of(_LINES, st.text(max_size=30)), max_size=40).map("\n".join),
    )
)
def test_random_text_parses_or_raises_input_error(text):
    try:
        recs = smi.parse(text)
    except InputError:
        return
    for f in smi.card_hypotheses(recs):
        assert 0 <= (f.confidence or 0) <= 1
        f.to_dict()
