"""A T5 encoder-decoder from Hugging Face ``transformers``, built from its config (no download) and
fine-tuned in fp32 with a plain loop, as a "train a small T5 on my pairs" script writes it.

``T5ForConditionalGeneration(T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8,
vocab_size=32128))``, batch 16, 256 source tokens and 64 target tokens drawn at random each step,
``labels=`` the targets, ``torch.optim.AdamW`` (default implementation), a linear warm-up,
gradient clipping at 1.0. The loss is read every ``--log-every`` iterations. Prints the mean time
per iteration then.
"""

import argparse
import time

import torch
from transformers import T5Config, T5ForConditionalGeneration

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=200)
parser.add_argument("--log-every", type=int, default=20)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--src", type=int, default=256)
parser.add_argument("--tgt", type=int, default=64)
parser.add_argument("--layers", type=int, default=6)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
config = T5Config(d_model=512, d_ff=2048, d_kv=64, num_layers=args.layers,
                  num_decoder_layers=args.layers, num_heads=8, vocab_size=32128,
                  dropout_rate=0.1, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
model = T5ForConditionalGeneration(config).to(device)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
warmup = 50
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    src = torch.randint(2, config.vocab_size, (args.batch_size, args.src), device=device)
    tgt = torch.randint(2, config.vocab_size, (args.batch_size, args.tgt), device=device)
    loss = model(input_ids=src, attention_mask=torch.ones_like(src), labels=tgt).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {loss.item():.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
