"""A small vision transformer trained in plain fp32, with the training accuracy read every step.

A ViT the way a "ViT from scratch in PyTorch" post builds it: a 16x16 patch-embedding
convolution, a class token and learned position embeddings, six ``nn.TransformerEncoderLayer``
blocks (width 384, 6 heads, MLP 1536, pre-norm, GELU, ``batch_first=True``), a linear head over
1000 classes. Random 224px images, batch 64, made on the device; AdamW with a cosine schedule,
label smoothing. No autocast and TF32 left off (PyTorch's default for matmuls). Each step
computes the batch's accuracy with ``(logits.argmax(1) == y).float().mean().item()`` and adds
it to a Python float, so the host waits for the GPU once per step. A log line every
``--log-every`` iterations with the mean time per iteration and the running accuracy.

EXPECTED on an H100 (written before any run on a GPU): ``fp32-matmul``. A step is ~0.8 TFLOP of
GEMMs (64 x 197 tokens through six blocks of 384 -> 1152 / 384 / 1536 / 384 projections, forward
and backward) plus ~0.08 TFLOP of attention; in fp32 the GEMMs run on CUDA cores (~67 TFLOP/s
peak, ~50 achieved: ~16 ms) and the attention on the fp32 memory-efficient kernel (~2-3 ms), so
the GPU sets a ~20-25 ms step while the host needs ~4-6 ms. The ``.item()`` every step is
``host-sync`` but minor: the host's launches are far ahead, so the sync costs only the refill of
an empty queue at the next step's start (well under 1 ms). Fixing the trap with bf16 autocast
(GEMMs at several hundred TFLOP/s, flash attention) should leave a step of ~5-7 ms, now about
as much the host's as the GPU's: x2.5-4.5 (the per-step sync then matters more, a few percent).
Knobs: bf16-autocast x2.5-4.5; tf32 x2-3.2 (GEMMs at the TF32 rate, but fp32 attention and fp32
elementwise traffic stay); compile x1.0-1.2 (fuses the LayerNorm/GELU/dropout/residual traffic,
the fp32 GEMMs stay; the ``.item()`` is outside the model's forward); loader-workers and
pin-memory do not apply (no DataLoader). One step = one optimizer step = one printed iteration.
"""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=600)
parser.add_argument("--log-every", type=int, default=50)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    image, patch, width, depth, heads, batch = 224, 16, 384, 6, 6, 64
else:
    image, patch, width, depth, heads, batch = 32, 8, 64, 2, 4, 8
num_classes = 1000


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, width, kernel_size=patch, stride=patch)
        num_patches = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, width) * 0.02)
        block = nn.TransformerEncoderLayer(
            d_model=width,
            nhead=heads,
            dim_feedforward=4 * width,
            dropout=0.1,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(block, num_layers=depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, N, D)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.encoder(x)
        return self.head(self.norm(x[:, 0]))


model = ViT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.iters)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)

running_acc = 0.0
t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    images = torch.randn(batch, 3, image, image, device=device)
    labels = torch.randint(0, num_classes, (batch,), device=device)

    logits = model(images)
    loss = criterion(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()

    acc = (logits.argmax(1) == labels).float().mean().item()
    running_acc += acc

    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(
            f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter, "
            f"train acc {100 * running_acc / args.log_every:.2f}%",
            flush=True,
        )
        running_acc = 0.0
        t0 = time.perf_counter()
