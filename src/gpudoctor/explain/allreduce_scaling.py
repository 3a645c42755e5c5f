"""All-reduce time vs GPU count
(``gpus,allreduce_ms[,bytes][,algo][,gpu][,fabric][,gpus_per_node]``) -> the count where the
measurement leaves the expected curve (all-reduce scaling across nodes).

The expected curve: when the table (or the scenario) names the machine, ``plan.collective_cost``'
model of it (``explain.interconnect``); else the ring model t = a + b x 2(N-1)/N fitted on the
smaller counts, with a hop-latency fit to tell a cliff from a ring growing long.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import msgspec
import numpy as np

from gpudoctor.core.arrays import median
from gpudoctor.core.finding import Finding, make_hypothesis
from gpudoctor.errors import InputError
from gpudoctor.explain.interconnect import (
    CROSS_NODE_FIXES,
    CROSS_NODE_WRONG,
    Hardware,
    plan_scaling,
)
from gpudoctor.explain.tables import (
    CLIFF,
    COLL_EXPECTED,
    MAX_BYTES,
    MAX_COUNT,
    MS_RANGE,
    cell_at,
    find_column,
    parse_number,
    read_table,
    whole_number,
)

FITTED = "ring model fitted on this table (no gpu, fabric or gpus_per_node given)"
_HARDWARE_COLUMNS = {"gpu": ("gpu", "gpu_name", "gpu_model"),
                     "fabric": ("fabric", "interconnect", "network"),
                     "gpus_per_node": ("gpus_per_node", "gpus_per_host", "local_world_size")}

# -- collective time vs GPU count
# ------------------------------------------------------------------------


def collective_hypotheses(text: str, *, gpu: str | None = None, fabric: str | None = None,
                          gpus_per_node: Any = None, nbytes: Any = None, algo: str | None = None,
                          notes: tuple[str, ...] = ()) -> list[Finding]:
    """Findings for one table; the keywords (a scenario's fields) fill in what its columns do not
    say: ``gpu``, ``fabric`` and ``gpus_per_node`` name the machine, ``nbytes`` the message per
    rank, ``algo`` the algorithm of rows without one; ``notes``: what the caller knows is missing (a
    cut line)."""
    what = "collective timings"
    header, rows = read_table(text, what, COLL_EXPECTED)
    gi = find_column(header, ("gpus", "n_gpus", "world_size", "nranks", "ranks"), what,
                     COLL_EXPECTED)
    ti = next((i for i, h in enumerate(header) if "allreduce" in h or "all_reduce" in h
               or "all-reduce" in h), None)
    if ti is None:
        ti = next((i for i, h in enumerate(header) if h in ("time_ms", "ms")
                   or h.endswith("_ms")), None)
    if ti is None:
        raise InputError(
            f"{what}: no all-reduce time column (allreduce_ms) in the header; expected "
            f"{COLL_EXPECTED}")
    bi = find_column(header, ("bytes", "size_bytes", "message_bytes", "size"), what, COLL_EXPECTED,
                     required=False)
    ai = find_column(header, ("algo", "algorithm"), what, COLL_EXPECTED, required=False)
    hw = _hardware(header, rows, {"gpu": gpu, "fabric": fabric, "gpus_per_node": gpus_per_node})
    default_size = None if nbytes is None else _message_bytes(nbytes)
    groups: dict[str, dict[int, list[tuple[float, float | None]]]] = {}
    dropped = 0
    for n, cells in rows:
        gpus = parse_number(cell_at(cells, gi), "gpus", n, COLL_EXPECTED)
        ms = parse_number(cell_at(cells, ti), header[ti], n, COLL_EXPECTED)
        size = parse_number(cell_at(cells, bi), "bytes", n, COLL_EXPECTED) if bi is not None else None
        if gpus is None or ms is None:
            dropped += 1
            continue
        if (not 2 <= gpus <= MAX_COUNT or gpus != int(gpus) or not MS_RANGE[0] <= ms <= MS_RANGE[1]
                or (size is not None and not 1 <= size <= MAX_BYTES)):
            raise InputError(f"line {n}: gpus must be a whole number >= 2, times in ms between "
                             f"{MS_RANGE[0]:g} and {MS_RANGE[1]:g}, bytes between 1 and "
                             f"{MAX_BYTES:g}; expected {COLL_EXPECTED}")
        if hw.named and gpus > hw.k and gpus % hw.k:
            low = int(gpus) // hw.k * hw.k
            raise InputError(f"line {n}: {int(gpus)} GPUs is not a whole number of {hw.k}-GPU "
                             f"nodes: the rows should be {low} or {low + hw.k} GPUs, or "
                             f"gpus_per_node is not {hw.k}")
        key = (cell_at(cells, ai) or algo or "").strip().lower()
        groups.setdefault(key,
                          {}).setdefault(int(gpus), []).append(
                              (ms, size if size is not None else default_size))
    least = 2 if hw.named else 3
    usable = {a: g for a, g in groups.items() if len(g) >= least}
    if not usable:
        counts = sorted({n for g in groups.values() for n in g})
        need = ("the interconnect model needs at least 2 (e.g. 8,16)" if hw.named else
                "the ring model needs at least 3 (e.g. 64,128,256,512)")
        raise InputError(
            f"{what}: {len(counts)} GPU count(s) {counts[:6]}; {need}; expected {COLL_EXPECTED}")
    said = list(notes) + ([f"{dropped} row(s) with empty or NaN cells dropped"] if dropped else [])
    said += [f"algo {a or '?'} has fewer than {least} GPU counts" for a in groups
             if a not in usable]
    with np.errstate(all="ignore"):
        out = [_scaling(a, g, "; ".join(said), hw) for a, g in usable.items()]
    return sorted(out, key=lambda f: -(f.confidence or 0))


def _message_bytes(value: Any) -> float:
    """A scenario's message size per rank, in bytes."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 1 <= value <= MAX_BYTES
    if not ok:
        raise InputError(
            f"bytes {value!r}: expected the message size per rank, a number from 1 to {MAX_BYTES:g}")
    return float(value)


def _hardware(header: list[str], rows: list[tuple[int, list[str]]],
              given: dict[str, Any]) -> Hardware:
    """The machine from the gpu / fabric / gpus_per_node columns (one value per table), else
    ``given``."""
    found = dict(given)
    for key, names in _HARDWARE_COLUMNS.items():
        index = find_column(header, names, "collective timings", COLL_EXPECTED, required=False)
        values = sorted({cell_at(cells, index) for _, cells in rows} - {""}) if index is not None else []
        if len(values) > 1:
            raise InputError(f"collective timings: one {key} per table, got "
                             f"{', '.join(values[:3])}; split the table by machine")
        if values:
            found[key] = values[0]
    gpn = found["gpus_per_node"]
    name, net = found["gpu"], found["fabric"]
    return Hardware(None if name is None else str(name), None if net is None else str(net),
                    None if gpn is None else whole_number(gpn, "gpus_per_node", 1))


def _nnls(features: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with coefficients >= 0, by trying every subset of the (at most 3) columns."""
    best, best_err = np.zeros(features.shape[1]), float("inf")
    for size in range(1, features.shape[1] + 1):
        for cols in combinations(range(features.shape[1]), size):
            try:
                coef = np.linalg.lstsq(features[:, cols], y, rcond=None)[0]
            except np.linalg.LinAlgError:
                continue
            if np.all(coef >= 0):
                err = float(np.sum((features[:, cols] @ coef - y) ** 2))
                if err < best_err:
                    best_err, best = err, np.zeros(features.shape[1])
                    best[list(cols)] = coef
    return best


def _scaling(algo: str, points: dict[int, list[tuple[float, float | None]]], partial: str,
             hw: Hardware) -> Finding:
    ns = np.array(sorted(points), dtype=float)
    t = np.array([float(median([ms for ms, _ in points[int(n)]])) for n in ns])
    sizes = [[s for _, s in points[int(n)] if s is not None] for n in ns]
    size = np.array([float(median(s)) for s in sizes]) if all(sizes) else None
    numbers: dict[str, Any] = {"gpus": [int(n) for n in ns],
                               "allreduce_ms": [round(float(x), 3) for x in t]}
    if size is not None:
        busbw = size * 2 * (ns - 1) / ns / (t / 1e3) / 1e9  # nccl-tests' busbw: algbw x 2(N-1)/N
        numbers["bus_bandwidth_gbps"] = [round(float(b), 2) for b in busbw]
    if hw.named:
        return plan_scaling(algo, [int(n) for n in ns], t,
                            None if size is None else [float(x) for x in size], hw,
                            numbers, partial)
    numbers["expected_from"] = FITTED
    ring = 2 * (ns - 1) / ns * (size if size is not None else 1.0)  # ring: 2(N-1)/N x S bytes per rank
    hops = 2 * (ns - 1)  # a ring all-reduce takes 2(N-1) latency-bound steps
    a_feat = np.column_stack([np.ones_like(ns), ring])
    b_feat = np.column_stack([np.ones_like(ns), ring, hops])
    cliff = None
    for j in range(2, ns.size):
        coef = _nnls(a_feat[:j], t[:j])
        expected = float(a_feat[j] @ coef)
        if expected > 0 and t[j] / expected >= CLIFF:
            cliff = (j, coef, expected)
            break
    label = f" ({algo})" if algo else ""
    if cliff is None:
        coef = _nnls(a_feat, t)
        worst = float(np.max(t / np.maximum(a_feat @ coef, 1e-12)))
        f = make_hypothesis(
            "collective-scaling-ok", f"All-reduce{label} scales as the ring model predicts", 0.6,
            f"All-reduce time{label} stays within {worst:.2f}x of the ring model t(N) = a + b x "
            f"2(N-1)/N fitted on all {ns.size} GPU counts ({int(ns[0])}-{int(ns[-1])}). Expected "
            f"curve: the {FITTED}." + (
                f" Partial data: {partial}." if partial else ""),
            dict(numbers, worst_ratio=round(worst, 3)), (),
            subject=f"all-reduce{label}", partial=bool(partial))
        return msgspec.structs.replace(f, severity="info")
    j, coef, expected = cliff
    n_cliff, ratio = int(ns[j]), float(t[j] / expected)
    hop_note, ratio_b = "", None
    if j >= 3:
        coef_b = _nnls(b_feat[:j], t[:j])
        expected_b = float(b_feat[j] @ coef_b)
        ratio_b = float(t[j] / expected_b) if expected_b > 0 else None
        if ratio_b is not None:
            numbers.update(expected_with_hop_latency_ms=round(expected_b, 3),
                           ratio_with_hop_latency=round(ratio_b, 2))
            hop_note = (" Even letting the latency grow with every ring hop (+c x 2(N-1)), "
                        f"{expected_b:.1f} ms is expected ({ratio_b:.1f}x)"
                        + (": latency x hops does not explain it." if ratio_b >= 2 else
                           ": latency x hops explains much of it; a tree's log2(N) latency is "
                           "the cure."))
    numbers.update(cliff_gpus=n_cliff, measured_ms=round(float(t[j]), 3),
                   expected_ms=round(expected, 3),
                   ratio=round(ratio, 2), fitted_on_gpus=[int(n) for n in ns[:j]],
                   latency_term_ms=round(float(coef[0]), 3),
                   bandwidth_term_ms=round(float(coef[1] * ring[j]), 3))
    bw = ""
    if size is not None:
        bw = (f" Bus bandwidth falls from {numbers['bus_bandwidth_gbps'][j - 1]:.1f} GB/s at "
              f"{int(ns[j - 1])} GPUs to {numbers['bus_bandwidth_gbps'][j]:.1f} GB/s at {n_cliff}.")
    conf = 0.3 + 0.55 * min(1.0, (ratio - CLIFF) / 2.5) - (0.1 if partial else 0.0)
    hops_explain = ratio_b is not None and ratio_b < CLIFF
    if hops_explain:  # a steady climb with the hop count, not a boundary
        fid, title, conf = "ring-latency-growth", f"All-reduce{label} time grows with the ring's length", min(conf, 0.6)
        why = ("The bandwidth term 2(N-1)/N x S/B is almost flat in N; what grows is the latency "
               "of the 2(N-1) steps of a ring.")
    else:
        fid, title = "topology-cliff", f"All-reduce{label} falls off a cliff at {n_cliff} GPUs"
        why = ("Ring time 2(N-1)/N x S/B is almost flat in N with the same message per rank, so a "
               "cliff means the ring crossed a topology boundary: most likely a pod / rack / spine "
               "boundary with less bandwidth between pods, or NCCL falling back from "
               "NVLink/NVSwitch to InfiniBand for part of the ring (the slowest segment sets "
               "the pace).")
    return make_hypothesis(
        fid, title, conf,
        f"All-reduce takes {t[j]:.1f} ms at {n_cliff} GPUs where the ring model fitted on "
        f"{', '.join(str(int(n)) for n in ns[:j])} GPUs expects {expected:.1f} ms "
        f"({ratio:.1f}x). {why}{hop_note}{bw} Expected curve: the {FITTED}."
        + (f" Partial data: {partial}." if partial else ""), numbers,
        CROSS_NODE_FIXES,
        subject=f"all-reduce{label} at {n_cliff} GPUs", partial=bool(partial),
        check_next=((f"nccl-tests `all_reduce_perf -b 8 -e 4G -f 2` at {int(ns[j - 1])} and "
                     f"{n_cliff} GPUs: busbw per size"),
                    ("NCCL_DEBUG=INFO: which transports (NVLink P2P, NVLS, NET/IB) and which "
                     "ring/tree NCCL chose"),
                    (f"Which pods, racks and spine switches the {n_cliff} ranks span; the "
                     "oversubscription between them"),
                    "`ibstat` and switch port counters on the inter-pod links"),
        wrong_fix=CROSS_NODE_WRONG)


