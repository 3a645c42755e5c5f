"""Measure what torch.compile gains on the lab's healthy GPT training step (lab/healthy.py's
build_train): eager vs ``model.compile()``, steps timed with CUDA events after warm-up, medians of
3 rounds of 20 steps. Prints one table line per variant; ``--out FILE`` writes the JSON.

    PYTHONPATH=src python3 scripts/compile_gain_healthy.py --out results.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from gpudoctor.lab.common import TinyGPT, adamw, gpt_train_step, seed
from gpudoctor.lab.healthy import VOCAB


def time_steps(step, n: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--layers", type=int, default=4)
    opts = ap.parse_args()
    results = {}
    for variant in ("eager", "compile"):
        seed(20)
        batch, seq, d = 8, 1024, 2048
        model = TinyGPT(VOCAB, d, opts.layers, d // 128, seq).to("cuda")
        opt = adamw(model.parameters(), "cuda")
        idx = torch.randint(0, VOCAB, (batch, seq), device="cuda")
        targets = torch.randint(0, VOCAB, (batch, seq), device="cuda")
        if variant == "compile":
            model.compile()

        def step(model=model, opt=opt, idx=idx, targets=targets) -> None:
            gpt_train_step(model, opt, idx, targets, "cuda")

        time_steps(step, 10)  # warm-up (compilation)
        rounds = [time_steps(step, 20) for _ in range(3)]
        results[variant] = {
            "rounds_ms": [round(r, 4) for r in rounds],
            "median_ms": round(statistics.median(rounds), 4),
        }
        print(
            f"{variant:8s} {results[variant]['median_ms']:8.3f} ms/step  rounds {results[variant]['rounds_ms']}",
            flush=True,
        )
        del model, opt, step
        torch.cuda.empty_cache()
    results["speedup"] = round(results["eager"]["median_ms"] / results["compile"]["median_ms"], 4)
    results["device"] = torch.cuda.get_device_name(0)
    results["torch"] = torch.__version__
    print(f"compile speedup x{results['speedup']:.3f} on {results['device']}")
    if opts.out:
        with open(opts.out, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
