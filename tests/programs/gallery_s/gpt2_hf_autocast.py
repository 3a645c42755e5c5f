"""A small GPT-2 from transformers' config, trained under bf16 autocast, the way the
"train a language model from scratch" notebooks write it without the Trainer.

``AutoModelForCausalLM.from_config(GPT2Config(n_layer=6, n_embd=512, n_head=8, n_positions=512))`` with the
eager attention (``attn_implementation="eager"``, as older transformers picked), vocab 16384,
batch 16 x 256 random tokens already on the device, ``torch.autocast("cuda", torch.bfloat16)``
around the forward, AdamW, gradient clipping at 1.0. Prints the mean time per iteration every
``--log-every``.
"""

import argparse
import time

import torch
from transformers import AutoModelForCausalLM, GPT2Config

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--seq", type=int, default=256)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
config = GPT2Config(vocab_size=16384, n_positions=512, n_embd=512, n_layer=6, n_head=8)
model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").to(device)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq), device=device)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if it % args.log_every == 0:
        lossf = out.loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
