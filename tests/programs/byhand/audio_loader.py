"""Keyword spotting on log-mel-like spectrograms computed in the Dataset, two loader workers.

Each sample is a 1 s "recording" (16 kHz, synthesised from the index) turned into a log-power
spectrogram with numpy in ``__getitem__`` (400-sample frames, hop 160, Hann window, ``np.fft.rfft``,
a 64-band triangular filter bank, log), plus time masking as augmentation. The DataLoader has
``num_workers=2`` (copied from a laptop config) and no pinned memory; a 1-D conv net trains on the
batches under bf16 autocast with AdamW.

Hand-made fixes, each one flag (the same change a user would make):
  --num-workers N / --pin-memory / --persistent-workers: the DataLoader's arguments.
  The ``loader-workers`` knob's equivalent on a 16-CPU machine: --num-workers 4 --pin-memory (twice
  the workers the program asked for, pinned; the program passes persistent_workers, so the knob keeps it).

EXPECTED on an H100 (written before any run): ``input-pipeline`` (two workers cannot keep up with
the spectrograms; the GPU step is a few ms). Hand-made ``--num-workers 4 --pin-memory
--persistent-workers`` (as first written): about x1.6-2.0 (the step is the loader's: half the time with twice the
workers, until the GPU step shows).
One step = one optimizer step = one batch = one printed iteration.
"""

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--num-workers", type=int, default=2)
parser.add_argument("--pin-memory", action="store_true")
parser.add_argument("--persistent-workers", action="store_true")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
batch, seconds = (64, 1.0) if cuda else (4, 0.25)
RATE, FRAME, HOP, BANDS = 16000, 400, 160, 64


def mel_filters(bins: int, bands: int) -> np.ndarray:
    edges = np.linspace(0, bins - 1, bands + 2)
    grid = np.arange(bins)[None, :]
    left, centre, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    return np.maximum(0.0, np.minimum((grid - left) / (centre - left), (right - grid) / (right - centre))).astype(np.float32)


FILTERS = mel_filters(FRAME // 2 + 1, BANDS)
WINDOW = np.hanning(FRAME).astype(np.float32)


class SpeechCommands(Dataset):
    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        t = np.arange(int(RATE * seconds), dtype=np.float32) / RATE
        label = int(rng.integers(0, 12))
        wave = np.sin(2 * np.pi * (200 + 40 * label) * t) + 0.3 * rng.standard_normal(t.shape).astype(np.float32)
        frames = np.lib.stride_tricks.sliding_window_view(wave, FRAME)[::HOP] * WINDOW
        power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
        spec = np.log(power @ FILTERS.T + 1e-6).astype(np.float32)
        start = int(rng.integers(0, spec.shape[0] - 10))
        spec[start:start + 10] = 0.0  # time masking
        spec = (spec - spec.mean()) / (spec.std() + 1e-5)
        return torch.from_numpy(np.ascontiguousarray(spec.T)), label


class KeywordNet(nn.Module):
    def __init__(self):
        super().__init__()
        layers, c = [], BANDS
        for width in (128, 128, 256, 256):
            layers += [nn.Conv1d(c, width, 5, padding=2), nn.BatchNorm1d(width), nn.ReLU(), nn.MaxPool1d(2)]
            c = width
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, 12)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=2))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = KeywordNet().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(SpeechCommands(batch * (args.iters + 8)), batch_size=batch, shuffle=True, drop_last=True,
                        num_workers=args.num_workers, pin_memory=args.pin_memory,
                        persistent_workers=args.persistent_workers and args.num_workers > 0)
    t0 = time.perf_counter()
    for it, (x, y) in enumerate(loader, start=1):
        x, y = x.to(device), y.to(device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it}: loss {loss.item():.4f}, {(time.perf_counter() - t0) / args.log_every * 1000:.2f} ms/iter",
                  flush=True)
            t0 = time.perf_counter()
        if it >= args.iters:
            break
