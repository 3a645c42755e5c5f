"""Fine-tuning a DistilBERT-sized sentence classifier in fp32, the way a notebook does it.

``DistilBertForSequenceClassification`` built from its config (random weights, nothing
downloaded), sequences of 128 tokens, batch 32, AdamW with a linear warm-up, gradient clipping,
no autocast. Random token ids already on the device stand in for a tokenized dataset. Prints the
mean time per iteration every ``--log-every``.
"""

import argparse
import time

import torch
from transformers import (
    DistilBertConfig,
    DistilBertForSequenceClassification,
    get_linear_schedule_with_warmup,
)

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=200)
parser.add_argument("--log-every", type=int, default=20)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--seq-len", type=int, default=128)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
config = DistilBertConfig(num_labels=4)
if device == "cpu":  # keep the CPU smoke run short
    config = DistilBertConfig(num_labels=4, n_layers=2, dim=128, hidden_dim=256, n_heads=2)
model = DistilBertForSequenceClassification(config).to(device)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01)
sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=50, num_training_steps=args.iters)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    input_ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device=device)
    attention_mask = torch.ones_like(input_ids)
    labels = torch.randint(0, 4, (args.batch_size,), device=device)
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if it % args.log_every == 0:
        lossf = out.loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
