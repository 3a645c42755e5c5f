"""What host time does a torch.compile'd module's forward call and its backward cost, against the
kernels each launches?

probe_compiled_host_cost.py timed whole steps (forward, backward and an eager SGD step together):
compiled steps cost about as much host time per kernel as eager ones, plus a fixed cost that made
the smallest model slower compiled. This one times the forward call and the backward call apart,
eager and compiled, so that a compiled call's host time can be fitted as a fixed entry cost plus a
cost per kernel it launches (rules/knob_prices.py prices the compile knob with it):

- a stack of small pre-norm MLP blocks at several depths (host-bound at the default sizes);
- a small Llama from transformers' config (no download), Python-heavy in eager mode, where
  transformers is importable;
- ``params<P>``: P parameter vectors summed into one scale of the input, so that the compiled call
  launches about as many kernels whatever P is: the cost of a compiled call per parameter it takes
  (``--params``);
- ``vit<L>``: L pre-norm ViT blocks with hand-written attention and dropout at a host-bound size
  (``--vit-layers``): the fp32 ViT whose compile and autocast together measured slower than
  autocast alone (benchmarks/BENCHMARKS-replay.md "Knob set t").

``--autocast`` runs each model's forward and loss under bf16 autocast too, eager and compiled (the
compiled code's host per launch under autocast against the eager autocast step's).

For each model and mode: the median host time of ``model(x)`` and of ``loss.backward()`` (wall time
of the call, unsynchronized: with kernels this small the host is the step), and the kernels each
launched in one profiled step (Triton's apart).

    python benchmarks/probes/probe_compiled_call_cost.py [--steps 60] [--out FILE.json]

Prints a table and writes the rows as JSON with the device, torch and triton versions.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from probe_compiled_host_cost import Block, kernels_per_step, write_rows
from torch import nn


def mlp(depth: int, width: int = 256, rows: int = 64):  # type: ignore[no-untyped-def]
    model = nn.Sequential(*[Block(width) for _ in range(depth)]).cuda()
    x = torch.randn(rows, width, device="cuda")
    return model, (lambda m: m(x).float().pow(2).mean())


def llama(layers: int):  # type: ignore[no-untyped-def]
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=1024,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(cfg).cuda()
    ids = torch.randint(0, 1024, (4, 64), device="cuda")
    return model, (lambda m: m(input_ids=ids, labels=ids).loss)


class VitBlock(nn.Module):
    def __init__(self, dim: int = 192, heads: int = 3) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim),
            nn.GELU(),
            nn.Dropout(0.1),
            nn.Linear(4 * dim, dim),
            nn.Dropout(0.1),
        )
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = (
            self.qkv(self.norm1(x))
            .reshape(b, n, 3, self.heads, c // self.heads)
            .permute(2, 0, 3, 1, 4)
        )
        attn = self.drop(((q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5).softmax(-1))
        x = x + self.drop(self.proj((attn @ v).transpose(1, 2).reshape(b, n, c)))
        return x + self.mlp(self.norm2(x))


def vit(layers: int, dim: int = 192, tokens: int = 17, rows: int = 4):  # type: ignore[no-untyped-def]
    model = nn.Sequential(*[VitBlock(dim) for _ in range(layers)]).cuda()
    x = torch.randn(rows, tokens, dim, device="cuda")
    return model, (lambda m: m(x).float().pow(2).mean())


class ManyParams(nn.Module):
    def __init__(self, count: int, width: int = 256) -> None:
        super().__init__()
        self.scales = nn.ParameterList(
            [nn.Parameter(torch.randn(width) * 0.01) for _ in range(count)]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.stack(list(self.scales)).sum(0)


def many_params(count: int, width: int = 256, rows: int = 64):  # type: ignore[no-untyped-def]
    model = ManyParams(count, width).cuda()
    x = torch.randn(rows, width, device="cuda")
    return model, (lambda m: m(x).float().pow(2).mean())


def measure(
    name: str,
    build,
    steps: int,
    compiled: bool,  # type: ignore[no-untyped-def]
    autocast: bool = False,
) -> dict:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, plain_loss_of = build()

    def loss_of(m):  # type: ignore[no-untyped-def]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            return plain_loss_of(m)

    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    run = torch.compile(model) if compiled else model
    fwd, bwd = [], []
    for i in range(steps + 3):  # the first three compile and warm the allocator
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = loss_of(run)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= 3:
            fwd.append((t1 - t0) * 1e6)
            bwd.append((t2 - t1) * 1e6)
    holder: list[torch.Tensor] = []
    k_fwd = kernels_per_step(lambda: holder.append(loss_of(run)))
    k_bwd = kernels_per_step(lambda: holder.pop().backward())
    opt.zero_grad(set_to_none=True)
    keep = steps // 4
    return {
        "model": name,
        "mode": ("compile" if compiled else "eager") + ("+bf16" if autocast else ""),
        "forward_us": round(statistics.median(fwd[keep:]), 1),
        "backward_us": round(statistics.median(bwd[keep:]), 1),
        "forward_kernels": k_fwd[0],
        "forward_triton": k_fwd[1],
        "backward_kernels": k_bwd[0],
        "backward_triton": k_bwd[1],
    }


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", default="")
    parser.add_argument("--mlp-depths", default="1,2,4,8,16,32")
    parser.add_argument("--llama-layers", default="1,2,4")
    parser.add_argument("--params", default="")
    parser.add_argument("--vit-layers", default="")
    parser.add_argument(
        "--autocast",
        action="store_true",
        help="each model under bf16 autocast too, eager and compiled",
    )
    opts = parser.parse_args()
    models = [(f"mlp{d}", lambda d=d: mlp(d)) for d in _ints(opts.mlp_depths)]
    models += [(f"params{p}", lambda p=p: many_params(p)) for p in _ints(opts.params)]
    models += [(f"vit{n}", lambda n=n: vit(n)) for n in _ints(opts.vit_layers)]
    try:
        import transformers  # noqa: F401

        models += [(f"llama{n}", lambda n=n: llama(n)) for n in _ints(opts.llama_layers)]
    except ImportError:
        pass
    rows = []
    casts = (False, True) if opts.autocast else (False,)
    for name, build in models:
        for autocast in casts:
            for compiled in (False, True):
                try:
                    rows.append(measure(name, build, opts.steps, compiled, autocast))
                except Exception as exc:  # noqa: BLE001 - a model that does not compile here: said
                    rows.append(
                        {
                            "model": name,
                            "mode": ("compile" if compiled else "eager")
                            + ("+bf16" if autocast else ""),
                            "error": f"{type(exc).__name__}: {exc}"[:300],
                        }
                    )
    print(
        f"{'model':8} {'mode':12} {'fwd us':>8} {'k':>4} {'tri':>4} {'bwd us':>8} {'k':>4} "
        f"{'tri':>4}"
    )
    for r in rows:
        if "error" in r:
            print(f"{r['model']:8} {r['mode']:12} {r['error'][:60]}")
            continue
        print(
            f"{r['model']:8} {r['mode']:12} {r['forward_us']:8.1f} {r['forward_kernels']:4d} "
            f"{r['forward_triton']:4d} {r['backward_us']:8.1f} {r['backward_kernels']:4d} "
            f"{r['backward_triton']:4d}"
        )
    if opts.out:
        write_rows(opts.out, rows)


if __name__ == "__main__":
    main()
