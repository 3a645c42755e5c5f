"""input-pipeline: the training loop waits for batches decoded on the main thread.

A ``DataLoader`` with ``num_workers=0`` runs ``Dataset.__getitem__`` (here a numpy decode, blur,
crop, flip and colour jitter per image) on the same thread that launches GPU work, so each step
first spends milliseconds of host time producing the batch while the GPU has nothing queued.
The copy from pageable memory then blocks as well. The fixed twin loads the same samples with
worker processes, pinned memory and ``non_blocking`` copies, so batches are ready before the GPU
asks for them.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from gpudoctor.lab.common import Block, adamw, autocast, on_gpu, seed, size
from gpudoctor.lab.trap import Trap, Workload

IMAGE = 64
PATCH = 8


class AugmentedImages(Dataset):
    """Synthetic images, "decoded" and augmented with numpy on every access."""

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, idx: int):
        rng = np.random.default_rng(idx)
        raw = rng.integers(0, 256, size=(IMAGE + 8, IMAGE + 8, 3), dtype=np.uint8)
        img = raw.astype(np.float32) / 255.0
        blur = (img[:-1, :-1] + img[1:, :-1] + img[:-1, 1:] + img[1:, 1:]) / 4
        top, left = rng.integers(0, 8, size=2)
        img = blur[top : top + IMAGE, left : left + IMAGE]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        gain, bias = rng.uniform(0.8, 1.2, size=3), rng.uniform(-0.1, 0.1, size=3)
        img = np.clip(img * gain + bias, 0.0, 1.0)
        gray = img.mean(axis=2, keepdims=True)
        img = ((0.7 * img + 0.3 * gray - 0.45) / 0.25).astype(np.float32)
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), idx % 1000


WORKER_WARMUP_S = 3.0


class PatchClassifier(nn.Module):
    def __init__(self, d_model: int, n_layers: int) -> None:
        super().__init__()
        self.embed = nn.Linear(3 * PATCH * PATCH, d_model)
        self.blocks = nn.ModuleList(Block(d_model, d_model // 64) for _ in range(n_layers))
        self.head = nn.Linear(d_model, 1000)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        b = images.shape[0]
        patches = F.unfold(images, PATCH, stride=PATCH).transpose(1, 2)
        x = self.embed(patches.reshape(b, -1, 3 * PATCH * PATCH))
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=1))


def _build(device: str, workers: int) -> Workload:
    seed(2)
    batch = size(device, 64, 8)
    model = PatchClassifier(size(device, 1536, 64), size(device, 4, 1)).to(device)
    opt = adamw(model.parameters(), device)
    gpu = on_gpu(device)
    fast = workers > 0
    loader = DataLoader(
        AugmentedImages(),
        batch_size=batch,
        shuffle=False,
        num_workers=workers if (gpu or not fast) else 2,
        pin_memory=fast and gpu,
        persistent_workers=fast,
        prefetch_factor=4 if fast else None,
    )
    it = iter(loader)
    if fast:
        # Worker processes take seconds to start; measure the fix in its steady state, with the
        # prefetch queue filled, not the workers' start-up.
        next(it)
        time.sleep(WORKER_WARMUP_S)

    def step() -> None:
        images, labels = next(it)
        images = images.to(device, non_blocking=fast)
        labels = labels.to(device, non_blocking=fast)
        with autocast(device):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def close() -> None:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()

    d = model.embed.out_features
    tokens = batch * (IMAGE // PATCH) ** 2
    flops = 3 * 2 * tokens * 12 * d * d * len(model.blocks)
    return Workload(step, close, flops_per_step=flops)


TRAP = Trap(
    id="input_pipeline",
    title="Batches decoded and augmented on the training thread",
    expected_finding="input-pipeline",
    build_sick=lambda device: _build(device, workers=0),
    build_fixed=lambda device: _build(device, workers=12),
    description="bf16 patch transformer fed by a DataLoader(num_workers=0) whose numpy "
    "augmentation takes milliseconds per batch. Fixed: 12 workers, pin_memory, non_blocking.",
)
