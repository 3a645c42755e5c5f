"""Where a DataLoader's time goes with and without ``pin_memory``: each step timed between the
loader's ``__next__`` calls on the training thread, the wait inside ``__next__``, and every
``pin_memory`` call (wall and thread CPU time, by thread: the workers' batches are pinned on the
loader's pin thread, a single-process loader's on the training thread).

    python benchmarks/probes/probe_pinned_loader.py PROGRAM [--pin 0|1] [--workers N]
        [--switch SECONDS] [--threads N] [-- PROGRAM ARGS]

``--pin`` and ``--workers`` override every DataLoader the program builds; ``--switch`` sets
Python's GIL switch interval (a pin thread starved of the GIL would wait, not work); ``--threads``
torch's intra-op threads. Prints one ``PINNED_LOADER {json}`` line at exit: the step's median and
mean over its last two thirds (a loader that falls behind makes the steps bimodal: the mean is
the throughput), the median wait, the pin calls. Results: benchmarks/BENCHMARKS-twins.md "Where
the pinned loader's time went".
"""

from __future__ import annotations

import atexit
import itertools
import json
import runpy
import statistics
import sys
import threading
import time

import torch
import torch.utils.data as tud
import torch.utils.data._utils.pin_memory as pin_module
import torch.utils.data.dataloader as dataloader

argv = sys.argv[1:]
program = argv.pop(0)
opts: dict[str, str] = {}
while argv and argv[0] != "--":
    key = argv.pop(0).lstrip("-")
    opts[key] = argv.pop(0)
if argv:
    argv.pop(0)
if "switch" in opts:
    sys.setswitchinterval(float(opts["switch"]))
if "threads" in opts:
    torch.set_num_threads(int(opts["threads"]))

nexts: list[tuple[float, float]] = []
pins: list[tuple[str, float, float]] = []
_next = dataloader._BaseDataLoaderIter.__next__
_pin = pin_module.pin_memory
_init = tud.DataLoader.__init__


def timed_next(self):
    start = time.perf_counter()
    out = _next(self)
    nexts.append((start, time.perf_counter()))
    return out


def timed_pin(data, device=None):
    wall, cpu = time.perf_counter(), time.thread_time()
    out = _pin(data, device)
    pins.append((threading.current_thread().name, time.perf_counter() - wall,
                 time.thread_time() - cpu))
    return out


def init(self, *args, **kwargs):
    if "pin" in opts:
        kwargs["pin_memory"] = opts["pin"] == "1"
    if "workers" in opts:
        kwargs["num_workers"] = int(opts["workers"])
        if kwargs["num_workers"] == 0:
            kwargs.pop("persistent_workers", None)
            kwargs.pop("prefetch_factor", None)
    _init(self, *args, **kwargs)


def report() -> None:
    kept = nexts[len(nexts) // 3:]
    steps = [b[0] - a[0] for a, b in itertools.pairwise(kept)]
    by_thread: dict[str, list[tuple[float, float]]] = {}
    for name, wall, cpu in pins[len(pins) // 3:]:
        by_thread.setdefault(name, []).append((wall, cpu))
    out = {
        "program": program.split("/")[-1], "opts": opts, "steps": len(nexts),
        "step_median_ms": round(statistics.median(steps) * 1e3, 3) if steps else None,
        "step_mean_ms": round(statistics.mean(steps) * 1e3, 3) if steps else None,
        "wait_median_ms": round(statistics.median(e - s for s, e in kept) * 1e3, 3) if kept else None,
        "pins": {name: {"calls": len(v),
                        "wall_median_ms": round(statistics.median(w for w, _ in v) * 1e3, 3),
                        "cpu_median_ms": round(statistics.median(c for _, c in v) * 1e3, 3)}
                 for name, v in by_thread.items()},
    }
    print("PINNED_LOADER " + json.dumps(out), flush=True)


dataloader._BaseDataLoaderIter.__next__ = timed_next
pin_module.pin_memory = timed_pin
tud.DataLoader.__init__ = init
atexit.register(report)
sys.argv = [program, *argv]
runpy.run_path(program, run_name="__main__")
