"""Numbers read from files a person or another tool wrote (env.json, trial records): a value is a
number only where a float holds it. JSON has integers of any length (``float(10**400)`` raises
OverflowError) and Python's reader takes ``Infinity`` and ``NaN``; ``true`` is an ``int`` to
``isinstance``."""

from __future__ import annotations

import math
from typing import Any


def finite_float(value: Any) -> float | None:
    """``value`` as a finite float; None where it is not a number (a bool is not), or no float
    holds it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
