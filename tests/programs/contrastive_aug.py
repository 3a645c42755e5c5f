"""A SimCLR-style contrastive loop: two augmented views per image, made on the CPU in the main process.

The dataset holds uint8 images in CPU memory; ``__getitem__`` makes two views of an image with
torch ops on CPU tensors (random resized crop via ``F.interpolate``, horizontal flip, brightness
and contrast jitter), the way a hand-written SimCLR transform does. The ``DataLoader`` is the
default one (``num_workers=0``, no pinned memory), so all of it runs on the training thread, and
each batch of both views is moved with ``.to('cuda')`` from pageable memory. A small CNN encoder +
projection head, bf16 autocast on CUDA, NT-Xent loss, AdamW; a log line every ``--log-every``
iterations.

EXPECTED on an H100: ``input-pipeline``. Two crops + resizes + jitters per image, 128 images a
batch, one at a time on one core, take far longer than the encoder's forward/backward on the GPU,
which waits in ``DataLoader.__next__`` every step. ``pageable-copy`` is the acceptable second
reading (2 x 128 x 3 x 96 x 96 fp32 = 28.3 MB copied host-to-device from pageable memory each
step), but the loader's cost dwarfs it.
One step = one optimizer step = one batch (of pairs) = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
src_size, crop, batch, width, n_images = (128, 96, 128, 64, 4096) if device == "cuda" else (40, 32, 8, 8, 64)


class TwoViews(Dataset):
    def __init__(self, n):
        self.images = torch.randint(0, 256, (n, 3, src_size, src_size), dtype=torch.uint8)

    def __len__(self):
        return len(self.images)

    def augment(self, img):
        img = img.float() / 255.0
        # random resized crop: 40-100% of the area, then back to crop x crop
        frac = torch.empty(1).uniform_(0.4, 1.0).item()
        side = max(8, int(src_size * frac**0.5))
        top = torch.randint(0, src_size - side + 1, (1,)).item()
        left = torch.randint(0, src_size - side + 1, (1,)).item()
        img = img[:, top:top + side, left:left + side]
        img = F.interpolate(img[None], size=(crop, crop), mode="bilinear", align_corners=False)[0]
        if torch.rand(1).item() < 0.5:
            img = img.flip(-1)
        brightness = torch.empty(1).uniform_(0.6, 1.4)
        contrast = torch.empty(1).uniform_(0.6, 1.4)
        mean = img.mean()
        img = ((img * brightness - mean) * contrast + mean).clamp(0, 1)
        return (img - 0.5) / 0.25

    def __getitem__(self, i):
        img = self.images[i]
        return self.augment(img), self.augment(img)


def conv_bn(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


encoder = nn.Sequential(
    conv_bn(3, width, 1), conv_bn(width, width, 1),
    conv_bn(width, 2 * width, 2), conv_bn(2 * width, 2 * width, 1),
    conv_bn(2 * width, 4 * width, 2), conv_bn(4 * width, 4 * width, 1),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(),
)
projector = nn.Sequential(nn.Linear(4 * width, 512), nn.ReLU(inplace=True), nn.Linear(512, 128))
model = nn.Sequential(encoder, projector).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-6)
loader = DataLoader(TwoViews(n_images), batch_size=batch, shuffle=True, drop_last=True)
ctx = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else torch.autocast("cpu", enabled=False)


def nt_xent(z1, z2, temperature=0.2):
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = z @ z.t() / temperature
    n = z1.shape[0]
    sim.fill_diagonal_(float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, targets)


it = 0
t0 = time.perf_counter()
while it < args.iters:
    for v1, v2 in loader:
        it += 1
        v1, v2 = v1.to(device), v2.to(device)
        with ctx:
            loss = nt_xent(model(v1).float(), model(v2).float())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            lossf = loss.item()
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
            t0 = time.perf_counter()
        if it >= args.iters:
            break
