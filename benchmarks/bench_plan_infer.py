"""`gpudoctor plan infer`'s two primitives against a GPU: the decode step and the prefill.

``python benchmarks/bench_plan_infer.py OUT_DIR [--presets llama-3.1-8b,...]`` on one GPU builds each preset's
decoder with random bf16 weights as plain tensors (no framework, no serving engine) and times

- a decode step (one new token for each of B sequences holding C cached tokens: RMSNorm, the fused
  q/k/v projection, o, the fused gate/up projection and down, as vLLM's QKVParallelLinear and
  MergedColumnParallelLinear lay them out; attention over the KV cache as two batched matmuls per KV head
  group; the LM head), captured in a CUDA graph so the CPU is out of it, as a serving engine runs it;
- a prefill of P tokens (one sequence, causal flash attention through
  ``F.scaled_dot_product_attention``, the same projections),

and writes ``OUT_DIR/plan_infer.json`` (``{"runs": [one per preset]}``). ``python benchmarks/bench_plan_infer.py --predict RESULTS_JSON``
prices the same steps with plan/infer.py (``decode_step_seconds``, ``prefill_seconds``, the datasheet
of the GPU the run saw) and prints predicted vs measured, and the bandwidth / FLOP-rate shares the steps
reached (what DECODE_HBM_EFFICIENCY and PREFILL_EFFICIENCY assume).

Not measured here: continuous batching, paging, a serving engine's scheduler, and therefore the QPS
at which one saturates.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

DECODE = [
    (1, 1024),
    (8, 1024),
    (32, 1024),
    (64, 1024),
    (1, 4096),
    (8, 4096),
    (32, 4096),
    (64, 4096),
]
PREFILL = [512, 2048, 8192]


def _layers(spec, device):
    import torch

    h, d, kv, inter = spec.hidden, spec.head_dim, spec.kv_heads, spec.intermediate
    g = torch.Generator(device=device).manual_seed(0)

    def w(*shape):
        return torch.randn(*shape, device=device, dtype=torch.bfloat16, generator=g) * 0.02

    layers = [
        {
            "norm1": torch.ones(h, device=device, dtype=torch.bfloat16),
            "norm2": torch.ones(h, device=device, dtype=torch.bfloat16),
            "qkv": w(h, (spec.heads + 2 * kv) * d),
            "o": w(spec.heads * d, h),
            "gate_up": w(h, 2 * inter),
            "down": w(inter, h),
        }
        for _ in range(spec.layers)
    ]
    head = {"norm": torch.ones(h, device=device, dtype=torch.bfloat16), "lm": w(h, spec.vocab)}
    return layers, head


def _decode_fn(spec, layers, head, x, caches):
    """One decode step for x [B, h] against caches [(K, V)] of [B, kv, C, d] per layer."""
    import torch
    import torch.nn.functional as F

    heads, kv, d = spec.heads, spec.kv_heads, spec.head_dim
    group = heads // kv

    def step():
        y = x
        for lw, (kc, vc) in zip(layers, caches):
            a = F.rms_norm(y, (spec.hidden,), lw["norm1"], 1e-5)
            # q, and the new token's K and V (appending them to the cache is not the cost)
            q = (a @ lw["qkv"])[:, : heads * d].reshape(-1, kv, group, d)  # [B, kv, group, d]
            s = torch.matmul(q, kc.transpose(-1, -2)) * d**-0.5  # [B, kv, group, C]
            p = torch.softmax(s.float(), dim=-1).to(q.dtype)
            o = torch.matmul(p, vc).reshape(-1, heads * d)  # [B, heads * d]
            y = y + o @ lw["o"]
            m = F.rms_norm(y, (spec.hidden,), lw["norm2"], 1e-5)
            gate, up = (m @ lw["gate_up"]).chunk(2, dim=-1)
            y = y + (F.silu(gate) * up) @ lw["down"]
        return F.rms_norm(y, (spec.hidden,), head["norm"], 1e-5) @ head["lm"]

    return step


def _prefill_fn(spec, layers, head, x):
    import torch.nn.functional as F

    heads, kv, d = spec.heads, spec.kv_heads, spec.head_dim

    def step():
        y = x  # [P, h]
        p = y.shape[0]
        for lw in layers:
            a = F.rms_norm(y, (spec.hidden,), lw["norm1"], 1e-5)
            q, k, v = (a @ lw["qkv"]).split([heads * d, kv * d, kv * d], dim=-1)
            q = q.reshape(1, p, heads, d).transpose(1, 2)
            k = k.reshape(1, p, kv, d).transpose(1, 2)
            v = v.reshape(1, p, kv, d).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            y = y + o.transpose(1, 2).reshape(p, heads * d) @ lw["o"]
            m = F.rms_norm(y, (spec.hidden,), lw["norm2"], 1e-5)
            gate, up = (m @ lw["gate_up"]).chunk(2, dim=-1)
            y = y + (F.silu(gate) * up) @ lw["down"]
        return (
            F.rms_norm(y[-1:], (spec.hidden,), head["norm"], 1e-5) @ head["lm"]
        )  # the first new token

    return step


def _time(fn, graph: bool, reps: int = 20) -> float:
    """Median seconds of ``fn`` (replayed from a CUDA graph when ``graph``), event-timed on the GPU."""
    import torch

    from gpudoctor.hardware.probe import median_ms

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    run = fn
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        run = g.replay
    return median_ms(torch, run, reps) / 1e3


def measure(out: Path, preset: str) -> dict:
    import torch

    from gpudoctor.core.presets import from_preset

    spec = from_preset(preset)
    dev = torch.device("cuda")
    layers, head = _layers(spec, dev)
    result = {
        "preset": preset,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "decode": [],
        "prefill": [],
    }
    for batch, ctx in DECODE:
        x = torch.randn(batch, spec.hidden, device=dev, dtype=torch.bfloat16)
        caches = [
            (
                torch.randn(
                    batch, spec.kv_heads, ctx, spec.head_dim, device=dev, dtype=torch.bfloat16
                ),
                torch.randn(
                    batch, spec.kv_heads, ctx, spec.head_dim, device=dev, dtype=torch.bfloat16
                ),
            )
            for _ in range(spec.layers)
        ]
        s = _time(_decode_fn(spec, layers, head, x, caches), graph=True)
        result["decode"].append({"batch": batch, "context": ctx, "step_s": s})
        print(f"decode B={batch} C={ctx}: {s * 1e3:.3f} ms", flush=True)
        del caches
        torch.cuda.empty_cache()
    for p in PREFILL:
        x = torch.randn(p, spec.hidden, device=dev, dtype=torch.bfloat16)
        s = _time(_prefill_fn(spec, layers, head, x), graph=False, reps=10)
        result["prefill"].append({"tokens": p, "s": s})
        print(f"prefill P={p}: {s * 1e3:.2f} ms", flush=True)
    del layers, head
    torch.cuda.empty_cache()
    return result


def predict(path: Path) -> list[dict]:
    rows = []
    for data in json.loads(path.read_text())["runs"]:
        rows += _predict_one(data)
    return rows


def _predict_one(data: dict) -> list[dict]:
    from gpudoctor.core.params import count_params
    from gpudoctor.core.presets import from_preset
    from gpudoctor.hardware.specs import find_spec
    from gpudoctor.memory.inference import kv_bytes_per_token
    from gpudoctor.memory.options import InferOptions
    from gpudoctor.plan.infer import (
        DECODE_HBM_EFFICIENCY,
        PREFILL_EFFICIENCY,
        decode_step_seconds,
        prefill_seconds,
        streamed_weight_bytes,
    )

    spec = from_preset(data["preset"])
    hw = find_spec(data["gpu"])
    o = InferOptions(batch=1, prompt=16, new=16)
    weights, per_token = streamed_weight_bytes(spec, o), kv_bytes_per_token(spec, o)
    n = count_params(spec).total
    rows = []
    for r in data["decode"]:
        pred = decode_step_seconds(weights, per_token, r["batch"], r["context"], hw.hbm_bytes_per_s)
        moved = weights + r["batch"] * r["context"] * per_token
        rows.append(
            {
                "kind": "decode",
                "shape": f"B={r['batch']} C={r['context']}",
                "measured_s": r["step_s"],
                "predicted_s": pred,
                "error": pred / r["step_s"] - 1,
                "reached": moved / r["step_s"] / hw.hbm_bytes_per_s,
                "assumed": DECODE_HBM_EFFICIENCY,
            }
        )
    peak = hw.matrix_flops["bf16"]
    for r in data["prefill"]:
        pred = prefill_seconds(n, r["tokens"], 1, peak)
        rows.append(
            {
                "kind": "prefill",
                "shape": f"P={r['tokens']}",
                "measured_s": r["s"],
                "predicted_s": pred,
                "error": pred / r["s"] - 1,
                "reached": 2 * n * r["tokens"] / r["s"] / peak,
                "assumed": PREFILL_EFFICIENCY,
            }
        )
    print(
        f"{data['preset']} on {data['gpu']} ({hw.key}: HBM {hw.hbm_bytes_per_s / 1e12:.2f} TB/s, bf16 "
        f"{peak / 1e12:.0f} TFLOP/s datasheet), torch {data['torch']}, {data['measured_utc']}"
    )
    print(
        "| step | shape | measured | predicted | error | share of the datasheet reached | assumed |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['kind']} | {r['shape']} | {r['measured_s'] * 1e3:.2f} ms | {r['predicted_s'] * 1e3:.2f} ms | "
            f"{r['error']:+.1%} | {r['reached']:.0%} | {r['assumed']:.0%} |"
        )
    return rows


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--predict":
        predict(Path(sys.argv[2]))
    elif len(sys.argv) > 1:
        presets = (
            sys.argv[sys.argv.index("--presets") + 1].split(",")
            if "--presets" in sys.argv
            else ["llama-3.1-8b"]
        )
        out = Path(sys.argv[1])
        out.mkdir(parents=True, exist_ok=True)
        runs = [measure(out, p) for p in presets]
        (out / "plan_infer.json").write_text(json.dumps({"runs": runs}, indent=1))
    else:
        sys.exit(__doc__)
