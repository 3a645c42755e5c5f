"""The compile and autocast fixes name the module class the steps called, where a live capture saw it
(env.json ``capture.root_module`` -> Analysis.root_module -> rules/common.py ``compile_line``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.capture.bundle import facts_of
from gpudoctor.pipeline import analyze_path

DATA = Path(__file__).parent / "data"


def test_the_compile_fixes_name_the_programs_module() -> None:
    findings = {f.id: f for f in analyze_path(DATA / "knobs_h100" / "karpathy_gpt_lecture").findings}
    graphs = findings["launch-bound"].fixes[0].code.splitlines()[0]
    assert graphs == ("model = torch.compile(model, mode='reduce-overhead')   "
                      "# model: your GPTLanguageModel")
    assert findings["unfused-elementwise"].fixes[0].code == (
        "model = torch.compile(model)   # model: your GPTLanguageModel")
    autocast = findings["fp32-matmul"].fixes
    assert any("    loss = model(x)   # model: your GPTLanguageModel\n" in f.code for f in autocast)
    # a bare trace does not say which module: the snippet stays generic
    bare = {f.id: f for f in analyze_path(DATA / "launch_bound" / "trace.json.gz").findings}
    assert bare["launch-bound"].fixes[0].code.splitlines()[0] == (
        "model = torch.compile(model, mode='reduce-overhead')")


@pytest.mark.parametrize(("value", "read"), [
    ("GPTLanguageModel", "GPTLanguageModel"), ("Outer.Inner", "Outer.Inner"),
    ("", ""), (None, ""), (3, ""), ("os.system('x')", ""), ("a b", ""), ("x" * 201, ""),
    (["GPT"], ""),
])
def test_the_module_name_is_read_only_as_a_class_name(value: object, read: str) -> None:
    assert facts_of({"capture": {"root_module": value}}).root_module == read
