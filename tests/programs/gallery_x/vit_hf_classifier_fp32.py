"""A Vision Transformer from Hugging Face ``transformers`` (``ViTForImageClassification`` built
from a config, no download) fine-tuned in fp32 on random 224 x 224 images, 100 classes, batch 32,
with ``torch.optim.AdamW`` and label smoothing, the way an image-classification tutorial writes
its loop. Prints the mean time per iteration every ``--log-every``.
"""

import argparse
import time

import torch
from torch import nn
from transformers import ViTConfig, ViTForImageClassification

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=200)
parser.add_argument("--log-every", type=int, default=25)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--size", type=int, default=224)
parser.add_argument("--layers", type=int, default=8)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
config = ViTConfig(image_size=args.size, patch_size=16, num_hidden_layers=args.layers,
                   hidden_size=512, intermediate_size=2048, num_attention_heads=8,
                   num_labels=100)
model = ViTForImageClassification(config).to(device)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    pixels = torch.randn(args.batch_size, 3, args.size, args.size, device=device)
    labels = torch.randint(0, 100, (args.batch_size,), device=device)
    loss = criterion(model(pixel_values=pixels).logits, labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {loss.item():.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
