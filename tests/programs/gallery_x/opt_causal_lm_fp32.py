"""An OPT causal language model from Hugging Face ``transformers``, built from its config (no
download) and trained in fp32 with a plain loop, as a "pretrain a small OPT" notebook writes it.

``OPTForCausalLM(OPTConfig(num_hidden_layers=8, hidden_size=768, ffn_dim=3072,
num_attention_heads=12, vocab_size=32000))``, batch 8 x 512 random tokens, ``labels=input_ids``,
``torch.optim.AdamW`` (default implementation) with a cosine schedule, gradient clipping at 1.0.
The loss is read every ``--log-every`` iterations. Prints the mean time per iteration then.
"""

import argparse
import math
import time

import torch
from transformers import OPTConfig, OPTForCausalLM

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--seq", type=int, default=512)
parser.add_argument("--layers", type=int, default=8)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
config = OPTConfig(num_hidden_layers=args.layers, hidden_size=768, ffn_dim=3072,
                   num_attention_heads=12, vocab_size=32000, max_position_embeddings=1024,
                   word_embed_proj_dim=768)
model = OPTForCausalLM(config).to(device)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s / args.iters, 1.0))))

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {loss.item():.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
