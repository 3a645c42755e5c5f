"""Step marks and the times between them.

A mark is what the session stamps at a step boundary outside the window: a CUDA event once the
program uses the GPU (recorded, never synchronized), a host clock reading (seconds, a float) before
that, or ``None`` where the series is cut (a step that compiled, a wait that is no step). This
module turns marks into milliseconds: all of a series once the GPU is synchronized
(``intervals_ms``), or while the program runs only those the GPU has reached
(``FinishedIntervals``), and per-token times of ``generate()`` calls (``token_times``).
"""

from __future__ import annotations

import itertools
import statistics
import sys
from typing import Any


def _timed_pairs(marks: list[Any]) -> list[int]:
    """The positions ``i`` whose marks ``i - 1`` and ``i`` time a step: a None mark cuts the series
    (a wait, not a step), and so does the switch from host clock stamps to CUDA events when the
    program starts CUDA."""
    return [i for i, (a, b) in enumerate(itertools.pairwise(marks), 1)
            if a is not None and b is not None and isinstance(a, float) == isinstance(b, float)]


def intervals_ms(marks: list[Any]) -> list[float]:
    """Times between consecutive marks (ms), where they time a step (``_timed_pairs``)."""
    return [(marks[i] - marks[i - 1]) * 1e3 if isinstance(marks[i], float)
            else marks[i - 1].elapsed_time(marks[i]) for i in _timed_pairs(marks)]


def interval_steps(marks: list[Any], steps: list[int | None]) -> list[int]:
    """The step each of ``intervals_ms(marks)`` times: the boundary count at its closing mark
    (``steps`` holds one count per mark). A trial compares its steps with a control's by these
    indices (tryfix/trial.py ``same_steps``). Empty (not known) where the counts do not pair
    with the marks."""
    if len(steps) != len(marks):
        return []
    return [int(steps[i]) if steps[i] is not None else -1 for i in _timed_pairs(marks)]


def leads_ms(marks: list[Any], host_at: dict[int, float], reference: Any,
             reference_host_s: float) -> list[float]:
    """How long after the host stamped each timed step's closing mark the GPU reached it (ms), in
    ``intervals_ms(marks)``'s order; empty unless every one is a CUDA event whose host clock
    reading ``host_at`` holds (by ``id``).

    ``reference`` is an event recorded on a GPU with nothing queued, at ``reference_host_s`` on the
    same clock: the GPU reached it a launch's latency later, which puts the events' times on the
    host's clock. A lead near that latency is a GPU that waited for the host; a longer one, a host
    that ran ahead of the GPU's work by that much, whose own time the step does not show."""
    closing = [marks[i] for i in _timed_pairs(marks)]
    if not closing or any(isinstance(m, float) or id(m) not in host_at for m in closing):
        return []
    return [(reference_host_s - host_at[id(m)]) * 1e3 - m.elapsed_time(reference)
            for m in closing]


class FinishedIntervals:
    """The intervals of one series of marks up to the last mark the GPU has reached (host stamps:
    all), kept as they come: each is read once (one event query a step, no list rebuilt).

    ``read`` returns one list that grows in place while the series is the same list of marks; a
    new series (a new epoch, a served backlog) starts a new list.
    """

    def __init__(self) -> None:
        self._marks: list[Any] | None = None
        self._read = 1  # marks read so far (the first one starts the first interval)
        self._intervals: list[float] = []
        self.steps: list[int] = []  # each interval's step (interval_steps), where steps are given
        self._steps_known = True  # every read of this series had the counts (else steps stay [])

    def read(self, marks: list[Any], steps: list[int | None] | None = None) -> list[float]:
        if marks is not self._marks:
            self._marks, self._read, self._intervals = marks, 1, []
            self.steps, self._steps_known = [], True
        end = len(marks)
        # back to the last mark the GPU has reached (a cut, None, tells nothing)
        while end > self._read:
            mark = marks[end - 1]
            if mark is not None and (isinstance(mark, float) or mark.query()):
                break
            end -= 1
        if end > self._read:
            self._intervals.extend(intervals_ms(marks[self._read - 1:end]))
            # one read without the counts and the series' steps are not known from there on
            self._steps_known &= steps is not None and len(steps) == len(marks)
            if self._steps_known and steps is not None:
                self.steps.extend(interval_steps(marks[self._read - 1:end],
                                                 steps[self._read - 1:end]))
            else:
                self.steps.clear()
            self._read = end
        return self._intervals


class CompileWatch:
    """Did torch.compile compile anything (a first compile, a recompile, a lazy backward) since the
    last ``changed()``? Read from dynamo's own compile-time records, only where the program has
    imported dynamo. A compiling step is no step as the program runs: timed with the rest, it made
    two invocations of one compile trial disagree by 15x (benchmarks/BENCHMARKS-capture.md "Evidence
    moved from the source: capture")."""

    def __init__(self) -> None:
        self._records = 0  # compile-time records seen at the last call

    def changed(self) -> bool:
        utils = sys.modules.get("torch._dynamo.utils")
        metrics = getattr(utils, "compilation_time_metrics", None)
        if not isinstance(metrics, dict):
            return False
        count = sum(len(v) for v in metrics.values() if isinstance(v, list))
        changed = count != self._records
        self._records = count
        return changed


def token_times(calls: list[list[Any]]) -> dict[str, Any]:
    """Prefill and per-token decode time of the generate() calls timed outside the window: each
    call's marks are its start, one per forward, its end and a closing None."""
    closed = [c[:-1] for c in calls if len(c) >= 4 and c[-1] is None]  # start, fwd, fwd..., end
    if not closed:
        return {}
    prefill, decode, tokens, total = [], [], [], []
    for marks in closed:
        gaps = intervals_ms(marks)  # start->fwd1, fwd1->fwd2, ..., fwdN->end
        total.append(sum(gaps))
        tokens.append(len(marks) - 2)
        if len(gaps) >= 3:
            prefill.append(gaps[0] + gaps[1])
            decode.extend(gaps[2:])
    out: dict[str, Any] = {"calls_timed": len(closed),
                           "forwards_per_call": statistics.median(tokens),
                           "call_ms": round(statistics.median(total), 4)}
    if prefill:
        out["prefill_ms"] = round(statistics.median(prefill), 4)
    if decode:
        out["decode_ms_per_token"] = round(statistics.median(decode), 4)
    return out
