"""Text from a trace reaches a terminal or a page with its control characters made visible.

A kernel, op or GPU name, a source line or a path is whatever the file says: ``ESC ] 0 ; pwned BEL``
in a kernel name would retitle the terminal, and other sequences recolour, move the cursor or
rewrite what was printed before. rich escapes its own markup, not control characters, so every
C0 control but tab and newline, DEL and every C1 control is replaced by a printable stand-in: the
Unicode control picture of a C0 one (ESC -> ␛, BEL -> ␇), ␡ for DEL, and U+FFFD for a C1 one.
The loader applies it to every name it keeps (trace/load.py), the console to every line it prints
(report/safe.py), the HTML page to every string it escapes (report/svg.py ``esc``).
"""

from __future__ import annotations

import re

CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _picture(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures block: U+241B ␛ for ESC
    return "\u2421" if code == 0x7F else "\ufffd"


def visible_controls(text: str) -> str:
    """``text`` with every control character but tab and newline replaced by a printable stand-in."""
    return CONTROLS.sub(_picture, text) if CONTROLS.search(text) else text
