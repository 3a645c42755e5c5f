"""tryfix/graph_breaks.py: where TorchDynamo broke a compile trial's graph, from the trial's
output.log, on logs of real compile trials (one lent H200, torch 2.11, 2026-12-04;
benchmarks/BENCHMARKS-replay.md "Knob trials, set f")."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.tryfix.graph_breaks import GraphBreak, graph_breaks, summary

LOGS = Path(__file__).parent / "data" / "graph_breaks"


def test_the_default_item_warning_names_the_innermost_frame() -> None:
    """Lightning's Fabric language model under reduce-overhead (no TORCH_LOGS: the warning torch
    prints by default): nn.Transformer's causal-mask check calls ``.item()``."""
    breaks = graph_breaks((LOGS / "fabric_item_output.log").read_text())
    assert breaks == [GraphBreak("torch/nn/modules/transformer.py:1252", "Tensor.item()")]
    assert summary(breaks) == (
        "TorchDynamo broke the graph at 1 place (output.log): "
        "torch/nn/modules/transformer.py:1252 (Tensor.item())"
    )


def test_a_break_dynamo_cannot_resume_from_says_the_rest_ran_eagerly() -> None:
    """pytorch/examples' word-level language model under reduce-overhead with
    TORCH_LOGS=graph_breaks: the nn.LSTM breaks the graph three times (the first compile, a
    recompile for the last short batch, one for eval's grad mode), one place. The lines are the
    trial's own, gathered from its log by grep."""
    breaks = graph_breaks((LOGS / "word_lm_output_excerpt.log").read_text())
    assert breaks == [
        GraphBreak(
            "/work/main/.gallery-public/examples-word-lm/model.py:50",
            "encountered graph break that we cannot resume from",
        )
    ]
    assert breaks[0].skips_the_rest
    assert summary(breaks).endswith("cannot resume from), the rest of that function ran eagerly")


def test_no_break_no_words_and_many_are_counted() -> None:
    assert graph_breaks("") == []
    assert summary([]) == ""
    many = [GraphBreak(f"m.py:{i}", "") for i in range(5)]
    assert summary(many) == (
        "TorchDynamo broke the graph at 5 places (output.log): m.py:0; m.py:1; m.py:2; 2 more"
    )
    # a log line cut short, or binary noise, is read past
    assert graph_breaks("Graph break in user code at \n\x00Graph Break Reason:") == []


def test_breaks_in_gpudoctors_own_files_are_not_the_programs() -> None:
    """A program that compiles its own model traces the knob's global module hook in its first
    iteration (``threading.get_ident``): that break is gpudoctor's, not the program's."""
    log = (
        "[__graph_breaks] Graph break in user code at /site/gpudoctor/tryfix/knobs.py:215\n"
        "[__graph_breaks] Graph Break Reason: Encountered graph break when attempting to trace "
        "CALL_FUNCTION_EX: a variadic function call, e.g. f(*args):\n"
        "[__graph_breaks] Graph break in user code at /home/me/train.py:12\n"
        "[__graph_breaks] Graph Break Reason: Data-dependent branching\n"
    )
    assert graph_breaks(log, own="/site/gpudoctor") == [
        GraphBreak("/home/me/train.py:12", "data-dependent branching")
    ]
    assert len(graph_breaks(log)) == 2
