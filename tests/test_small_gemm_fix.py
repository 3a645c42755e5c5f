"""small-gemm's "more rows" fix written from the program (rules/small_gemm.py ``_more_rows_fix``):
the rows the trace recorded, the DataLoader's own batch where ``gpudoctor run`` read it, a
placeholder where a bare trace does not say, and no DataLoader line for a program with none."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.pipeline import analyze_path

DATA = Path(__file__).parent / "data"


def _more_rows(bundle: Path) -> str:
    finding = next(f for f in analyze_path(bundle).findings if f.id == "small-gemm")
    return next(f.code for f in finding.fixes if f.title.startswith("Give each matmul more rows"))


@pytest.mark.parametrize(("bundle", "code"), [
    # batches sliced by hand: no DataLoader to change
    ("knobs_h100/karpathy_gpt_lecture",
     ("# each small matmul multiplies 64 rows now (median, from the recorded shapes)\n"
      "batch_size = 8 * B   # B: the batch the step takes now; 512 rows a matmul")),
    # a DataLoader whose settings the capture read (batch 64)
    ("knobs_h100/examples_siamese",
     ("# each small matmul multiplies 64 rows now (median, from the recorded shapes)\n"
      "loader = DataLoader(ds, batch_size=512)   # was batch_size=64; 512 rows a matmul")),
    # a DataLoader in a trace that does not say its batch
    ("gallery_h100/accelerate_loop",
     ("# each small matmul multiplies 82 rows now (median, from the recorded shapes)\n"
      "loader = DataLoader(ds, batch_size=8 * B)   # B: the batch size now; 656 rows a matmul")),
])
def test_the_more_rows_fix_is_written_from_the_program(bundle: str, code: str) -> None:
    assert _more_rows(DATA / bundle) == code
