"""The datasheet table: device names find the intended row, and no row carries a sparse figure."""

from __future__ import annotations

import re

import msgspec
import pytest

from gpudoctor.hardware.ceilings import for_gpu_name
from gpudoctor.hardware.specs import SPECS, find_spec, known_names

# Device names as torch.cuda.get_device_name() / NVML report them -> intended row.
DEVICE_NAMES = {
    "Tesla V100-SXM2-32GB": "v100-sxm2-32gb",
    "Tesla V100-SXM2-16GB": "v100-sxm2-16gb",
    "Tesla V100-PCIE-32GB": "v100-pcie-32gb",
    "Tesla V100-PCIE-16GB": "v100-pcie-16gb",
    "NVIDIA A100-SXM4-40GB": "a100-40gb",
    "NVIDIA A100-SXM4-80GB": "a100-sxm-80gb",
    "NVIDIA A100-PCIE-40GB": "a100-pcie-40gb",
    "NVIDIA A100 80GB PCIe": "a100-pcie-80gb",
    "NVIDIA A10G": "a10g",
    "NVIDIA A10": "a10",
    "NVIDIA L4": "l4",
    "NVIDIA L40S": "l40s",
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H100 NVL": "h100-nvl",
    "NVIDIA H200": "h200",
    "NVIDIA B200": "b200",
    "NVIDIA GB200": "gb200",
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "NVIDIA GeForce RTX 3090": "rtx-3090",
    "AMD Instinct MI300X": "mi300x",
    "Tesla T4": "t4",
    "NVIDIA L40": "l40",
    "NVIDIA A40": "a40",
    "NVIDIA RTX A6000": "rtx-a6000",
    "NVIDIA GeForce RTX 3080": "rtx-3080",
    "NVIDIA RTX 6000 Ada Generation": "rtx-6000-ada",
    "NVIDIA H800": "h800",
    "NVIDIA H800 PCIe": "h800-pcie",
    "NVIDIA GH200 480GB": "gh200",
    "NVIDIA GH200 144G HBM3e": "gh200-144gb",
}

HOPPER = ("h100-sxm", "h100-pcie", "h100-nvl", "h200")


@pytest.mark.parametrize(("device", "key"), sorted(DEVICE_NAMES.items()))
def test_device_name_finds_the_intended_row(device: str, key: str) -> None:
    spec = find_spec(device)
    assert spec is not None, device
    assert spec.key == key


@pytest.mark.parametrize(
    "device",
    [
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "Tesla V100S-PCIE-32GB",
        "AMD Instinct MI300A",
        "voodoo5",
        "",
        "NVIDIA GeForce RTX 3080 Ti",
        "NVIDIA GeForce RTX 3080 Laptop GPU",
        "Quadro RTX 6000",
        "NVIDIA T400",
        "NVIDIA H20",
        "Some Future GPU",
    ],
)
def test_look_alikes_and_unknown_names_find_nothing(device: str) -> None:
    assert find_spec(device) is None


def test_specific_rows_win_over_generic_ones() -> None:
    # each pair: (name that must not fall into the generic row, the generic row's key)
    assert find_spec("NVIDIA A100 80GB PCIe").key != "a100-sxm-80gb"
    assert find_spec("NVIDIA H100 NVL").key != "h100-sxm"
    assert find_spec("NVIDIA A10").key not in ("a100-40gb", "a10g")
    assert find_spec("NVIDIA A100-SXM4-40GB").key != "a10"
    assert find_spec("NVIDIA L4").key != "l40s" and find_spec("NVIDIA L40S").key != "l4"
    assert find_spec("NVIDIA GB200").key != "b200"
    # substrings of another card's name: GH200 is not an H200, A10 not an A100, L40 not an L40S
    assert find_spec("NVIDIA GH200 480GB").key == "gh200"
    assert find_spec("NVIDIA H200").key == "h200"
    assert (
        find_spec("NVIDIA A100-SXM4-40GB").key == "a100-40gb"
        and find_spec("NVIDIA A10").key == "a10"
    )
    assert find_spec("NVIDIA L40").key == "l40" and find_spec("NVIDIA L40S").key == "l40s"
    assert (
        find_spec("NVIDIA H100 PCIe").key == "h100-pcie"
        and find_spec("NVIDIA H100 80GB HBM3").key == "h100-sxm"
    )
    assert (
        find_spec("NVIDIA H800 PCIe").key == "h800-pcie" and find_spec("NVIDIA H800").key == "h800"
    )


def test_keys_and_names_look_themselves_up() -> None:
    for spec in SPECS:
        assert find_spec(spec.key) is spec
        assert find_spec(spec.name) is spec
        assert find_spec(spec.key.upper()) is spec


def test_keys_are_unique_and_listed() -> None:
    keys = [spec.key for spec in SPECS]
    assert len(keys) == len(set(keys))
    assert known_names() == keys


def test_every_alias_is_a_valid_regex() -> None:
    for spec in SPECS:
        assert spec.aliases, spec.key
        for alias in spec.aliases:
            re.compile(alias)  # raises re.error when it is not one
            # names are lower-cased before matching: an upper-case letter (outside an escape) never matches
            assert not any(ch.isupper() for ch in re.sub(r"\\.", "", alias)), (spec.key, alias)
        # and the row's aliases find its real device names (without the key / name shortcut)
        names = [device.lower() for device, key in DEVICE_NAMES.items() if key == spec.key]
        assert all(any(re.search(alias, name) for alias in spec.aliases) for name in names), (
            spec.key,
            names,
        )
    assert set(DEVICE_NAMES.values()) == set(known_names())  # every row has a device name above


def test_cli_key_and_name_survive() -> None:
    assert for_gpu_name("a100-sxm-80gb").gpu == "NVIDIA A100 SXM4 80GB"
    assert for_gpu_name("NVIDIA H100 80GB HBM3").gpu == "NVIDIA H100 SXM5 80GB"


def test_no_row_holds_a_sparse_figure() -> None:
    # The largest dense 16-bit figure in the table is GB200 at 2.5 PF; 2:4 figures are >= 4.5 PF.
    for spec in SPECS:
        for dtype in ("bf16", "fp16"):
            if dtype in spec.matrix_flops:
                assert spec.matrix_flops[dtype] <= 2.6e15, (spec.key, dtype)
        if "fp8" in spec.matrix_flops:
            assert spec.matrix_flops["fp8"] <= 5.2e15, spec.key


def test_hopper_fp8_is_twice_bf16() -> None:
    for key in HOPPER:
        flops = find_spec(key).matrix_flops
        assert flops["fp8"] == pytest.approx(2 * flops["bf16"], rel=1e-3), key


def test_dtype_ladders_are_consistent() -> None:
    """Dense figures keep each architecture's fixed ratios; a half-sparse row would break them."""
    for spec in SPECS:
        f = spec.matrix_flops
        if "bf16" in f and "fp16" in f:
            assert f["bf16"] == f["fp16"], spec.key
        if "fp8" in f and "bf16" in f:
            assert f["fp8"] == pytest.approx(2 * f["bf16"], rel=0.03), spec.key
        if "tf32" in f and "bf16" in f:
            assert f["tf32"] == pytest.approx(f["bf16"] / 2, rel=0.03), spec.key
        if "int8" in f and "fp8" in f:
            assert f["int8"] >= f["fp8"], spec.key
        best = f.get("bf16") or f.get("fp16")
        if best:
            assert best > spec.vector_flops, spec.key  # tensor cores beat the FMA pipes
        if "fp32" in f:
            assert f["fp32"] == spec.vector_flops, spec.key


def test_geforce_rows_use_fp32_accumulate_rates() -> None:
    for key, bf16 in (("rtx-4090", 165.2e12), ("rtx-3090", 71e12)):
        spec = find_spec(key)
        assert spec.matrix_flops["bf16"] == pytest.approx(bf16)
        assert "fp32-accumulate" in spec.source.lower().replace(" ", "-")


def test_rows_are_plausible() -> None:
    for spec in SPECS:
        assert spec.source.strip() and spec.notes.strip(), spec.key
        assert len(spec.source) <= 140, spec.key  # printed in the report header
        assert spec.vector_flops > 0, spec.key
        assert all(v > 0 for v in spec.matrix_flops.values()), spec.key
        assert 1e11 < spec.hbm_bytes_per_s < 1e13, spec.key
        assert 8 * 1024**3 <= spec.memory_bytes <= 200 * 1024**3, spec.key  # RTX 3080: 10 GB
        assert spec.l2_bytes >= 0 and spec.sm_count >= 0 and spec.nvlink_bytes_per_s >= 0, spec.key
        assert spec.pcie == "" or re.fullmatch(r"Gen[3-6] x16", spec.pcie), spec.key
        assert set(spec.matrix_flops) <= {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8"}


def test_amd_last_level_cache_is_kept_apart_from_l2() -> None:
    spec = find_spec("AMD Instinct MI300X")
    assert spec.l2_bytes == 32 * 1024**2
    assert spec.infinity_cache_bytes == 256 * 1024**2
    assert "infinity cache" in spec.source.lower()


def test_unconfirmed_dtypes_are_left_out_and_said_so() -> None:
    a10g = find_spec("NVIDIA A10G")
    assert a10g.matrix_flops == {}
    assert "confirm" in a10g.source
    # Ceilings still work: they fall back to the vector rate.
    ceilings = for_gpu_name("NVIDIA A10G")
    assert ceilings.best_matrix_flops == a10g.vector_flops > 0


def test_the_16_bit_type_a_card_takes_best() -> None:
    """bf16 where the tensor cores take it (its rate is fp16's); fp16 where the datasheet has no bf16
    row (V100, T4) or where ``gpudoctor bench`` measured bf16 far under fp16 (bf16 runs without
    tensor cores there): the roof MFU and the fixes are read against."""
    from gpudoctor.hardware.ceilings import for_gpu_name

    assert for_gpu_name("h100-sxm").half_dtype == "bf16"
    v100 = for_gpu_name("v100-sxm2-32gb")
    assert (v100.half_dtype, v100.best_matrix_flops) == ("fp16", 125e12)
    measured = msgspec.structs.replace(
        v100, matrix_flops={"fp32": 14.1e12, "bf16": 13.2e12, "fp16": 98.0e12}
    )
    assert (measured.half_dtype, measured.best_matrix_flops) == ("fp16", 98.0e12)
    near = msgspec.structs.replace(v100, matrix_flops={"bf16": 780e12, "fp16": 800e12})
    assert (near.half_dtype, near.best_matrix_flops) == ("bf16", 780e12)
