"""The lab's healthy bf16 GPT training step (gpudoctor/lab/healthy.py ``build_train``) as a plain
training loop, for ``gpudoctor run --try-fixes --fixes compile`` to compile and trace:

    python -m gpudoctor run --try-fixes --fixes compile benchmarks/probes/healthy_train_loop.py --iters 450

Prints the mean step every ``--log-every`` steps (one step = one optimizer step).
"""

from __future__ import annotations

import argparse
import time

import torch

from gpudoctor.lab.healthy import build_train

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
work = build_train(device)
t0 = time.perf_counter()
for i in range(1, args.iters + 1):
    work.step()
    if i % args.log_every == 0:
        if device == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        print(f"step {i}: {(t1 - t0) / args.log_every * 1e3:.2f} ms/step", flush=True)
        t0 = t1
