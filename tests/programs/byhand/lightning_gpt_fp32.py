"""A small GPT-style language model trained with ``lightning.Trainer`` at its default precision (fp32).

A ``LightningModule`` with a token embedding, 6 causal ``nn.TransformerEncoderLayer`` blocks (width
768, 12 heads, pre-norm, GELU, batch_first) and a tied output head over a 8,192-token vocabulary;
sequences of 256, batch 24, AdamW. The data set hands out pre-made random token sequences (no work
in ``__getitem__``). The Trainer is built as the quick-start shows it, with no ``precision``: fp32,
TF32 off. A ``Callback`` prints the mean time per batch.

Hand-made fixes, each one flag:
  --precision bf16-mixed: ``Trainer(precision="bf16-mixed")``, the change Lightning's docs prescribe
                          (the ``bf16-autocast`` knob's: Lightning autocasts ``training_step``, the
                          knob the outermost module's forward; the loss is computed in fp32 either way);
  --matmul-precision high: ``torch.set_float32_matmul_precision("high")`` before training (the
                          ``tf32`` knob's change).

EXPECTED on an H100 (written before any run): ``fp32-matmul`` (the GEMMs run on FP32 CUDA cores).
Hand-made --precision bf16-mixed: about x2.0-3.0; --matmul-precision high: about x1.5-2.2.
One step = one optimizer step = one training batch = one timed batch.
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
parser.add_argument("--precision", default=None)
parser.add_argument("--matmul-precision", default=None)
args = parser.parse_args()

cuda = torch.cuda.is_available()
vocab, width, depth, heads, seq, batch = (8192, 768, 6, 12, 256, 24) if cuda else (256, 32, 1, 2, 16, 4)
if args.matmul_precision:
    torch.set_float32_matmul_precision(args.matmul_precision)


class TinyGPT(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.pos = nn.Parameter(torch.zeros(1, seq, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, ids):
        x = self.embed(ids) + self.pos[:, : ids.shape[1]]
        x = self.blocks(x, mask=self.causal, is_causal=True)
        return self.norm(x) @ self.embed.weight.T

    def training_step(self, batch, batch_idx):
        ids = batch
        logits = self(ids[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), ids[:, 1:].reshape(-1))
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-4, weight_decay=0.1)


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


class RandomTokens(Dataset):
    def __init__(self, n):
        self.ids = torch.randint(0, vocab, (n, seq + 1))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return self.ids[i]


if __name__ == "__main__":
    torch.manual_seed(0)
    loader = DataLoader(RandomTokens(batch * 16), batch_size=batch, shuffle=True, drop_last=True)
    trainer = L.Trainer(max_steps=args.max_steps, accelerator="auto", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[BatchTimer(args.log_every)], **({"precision": args.precision} if args.precision else {}))
    trainer.fit(TinyGPT(), train_dataloaders=loader)
