"""Record a Lightning training window on a GPU through gpudoctor's own Lightning callback.

    PYTHONPATH=src python scripts/record_lightning_closure.py --out DIR [--for-loop]

Lightning steps the optimizer as ``optimizer.step(closure)``: the closure's forward and backward
run inside the ``Optimizer.step#AdamW.step`` annotation. The model is a healthy bf16-mixed MLP
(8 x Linear(2048, 2048), batch 512, its input resident on the GPU) with a multi-tensor
(``foreach=True``) AdamW; ``--for-loop`` uses ``foreach=False`` instead, the optimizer-loop trap.
``GpuDoctorCallback(skip=5, steps=3)`` writes DIR/lightning-<stamp>/{trace.json.gz, env.json,
report.json}; tests/data/lightning_closure/trace.json.gz is the healthy run's trace.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import lightning.pytorch as pl
import torch

from gpudoctor.integrations.lightning import GpuDoctorCallback

WIDTH, DEPTH, BATCH = 2048, 8, 512


class Mlp(pl.LightningModule):
    def __init__(self, foreach: bool) -> None:
        super().__init__()
        self.foreach = foreach
        layers: list[torch.nn.Module] = []
        for _ in range(DEPTH):
            layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
        self.net = torch.nn.Sequential(*layers)
        self.register_buffer("x", torch.randn(BATCH, WIDTH))  # no input pipeline in the way

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.net(self.x).float().square().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-4, foreach=self.foreach)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument(
        "--for-loop", action="store_true", help="AdamW(foreach=False): the optimizer-loop trap"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(
        torch.arange(40), batch_size=1
    )  # 40 steps; the batch is unused
    callback = GpuDoctorCallback(skip=5, steps=3, out=args.out)
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="gpu",
        devices=1,
        precision="bf16-mixed",
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Mlp(foreach=not args.for_loop), loader)
    report = callback.report()
    print(f"{callback.run_dir}: step {report.step_ms:.3f} ms")
    for f in report.findings:
        print(f"  [{f.severity}] {f.id} ~{f.saving_ms:.3f} ms/step {f.evidence.numbers}")


if __name__ == "__main__":
    main()
