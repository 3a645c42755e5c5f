"""A convolutional VAE on 28x28 images, the way a tutorial trains one: batch 128, Adam, fp32.

Two strided convolutions down to a 16-dimensional latent, the reparameterisation trick, two
transposed convolutions back up; binary cross-entropy plus the KL term, summed over the batch.
Random images already on the device stand in for MNIST. Prints the mean time per iteration every
``--log-every`` (the loss read there is the only sync).
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=128)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"


class VAE(nn.Module):
    def __init__(self, latent=16):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(1, 32, 4, 2, 1), nn.ReLU(),
            nn.Conv2d(32, 64, 4, 2, 1), nn.ReLU(),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 256), nn.ReLU(),
        )
        self.mu = nn.Linear(256, latent)
        self.logvar = nn.Linear(256, latent)
        self.dec_in = nn.Linear(latent, 64 * 7 * 7)
        self.dec = nn.Sequential(
            nn.ReLU(), nn.Unflatten(1, (64, 7, 7)),
            nn.ConvTranspose2d(64, 32, 4, 2, 1), nn.ReLU(),
            nn.ConvTranspose2d(32, 1, 4, 2, 1),
        )

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(self.dec_in(z)), mu, logvar


model = VAE().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.rand(args.batch_size, 1, 28, 28, device=device)
    recon, mu, logvar = model(x)
    bce = F.binary_cross_entropy_with_logits(recon, x, reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    loss = (bce + kld) / args.batch_size
    opt.zero_grad()
    loss.backward()
    opt.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
