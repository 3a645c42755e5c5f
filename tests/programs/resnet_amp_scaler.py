"""A small ResNet trained the way the AMP recipe says: fp16 autocast, GradScaler, channels_last.

ResNet-18-style BasicBlocks (two 3x3 convs, BatchNorm, ReLU, a 1x1 projection shortcut when the
shape changes) on random 96x96 images generated on the GPU, ``torch.autocast(dtype=float16)`` +
``torch.amp.GradScaler``, model and input in ``channels_last``, SGD with momentum and weight decay
(foreach on CUDA); a log line every ``--log-every`` iterations (the loop's only ``.item()``).

EXPECTED on an H100: no major problem. Convolutions run fp16 on the tensor cores in the layout
cuDNN prefers, the optimizer is multi-tensor, and no data comes from the host. What is left is the
eager BatchNorm / ReLU / residual-add chains between the convolutions: ``unfused-elementwise``
(minor) or healthy. ``scaler.step`` reads ``found_inf`` back to the host every step (one small sync
after the backward is queued); with ~20+ ms of GPU work behind it the refill costs little, so
``host-sync`` is acceptable only as a minor reading. The scaler skips ``optimizer.step`` while its
scale is too large (the first few iterations): those iterations merge into the next step.
One step = one optimizer step = one batch = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
use_amp = device == "cuda"
image, batch, width, num_classes = (96, 128, 64, 1000) if device == "cuda" else (32, 8, 8, 10)
torch.backends.cudnn.benchmark = True


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, w, n_classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True))
        layers, cin = [], w
        for i, cout in enumerate([w, 2 * w, 4 * w, 8 * w]):
            stride = 1 if i == 0 else 2
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, n_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


model = ResNet(width, num_classes).to(device).to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
scaler = torch.amp.GradScaler(device, enabled=use_amp)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(batch, 3, image, image, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(num_classes, (batch,), device=device)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=use_amp):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, scale {scaler.get_scale():.0f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
