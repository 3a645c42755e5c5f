"""Fine-tuning a BERT-style classifier with the Hugging Face ``Trainer`` at its default precision.

A ``BertForSequenceClassification`` built from a config (6 layers, hidden 768, 12 heads, no
download), 3 labels, sequences of 256 padded to length, batch 32. The data set hands out pre-made
random token ids with an attention mask that pads the last quarter of every other sequence. The
``TrainingArguments`` are the tutorial's, with no precision flag: fp32, TF32 off. A
``TrainerCallback`` prints the mean time per optimizer step.

Hand-made fixes, each one flag:
  --bf16:           ``TrainingArguments(bf16=True)`` (the ``bf16-autocast`` knob's change: the Trainer
                    autocasts the model's forward, which computes the loss inside, as the knob does);
  --tf32:           ``TrainingArguments(tf32=True)`` (the ``tf32`` knob's);
  --torch-compile:  ``TrainingArguments(torch_compile=True)`` (the ``compile`` knob's: the Trainer
                    compiles the model, the knob the outermost module's forward).

EXPECTED on an H100 (written before any run): ``fp32-matmul`` first (the GEMMs of a 43M-parameter
encoder on 8,192 tokens a step run on FP32 CUDA cores). Hand-made --bf16: about x2.5-4.5;
--tf32: about x2.0-3.2; --torch-compile: about x1.05-1.3 (the step stays on fp32 GEMMs).
One step = one optimizer step = one batch (gradient_accumulation_steps=1).
"""

import argparse
import tempfile
import time

import torch
from torch.utils.data import Dataset
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=40)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--bf16", action="store_true")
parser.add_argument("--tf32", action="store_true")
parser.add_argument("--torch-compile", action="store_true")
args = parser.parse_args()

cuda = torch.cuda.is_available()
if cuda:
    config = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=3072, num_labels=3)
    seq_len, batch = 256, 32
else:
    config = BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, num_labels=3)
    seq_len, batch = 16, 4
model = BertForSequenceClassification(config)


class RandomPairs(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(100, config.vocab_size, (n, seq_len), generator=g)
        self.labels = torch.randint(0, 3, (n,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        mask = torch.ones(seq_len, dtype=torch.long)
        if i % 2:
            mask[-seq_len // 4:] = 0
        return {"input_ids": self.ids[i], "attention_mask": mask, "labels": self.labels[i]}


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


training_args = TrainingArguments(
    output_dir=tempfile.mkdtemp(prefix="bert-cls-"),
    per_device_train_batch_size=batch,
    max_steps=args.max_steps,
    learning_rate=2e-5,
    weight_decay=0.01,
    logging_steps=50,
    save_strategy="no",
    report_to=[],
    use_cpu=not cuda,
    bf16=args.bf16,
    tf32=True if args.tf32 and cuda else None,  # the Trainer refuses tf32 without a GPU
    torch_compile=args.torch_compile,
    disable_tqdm=True,
)
trainer = Trainer(model=model, args=training_args, train_dataset=RandomPairs(batch * (args.max_steps + 2)),
                  callbacks=[StepTimer(args.log_every)])
result = trainer.train()
print(f"done: train_loss {result.training_loss:.4f}")
