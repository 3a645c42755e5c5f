"""Greedy ``model.generate`` with a tiny, randomly initialised Hugging Face causal LM (no download).

A Llama built from a config (bf16 on CUDA), prompts of random token ids, ``max_new_tokens=32``,
``do_sample=False``; the script times each ``generate`` call and prints the mean every
``--log-every`` calls. No optimizer, no backward.

EXPECTED on an H100: decoding one token at a time at batch 8 with a small model is a long chain of
tiny kernels that the host cannot launch fast enough: ``launch-bound`` (``small-gemm`` acceptable).
One step = one ``generate`` call = 1 prefill + 31 decode forwards (per-token timing is a bonus).
"""

import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

parser = argparse.ArgumentParser()
parser.add_argument("--calls", type=int, default=30)
parser.add_argument("--log-every", type=int, default=5)
parser.add_argument("--max-new-tokens", type=int, default=32)
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
if cuda:
    cfg = {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8, "num_attention_heads": 16,
               "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 2048}
    batch, prompt_len = 8, 128
else:
    cfg = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 256}
    batch, prompt_len = 2, 16

config = LlamaConfig(**cfg, pad_token_id=0, bos_token_id=1, eos_token_id=2)
model = LlamaForCausalLM(config).to(device, dtype=torch.bfloat16 if cuda else torch.float32).eval()

t0 = time.perf_counter()
for call in range(1, args.calls + 1):
    prompt = torch.randint(3, config.vocab_size, (batch, prompt_len), device=device)
    attention_mask = torch.ones_like(prompt)
    out = model.generate(prompt, attention_mask=attention_mask, max_new_tokens=args.max_new_tokens,
                         min_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=0)
    if call % args.log_every == 0:
        new_tokens = out.shape[1] - prompt_len
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"call {call}: {new_tokens} new tokens, {ms:.2f} ms/call", flush=True)
        t0 = time.perf_counter()
