"""Why did the bf16-autocast knob's trial on the lab's fp32_matmul trap step in 2.12 ms when the trap's
fixed twin (bf16 autocast written into its step) stepped in 1.21 (H100, 2026-11-26, bench_try_fixes.py --lab)?

``PYTHONPATH=src python3 benchmarks/probes/probe_autocast_knob.py VARIANT`` times 200 steps of the trap's model
(4 x Linear(2048) + GELU, batch 4096, AdamW fused, allow_tf32 False) in this process, a sync every 10
steps, and prints one line: VARIANT and the mean ms of the last 150 steps. VARIANT:

- ``twin``: the fixed twin (``build_fixed``: autocast around the forward, ``.float()`` and the loss);
- ``wrapped``: the sick step with ``model.forward`` wrapped in autocast by hand (the loss outside);
- ``knob``: the sick step with the knob applied as a trial applies it (``tryfix.knobs.apply_knobs``);
- ``knob-first``: the knob, and the first step timed apart (the knob's first-call context).
Run each in a fresh process (``for v in twin wrapped knob; do ...; done``).
"""

from __future__ import annotations

import sys

import torch


def main() -> None:
    variant = sys.argv[1]
    from gpudoctor.lab.program import timed_loop
    from gpudoctor.lab.traps import fp32_matmul

    if variant.startswith("knob"):
        from gpudoctor.tryfix.knobs import apply_knobs

        effects = apply_knobs(["bf16-autocast"])
    else:
        effects = []
    if variant == "twin":
        work = fp32_matmul.TRAP.build_fixed("cuda")
    else:
        work = fp32_matmul.TRAP.build_sick("cuda")
    if variant == "wrapped":
        import gc

        from torch import nn

        model = next(o for o in gc.get_objects() if isinstance(o, nn.Sequential))
        forward = model.forward

        def autocast_forward(*args, **kwargs):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return forward(*args, **kwargs)

        model.forward = autocast_forward
    times = [ms for _, ms in timed_loop(work.step, 200, 10, torch.cuda.synchronize)]
    print(
        f"{variant}: {sum(times[5:]) / len(times[5:]):.3f} ms/step  ({', '.join(f'{t:.2f}' for t in times[:6])} ...)"
        f"  effects={effects}",
        flush=True,
    )


if __name__ == "__main__":
    main()
