"""Hugging Face ``Trainer`` on a tiny, randomly initialised Llama (built from a config: no download).

The data set is random token ids in a plain ``torch.utils.data.Dataset``; ``TrainingArguments``
asks for bf16 on CUDA, AdamW (``adamw_torch``), no checkpoints, no reporting integrations. A small
``TrainerCallback`` prints the mean time per optimizer step every ``--log-every`` steps, the way
people add a throughput line to their own runs.

EXPECTED on an H100: the model is small (hidden 512, 4 layers, 8k tokens a step), so the eager
Llama's many small elementwise kernels (RMSNorm in fp32, rotary, SiLU-gate, casts) dominate:
``unfused-elementwise``; ``launch-bound`` is an acceptable second reading. The Trainer's closure-less
AdamW (foreach) must not be called an optimizer-loop.
One step = one optimizer step = one forward/backward (gradient_accumulation_steps=1).
"""

import argparse
import tempfile
import time

import torch
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

cuda = torch.cuda.is_available()
if cuda:
    cfg = {"hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4, "num_attention_heads": 8,
               "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 1024}
    seq_len, batch = 512, 16
else:
    cfg = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 4, "vocab_size": 512, "max_position_embeddings": 128}
    seq_len, batch = 32, 4

config = LlamaConfig(**cfg)
model = LlamaForCausalLM(config)
print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")


class RandomTokens(Dataset):
    def __init__(self, n, seq_len, vocab):
        g = torch.Generator().manual_seed(0)
        self.data = torch.randint(vocab, (n, seq_len), generator=g)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        ids = self.data[i]
        return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}


class StepTimer(TrainerCallback):
    def __init__(self, every):
        self.every = every
        self.t0 = None

    def on_step_end(self, args_, state, control, **kwargs):
        step = state.global_step
        if self.t0 is None:
            self.t0, self.last = time.perf_counter(), step
            return
        if step % self.every == 0:
            if cuda:
                torch.cuda.synchronize()
            ms = (time.perf_counter() - self.t0) / (step - self.last) * 1000
            print(f"step {step}: {ms:.2f} ms/step", flush=True)
            self.t0, self.last = time.perf_counter(), step


train = RandomTokens(batch * (args.max_steps + 2), seq_len, config.vocab_size)
out_dir = tempfile.mkdtemp(prefix="hf-trainer-")
targs = TrainingArguments(
    output_dir=out_dir,
    per_device_train_batch_size=batch,
    max_steps=args.max_steps,
    learning_rate=3e-4,
    warmup_steps=5,
    logging_steps=20,
    save_strategy="no",
    report_to=[],
    bf16=cuda,
    use_cpu=not cuda,
    optim="adamw_torch",
    dataloader_num_workers=0,
    disable_tqdm=True,
)
trainer = Trainer(model=model, args=targs, train_dataset=train, callbacks=[StepTimer(args.log_every)])
result = trainer.train()
print(f"done: train_loss {result.training_loss:.4f}")
