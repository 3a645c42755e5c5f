"""The compile knob's replayed step beside the compiled step itself, host and GPU apart.

A ``run --try-fixes --fixes compile`` bundle whose compile trial kept its trace (the default,
``--trial-trace``; the trial needs 400 or more steps to leave a window after its warm-up) holds
both sides of the knob: the eager step the knob was priced on (the bundle's own trace) and the
step the compiled program ran (``trials/compile/trace.json.gz``, with the unprofiled step its
trial timed). For each such bundle this prints, per step and without the profiler (both traces
replayed as ``gpudoctor run`` replays them, each fitted to its own unprofiled step):

- the eager step: the host's own work and the GPU's busy time;
- the knob's edit replayed on it (rules/knob_prices.py): the step, host and GPU it predicts;
- the compiled trial's step, host and GPU.

So a miss says which side the price got wrong: the fusion of the kernels (GPU) or what the
compiled code leaves the host. ``--region`` splits each host in two: the module's passes (the eager
trace's region, rules/knob_prices.py ``_region_passes``; the compiled trace's ``Torch-Compiled
Region`` and ``CompiledFunctionBackward`` calls) and the rest of the step, which the knob's edit
leaves as it ran.

    python benchmarks/bench_compile_vs_trace.py --bundles benchmarks/results/compile-traces-h100-2026-12-06-bundles.tar.xz
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _per_step(model, fixed=None) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The step, the host's own work and the GPU's busy time per step (ms) of a step model, or of
    ``fixed`` (a replay of it edited) in the model's terms."""
    r = model.base.replayed if fixed is None else fixed
    return {
        "step": model.step_ms,
        "host": r.host_work_ns / max(r.marks_ns.size - 1, 1) / 1e6,
        "gpu": r.gpu_busy_ns / max(r.marks_ns.size, 1) / 1e6,
    }


def sides(path: Path) -> tuple[dict[str, float], dict[str, float]]:
    """A run directory as the replay sees it without the profiler, and the compile knob's edit
    replayed on it (its step in the run's terms, rules/whatif.py ``StepModel.after_ms``)."""
    from gpudoctor.pipeline import diagnose_path
    from gpudoctor.replay.edits import changes
    from gpudoctor.replay.simulate import replay
    from gpudoctor.rules.knob_prices import KNOB_COMPILE, knob_edits
    from gpudoctor.rules.whatif import step_model

    a = diagnose_path(path).analysis
    model = step_model(a)
    if isinstance(model, str):
        raise ValueError(f"{path}: {model}")
    edit = knob_edits(a).get(KNOB_COMPILE)
    if edit is None:
        return _per_step(model), {}
    fixed = replay(model.graph, changes(model.graph, edit, base=model.base.changes))
    return _per_step(model), {**_per_step(model, fixed), "step": model.after_ms(edit)}


def region_host(path: Path, compiled: bool) -> tuple[float, float]:
    """The host's own work per step (ms, without the profiler) inside the module's passes, and
    outside them: each entry of the step's graph that starts in a pass counts its gap before it
    (but a pass's first) and its own time."""
    import numpy as np

    from gpudoctor.analysis.compiled_region import compiled_region, traced_by_dynamo
    from gpudoctor.pipeline import diagnose_path
    from gpudoctor.rules.knob_prices import _region_passes
    from gpudoctor.rules.whatif import step_model

    a = diagnose_path(path).analysis
    model = step_model(a)
    if isinstance(model, str):
        raise ValueError(f"{path}: {model}")
    graph, base = model.graph, model.base.changes
    if compiled:
        host = a.trace.host
        marks = a.trace.names_matching(
            lambda s: s.startswith("Torch-Compiled Region") or s == "CompiledFunctionBackward"
        )
        calls = np.flatnonzero(marks[host.name])
        calls = calls[(host.ts[calls] >= a.steps.start[0]) & (host.ts[calls] < a.steps.end[-1])]
        starts, ends = host.ts[calls], host.end[calls]
    else:
        starts, ends, _ = _region_passes(a, traced_by_dynamo(a.trace, compiled_region(a.trace)))
    gap = np.asarray(base.gap_ns if base.gap_ns is not None else graph.gap_ns, float)
    own = np.asarray(base.own_ns if base.own_ns is not None else graph.own_ns, float)
    inside = 0.0
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        k = np.flatnonzero((graph.ts_ns >= lo) & (graph.ts_ns < hi))
        inside += float(gap[k[1:]].sum() + own[k].sum())
    steps = max(len(a.steps), 1)
    total = _per_step(model)["host"]
    return inside / steps / 1e6, total - inside / steps / 1e6


def bundles_in(path: Path, scratch: Path) -> list[Path]:
    if path.is_file():
        with tarfile.open(path) as tar:
            tar.extractall(scratch, filter="data")
        path = scratch
    return sorted({p.parents[2] for p in path.rglob("trials/compile/trace.json*")})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--bundles",
        type=Path,
        required=True,
        help="a folder of run bundles, or a .tar.gz / .tar.xz of one",
    )
    ap.add_argument(
        "--region",
        action="store_true",
        help="also the host inside the module's passes and outside them, eager and compiled",
    )
    opts = ap.parse_args()
    if not opts.bundles.exists():
        ap.error(f"--bundles {opts.bundles}: no such file or folder")
    region = " | eager host in / out of the module | compiled host in / out" if opts.region else ""
    print(
        "| program | eager step / host / GPU | predicted step / host / GPU | compiled step / host / GPU "
        f"| step predicted / compiled{region} |"
    )
    print("|---|---:|---:|---:|---:" + ("|---:|---:|" if opts.region else "|"))
    with tempfile.TemporaryDirectory() as scratch:
        try:
            bundles = bundles_in(opts.bundles, Path(scratch))
        except (tarfile.TarError, EOFError, OSError) as exc:
            reason = " ".join(str(exc).split())
            ap.error(
                f"--bundles {opts.bundles}: not a folder or a .tar.gz / .tar.xz of one ({reason})"
            )
        if not bundles:
            ap.error(
                f"--bundles {opts.bundles}: no bundle with a compile trial's trace "
                "(trials/compile/trace.json.gz); run --try-fixes --fixes compile keeps one"
            )
        for bundle in bundles:
            eager, after = sides(bundle)
            if not after:
                raise ValueError(f"{bundle}: the compile knob has no edit here")
            compiled, _ = sides(bundle / "trials" / "compile")

            def three(d: dict[str, float]) -> str:
                return f"{d['step']:.2f} / {d['host']:.2f} / {d['gpu']:.2f}"

            row = (
                f"| {bundle.name.rsplit('-', 2)[0]} | {three(eager)} | {three(after)} | "
                f"{three(compiled)} | {after['step'] / compiled['step']:.2f} |"
            )
            if opts.region:
                e_in, e_out = region_host(bundle, compiled=False)
                c_in, c_out = region_host(bundle / "trials" / "compile", compiled=True)
                row += f" {e_in:.2f} / {e_out:.2f} | {c_in:.2f} / {c_out:.2f} |"
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
