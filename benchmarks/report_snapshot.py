"""Every fixture's report, to check that a speed change changes no output.

    python benchmarks/report_snapshot.py dump OUT_DIR [--src SRC]    # before and after the change
    python benchmarks/report_snapshot.py compare BEFORE_DIR AFTER_DIR

``dump`` runs ``python -m gpudoctor analyze T --json`` on every trace under tests/data (each
trace file, and each run directory, whose env.json counts) and on benchmarks/data/bench_170k.json.gz,
and keeps stdout, stderr and the exit code of each. ``compare`` names every one that differs and
exits 1 if any does. The reports hold no timings, so equal outputs are byte-identical.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def inputs() -> list[Path]:
    data = ROOT / "tests" / "data"
    traces = sorted(data.rglob("trace*.json.gz"))
    runs = sorted({p.parent for p in data.rglob("env.json")})
    return [*traces, *runs, ROOT / "benchmarks" / "data" / "bench_170k.json.gz"]


def dump(out: Path, src: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(src))
    for path in inputs():
        key = str(path.relative_to(ROOT)).replace("/", "_") + ("_dir" if path.is_dir() else "")
        done = subprocess.run(
            [sys.executable, "-m", "gpudoctor", "analyze", str(path.relative_to(ROOT)), "--json"],
            capture_output=True,
            cwd=ROOT,
            env=env,
            timeout=600,
            check=False,
        )
        (out / f"{key}.out").write_bytes(done.stdout)
        (out / f"{key}.err").write_bytes(done.stderr)
        (out / f"{key}.rc").write_text(f"{done.returncode}\n")
    print(f"{len(inputs())} reports in {out}")


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    differ = [
        n
        for n in names
        if not (before / n).is_file()
        or not (after / n).is_file()
        or (before / n).read_bytes() != (after / n).read_bytes()
    ]
    for name in differ:
        print(f"differs: {name}")
    print(f"{len(names) - len(differ)} of {len(names)} files identical")
    return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--src", type=Path, default=ROOT / "src")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.out, args.src)
    else:
        sys.exit(compare(args.before, args.after))


if __name__ == "__main__":
    main()
