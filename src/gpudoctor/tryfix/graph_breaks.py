"""Where TorchDynamo broke a compile trial's graph, read from the trial's output.log.

A compile knob that measures little has most often been cut short by graph breaks: the operators
after a break Dynamo cannot resume from run eagerly, and a break in a nested call leaves that call
eager (benchmarks/BENCHMARKS-replay.md "Knob trials, set f"). The compile trials run with ``TORCH_LOGS=graph_breaks``
(tryfix/knobs.py ``GRAPH_BREAK_LOGS``), which logs each break's place and reason; a ``.item()``
break is also warned about by default. The trial's reason names the places, so the user sees why
the knob did less than its price.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpudoctor.plan.limits import plural

# "[__graph_breaks] Graph break in user code at /path/file.py:50", also "Graph break (user stack
# suppressed due to duplicate graph break) in user code at ..."
_AT = re.compile(r"Graph break(?: \([^)]*\))? in user code at (?P<where>\S+?):(?P<line>\d+)\s*$")
_REASON = re.compile(r"Graph Break Reason: (?P<reason>.+?)\s*$")
# the default warning: "Graph break from `Tensor.item()`, consider setting:" ... "Graph break:
# from user code at:" and the traceback's frames, innermost last
_FROM = re.compile(r"Graph break from `(?P<what>[^`]+)`")
_FRAME = re.compile(r'File "(?P<where>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')
_CANNOT_RESUME = "cannot resume"
MAX_NAMED = 3


@dataclass(frozen=True)
class GraphBreak:
    where: str  # "torch/nn/modules/transformer.py:1252"
    reason: str  # the first clause of Dynamo's reason, "" when it gave none

    @property
    def skips_the_rest(self) -> bool:
        return _CANNOT_RESUME in self.reason


def graph_breaks(log: str, own: str = "") -> list[GraphBreak]:
    """The distinct places (first reason kept) where a trial's log says Dynamo broke the graph;
    none in files under ``own`` (gpudoctor's folder: its global module hooks, traced when a
    program compiles its own model, break the graph in the first iteration only, before they are
    removed)."""
    found: dict[str, str] = {}
    lines = log.splitlines()
    for i, line in enumerate(lines):
        at = _AT.search(line)
        if at:
            path, number = at["where"], at["line"]
            reason = _first_clause(
                next((m["reason"] for m in map(_REASON.search, lines[i + 1:i + 4]) if m), ""))
        elif warned := _FROM.search(line):
            frames = [m for m in map(_FRAME.search, lines[i + 1:i + 80]) if m]
            if not frames:
                continue
            path, number, reason = frames[-1]["where"], frames[-1]["line"], warned["what"]
        else:
            continue
        if not (own and path.startswith(own)):
            found.setdefault(_short(path, number), reason)
    return [GraphBreak(w, r) for w, r in found.items()]


def summary(breaks: list[GraphBreak]) -> str:
    """One line for the trial's reason ("" without breaks)."""
    if not breaks:
        return ""
    named = "; ".join(
        f"{b.where}" + (f" ({b.reason})" if b.reason else "")
        + (", the rest of that function ran eagerly" if b.skips_the_rest else "")
        for b in breaks[:MAX_NAMED])
    more = f"; {len(breaks) - MAX_NAMED} more" if len(breaks) > MAX_NAMED else ""
    return f"TorchDynamo broke the graph at {plural(len(breaks), 'place')} (output.log): {named}{more}"


def _short(path: str, line: str) -> str:
    """A library file from its package on (site-packages/ left out), any other as written."""
    _, sep, tail = path.rpartition("site-packages/")
    return f"{tail if sep else path}:{line}"


def _first_clause(reason: str) -> str:
    """Dynamo's reason up to its first full stop or colon, which open its details."""
    cut = re.split(r"[.:](?:\s|$)", reason, maxsplit=1)[0].strip()
    return cut[0].lower() + cut[1:] if cut[:1].isupper() and not cut[1:2].isupper() else cut


__all__ = ["GraphBreak", "graph_breaks", "summary"]
