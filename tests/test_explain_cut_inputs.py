"""`explain` on cut, partial or NaN-holed inputs (issue 16, item 13): what could not be read is said,
a rank is never lost without a word, and nothing is called healthy that was not checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import gd
from test_explain_smi import BUSY, q_text

from gpudoctor.errors import InputError
from gpudoctor.explain import explain_paths, smi, timings

DATA = Path(__file__).parent / "data" / "explain"
REAL_Q = DATA / "nvidia_smi_q.txt"
REAL_CSV = DATA / "nvidia_smi_query.csv"


def explain_one(tmp_path: Path, text: str, name: str = "in.csv"):
    path = tmp_path / name
    path.write_text(text)
    ex = explain_paths([path])
    return ex.sources[0], [h for _, h in ex.hypotheses]


# -- rank timings with NaN rows ----------------------------------------------------------------------


def test_nan_rows_of_a_rank_name_that_rank_instead_of_dropping_it_silently():
    """Before: "only rank 1 in the table" although rank 0 is in it (its one row had a NaN)."""
    with pytest.raises(InputError) as err:
        timings.rank_hypotheses("rank,step,step_ms\n0,0,nan\n1,0,101\n")
    msg = str(err.value)
    assert "only rank 1 has step times: every row of rank 0 has an empty or NaN cell" in msg
    assert "only rank 1 in the table" not in msg and "\n" not in msg


def test_a_rank_left_with_no_row_is_noted_and_nan_rows_are_counted(tmp_path):
    text = "rank,step,step_ms\n0,0,100\n1,0,nan\n0,1,100\n1,1,NaN\n2,0,100\n2,1,100\n"
    (f,) = timings.rank_hypotheses(text)
    assert (f.id, f.partial) == ("step-time-steady", True)
    assert (
        "2 row(s) with empty or NaN cells dropped, rank 1 left out: no row with a step time"
        in f.summary
    )
    source, _ = explain_one(tmp_path, text)
    assert source.detail == "2 rank(s) x 2 step(s)"
    assert "rank 1 left out" in source.partial


def test_one_nan_row_keeps_every_rank(tmp_path):
    text = "rank,step,step_ms\n" + "".join(
        f"{r},{s},{'NaN' if (r, s) == (0, 3) else 100.0 + (r + s) % 3}\n"
        for s in range(20)
        for r in range(4)
    )
    source, found = explain_one(tmp_path, text)
    assert source.detail == "4 rank(s) x 20 step(s)"
    assert (
        source.partial
        == "1 row(s) with empty or NaN cells dropped, 1 of 80 (rank, step) values missing"
    )
    assert found[0].evidence.numbers["ranks"] == 4


def test_a_rank_table_cut_mid_row_does_not_use_the_cut_value(tmp_path):
    """Before: the last row, cut from 100.0 to 1, read as a 1 ms step with no word of the cut."""
    lines = ["rank,step,step_ms"] + [f"{r},{s},100.0" for s in range(40) for r in range(4)]
    text = "\n".join(lines)[:-4]  # "...,3,39,1"
    source, found = explain_one(tmp_path, text)
    assert "the last line has no line end (the file may be cut mid-row): not used" in source.partial
    assert all(h.partial for h in found)
    assert found[0].evidence.numbers["median_step_ms"] == 100.0


def test_an_error_on_a_cut_table_says_it_was_cut(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("rank,step,step_ms\n0,0,100\n1,0,10")
    out = gd("explain", str(path))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "only rank 0 in the table" in out.stderr and "the file may be cut mid-row" in out.stderr


def test_a_collective_table_cut_mid_row_is_partial(tmp_path):
    """Before: 512 GPUs read as 3 ms (cut from 340): scaling called fine, nothing partial."""
    source, found = explain_one(tmp_path, "gpus,allreduce_ms\n64,45\n128,52\n256,61\n512,3")
    assert "cut mid-row" in source.partial
    assert all(h.partial for h in found)
    assert "512" not in json.dumps([h.evidence.numbers for h in found])  # the cut row is not used


def test_with_several_files_an_error_names_the_file(tmp_path):
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text("gpus,allreduce_ms\n64,45\n128,52\n256,61\n512,340\n")
    bad.write_text("rank,step,step_ms\n0,0,100\n0,1,100\n")
    with pytest.raises(InputError) as err:
        explain_paths([good, bad])
    assert str(err.value).startswith(f"{bad}: rank timings: only rank 0")


# -- nvidia-smi -q cut short -------------------------------------------------------------------------


@pytest.mark.skipif(not REAL_Q.exists(), reason="no recorded nvidia-smi -q")
@pytest.mark.parametrize("lines", [20, 40, 60])
def test_a_truncated_q_is_never_called_healthy(tmp_path, lines):
    """Before: "GPU 0 looks healthy (60% confidence)" with nothing checked."""
    text = "".join(REAL_Q.read_text().splitlines(keepends=True)[:lines])
    source, found = explain_one(tmp_path, text, "smi.txt")
    assert [h.id for h in found] == ["gpu-unchecked"]
    (h,) = found
    assert h.partial and h.confidence == 0.0 and h.severity == "info"
    assert "no health check ran and nothing is claimed" in h.summary
    assert "stops before its end (no Processes)" in source.partial
    assert (
        "not checked on GPU 0: clocks, throttle reasons, utilization, ECC, PCIe, power"
        in source.partial
    )


@pytest.mark.skipif(not REAL_Q.exists(), reason="no recorded nvidia-smi -q")
def test_a_q_cut_before_any_gpu_section_says_so():
    """Before: "no nvidia-smi --query-gpu header", the CSV parser's complaint, for -q text."""
    text = "".join(REAL_Q.read_text().splitlines(keepends=True)[:8])
    with pytest.raises(InputError) as err:
        smi.parse(text)
    assert "the nvidia-smi -q text has no GPU section" in str(err.value) and "\n" not in str(
        err.value
    )


def test_a_truncated_q_on_the_command_line(tmp_path):
    path = tmp_path / "smi.txt"
    path.write_text(q_text(BUSY)[:400])
    out = gd("explain", str(path), "--width", "200")
    assert out.returncode == 0, out.stderr
    assert (
        "looks healthy" not in out.stdout
        and "gpu-unchecked" in out.stdout
        and "(not checked)" in out.stdout
    )
    data = json.loads(gd("explain", str(path), "--json").stdout)
    assert [h["id"] for h in data["hypotheses"]] == ["gpu-unchecked"]
    assert "not checked on GPU 0" in data["sources"][0]["partial"]


def test_a_q_cut_inside_the_ecc_section_does_not_count_it_as_checked():
    """Before: cut after the SRAM counters, the DRAM errors unread, ECC counted as checked with 0 errors."""
    full = q_text(dict(BUSY, dram_unc=4))
    text = full[: full.index("            DRAM Correctable")]
    records, notes = smi.read(text)
    (r,) = records
    assert r.ecc_volatile_unc is None and "ECC" in r.missing
    assert "GPU 0's 'ECC Errors > Volatile' section is cut: not used" in notes
    (f,) = smi.card_hypotheses(records)
    assert f.id == "gpu-healthy" and f.partial and "ECC" in f.evidence.numbers["not_checked"]
    assert f.confidence < 0.9 and "looks healthy" not in f.title


def test_a_q_cut_mid_line_does_not_read_the_cut_number():
    """Before: "Current Power Limit : 700.00 W" cut to "70" read as a 70 W limit, power counted as checked."""
    full = q_text(BUSY)
    text = full[
        : full.index("        Current Power Limit")
        + len("        Current Power Limit               : 70")
    ]
    records, notes = smi.read(text)
    assert records[0].power_limit_w is None
    assert "the text stops mid-line (a cut copy): its last line is not used" in notes
    assert "power-cap" not in [f.id for f in smi.card_hypotheses(records)]


def test_q_with_fewer_gpu_sections_than_attached_gpus():
    """A note, not a cut: `nvidia-smi -q -i 0` prints one section under "Attached GPUs : 8" too."""
    text = q_text(BUSY, BUSY)
    text = text.replace(
        "Attached GPUs                             : 2",
        "Attached GPUs                             : 8",
    )
    records, notes = smi.read(text)
    assert len(records) == 2 and all(r.missing == () for r in records)
    assert notes == [
        "6 of the 8 attached GPUs are not in the text (left out with -i, or the copy stops early)"
    ]
    # cut mid-section as well: the section it stops in is not used
    cut = text[: text.rindex("            DRAM Correctable")]
    records, notes = smi.read(cut)
    assert "ECC" in records[1].missing and records[0].missing == ()
    assert "GPU 1's 'ECC Errors > Aggregate' section is cut: not used" in notes


def test_a_whole_q_has_no_notes():
    records, notes = smi.read(q_text(BUSY, BUSY))
    assert notes == [] and all(r.missing == () for r in records)


# -- nvidia-smi --query-gpu CSV cut short --------------------------------------------------------------


@pytest.mark.skipif(not REAL_CSV.exists(), reason="no recorded nvidia-smi --query-gpu CSV")
def test_a_query_csv_cut_mid_row_is_an_error_not_a_reading():
    """Before: the one row, cut mid-cell, was read as whole: healthy at 90% confidence, no word of the cut."""
    text = REAL_CSV.read_text()
    with pytest.raises(InputError) as err:
        smi.parse(text[:-10])
    assert "no whole GPU row: the last one stops mid-row" in str(err.value)
    # the same row, whole but for its line end ("... 143771 MiB"), is read
    (r,) = smi.parse(text.rstrip("\n"))
    assert r.sm_max_mhz == 1980.0


def test_a_query_csv_with_only_names_checks_nothing(tmp_path):
    source, found = explain_one(
        tmp_path,
        "name, index, temperature.gpu\nNVIDIA H100 80GB HBM3, 0, 40\nNVIDIA H100 80GB HBM3, 1, 41\n",
        "smi.csv",
    )
    assert [h.id for h in found] == ["gpu-unchecked", "gpu-unchecked"]
    assert "not checked on GPU 0, 1: clocks" in source.partial


def test_query_csv_with_old_mac_line_ends():
    """Before: "unreadable nvidia-smi CSV (new-line character seen in unquoted field ...)"."""
    (r,) = smi.parse(REAL_CSV.read_text().replace("\n", "\r"))
    assert (r.sm_mhz, r.sm_max_mhz) == (345.0, 1980.0)


def test_a_tab_separated_rank_table_is_recognised(tmp_path):
    """Before: "not a format explain knows", though the rank parser reads TSV."""
    text = "rank\tstep\tstep_ms\n" + "".join(
        f"{r}\t{s}\t{100.0 + (r + s) % 3}\n" for s in range(20) for r in range(4)
    )
    source, found = explain_one(tmp_path, text, "ranks.tsv")
    assert (source.kind, source.detail, found[0].id) == (
        "rank-timings",
        "4 rank(s) x 20 step(s)",
        "step-time-steady",
    )


def test_a_step_only_one_rank_reported_is_named():
    """Before: step 1 (rank 1's value NaN) left out with only "1 row(s) with empty cells dropped"."""
    (f,) = timings.rank_hypotheses("rank,step,step_ms\n0,0,100\n1,0,101\n0,1,100\n1,1,NaN\n")
    assert "1 step(s) reported by fewer than 2 ranks left out" in f.summary


# -- scenario fields: a wrong value is a one-line error naming it --------------------------------------

SCEN = Path(__file__).parent / "data" / "explain" / "scenarios"


def _scenario(name: str, path: tuple, value) -> dict:
    data = json.loads((SCEN / name).read_text())
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


# before: each of these was a traceback ("internal error: TypeError ...", exit 1) or a silent diagnosis
@pytest.mark.parametrize(
    ("name", "path", "value", "needle"),
    [
        ("01_slow_gemm.json", ("kernel", "sm_busy_pct"), None, None),  # null: left out, no error
        (
            "01_slow_gemm.json",
            ("kernel", "sm_busy_pct"),
            "x",
            "'kernel.sm_busy_pct' must be a number, got 'x'",
        ),
        (
            "01_slow_gemm.json",
            ("kernel", "tensor_pipe_pct"),
            250,
            "'kernel.tensor_pipe_pct' must be a number from 0 up to 100",
        ),
        (
            "01_slow_gemm.json",
            ("kernel", "registers_per_thread"),
            -1,
            "'kernel.registers_per_thread' must be a number from 0",
        ),
        (
            "01_slow_gemm.json",
            ("kernel", "is_matrix"),
            "false",
            "'kernel.is_matrix' must be true or false",
        ),
        (
            "01_slow_gemm.json",
            ("achieved_tflops",),
            -180,
            "'achieved_tflops' must be a number above 0",
        ),
        (
            "02_mfu_collapse.json",
            ("mfu_before",),
            48,
            "'mfu_before' must be a number above 0 up to 1",
        ),
        ("02_mfu_collapse.json", ("gpus",), -1, "'gpus' must be a number from 1"),
        (
            "03_serving_collapse.json",
            ("load", 0, "qps"),
            None,
            "each 'load' point needs a positive 'qps' (point 0",
        ),
        (
            "03_serving_collapse.json",
            ("load", 1, "qps"),
            "x",
            "'load[1].qps' must be a number, got 'x'",
        ),
        (
            "03_serving_collapse.json",
            ("load", 0, "ttft_p50_ms"),
            "x",
            "'load[0].ttft_p50_ms' must be a number",
        ),
        ("03_serving_collapse.json", ("kv_bytes",), 0, "'kv_bytes' must be a number above 0"),
        (
            "03_serving_collapse.json",
            ("gpus",),
            1e300,
            "'gpus' must be a number from 1 up to 1e+07",
        ),
        ("03_serving_collapse.json", ("gpu",), "h900", "unknown gpu 'h900'; known:"),
        (
            "03_serving_collapse.json",
            ("weights_dtype",),
            "nvfp3",
            "'weights_dtype' 'nvfp3' is not one of",
        ),
        ("04_fp8_long_context.json", ("long_task", "seq"), "x", "'long_task.seq' must be a number"),
        ("04_fp8_long_context.json", ("long_task", "fp8"), True, "needs numbers 'fp8' and 'bf16'"),
        ("04_fp8_long_context.json", ("format",), "int8", "'format' 'int8' is not an FP8 format"),
        ("05_oom_tp4.json", ("works", "tp"), "x", "'works.tp' must be a number, got 'x'"),
        ("05_oom_tp4.json", ("fails", "dp"), 1.5, "'fails.dp' must be a whole number"),
        ("05_oom_tp4.json", ("gpu",), 7, "'gpu' must be a text (a name), got 7"),
        (
            "07_triton_autotune.json",
            ("configs", 0, "BLOCK_K"),
            "x",
            "'configs[0].BLOCK_K' must be a number",
        ),
        (
            "07_triton_autotune.json",
            ("fused",),
            1,
            "'fused' must be a list of the fused ops' names",
        ),
    ],
)
def test_wrong_scenario_fields_are_one_line_errors(tmp_path, name, path, value, needle):
    f = tmp_path / "s.json"
    f.write_text(json.dumps(_scenario(name, path, value)))
    if needle is None:
        assert explain_paths([f]).hypotheses
        return
    with pytest.raises(InputError) as err:
        explain_paths([f])
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_in_a_scenario_is_named_not_echoed(tmp_path, literal):
    """Before: NaN was accepted (JSON NaN in the output, an unparseable --json) or crashed later."""
    f = tmp_path / "s.json"
    f.write_text(
        '{"scenario": "serving", "model_params_b": 70, "gpus": 8, "load": [{"qps": 4, "tok_s_per_user": 180}, '
        f'{{"qps": {literal}, "tok_s_per_user": 22}}]}}'
    )
    out = gd("explain", str(f), "--json")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "'load[1].qps' is" in out.stderr and "give a finite number" in out.stderr


def test_infinite_ncu_values_are_missing_and_json_stays_strict(tmp_path):
    """Before: a metric value of "inf" went through as infinity: `--json` printed Infinity."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO((DATA / "ncu_kernels_details.csv").read_text())))
    vi = rows[0].index("Metric Value")
    rows = [rows[0]] + [
        r[:vi] + ["inf"] + r[vi + 1 :] if i % 3 == 0 else r for i, r in enumerate(rows[1:])
    ]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    path = tmp_path / "k.csv"
    path.write_text(buf.getvalue())
    out = gd("explain", str(path), "--json")
    assert out.returncode == 0, out.stderr
    assert "Infinity" not in out.stdout and "NaN" not in out.stdout
    json.loads(out.stdout, parse_constant=lambda c: pytest.fail(f"non-finite {c} in --json"))
