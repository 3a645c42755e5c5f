"""A small Vision Transformer trained in plain fp32 (no autocast, TF32 left off).

Patch embedding by a strided conv (224x224 images, 16x16 patches: 196 tokens + a class token),
8 ``nn.TransformerEncoderLayer`` blocks (width 512, 8 heads, pre-norm, GELU, batch_first), a linear
head; batch 64, AdamW, random images made on the GPU (no loader). Written the way the tutorial wrote
it: nothing about precision anywhere.

Hand-made fixes, each one flag:
  --bf16: ``with torch.autocast("cuda", dtype=torch.bfloat16): logits = model(x)`` (the loss
          outside it), the ``bf16-autocast`` knob's change;
  --tf32: ``torch.backends.cuda.matmul.allow_tf32 = True`` and ``torch.backends.cudnn.allow_tf32 =
          True``, the ``tf32`` knob's change.

EXPECTED on an H100 (written before any run): ``fp32-matmul`` (the step's GEMMs run on FP32 CUDA
cores, ~50 TFLOP/s at best). Hand-made --bf16: about x2.0-3.5; --tf32: about x1.6-2.5 (the GEMMs
gain, the elementwise and softmax work stays as it was).
One step = one optimizer step = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--bf16", action="store_true")
parser.add_argument("--tf32", action="store_true")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
image, patch, width, depth, batch = (224, 16, 512, 8, 64) if cuda else (32, 8, 64, 2, 4)
if args.tf32:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


class ViT(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.patchify = nn.Conv2d(3, width, patch, stride=patch)
        tokens = (image // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.pos = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, 8, 4 * width, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.patchify(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.blocks(x)
        return self.head(self.norm(x[:, 0]))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = ViT().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
    t0 = time.perf_counter()
    for it in range(1, args.iters + 1):
        x = torch.randn(batch, 3, image, image, device=device)
        y = torch.randint(0, 1000, (batch,), device=device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it}: loss {loss.item():.4f}, {(time.perf_counter() - t0) / args.log_every * 1000:.2f} ms/iter",
                  flush=True)
            t0 = time.perf_counter()
