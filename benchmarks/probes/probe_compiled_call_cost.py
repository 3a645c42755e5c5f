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
  (``--params``).

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


class ManyParams(nn.Module):
    def __init__(self, count: int, width: int = 256) -> None:
        super().__init__()
        self.scales = nn.ParameterList([nn.Parameter(torch.randn(width) * 0.01) for _ in range(count)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.stack(list(self.scales)).sum(0)


def many_params(count: int, width: int = 256, rows: int = 64):  # type: ignore[no-untyped-def]
    model = ManyParams(count, width).cuda()
    x = torch.randn(rows, width, device="cuda")
    return model, (lambda m: m(x).float().pow(2).mean())


def measure(name: str, build, steps: int, compiled: bool) -> dict:  # type: ignore[no-untyped-def]
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, loss_of = build()
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
        "mode": "compile" if compiled else "eager",
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
    opts = parser.parse_args()
    models = [(f"mlp{d}", lambda d=d: mlp(d)) for d in _ints(opts.mlp_depths)]
    models += [(f"params{p}", lambda p=p: many_params(p)) for p in _ints(opts.params)]
    try:
        import transformers  # noqa: F401

        models += [(f"llama{n}", lambda n=n: llama(n)) for n in _ints(opts.llama_layers)]
    except ImportError:
        pass
    rows = []
    for name, build in models:
        for compiled in (False, True):
            try:
                rows.append(measure(name, build, opts.steps, compiled))
            except Exception as exc:  # noqa: BLE001 - a model that does not compile here: said
                rows.append(
                    {
                        "model": name,
                        "mode": "compile" if compiled else "eager",
                        "error": f"{type(exc).__name__}: {exc}"[:300],
                    }
                )
    print(
        f"{'model':8} {'mode':8} {'fwd us':>8} {'k':>4} {'tri':>4} {'bwd us':>8} {'k':>4} "
        f"{'tri':>4}"
    )
    for r in rows:
        if "error" in r:
            print(f"{r['model']:8} {r['mode']:8} {r['error'][:60]}")
            continue
        print(
            f"{r['model']:8} {r['mode']:8} {r['forward_us']:8.1f} {r['forward_kernels']:4d} "
            f"{r['forward_triton']:4d} {r['backward_us']:8.1f} {r['backward_kernels']:4d} "
            f"{r['backward_triton']:4d}"
        )
    if opts.out:
        write_rows(opts.out, rows)


if __name__ == "__main__":
    main()
