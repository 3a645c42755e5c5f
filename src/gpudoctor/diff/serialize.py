"""The Diff as JSON-ready data (schema: docs/diff.md, "JSON"). Lists are cut to the top entries
(``MAX_KERNELS``); counts say how many there were."""

from __future__ import annotations

import math
from typing import Any

from gpudoctor.diff.compare import MAX_KERNELS, Diff, FindingChange, Row, SideInfo, step_dict
from gpudoctor.diff.match import Group, KernelChange


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def _side(s: SideInfo) -> dict[str, Any]:
    return {"path": s.path, "trace": s.trace, "kind": s.kind, "gpu": s.gpu,
            "profiled_step_ms": _r(s.profiled_step_ms),
            "unprofiled_step_ms": _r(s.unprofiled_step_ms),
            "samples_ms": [_r(v) for v in s.samples], "notes": list(s.notes), "program": s.program}


def _row(r: Row) -> dict[str, Any]:
    return {"name": r.name, "before_ms": _r(r.before_ms), "after_ms": _r(r.after_ms),
            "delta_ms": _r(r.delta_ms)}


def _group(g: Group | None) -> dict[str, Any] | None:
    if g is None:
        return None
    return {"name": g.display, "kind": g.kind, "op": g.key.op, "shapes": g.key.shapes,
            "site": g.key.site,
            "calls_per_step": _r(g.calls_per_step, 3), "ms_per_step": _r(g.ms_per_step)}


def _kernel(k: KernelChange) -> dict[str, Any]:
    return {"name": k.name, "matched_by": k.level, "before": _group(k.before),
            "after": _group(k.after), "before_ms": _r(k.ms_before), "after_ms": _r(k.ms_after),
            "delta_ms": _r(k.delta_ms)}


def _finding(f: FindingChange) -> dict[str, Any]:
    return {"id": f.id, "title": f.title, "status": f.status,
            "saving_before_ms": _r(f.saving_before_ms), "saving_after_ms": _r(f.saving_after_ms),
            "predicted_speedup": _r(f.predicted_speedup),
            "measured_saving_ms": _r(f.measured_saving_ms),
            "measured_speedup": _r(f.measured_speedup), "ratio": _r(f.ratio, 3)}


def diff_to_dict(d: Diff) -> dict[str, Any]:
    step = {k: (_r(v) if isinstance(v, float) else list(v) if isinstance(v, tuple) else v)
            for k, v in step_dict(d.step).items()}
    matched = [k for k in d.kernels if k.before and k.after]
    return {
        "schema_version": d.schema_version,
        "verdict": d.verdict,
        "samples": {"kind": d.samples_kind, "before": d.step.n_before, "after": d.step.n_after},
        "step": step,
        "before": _side(d.before),
        "after": _side(d.after),
        "categories": [_row(r) for r in d.categories],
        "idle": [_row(r) for r in d.idle],
        "kernels": {
            "matched": len(matched),
            "appeared": sum(k.before is None for k in d.kernels),
            "disappeared": sum(k.after is None for k in d.kernels),
            "changed_most": [_kernel(k) for k in d.changed_kernels(MAX_KERNELS)],
            "appeared_top": [_kernel(k) for k in d.appeared(MAX_KERNELS)],
            "disappeared_top": [_kernel(k) for k in d.disappeared(MAX_KERNELS)],
        },
        "findings": {s: [_finding(f) for f in d.by_status(s)] for s in ("resolved", "new",
                                                                        "persisting")},
        "segments": {"before": [[label, _r(ms)] for label, ms in d.segments_before],
                     "after": [[label, _r(ms)] for label, ms in d.segments_after]},
        "warnings": list(d.warnings),
    }
