"""Run in HolisticTraceAnalysis' environment as one whole process: load a set of rank traces and
print, as one JSON line, what HTA 0.5.0 says about stragglers, comm/compute overlap, the temporal
breakdown and communication's share of GPU kernel time. Each analysis is tried on its own: a
failure is recorded as an "error" entry and the others still run.

    python _hta_ranks.py FOLDER      (FOLDER holds rank{R}.json.gz, one file per rank;
                                      bench_ranks_vs_hta.py)

The ranks are given to ``TraceAnalysis(trace_files={rank: path})``, HTA's documented way of naming
each file's rank, so that copies of one trace (whose distributedInfo all say rank 0) stay apart.
"""

from __future__ import annotations

import json
import os
import re
import sys

try:
    from hta.analyzers.straggler import find_stragglers_with_late_start_comm_kernels
    from hta.trace_analysis import TraceAnalysis
except Exception as exc:  # noqa: BLE001 - a broken HTA install is a result too
    print(json.dumps({"error": f"import: {type(exc).__name__}: {str(exc)[:160]}"}))
    sys.exit(0)


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"


def main(folder: str) -> None:
    files = {}
    for name in os.listdir(folder):
        m = re.fullmatch(r"rank(\d+)\.json\.gz", name)
        if m:
            files[int(m.group(1))] = os.path.join(folder, name)
    out: dict = {"ranks": len(files)}
    try:
        analyzer = TraceAnalysis(trace_files=dict(sorted(files.items())), trace_dir=folder)
    except BaseException as exc:  # noqa: BLE001 - MemoryError and SystemExit included
        out["error"] = f"load: {_err(exc)}"
        print(json.dumps(out))
        return
    counts: dict = {}

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        # HTA's own metric, kept to show how many steps each rank was picked in
        series = find_stragglers_with_late_start_comm_kernels(*args, **kwargs)
        counts.update({int(k): int(v) for k, v in series.items()})
        return series

    try:  # one candidate: the least HTA can name (its default is two)
        out["stragglers"] = [
            int(r)
            for r in analyzer.get_potential_stragglers(
                num_candidates=1, straggler_identification_impl=counted
            )
        ]
        out["straggler_counts"] = counts
    except BaseException as exc:  # noqa: BLE001
        out["stragglers_error"] = _err(exc)
    try:
        overlap = analyzer.get_comm_comp_overlap(visualize=False)
        out["overlap_pct"] = {
            int(r["rank"]): float(r["comp_comm_overlap_pctg"])
            for r in overlap.to_dict(orient="records")
        }
    except BaseException as exc:  # noqa: BLE001
        out["overlap_error"] = _err(exc)
    try:
        temporal = analyzer.get_temporal_breakdown(visualize=False)
        out["idle_pct"] = {
            int(r["rank"]): float(r["idle_time_pctg"]) for r in temporal.to_dict(orient="records")
        }
    except BaseException as exc:  # noqa: BLE001
        out["temporal_error"] = _err(exc)
    try:
        kinds, _ = analyzer.get_gpu_kernel_breakdown(visualize=False)
        total = float(kinds["sum"].sum())
        comm = float(kinds.loc[kinds["kernel_type"] == "COMMUNICATION", "sum"].sum())
        out["comm_share_pct"] = 100.0 * comm / total if total else None
        out["comm_kernel_ms"] = comm / 1000.0  # us in HTA's frame: every rank and step together
    except BaseException as exc:  # noqa: BLE001
        out["kernels_error"] = _err(exc)
    if "stragglers_error" in out:
        _retry_with_old_names(analyzer, out, counted, counts)
    print(json.dumps(out))


def _retry_with_old_names(analyzer, out: dict, counted, counts: dict) -> None:  # type: ignore[no-untyped-def]
    """HTA 0.5.0 takes as communication kernels only names starting "ncclKernel"; NCCL 2.19 and later
    name them "ncclDevKernel_...", so its straggler search finds none and fails. Retried with those
    names given the old prefix in HTA's symbol table (the ids in its frames stay the same), to show
    what its method says once it sees the collectives."""
    table = analyzer.t.symbol_table
    names, index = table.get_sym_table(), table.get_sym_id_map()
    renamed = 0
    for i, name in enumerate(names):
        if name.startswith("ncclDevKernel"):
            names[i] = "ncclKernel" + name[len("ncclDevKernel") :]
            index[names[i]] = i
            renamed += 1
    if not renamed:
        return
    counts.clear()
    try:
        out["stragglers_renamed"] = [
            int(r)
            for r in analyzer.get_potential_stragglers(
                num_candidates=1, straggler_identification_impl=counted
            )
        ]
        out["straggler_counts_renamed"] = dict(counts)
    except BaseException as exc:  # noqa: BLE001
        out["stragglers_renamed_error"] = _err(exc)


if __name__ == "__main__":
    main(sys.argv[1])
