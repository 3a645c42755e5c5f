"""host-blocking-work: file I/O on the training thread, with no GPU work queued meanwhile.

Each sick step first writes a metrics/checkpoint blob to a file under the temp directory and
``fsync``s it, then launches the GPU work. The write involves no torch operation at all, so a
profiler sees only a long stretch of host time in Python during which the GPU, having finished
the previous step, has nothing to do. The fixed twin hands the same blob to a background thread
that writes the most recent one whenever it is free (file writes and ``fsync`` release the GIL),
so the training thread keeps the GPU fed.
"""

from __future__ import annotations

import functools
import os
import tempfile
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gpudoctor.lab.common import adamw, autocast, on_gpu, seed, size
from gpudoctor.lab.trap import Trap, Workload

TARGET_WRITE_S = 0.012


def write_blob(path: str, blob: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, blob)
        os.fsync(fd)
    finally:
        os.close(fd)


@functools.cache
def blob_size() -> int:
    """Bytes whose write and fsync take about TARGET_WRITE_S on this machine."""
    probe = np.random.default_rng(0).bytes(16 << 20)
    fd, path = tempfile.mkstemp(prefix="gpudoctor-lab-")
    os.close(fd)
    try:
        write_blob(path, probe)
        start = time.perf_counter()
        write_blob(path, probe)
        seconds = time.perf_counter() - start
    finally:
        os.unlink(path)
    rate = len(probe) / max(seconds, 1e-6)
    return int(min(max(rate * TARGET_WRITE_S, 1 << 20), 512 << 20))


class BackgroundWriter:
    """Writes the latest submitted blob on its own thread; older pending blobs are replaced."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pending: bytes | None = None
        self.stopped = False
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def submit(self, blob: bytes) -> None:
        with self.cond:
            self.pending = blob
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while self.pending is None and not self.stopped:
                    self.cond.wait()
                if self.pending is None:
                    return
                blob, self.pending = self.pending, None
            write_blob(self.path, blob)

    def close(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify()
        self.thread.join()


def _build(device: str, background: bool) -> Workload:
    seed(11)
    width, batch, depth = size(device, 4096, 128), size(device, 4096, 64), 8
    model = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.GELU())])
    model = model.to(device)
    opt = adamw(model.parameters(), device)
    x = torch.randn(batch, width, device=device)
    target = torch.randn(batch, width, device=device)
    blob = np.random.default_rng(1).bytes(blob_size() if on_gpu(device) else 1 << 20)
    fd, path = tempfile.mkstemp(prefix="gpudoctor-lab-", suffix=".bin")
    os.close(fd)
    writer = BackgroundWriter(path) if background else None

    def step() -> None:
        if writer is not None:
            writer.submit(blob)
        else:
            write_blob(path, blob)
        with autocast(device):
            loss = F.mse_loss(model(x).float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def close() -> None:
        if writer is not None:
            writer.close()
        if os.path.exists(path):
            os.unlink(path)

    return Workload(
        step,
        close,
        flops_per_step=3 * 2 * batch * width * width * depth,
        info=lambda: {"blob_bytes": len(blob)},
    )


TRAP = Trap(
    id="host_blocking_work",
    title="Synchronous file write and fsync on the training thread every step",
    expected_finding="host-blocking-work",
    build_sick=lambda device: _build(device, background=False),
    build_fixed=lambda device: _build(device, background=True),
    with_stack=True,
    description="bf16 MLP training (8 x 4096, batch 4096); each step first writes and fsyncs a "
    "blob sized to take about 12 ms on the machine. Fixed: a background writer thread.",
)
