"""Does allocator churn still cost time on this GPU and driver? Step times of plant variants, each in
a fresh process, over rounds that alternate with a fixed build (as `gpudoctor lab` does).

    PYTHONPATH=src python3 benchmarks/probes/probe_alloc_churn.py [--out FILE.json]
    PYTHONPATH=src python3 benchmarks/probes/probe_alloc_churn.py --lab [--out FILE.json]

``--lab``: the candidate plants as lab traps (sick: the variant; fixed: the same sizes as views of
one workspace), timed in one process by the lab's own ``paired_rounds``, one after the other, as
``gpudoctor lab run`` does.

Variants (each step: allocate, fill, reduce, free; ``empty_cache()`` at the step's end unless noted):
- ``lab``: the lab trap's sick twin (16 bf16 tensors of 16-64 MB, sizes cycling over 4 steps);
- ``fixed``: its fixed twin (views of one workspace);
- ``large``: 4 tensors of 256 MB-1 GB, sizes cycling;
- ``growing``: 16 tensors whose sizes never repeat (grow by 2 MB a step), no empty_cache: the cache
  cannot serve them, so each is a cudaMalloc;
- ``many``: 256 tensors of 1-4 MB, sizes cycling;
- ``nocache``: the lab's sick step with the caching allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING=1).
Also, per process: the time of one 64 MB and one 1 GB cudaMalloc + cudaFree pair, fresh and after
a 1 GiB allocation was made and released. Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MIB = 1 << 20
VARIANTS = ("lab", "fixed", "large", "growing", "many", "nocache")

CHILD = r'''
import json, statistics, sys, time, torch
variant, rounds = sys.argv[1], int(sys.argv[2])
dev = "cuda"; MIB = 1 << 20; bf = torch.bfloat16

def pair_us(nbytes):
    torch.cuda.synchronize(); t = time.perf_counter()
    x = torch.empty(nbytes, dtype=torch.uint8, device=dev); del x; torch.cuda.empty_cache()
    torch.cuda.synchronize(); return (time.perf_counter() - t) * 1e6

def sizes(step):
    if variant in ("lab", "fixed", "nocache"):
        return [(8 + 8 * ((step + j) % 4)) * MIB for j in range(16)], True
    if variant == "large":
        return [(128 + 128 * ((step + j) % 4)) * MIB for j in range(4)], True
    if variant == "growing":
        return [(8 + 8 * (j % 4)) * MIB + step * MIB for j in range(16)], False
    if variant == "many":
        return [(1 + (step + j) % 4) * MIB // 2 for j in range(256)], True

ws = torch.empty(16, 32 * MIB, device=dev, dtype=bf) if variant == "fixed" else None
counter = [0]
def step():
    ns, empty = sizes(counter[0]); counter[0] += 1
    ts = [(ws[j, :n] if ws is not None else torch.empty(n, device=dev, dtype=bf)).normal_() for j, n in enumerate(ns)]
    torch.stack([t.sum(dtype=torch.float32) for t in ts]).sum()
    ts.clear()
    if empty and ws is None:
        torch.cuda.empty_cache()

def timed(n=20, warm=5):
    for _ in range(warm): step()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]; ev[0].record()
    for i in range(n): step(); ev[i + 1].record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in zip(ev, ev[1:]))

out = {"variant": variant, "pair_us_fresh": {"64MB": pair_us(64 * MIB), "1GB": pair_us(1 << 30)}}
rounds_ms = []
for r in range(rounds):
    rounds_ms.append(timed())
    # what a fixed build between the lab's rounds leaves: 1 GiB allocated, then handed back
    w = torch.empty(1 << 30, dtype=torch.uint8, device=dev); del w; torch.cuda.empty_cache()
out["pair_us_after_1GiB"] = {"64MB": pair_us(64 * MIB), "1GB": pair_us(1 << 30)}
out["rounds_ms"] = rounds_ms
print(json.dumps(out))
'''


LAB_VARIANTS = {  # name -> (bf16 element counts of one step's tensors, steps between empty_cache calls)
    "lab": (lambda step: [(8 + 8 * ((step + j) % 4)) * MIB for j in range(16)], 1),
    "large": (lambda step: [(128 + 128 * ((step + j) % 4)) * MIB for j in range(4)], 1),
    "many": (lambda step: [(1 + (step + j) % 4) * MIB // 2 for j in range(256)], 1),
    # empty_cache after every tensor: 8 allocations and 8 device syncs a step
    "inner": (lambda step: [(8 + 8 * ((step + j) % 4)) * MIB for j in range(8)], 0),
}


def lab_trap(name: str):  # type: ignore[no-untyped-def]
    import torch

    from gpudoctor.lab.trap import Trap, Workload

    sizes_of, every = LAB_VARIANTS[name]
    largest = [max(sizes_of(s)[j] for s in range(4)) for j in range(len(sizes_of(0)))]

    def build(device: str, churn: bool) -> Workload:
        workspace = (
            None
            if churn
            else [torch.empty(n, device=device, dtype=torch.bfloat16) for n in largest]
        )
        counter = [0]

        def step() -> None:
            sums = []
            for j, n in enumerate(sizes_of(counter[0])):
                t = (
                    torch.empty(n, device=device, dtype=torch.bfloat16)
                    if churn
                    else workspace[j][:n]
                )
                sums.append(t.normal_().sum(dtype=torch.float32))
                del t
                if churn and every == 0:
                    torch.cuda.empty_cache()
            torch.stack(sums).sum()
            counter[0] += 1
            if churn and every:
                torch.cuda.empty_cache()

        return Workload(step)

    return Trap(
        id=f"churn_{name}",
        title=name,
        expected_finding="allocator-churn",
        build_sick=lambda d: build(d, True),
        build_fixed=lambda d: build(d, False),
        description=name,
    )


def lab_mode(out: str | None) -> int:
    from gpudoctor.lab.verify import paired_rounds

    rows = []
    for name in LAB_VARIANTS:
        t0 = time.perf_counter()
        sick, fixed = paired_rounds(lab_trap(name), "cuda", warmup=5, timed=20)
        rows.append(
            {
                "variant": name,
                "sick_rounds_ms": sick,
                "fixed_rounds_ms": fixed,
                "ratio": statistics.median(sick) / statistics.median(fixed),
                "wall_s": time.perf_counter() - t0,
            }
        )
    if out:
        with open(out, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"{'variant':<8} {'sick rounds ms':<26} {'fixed rounds ms':<26} {'x':>6}")
    for r in rows:
        print(
            f"{r['variant']:<8} {' '.join(f'{x:.3f}' for x in r['sick_rounds_ms']):<26} "
            f"{' '.join(f'{x:.3f}' for x in r['fixed_rounds_ms']):<26} {r['ratio']:>6.2f}"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lab", action="store_true", help="the candidate plants timed as lab traps")
    args = ap.parse_args()
    if args.lab:
        return lab_mode(args.out)
    results = []
    for v in VARIANTS:
        env = dict(os.environ)
        if v == "nocache":
            env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        t0 = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-c", CHILD, v, str(args.rounds)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        try:
            results.append(json.loads(p.stdout.strip().splitlines()[-1]))
        except (IndexError, json.JSONDecodeError):
            results.append({"variant": v, "error": p.stderr[-500:]})
        results[-1]["wall_s"] = round(time.perf_counter() - t0, 1)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    fixed = next(
        (
            statistics.median(r["rounds_ms"])
            for r in results
            if r["variant"] == "fixed" and "rounds_ms" in r
        ),
        None,
    )
    print(
        f"{'variant':<9} {'rounds ms':<28} {'x fixed':>7} {'64MB fresh/after us':>20} {'1GB fresh/after us':>20}"
    )
    for r in results:
        if "error" in r:
            print(f"{r['variant']:<9} error: {r['error'][-200:]}")
            continue
        med = statistics.median(r["rounds_ms"])
        print(
            f"{r['variant']:<9} {' '.join(f'{x:.3f}' for x in r['rounds_ms']):<28} "
            f"{med / fixed if fixed else 0:>7.2f} "
            f"{r['pair_us_fresh']['64MB']:>9.0f}/{r['pair_us_after_1GiB']['64MB']:<10.0f} "
            f"{r['pair_us_fresh']['1GB']:>9.0f}/{r['pair_us_after_1GiB']['1GB']:<10.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
