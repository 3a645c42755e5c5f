"""A BERT-style encoder written by hand and pre-trained with a masked-language-model loss, fp32,
the way a "BERT from scratch" tutorial writes it.

Token embeddings plus learned position embeddings, LayerNorm and dropout, then six post-norm
encoder layers (d_model 512, 8 heads, separate query / key / value ``nn.Linear``, attention by
``F.scaled_dot_product_attention`` with the padding mask, feed-forward 2048 with GELU, dropout
0.1), and the masked-LM head (dense, GELU, LayerNorm, a decoder tied to the token embeddings).
Batch 32 x 256 random tokens of an 8192-word vocabulary with random lengths; 15% of the real
tokens are replaced by ``[MASK]`` and only they count in the cross-entropy (``ignore_index=-100``).
AdamW, all on the device. Prints the mean time per iteration every ``--log-every``.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--seq", type=int, default=256)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
vocab, d_model, heads, layers, d_ff = 8192, 512, 8, 6, 2048
PAD, MASK = 0, 1


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask):
        B, T, _ = x.shape
        q = self.query(x).view(B, T, heads, d_model // heads).transpose(1, 2)
        k = self.key(x).view(B, T, heads, d_model // heads).transpose(1, 2)
        v = self.value(x).view(B, T, heads, d_model // heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                           dropout_p=0.1 if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(B, T, d_model))


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = SelfAttention()
        self.norm1 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, attn_mask):
        x = self.norm1(x + self.dropout(self.attn(x, attn_mask)))
        return self.norm2(x + self.dropout(self.ff(x)))


class BertMLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.pos = nn.Embedding(args.seq, d_model)
        self.emb_norm = nn.LayerNorm(d_model)
        self.emb_drop = nn.Dropout(0.1)
        self.layers = nn.ModuleList([EncoderLayer() for _ in range(layers)])
        self.transform = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(),
                                       nn.LayerNorm(d_model))
        self.decoder = nn.Linear(d_model, vocab)
        self.decoder.weight = self.tok.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.zero_()

    def forward(self, ids, pad):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.emb_drop(self.emb_norm(self.tok(ids) + self.pos(positions)))
        attn_mask = ~pad[:, None, None, :]  # True = attend
        for layer in self.layers:
            x = layer(x, attn_mask)
        return self.decoder(self.transform(x))


model = BertMLM().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    tokens = torch.randint(2, vocab, (args.batch_size, args.seq), device=device)
    lengths = torch.randint(args.seq // 2, args.seq + 1, (args.batch_size, 1), device=device)
    pad = torch.arange(args.seq, device=device)[None, :] >= lengths
    tokens = tokens.masked_fill(pad, PAD)
    chosen = (torch.rand(tokens.shape, device=device) < 0.15) & ~pad
    inputs = torch.where(chosen, torch.full_like(tokens, MASK), tokens)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))

    logits = model(inputs, pad)
    loss = F.cross_entropy(logits.view(-1, vocab), labels.view(-1), ignore_index=-100)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
