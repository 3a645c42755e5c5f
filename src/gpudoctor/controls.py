"""Text from a trace reaches a terminal or a page with its control characters made visible.

A kernel, op or GPU name, a source line or a path is whatever the file says: ``ESC ] 0 ; pwned BEL``
in a kernel name would retitle the terminal, and other sequences recolour, move the cursor or
rewrite what was printed before. rich escapes its own markup, not control characters, so every C0
control but tab and newline, DEL and every C1 control is replaced by a printable stand-in: the
Unicode control picture of a C0 one (ESC -> ␛, BEL -> ␇), ␡ for DEL, and U+FFFD for a C1 one. A lone
surrogate cannot be written as UTF-8 at all: a file name's undecodable byte (Python's
surrogateescape, ``tr\\xe9ce.json.gz`` in a UTF-8 locale) is shown as ``\\xe9``, any other as
``\\udXXX``. The loader applies it to every name it keeps (trace/load.py), the console to every line
it prints (report/safe.py), the HTML page to every string it escapes (report/escape.py ``esc``).
"""

from __future__ import annotations

import re

CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
SURROGATES = re.compile("[\ud800-\udfff]")


def _surrogate(code: int) -> str:
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def _picture(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code >= 0xD800:
        return _surrogate(code)
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures block: U+241B ␛ for ESC
    return "\u2421" if code == 0x7F else "\ufffd"


def visible_controls(text: str) -> str:
    """``text`` with every control character but tab and newline, and every lone surrogate, replaced
    by a printable stand-in."""
    return CONTROLS.sub(_picture, text) if CONTROLS.search(text) else text


def encodable(text: str) -> str:
    """``text`` with only its lone surrogates replaced (``\\xe9``): what a UTF-8 file can hold."""
    return SURROGATES.sub(lambda m: _surrogate(ord(m.group())), text) if SURROGATES.search(text) else text
