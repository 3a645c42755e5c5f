"""explain on real Nsight Compute exports (H200, ncu 2025.3.1, --clock-control none, 2026-11-22;
tests/data/explain/README.md): each bad kernel's limiter is named, the good kernels are called good."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.errors import InputError
from gpudoctor.explain import explain_paths
from gpudoctor.explain.kernel import KernelMetrics
from gpudoctor.explain.ncu import EXPECTED as NCU_EXPECTED
from gpudoctor.explain.ncu import number, parse_ncu_csv

DATA = Path(__file__).parent / "data" / "explain"
EXPORTS = ["ncu_kernels_details.csv", "ncu_kernels_details_plain.csv.gz", "ncu_kernels_raw.csv.gz"]
EXPECTED = {
    "fma_gemm": "tensor-cores-idle",
    "uncoalesced_copy": "uncoalesced-access",
    "bank_conflict_transpose": "bank-conflicts",
    "register_spill": "register-spills",
    "small_grid": "small-grid",
    "dot_gemm": "kernel-efficient",
    "nvjet_sm90": "kernel-efficient",  # cuBLAS bf16 GEMM
    "coalesced_copy": "kernel-efficient",
    "padded_transpose": "kernel-efficient",
    "vectorized_elementwise_kernel": "kernel-efficient",  # torch.add
}


def first_verdicts(path: Path) -> dict[str, str]:
    ex = explain_paths([path])
    out: dict[str, str] = {}
    for _, h in ex.hypotheses:
        for key in EXPECTED:
            if h.subject == key or (
                key in ("nvjet_sm90", "vectorized_elementwise_kernel") and key in h.subject
            ):
                out.setdefault(key, h.id)
    return out


@pytest.mark.parametrize("export", EXPORTS)
def test_each_kernel_gets_its_limiter(export):
    assert first_verdicts(DATA / export) == EXPECTED


def test_numbers_read_from_the_details_page():
    kernels = {k.name: k for k in parse_ncu_csv((DATA / "ncu_kernels_details.csv").read_text())}
    fma = kernels["fma_gemm"]
    assert fma.tensor_pipe_pct == 0.0 and fma.registers_per_thread == 64
    assert fma.duration_us == pytest.approx(5180, rel=0.01)  # 5.18 ms
    assert (
        kernels["uncoalesced_copy"].uncoalesced_excess_pct == 78.0
    )  # "29360128 excessive sectors (78% ..."
    # shared load + store bank conflicts over wavefronts (the --metrics counters; the rule text says 96.90%
    # for loads alone)
    assert kernels["bank_conflict_transpose"].bank_conflict_pct == pytest.approx(94.0, abs=0.01)
    assert kernels["register_spill"].spill_note.startswith(
        "1,070,336 local-memory spilling requests"
    )
    assert kernels["small_grid"].grid_size == 4 and kernels["small_grid"].sm_count == 132


def test_the_tensor_idle_fix_order_on_real_data():
    ex = explain_paths([DATA / "ncu_kernels_details.csv"])
    h = next(h for _, h in ex.hypotheses if h.subject == "fma_gemm")
    assert h.id == "tensor-cores-idle" and h.fixes[0].title.startswith(
        "Use tensor-core instructions"
    )
    assert "occupancy" in h.wrong_fix.lower()
    assert ex.hypotheses[0][1].id != "kernel-efficient"  # problems rank above health


def test_preamble_and_missing_sections_are_tolerated():
    text = (DATA / "ncu_kernels_details.csv").read_text()
    only_sol = [
        line
        for line in text.splitlines()
        if line.startswith('"ID"') or '"GPU Speed Of Light Throughput"' in line
    ]
    noisy = (
        "==PROF== Connected to process 1 (python3)\n==WARNING== something\n"
        + "\n".join(only_sol)
        + "\n"
    )
    kernels = parse_ncu_csv(noisy)
    assert len(kernels) == 10
    assert all("Occupancy" in k.missing and "Launch Statistics" in k.missing for k in kernels)
    ex_path = DATA / "ncu_kernels_details.csv"
    assert ex_path.exists()


def test_partial_conclusions_are_marked(tmp_path):
    text = (DATA / "ncu_kernels_details.csv").read_text()
    keep = [
        line
        for line in text.splitlines()
        if line.startswith('"ID"') or '"GPU Speed Of Light Throughput"' in line
    ]
    f = tmp_path / "sol_only.csv"
    f.write_text("\n".join(keep) + "\n")
    ex = explain_paths([f])
    assert ex.sources[0].partial.startswith("missing: Launch Statistics, Occupancy")
    assert all(h.partial for _, h in ex.hypotheses)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "is empty"),
        ("hello,world\n1,2\n", "not a format explain knows"),
        (
            '"ID","Kernel Name","foo__bar.sum"\n"0","k","1"\n',
            "none of the raw metrics explain reads",
        ),
        (
            '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n',
            "no kernel rows",
        ),
    ],
)
def test_bad_exports_are_one_line_errors(tmp_path, text, message):
    f = tmp_path / "x.csv"
    f.write_text(text)
    with pytest.raises(InputError) as info:
        explain_paths([f])
    assert message in str(info.value)


def test_numbers_with_separators_and_tuples():
    assert number('"1,070,336"') == 1070336
    assert number("(128, 1, 1)") == 128
    assert number("(64, 64, 1)") == 4096
    assert number("n/a") is None and number("") is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_fuzz_never_raises_anything_but_input_error(junk):
    header = '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
    if '"ID"' not in junk and "ID," not in junk:
        # no header row at all: refused, and said so in one line
        with pytest.raises(InputError) as info:
            parse_ncu_csv(junk)
        assert (
            str(info.value) == f"ncu csv: no CSV header with an ID column; expected {NCU_EXPECTED}"
        )
    for text in (junk, header + junk):
        try:
            kernels = parse_ncu_csv(text)
        except InputError as exc:
            assert str(exc).startswith("ncu csv: ") and "\n" not in str(exc), str(exc)
            continue
        # a kernel per ID among the rows below the header: at most one per line after it
        assert 1 <= len(kernels) <= len(text.splitlines()) - 1, (text, kernels)
        assert all(isinstance(k, KernelMetrics) and isinstance(k.name, str) for k in kernels)


def test_raw_export_gz_round_trip():
    raw = gzip.decompress((DATA / "ncu_kernels_raw.csv.gz").read_bytes()).decode()
    kernels = {k.name: k for k in parse_ncu_csv(raw)}
    assert kernels["fma_gemm"].tensor_pipe_pct == pytest.approx(0.000623)
    assert kernels["register_spill"].local_memory_bytes > 0
