"""pageable-copy's fixes written from the program (rules/pageable_copy.py ``_fixes``): a program
whose batches come from no DataLoader is told to stage them through a pinned buffer of its own
batch's shape and dtype; a DataLoader's fix carries its own batch size and workers where
``gpudoctor run`` read them, and the placeholders where a bare trace does not say."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpudoctor.core.loader import LoaderSettings
from gpudoctor.pipeline import analyze_path
from gpudoctor.rules.pageable_copy import _fixes

DATA = Path(__file__).parent / "data"


def _fix_codes(bundle: Path) -> list[tuple[str, str]]:
    finding = next(f for f in analyze_path(bundle).findings if f.id == "pageable-copy")
    return [(f.title, f.code) for f in finding.fixes]


def test_batches_sliced_by_hand_are_staged_through_a_pinned_buffer_of_their_shape() -> None:
    # the lecture's GPT slices 64 rows of 256 token ids (int64) and copies them each step
    fixes = _fix_codes(DATA / "knobs_h100" / "karpathy_gpt_lecture")
    assert [t for t, _ in fixes] == ["Reuse one pinned staging buffer for repeated transfers",
                                     "Keep data resident on the GPU when it fits"]
    assert fixes[0][1].startswith(
        "buf = torch.empty((64, 256), dtype=torch.int64, pin_memory=True)")
    assert "DataLoader" not in "".join(code for _, code in fixes)


def test_a_dataloaders_pin_fix_carries_its_own_settings() -> None:
    fixes = _fix_codes(DATA / "knobs_h100" / "fabric_image_classifier")
    assert fixes[0][1] == (
        "# no workers: the loop's own thread pins each batch (workers would pin beside it)\n"
        "loader = DataLoader(ds, batch_size=64, num_workers=0, pin_memory=True)   "
        "# was pin_memory=False\n"
        "x = x.to('cuda', non_blocking=True)")
    # a bare trace (no settings read): the snippet names what it does not know
    bare = _fix_codes(DATA / "input_pipeline")
    assert bare[0][1].startswith("loader = DataLoader(ds, ..., pin_memory=True)")


def test_every_variant_of_the_fixes_is_python() -> None:
    settings = (None, LoaderSettings(num_workers=4, pin_memory=False, batch_size=32),
                LoaderSettings(num_workers=0, pin_memory=False))
    uploads = (None, ((8, 3, 224, 224), "c10::Half"), ((7,), "an unknown type"))
    for downloads in (True, False):
        for loader in (True, False):
            for upload in uploads:
                for s in settings:
                    fixes = _fixes(downloads, loader, upload, s)
                    assert fixes and len({f.title for f in fixes}) == len(fixes)
                    for f in fixes:
                        ast.parse(f.code.replace("...", "None"))
                    if downloads:
                        assert fixes[0].title.startswith("Download into one pinned buffer")
                    if not loader:
                        assert all("DataLoader" not in f.code for f in fixes)


def test_the_pin_memory_knob_keeps_the_copies_blocking_and_pins_on_the_loops_thread() -> None:
    # Fabric's image classifier (H100): a DataLoader with no workers, 0.2 MB uploaded a step from
    # pageable memory. The knob pins the batches but leaves `.to()` blocking, and the loop's thread
    # pins them: priced under the finding's fix (pinned and non_blocking)
    from gpudoctor.capture.bundle import read_run
    from gpudoctor.pipeline import analyze_trace, choose_ceilings, knob_prices_for
    from gpudoctor.rules.pageable_copy import pin_memory_edit
    from gpudoctor.trace.load import load

    bundle = DATA / "knobs_h100" / "fabric_image_classifier"
    knob = knob_prices_for(bundle)["pin-memory"]
    finding = next(f for f in analyze_path(bundle).findings if f.id == "pageable-copy")
    assert knob["predicted_speedup"] == 1.0064 and knob["predicted_speedup"] < finding.predicted_speedup
    assert knob["note"] == "batches pinned by the DataLoader, copied blocking, pinned on the loop's thread"
    # the lab's input-pipeline trap: the same knob, the same order
    lab = knob_prices_for(DATA / "input_pipeline")["pin-memory"]["predicted_speedup"]
    assert lab == 1.0089
    # no DataLoader (the lecture's GPT slices its batches by hand): nothing for the knob to change
    assert "pin-memory" not in knob_prices_for(DATA / "knobs_h100" / "karpathy_gpt_lecture")
    # with workers, they pin: no host time is added on the loop's thread
    run, trace = read_run(bundle), load(bundle)
    a = analyze_trace(trace, choose_ceilings(trace), run.unprofiled_step_ms,
                      loader=LoaderSettings(num_workers=4, pin_memory=False, batch_size=64))
    workers = pin_memory_edit(a)
    assert workers is not None and not workers.calls_slower_ns.any()
    assert workers.note == "batches pinned by the DataLoader, copied blocking"
    alone = pin_memory_edit(analyze_trace(trace, choose_ceilings(trace), run.unprofiled_step_ms,
                                          loader=run.loader))
    # each copy's call pays for pinning its bytes at 32 GB/s: 64 x 784 fp32 pixels, 6.3 us
    assert alone is not None and alone.calls_slower.size == workers.calls_slower.size
    assert alone.calls_slower_ns.max() == pytest.approx(64 * 784 * 4 / 32e9 * 1e9, rel=0.01)
