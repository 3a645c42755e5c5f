"""An MLP on a CSV table, with a Dataset that parses one text row per item on the training thread.

The way a first tabular project reads its data: the CSV file's lines are kept in memory (here made
at start-up: 200,000 rows of 48 numeric features and a class label, the stand-in for
``open("train.csv").read().splitlines()``), and ``Dataset.__getitem__`` splits one line on commas,
converts the fields with ``float``, standardises them with numpy (column means and stds estimated
once on the first rows) and returns a fresh ``torch.tensor`` per sample.
``DataLoader(batch_size=256, shuffle=True)`` with the default ``num_workers=0``; batches moved with
``.to(device)``. The model is a modest MLP (three hidden Linear layers of width 1024, ReLU,
dropout) in bf16 autocast on CUDA, AdamW. A log line every ``--log-every`` iterations; the loop
runs over as many epochs as ``--iters`` needs.

EXPECTED on an H100 (written before any run on a GPU): ``input-pipeline``. Parsing a row costs
~25-30 us of Python (split, 48 ``float`` calls, a numpy array and two small numpy ops, two
``torch.tensor``), so a batch of 256 plus its collate is ~6-9 ms of host work inside
``next(iterator)``, while the model's step is ~3.5 GFLOP (~20-50 us on the GPU) and ~1 ms of host
dispatch: the GPU idles ~85-90% of the step. ``launch-bound`` is what remains after the fix. With
W workers the batches arrive W times as fast, down to the main process's own cost per step
(receiving the batch from a worker, the copy, ~1 ms of dispatch): with 8 workers ~1.2-2 ms, so
the fix should measure x4-7 (less where the host has few free cores). Knobs: loader-workers
x4-7; pin-memory ~x1.0 (a 49 KB batch copies in microseconds either way); bf16-autocast is
already on (nothing to try); tf32 ~x1.0 (the GEMMs already run in bf16); compile ~x1.0 (the
model is not what the step waits for). One step = one optimizer step = one batch = one printed
iteration.
"""

import argparse
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=1500)
parser.add_argument("--log-every", type=int, default=100)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
use_amp = device == "cuda"
num_features, num_classes, batch_size = 48, 10, 256
num_rows, hidden = (200_000, 1024) if device == "cuda" else (6_000, 256)


def make_csv_lines(rows, features, classes, seed=0):
    """What reading the CSV file would give: a header and one text line per row."""
    rng = np.random.default_rng(seed)
    X = rng.normal(loc=3.0, scale=2.0, size=(rows, features))
    y = (X[:, :classes] + rng.normal(size=(rows, classes))).argmax(axis=1)
    header = ",".join([f"f{i}" for i in range(features)] + ["label"])
    fmt = ",".join(["%.5f"] * features) + ",%d"
    return [header] + [fmt % (*row, label) for row, label in zip(X.tolist(), y.tolist())]


class CSVDataset(Dataset):
    def __init__(self, lines, stats_rows=1000):
        self.columns = lines[0].split(",")
        self.rows = lines[1:]
        # estimate the normalisation on the first rows
        sample = np.array([[float(v) for v in r.split(",")[:-1]] for r in self.rows[:stats_rows]])
        self.mean = sample.mean(axis=0).astype(np.float32)
        self.std = sample.std(axis=0).astype(np.float32) + 1e-6

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, idx):
        fields = self.rows[idx].split(",")
        features = np.array([float(v) for v in fields[:-1]], dtype=np.float32)
        features = (features - self.mean) / self.std
        label = int(fields[-1])
        return torch.tensor(features), torch.tensor(label)


t_load = time.perf_counter()
dataset = CSVDataset(make_csv_lines(num_rows, num_features, num_classes))
loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True)
print(
    f"{len(dataset)} rows, {len(loader)} batches per epoch ({time.perf_counter() - t_load:.1f} s)"
)

model = nn.Sequential(
    nn.Linear(num_features, hidden),
    nn.ReLU(),
    nn.Dropout(0.1),
    nn.Linear(hidden, hidden),
    nn.ReLU(),
    nn.Dropout(0.1),
    nn.Linear(hidden, hidden),
    nn.ReLU(),
    nn.Dropout(0.1),
    nn.Linear(hidden, num_classes),
).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)

epochs = math.ceil(args.iters / len(loader))
it = 0
t0 = time.perf_counter()
for epoch in range(epochs):
    print(f"epoch {epoch + 1}/{epochs}", flush=True)
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=use_amp):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        it += 1
        if it % args.log_every == 0:
            lossf = loss.item()
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
            t0 = time.perf_counter()
        if it == args.iters:
            break
