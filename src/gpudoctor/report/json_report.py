"""The versioned JSON report (schema: docs/report-schema.md)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from gpudoctor.controls import encodable
from gpudoctor.report.model import Report


def _default(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _finite(value: Any) -> Any:
    """NaN and infinities are not JSON: they become null. Nor is a lone surrogate (a file name's
    undecodable byte) valid UTF-8 JSON: it becomes ``\\xNN`` (gpudoctor/controls.py)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, dict):
        return {encodable(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def to_json(report: Report, indent: int | None = 2) -> str:
    data = json.loads(json.dumps(report.to_dict(), default=_default))
    return json.dumps(_finite(data), indent=indent, allow_nan=False)
