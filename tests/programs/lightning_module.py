"""A ``LightningModule`` trained by ``lightning.Trainer``: an MLP classifier on random features.

Ordinary Lightning: ``training_step`` returns the loss, ``configure_optimizers`` returns Adam
(foreach by default), the Trainer runs ``optimizer.step(closure)`` (forward and backward happen
inside the optimizer step), bf16-mixed precision on CUDA, no logger, no checkpoints, no progress
bar; the data set hands out whole pre-made batches. A ``Callback`` prints the mean time per batch every ``--log-every`` batches.

EXPECTED on an H100: healthy. Wide bf16 matmuls (4096 x 4096 weights, batch 4096) dominate the step; the
foreach Adam update is a few percent of it. In particular NOT ``optimizer-loop``: the closure's
forward/backward belong to the step, not to the optimizer.
One step = one optimizer step = one training batch (the closure runs forward + backward once).
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

try:
    import lightning as L
except ImportError:  # the older package name
    import pytorch_lightning as L

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

cuda = torch.cuda.is_available()
in_dim, width, depth, batch, n_classes = (1024, 4096, 4, 4096, 1000) if cuda else (32, 64, 3, 32, 10)


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        layers = [nn.Linear(in_dim, width), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        return self.head(self.body(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class BatchTimer(L.Callback):
    def __init__(self, every):
        self.every = every
        self.t0 = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if self.t0 is None:
            self.t0, self.last = time.perf_counter(), step
            return
        if step % self.every == 0:
            loss = outputs["loss"].item()
            ms = (time.perf_counter() - self.t0) / (step - self.last) * 1000
            print(f"batch {step}: loss {loss:.4f}, {ms:.2f} ms/batch", flush=True)
            self.t0, self.last = time.perf_counter(), step




class PreBatched(Dataset):
    """Eight fixed batches, handed out whole (``batch_size=None``): no per-sample collate."""

    def __init__(self):
        self.x = torch.randn(8, batch, in_dim)
        self.y = torch.randint(n_classes, (8, batch))

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return self.x[i], self.y[i]


# the Trainer goes round the data set as many times as max_steps needs
loader = DataLoader(PreBatched(), batch_size=None, shuffle=True, pin_memory=cuda)

trainer = L.Trainer(
    max_steps=args.max_steps,
    accelerator="auto",
    devices=1,
    precision="bf16-mixed" if cuda else "32-true",
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    callbacks=[BatchTimer(args.log_every)],
)
trainer.fit(Classifier(), train_dataloaders=loader)
print("done")
