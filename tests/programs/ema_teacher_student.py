"""Mean teacher (self-distillation): a ResNet student and an EMA teacher updated in a Python loop.

The recipe of Tarvainen & Valpola's "mean teacher", as a blog post writes it for CIFAR-sized
images: a ResNet student (4 stages of 4 basic blocks, widths 32-256, BatchNorm; 110 parameter
tensors, ~6M parameters) is trained with cross-entropy plus a consistency loss against a teacher
that sees a differently-noised copy of the batch. The teacher is a deep copy of the student whose
weights follow the student's by an exponential moving average after every optimizer step, written
the way most repositories write it:

    for p_t, p_s in zip(teacher.parameters(), student.parameters()):
        p_t.mul_(decay).add_(p_s.detach(), alpha=1 - decay)
    for b_t, b_s in zip(teacher.buffers(), student.buffers()):
        b_t.copy_(b_s)

Batch 128 of random 32x32 images made on the device, bf16 autocast on CUDA, SGD with Nesterov
momentum (foreach by default on CUDA). A log line every ``--log-every`` iterations.

EXPECTED on an H100 (written before any run on a GPU): ``launch-bound``. The EMA update is
2 x 110 + 108 = 328 kernel launches per step on tensors of at most 0.6M elements (each a
microsecond or two on the GPU, ~5 us of Python and dispatch on the host: ~1.5-2.5 ms), next to
a student forward and backward, a teacher forward and a foreach optimizer step of some 600
kernels whose host cost (module calls, autocast casts, autograd) is ~4-5 ms. The GPU's own work
is small at batch 128 (~600 GFLOP of convolutions at 32x32 and below, a few GB of BatchNorm/ReLU
traffic: ~2.5-4 ms), so the host sets the step (~6-7 ms) and the EMA loop is about a third of it.
``optimizer-loop`` would name the EMA loop best and is acceptable, but the loop runs after
``opt.step()``, so I do not expect it first. Fixing the trap the way a user would
(``torch._foreach_lerp_(t_params, s_params, 1 - decay)`` and ``torch._foreach_copy_`` for the
buffers: a handful of kernels) should measure x1.2-1.6, less if the GPU's work turns out close to
the host's. Knobs: bf16-autocast is already on (nothing to try); tf32 ~x1.0 (every conv and the
head already run in bf16); optimizer-foreach ~x1.0 (already foreach); compile (student and
teacher forwards compiled, the EMA loop left eager) x1.2-1.8, uncertain because the loop it
leaves then holds most of the host's time; loader-workers and pin-memory do not apply (no
DataLoader). One step = one optimizer step (+ its EMA update) = one printed iteration.
"""

import argparse
import copy
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=1200)
parser.add_argument("--log-every", type=int, default=100)
parser.add_argument("--ema-decay", type=float, default=0.999)
parser.add_argument("--consistency", type=float, default=10.0)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
use_amp = device == "cuda"
if device == "cuda":
    widths, batch, image = (32, 64, 128, 256), 128, 32
else:
    widths, batch, image = (8, 16, 32, 64), 8, 16
blocks_per_stage, classes = 4, 10


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, widths, blocks_per_stage, num_classes):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            for j in range(blocks_per_stage):
                layers.append(BasicBlock(cin, w, stride=2 if (i > 0 and j == 0) else 1))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


student = ResNet(widths, blocks_per_stage, classes).to(device)
teacher = copy.deepcopy(student)
teacher.requires_grad_(False)
teacher.eval()

opt = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)


@torch.no_grad()
def update_teacher(teacher, student, decay):
    for p_t, p_s in zip(teacher.parameters(), student.parameters()):
        p_t.mul_(decay).add_(p_s.detach(), alpha=1 - decay)
    for b_t, b_s in zip(teacher.buffers(), student.buffers()):
        b_t.copy_(b_s)


def add_noise(x):
    return x + 0.15 * torch.randn_like(x)


print(f"student: {sum(p.numel() for p in student.parameters()) / 1e6:.1f}M parameters")
t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    images = torch.randn(batch, 3, image, image, device=device)
    labels = torch.randint(0, classes, (batch,), device=device)

    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=use_amp):
        student_logits = student(add_noise(images))
        with torch.no_grad():
            teacher_logits = teacher(add_noise(images))
        class_loss = F.cross_entropy(student_logits, labels)
        consistency_loss = F.mse_loss(
            student_logits.float().softmax(dim=1), teacher_logits.float().softmax(dim=1)
        )
        loss = class_loss + args.consistency * consistency_loss

    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()

    # ramp the decay up early on, as in the paper, so the teacher is not stuck at its init
    decay = min(1 - 1 / (it + 1), args.ema_decay)
    update_teacher(teacher, student, decay)

    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
