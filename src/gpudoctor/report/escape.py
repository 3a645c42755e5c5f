"""The one escape for HTML: every renderer's page (report, diff, bench, the fixes tried) passes
each string from outside (trace names, paths, messages) through ``esc`` before it joins the
markup."""

from __future__ import annotations

from html import escape
from typing import Any

from gpudoctor.controls import visible_controls


def esc(value: Any) -> str:
    """Escape anything (trace strings above all) for HTML text and attribute values; a control
    character (no HTML page may hold one, gpudoctor/controls.py) becomes a printable stand-in."""
    return escape(visible_controls(str(value)), quote=True)
