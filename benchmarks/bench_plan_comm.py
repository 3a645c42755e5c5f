"""`gpudoctor plan comm` predicted vs measured: the 2x H200 NCCL curves committed in
benchmarks/results/, every op and size >= 1 MiB; preset, calibrated (interpolated on the curve) and
the fitted alpha-beta model (what other GPU counts use). No GPU needed.

    python benchmarks/bench_plan_comm.py [--table FILE] [--append benchmarks/BENCHMARKS-plan.md]
    python benchmarks/bench_plan_comm.py --from 2-GPU.json --measured 4-GPU.json   # across GPU counts

Across counts every measured size is compared (1 KiB up), and the summary gives the median and max
|error| of each column over all sizes and over sizes >= 1 MiB.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from gpudoctor.plan.collective_cost import load_curves, predict

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = "benchmarks/results/bench-2xh200-2026-11-22.json"
HEADING = "## `gpudoctor plan comm`: predicted vs measured collectives (2x H200)"
MIB = 2**20


def size(n: int) -> str:
    if n >= 2**30:
        return f"{n // 2**30} GiB"
    return f"{n // MIB} MiB" if n >= MIB else f"{n // 1024} KiB"


def points(table: str, min_bytes: int = MIB):
    """(op, bytes, measured seconds, predict() keywords) of every measured size >= ``min_bytes``."""
    curves, _ = load_curves(str(ROOT / table))
    for op, curve in curves.items():
        for nbytes, measured in zip(curve.sizes, curve.times):
            if nbytes >= min_bytes:
                yield op, nbytes, measured, {"gpus": curve.world, "gpu": "h200"}


def rows(table: str) -> list[dict]:
    out = []
    for op, nbytes, measured, kw in points(table):
        preset = predict(op, nbytes, **kw).time_s
        calib = predict(op, nbytes, busbw_table=str(ROOT / table), **kw).time_s
        fitted = predict(op, nbytes, busbw_table=str(ROOT / table), interpolate=False, **kw).time_s
        out.append(
            {
                "op": op,
                "bytes": nbytes,
                "measured": measured,
                "preset": preset,
                "calibrated": calib,
                "fitted": fitted,
            }
        )
    return out


def err(pred: float, measured: float) -> float:
    return pred / measured - 1


def markdown(table: str) -> str:
    data = json.loads((ROOT / table).read_text())
    coll = data["collectives"]
    rs = rows(table)
    lines = [
        HEADING,
        "",
        (
            f"Measured by `gpudoctor bench` on {coll['world_size']}x {coll['gpu']} ({coll['backend']}, NCCL "
            f"{coll.get('nccl_env', {}).get('NCCL_VERSION', '?')}, NVLS off), {data['measured_utc']} "
            f"(`{table}`). Predictions: `python benchmarks/bench_plan_comm.py` (no GPU needed), i.e. "
            f"`gpudoctor plan comm OP SIZE --gpus {coll['world_size']} --gpu h200 [--busbw-table {table}]`."
        ),
        "",
        (
            "*preset*: NVLink 4 datasheet (450 GB/s per direction) x 0.80, NCCL latencies; *calibrated*: "
            "read off the measured busbw curve (log-log), what `--busbw-table` gives at the measured GPU "
            "count; *fitted*: the alpha-beta fit of that curve, what `--busbw-table` gives at other counts. "
            "Error = predicted / measured - 1."
        ),
        "",
        "| op | size | measured | preset | err | calibrated | err | fitted | err |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rs:
        m = r["measured"]
        lines.append(
            f"| {r['op']} | {size(r['bytes'])} | {m * 1e6:,.1f} us | {r['preset'] * 1e6:,.1f} us | "
            f"{err(r['preset'], m):+.1%} | {r['calibrated'] * 1e6:,.1f} us | "
            f"{err(r['calibrated'], m):+.1%} | {r['fitted'] * 1e6:,.1f} us | {err(r['fitted'], m):+.1%} |"
        )
    lines.append("")
    lines.append("| | preset | calibrated | fitted |")
    lines.append("|---|---:|---:|---:|")
    for label, fn in (("median abs error", statistics.median), ("max abs error", max)):
        cells = [
            f"{fn([abs(err(r[k], r['measured'])) for r in rs]):.1%}"
            for k in ("preset", "calibrated", "fitted")
        ]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    big = [r for r in rs if r["bytes"] >= 256 * MIB]
    cells = [
        f"{statistics.median([abs(err(r[k], r['measured'])) for r in big]):.1%}"
        for k in ("preset", "calibrated", "fitted")
    ]
    lines.append(f"| median abs error, >= 256 MiB | {' | '.join(cells)} |")
    lines += [
        "",
        (
            "The preset under-predicts small messages most: the measured curve has a ~60 us floor "
            "that NCCL's latency figures (8.4 us + 3.4 us per step) do not hold; how much of it is "
            "the harness's per-call dispatch between its CUDA events was not separated. At 4 GiB "
            "the preset's error is its efficiency guess (0.80 of NVLink): all-reduce reaches close "
            "to it on 2 GPUs, all-gather and reduce-scatter less (see the 4 GiB rows). Calibrated "
            "matches by construction at measured sizes (it interpolates the same points); the "
            "fitted column is the check of the model `--busbw-table` uses at other GPU counts."
        ),
        "",
    ]
    return "\n".join(lines)


def summary(
    rows: list[dict], columns: tuple[str, ...], min_bytes: int = 0
) -> dict[str, tuple[float, float]]:
    """Per column, (median |error|, max |error|) over the rows of ``min_bytes`` and more; each row holds
    "bytes", "measured" and one predicted time per column."""
    kept = [r for r in rows if r["bytes"] >= min_bytes]
    if not kept:
        raise ValueError(f"no row of {min_bytes} bytes or more")
    out = {}
    for col in columns:
        errs = [abs(err(r[col], r["measured"])) for r in kept]
        out[col] = (statistics.median(errs), max(errs))
    return out


def held_out(calibration: str, measured: str) -> str:
    """The model calibrated on one GPU count's curve (``calibration``) predicting another count's
    measured curve (``measured``), every measured size: the fitted alpha-beta model is all
    ``--busbw-table`` has there."""
    lines = [
        "| op | size | measured | preset | err | from the other count's curve | err |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rs = []
    for op, nbytes, m, kw in points(measured, min_bytes=1):
        pre = predict(op, nbytes, **kw).time_s
        held = predict(op, nbytes, busbw_table=str(ROOT / calibration), **kw).time_s
        rs.append({"bytes": nbytes, "measured": m, "preset": pre, "held": held})
        lines.append(
            f"| {op} | {size(nbytes)} | {m * 1e6:,.1f} us | {pre * 1e6:,.1f} us | {err(pre, m):+.1%} | "
            f"{held * 1e6:,.1f} us | {err(held, m):+.1%} |"
        )
    lines += ["", "| |error| | preset | from the other count's curve |", "|---|---:|---:|"]
    for label, floor in (("all sizes", 0), (">= 1 MiB", MIB)):
        stats = summary(rs, ("preset", "held"), floor)
        lines.append(f"| median, {label} | {stats['preset'][0]:.1%} | {stats['held'][0]:.1%} |")
        lines.append(f"| max, {label} | {stats['preset'][1]:.1%} | {stats['held'][1]:.1%} |")
    return "\n".join(lines)


def append(md: str, path: Path) -> None:
    text = path.read_text() if path.exists() else ""
    if HEADING in text:  # replace our section, keep everything else
        start = text.index(HEADING)
        nxt = text.find("\n## ", start + len(HEADING))
        text = text[:start] + md + ("\n" + text[nxt + 1 :] if nxt != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + md
    path.write_text(text if text.endswith("\n") else text + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--table",
        "--from",
        dest="table",
        default=DEFAULT,
        help="The bench file whose curve calibrates the model.",
    )
    parser.add_argument(
        "--append", type=Path, default=None, help="Add / replace the section in this file."
    )
    parser.add_argument(
        "--held-out",
        "--measured",
        dest="held_out",
        default=None,
        metavar="MEASURED",
        help="Predict this bench file's GPU count from --table's curve, and compare.",
    )
    args = parser.parse_args()
    if args.held_out:
        print(held_out(args.table, args.held_out))
        return
    md = markdown(args.table)
    print(md)
    if args.append:
        append(md, args.append)


if __name__ == "__main__":
    from gpudoctor.errors import InputError

    try:
        main()
    except (
        InputError
    ) as exc:  # a file that is not a bench JSON with curves: one line, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
