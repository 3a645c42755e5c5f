"""A real program written elsewhere: Hugging Face Trainer fine-tuning a small randomly initialised
GPT-2 on random tokens, with the library's defaults (no bf16, vocabulary 50257).

    gpudoctor run --skip 10 --steps 5 --stack benchmarks/hf_trainer_example.py

Nothing here is tuned for gpudoctor; the defaults are what a user gets from the documentation.
"""

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, length: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.data[i], "labels": self.data[i]}


def main() -> None:
    config = GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=512)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir="/tmp/hf-example",
        per_device_train_batch_size=8,
        max_steps=60,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
    )
    Trainer(
        model=model, args=args, train_dataset=RandomTokens(2048, 512, config.vocab_size)
    ).train()


if __name__ == "__main__":
    main()
