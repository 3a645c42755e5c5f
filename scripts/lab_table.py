"""Print the lab's results (``gpudoctor lab run --all --json``) as one short table per run.

    python scripts/lab_table.py RUN.json [RUN.json ...]

Counts the traps named first with a predicted/measured ratio within 1.5x either way (the lab's
``RATIO_BAND``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from gpudoctor.lab.verify import RATIO_BAND


def main(paths: list[str]) -> int:
    if not paths:
        print(
            "lab_table.py: give one or more files written by `gpudoctor lab run --all --json`",
            file=sys.stderr,
        )
        return 2
    failed = 0
    for path in paths:
        try:
            with open(path) as f:
                rows = json.load(f)
        except (OSError, ValueError) as exc:
            print(
                f"{path}: not a readable JSON file ({exc}); give the output of `gpudoctor lab run --all --json`",
                file=sys.stderr,
            )
            failed += 1
            continue
        if not isinstance(rows, list) or not all(isinstance(r, dict) and "trap" in r for r in rows):
            print(
                f"{path}: not a lab result (a JSON list of traps); give the output of `gpudoctor lab run --all "
                "--json`",
                file=sys.stderr,
            )
            failed += 1
            continue
        ok = 0
        print(f"== {path}")
        for r in rows:
            ratio = r.get("ratio")
            if r.get("predicted_speedup") and r.get(
                "measured_speedup"
            ):  # unrounded (ratio has 3 decimals)
                ratio = r["predicted_speedup"] / r["measured_speedup"]
            hit = r.get("top_finding") == r.get("expected")
            good = hit and ratio is not None and RATIO_BAND[0] <= ratio <= RATIO_BAND[1]
            ok += good
            print(
                f"{r['trap']:<22} {r.get('top_finding')!s:<20} {'' if ratio is None else f'{ratio:5.2f}':>5} "
                f"pred {r.get('predicted_speedup') or 0:7.2f} meas {r.get('measured_speedup') or 0:7.2f} "
                f"{'ok' if good else ''} {r.get('error', '')[:60]}"
            )
        print(f"in band and first: {ok} of {len(rows)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
