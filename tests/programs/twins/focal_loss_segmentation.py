"""A segmentation network trained with a focal loss written out elementwise in float32.

A light encoder-decoder (conv + ReLU stages of 32-128 channels down and up, bf16 autocast,
channels_last) predicts 19 classes on 16 images of 256x256; the loss is a multi-class focal loss
written the way it is usually copied: softmax in float32, a one-hot target (``F.one_hot``, permuted
and cast), the target's probability as a masked sum, ``(1 - p_t) ** gamma * log(p_t)`` weighted by
class. ~20M logits pass through about ten separate elementwise and reduction kernels forward and as
many backward, each reading and writing them in HBM.

--fixed: the same loss function wrapped in ``torch.compile`` (fused into a few kernels); the
model, data and optimizer unchanged.

EXPECTED on an H100: ``unfused-elementwise`` first (the loss's chain of memory-bound kernels).
Measured speedup with --fixed: about x1.3-2.0 (the loss is about half of a
~4-6 ms step).
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
parser.add_argument("--fixed", action="store_true", help="torch.compile the loss")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
side, batch, classes = (256, 16, 19) if cuda else (32, 2, 19)
torch.manual_seed(0)


def block(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, 1, 1), nn.ReLU(inplace=True))


class SegNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.ModuleList([block(3, 32), block(32, 64), block(64, 128), block(128, 128)])
        self.up = nn.ModuleList([block(128, 128), block(128, 64), block(64, 32), block(32, 32)])
        self.head = nn.Conv2d(32, classes, 1)

    def forward(self, x):
        for i, b in enumerate(self.down):
            x = b(x) if i == 0 else b(F.max_pool2d(x, 2))
        for i, b in enumerate(self.up):
            x = b(x) if i == 0 else b(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        return self.head(x)


class_weights = torch.linspace(0.5, 2.0, classes, device=device)


def focal_loss(logits, target, gamma=2.0, eps=1e-6):
    p = logits.float().softmax(dim=1)
    one_hot = F.one_hot(target, classes).permute(0, 3, 1, 2).float()
    p_t = (p * one_hot).sum(1)
    w = (one_hot * class_weights.view(1, -1, 1, 1)).sum(1)
    return (-w * (1.0 - p_t) ** gamma * torch.log(p_t + eps)).mean()


loss_fn = torch.compile(focal_loss) if args.fixed else focal_loss
model = SegNet().to(device, memory_format=torch.channels_last)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
images = torch.randn(2 * batch, 3, side, side, device=device).contiguous(memory_format=torch.channels_last)
masks = torch.randint(classes, (2 * batch, side, side), device=device)
t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    rows = slice((it % 2) * batch, (it % 2 + 1) * batch)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        logits = model(images[rows])
    loss = loss_fn(logits, masks[rows])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
