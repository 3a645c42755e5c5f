"""A GPT-2 language model from Hugging Face ``transformers``, built from its config (no download)
and trained with a hand-written loop in fp32, the way a "train GPT-2 from scratch" blog post
writes it.

``GPT2LMHeadModel(GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=16384,
n_positions=512))``, batch 16 x 256 random tokens, ``labels=input_ids`` (the model shifts them
itself), AdamW with weight decay, gradient clipping at 1.0 and a linear warmup schedule from
``transformers.get_linear_schedule_with_warmup``. The loss is read with ``loss.item()`` every
``--log-every`` iterations only. Prints the mean time per iteration every ``--log-every``.
"""

import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--seq", type=int, default=256)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
config = GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=16384, n_positions=512)
model = GPT2LMHeadModel(config).to(device)
model.train()

decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                         {"params": no_decay, "weight_decay": 0.0}], lr=3e-4)
sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=100, num_training_steps=args.iters)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {out.loss.item():.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
