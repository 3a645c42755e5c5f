"""A DCGAN: a generator and a discriminator, each with its own Adam optimizer.

Each iteration updates the discriminator on real and fake images, then the generator, so two
``optimizer.step()`` calls happen per iteration. Conv nets with BatchNorm on 64x64 images, fp32
(cuDNN convolutions use TF32 by default in PyTorch), a log line every ``--log-every`` iterations.

EXPECTED on an H100: the step is dominated by cuDNN convolutions and the BatchNorm/LeakyReLU chains
around them, at batch 128 and 64x64: ``unfused-elementwise`` or ``fp32-matmul`` (convs in fp32/TF32
rather than bf16); healthy is acceptable.
One step = one iteration = one D update + one G update (two optimizer steps).
"""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
nz, ngf, ndf, batch = (100, 64, 64, 128) if device == "cuda" else (16, 8, 8, 8)


def weights_init(m):
    if "Conv" in type(m).__name__:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif "BatchNorm" in type(m).__name__:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


netG = nn.Sequential(
    nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
    nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
    nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
    nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
    nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh(),
).to(device)
netD = nn.Sequential(
    nn.Conv2d(3, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4), nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 8), nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), nn.Flatten(),
).to(device)
netG.apply(weights_init)
netD.apply(weights_init)

criterion = nn.BCEWithLogitsLoss()
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
real_images = torch.rand(batch * 4, 3, 64, 64, device=device) * 2 - 1

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    real = real_images[(it % 4) * batch : (it % 4 + 1) * batch]
    ones = torch.ones(batch, 1, device=device)
    zeros = torch.zeros(batch, 1, device=device)
    # (1) discriminator: maximize log(D(x)) + log(1 - D(G(z)))
    netD.zero_grad()
    errD_real = criterion(netD(real), ones)
    errD_real.backward()
    noise = torch.randn(batch, nz, 1, 1, device=device)
    fake = netG(noise)
    errD_fake = criterion(netD(fake.detach()), zeros)
    errD_fake.backward()
    optD.step()
    # (2) generator: maximize log(D(G(z)))
    netG.zero_grad()
    errG = criterion(netD(fake), ones)
    errG.backward()
    optG.step()
    if it % args.log_every == 0:
        d, g = (errD_real + errD_fake).item(), errG.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss_D {d:.4f} loss_G {g:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
