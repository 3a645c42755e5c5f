"""A rich Console that never prints a control character taken from a trace
(gpudoctor/controls.py)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

from gpudoctor.controls import CONTROLS, visible_controls


class SafeConsole(Console):
    """A rich Console whose printed text never carries a control character of its own: rich's
    styles and cursor moves still reach the terminal (they are separate control segments)."""

    def render(self, renderable: RenderableType,
               options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None and CONTROLS.search(segment.text):
                yield Segment(visible_controls(segment.text), segment.style)
            else:
                yield segment
