"""reduce-overhead's CUDA graphs leave out a forward graph that holds operators on CPU tensors
(rules/knob_prices.py ``_graphs_skipped``): cudagraph trees skip a graph with a CPU device in it,
and TorchDynamo cuts the forward into graphs where the module reads a GPU value."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpudoctor.analysis.compiled_region import compiled_region, traced_by_dynamo
from gpudoctor.pipeline import _run_model, knob_prices_for
from gpudoctor.rules.knob_prices import _graphs_skipped

BUNDLE = Path(__file__).parent / "data" / "knobs_h100" / "fabric_language_model"


def test_the_forward_graph_that_builds_a_mask_on_the_cpu_is_left_out_of_the_graphs() -> None:
    """Lightning Fabric's language-model example (recorded on a lent H100 under ``run --fixes``):
    each forward builds its causal mask with ``torch.triu`` on the CPU and moves it over, then
    nn.Transformer's decoder reads ``bool((mask == causal).all())``, where TorchDynamo breaks the
    graph. The graph before the read (the mask, the embeddings and the encoder: 49 kernels a step)
    holds the CPU operators and stays out of the CUDA graphs; the decoder's graph and the
    backward are captured. Priced x2.11 (x3.06 with everything captured, x2.27 paced); measured x0.74 in that
    run, whose controls drifted 34% apart, and x0.98 and x1.31 in two others."""
    a, _ = _run_model(BUNDLE)
    region = traced_by_dynamo(a.trace, compiled_region(a.trace))
    skipped = _graphs_skipped(a, region)
    host, dev = a.trace.host, a.trace.device
    names = {a.trace.strings[i] for i in np.unique(host.name[skipped & (host.top_op < 0)])}
    assert {"aten::triu", "aten::masked_fill", "aten::embedding"} <= names
    assert "aten::scaled_dot_product_attention" in names  # the encoder's
    launched = dev.launch >= 0
    assert int(skipped[dev.launch[launched]].sum()) == 250  # 50 a step, 5 steps (the mask's `full`
    # and `ones`, no-grad operators inside the forward, joined the region: 49 before)
    price = knob_prices_for(BUNDLE)["compile-reduce-overhead"]
    assert price["predicted_speedup"] == pytest.approx(2.1055, abs=1e-3)
    assert "50 kernels a step left out of the graphs" in price["note"]
    trials = json.loads((BUNDLE / "trials.json").read_text())["trials"]
    measured = next(t["measured_speedup"] for t in trials if t["knob"] == "compile-reduce-overhead")
    assert measured < price["predicted_speedup"]  # still above what it measured


def test_a_forward_without_cpu_work_is_captured_whole() -> None:
    """pytorch/examples' siamese ResNet: no operator on a CPU tensor in its forward, nothing left
    out."""
    a, _ = _run_model(BUNDLE.parent / "examples_siamese")
    region = traced_by_dynamo(a.trace, compiled_region(a.trace))
    assert not _graphs_skipped(a, region).any()
