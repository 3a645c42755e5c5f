"""Does a compile slow the host's copies into pinned memory? (A Lightning classifier's ``DataLoader``
pinned its 16 MB batch in 0.30 ms a step, and in 5.1 ms once ``--try-fixes`` compiled the model: H100,
2026-11-26.)

``PYTHONPATH=src python3 benchmarks/probes/probe_pin_after_compile.py`` times ``Tensor.pin_memory()`` of a
16 MB fp32 tensor (median of 30) and reads ``torch.get_num_threads()``: before any compile, after
``torch.compile`` of a small MLP has run (its compile workers up), after
``torch._inductor.async_compile.shutdown_compile_workers()``, and again with a fresh compile in a
process where ``TORCHINDUCTOR_COMPILE_THREADS=1`` (no worker pool: run it a second time with that
variable set). Needs a GPU.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch


def pin_ms(x: torch.Tensor, n: int = 30) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        x.pin_memory()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("probe_pin_after_compile.py needs a CUDA GPU")
    x = torch.randn(4096, 1024)
    rows = [("before compile", pin_ms(x), torch.get_num_threads())]
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    ).cuda()
    compiled = torch.compile(model)
    for _ in range(3):
        compiled(torch.randn(64, 256, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    rows.append(("after compile", pin_ms(x), torch.get_num_threads()))
    time.sleep(2)
    rows.append(("after compile, 2 s later", pin_ms(x), torch.get_num_threads()))
    from torch._inductor.async_compile import shutdown_compile_workers

    shutdown_compile_workers()
    rows.append(("workers shut down", pin_ms(x), torch.get_num_threads()))
    print(
        f"TORCHINDUCTOR_COMPILE_THREADS={os.environ.get('TORCHINDUCTOR_COMPILE_THREADS', '(unset)')}"
    )
    for name, ms, threads in rows:
        print(f"{name:28} pin 16 MB {ms:7.3f} ms   torch threads {threads}")


if __name__ == "__main__":
    main()
