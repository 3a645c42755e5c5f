"""VGG-11 with batch norm trained on CIFAR-sized images in fp32, as tutorials write it: a config
list of channel widths and "M" for max-pooling, Conv2d + BatchNorm2d + ReLU(inplace) per entry,
NCHW, a dropout classifier, SGD with momentum and weight decay, a step schedule. The dataset
(20,000 random 32 x 32 images, 10 classes) sits on the GPU in fp32; each step takes a shuffled
batch. Prints the mean time per iteration every ``--log-every``.
"""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=400)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=128)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
CFG = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]


def make_layers(cfg):
    layers, c_in = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c_in, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
            c_in = v
    return nn.Sequential(*layers)


class VGG(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.features = make_layers(CFG)
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Linear(512, 512), nn.ReLU(True),
                                        nn.Dropout(0.5), nn.Linear(512, n_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


torch.manual_seed(0)
images = torch.randn(20_000, 3, 32, 32, device=device)
labels = torch.randint(0, 10, (20_000,), device=device)
model = VGG().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=max(args.iters // 3, 1), gamma=0.1)
criterion = nn.CrossEntropyLoss()

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    idx = torch.randint(0, images.shape[0], (args.batch_size,), device=device)
    x, y = images[idx], labels[idx]
    loss = criterion(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {loss.item():.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
