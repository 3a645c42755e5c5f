"""Record a CPU-only training trace (no GPU activity) as a fixture: tests/data/cpu_only/.

    python scripts/record_cpu_only_fixture.py --out tests/data/cpu_only

A small MLP trained on the CPU from a DataLoader (num_workers=0, batch 64) with SGD + momentum;
``prof.step()`` once per iteration, 3 active steps after 1 warm-up, activities=[CPU] only, as
``gpudoctor run`` records a program on a machine without CUDA. Writes DIR/trace.json.gz.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # steadier step times on a shared CI machine
    data = TensorDataset(torch.randn(1024, 128), torch.randint(0, 10, (1024,)))
    loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    with profile(
        activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3, repeat=1)
    ) as prof:
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()
            if i == 5:
                break
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.GzipFile(args.out / "trace.json.gz", "wb", mtime=0) as dst:
            shutil.copyfileobj(src, dst)


if __name__ == "__main__":
    main()
