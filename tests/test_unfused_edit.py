"""unfused-elementwise's edit (rules/unfused_elementwise.py ``edit``): every chain's kernels at
their share of the chain's fused time, on the lab trap's recorded trace (H100: hand-written GELU,
LayerNorm, bias and dropout on 64k x 512 bf16 activations; its fixed twin, the built-in fused
operators, measured x2.71). Derived from the finding's five named kernels alone, the edit held 168
of the 321 chained kernels (8.69 of 13.12 ms a step) and zeroed them: x2.21."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpudoctor.analysis import analyze_trace
from gpudoctor.analysis.host_events import ran_backward
from gpudoctor.hardware.ceilings import for_gpu_name
from gpudoctor.pipeline import analyze_path
from gpudoctor.rules import unfused_elementwise as rule
from gpudoctor.trace import load

DATA = Path(__file__).parent / "data"


def test_every_chain_is_retimed_to_its_fused_time() -> None:
    trace = load(DATA / "unfused_elementwise")
    a = analyze_trace(trace, for_gpu_name("h100-sxm"))
    edit = rule.edit(a)
    assert edit is not None
    runs = rule.chains(a)
    assert sum(r.size for r in runs) == edit.device.size == 321
    t, dur = a.roofline.event_in_steps_ns, trace.device.dur
    floor, training = rule.kernel_floor_ns(a), ran_backward(trace)
    after = dict(zip(edit.device.tolist(), edit.device_ns.tolist()))
    for r in runs:
        fused = rule.fused_ns(a, r, t, floor, training)
        ran = float(t[r].sum())
        assert 0 < fused <= ran
        edited = sum(after[i] for i in r.tolist())
        assert edited == pytest.approx(float(dur[r].sum()) * fused / ran, rel=1e-9)
    assert np.all(edit.device_ns > 0)


def test_the_lab_trap_is_priced_by_its_own_edit() -> None:
    f = analyze_path(DATA / "unfused_elementwise").finding("unfused-elementwise")
    assert f.evidence.numbers["priced_by"] == "replay"
    assert f.saving_ms == pytest.approx(10.9993, abs=1e-3)
    assert f.predicted_speedup == pytest.approx(3.2449, abs=1e-3)
