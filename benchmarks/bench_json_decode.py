"""Which JSON decoder: json vs orjson (to dicts) vs msgspec (into gpudoctor's typed structs).

    python benchmarks/bench_json_decode.py TRACE [--repeat 3]

Decoding only, from bytes already in memory; each decoder in a fresh process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench_load import json_size, measure


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.trace.name}: {json_size(args.trace) / 1e6:.1f} MB of JSON\n")
    print("| decoder | seconds | peak MB |\n|---|---:|---:|")
    for kind in ("decode-json", "decode-orjson", "decode-msgspec"):
        runs = [measure(sys.executable, kind, args.trace) for _ in range(args.repeat)]
        if any("error" in r for r in runs):
            print(f"| {kind[7:]} | failed | |")
            continue
        seconds = statistics.median(r["seconds"] for r in runs)
        peak = max(r["rss_peak"] - r["rss_before"] for r in runs) / 1e6
        print(f"| {kind[7:]} | {seconds:.3f} | {peak:.0f} |")


if __name__ == "__main__":
    main()
