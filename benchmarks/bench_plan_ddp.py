"""A real 2-GPU training step under DDP and FSDP, to check `gpudoctor plan train`'s step time.

On a 2-GPU machine: ``torchrun --nproc_per_node 2 benchmarks/bench_plan_ddp.py OUT_DIR``. Builds a
transformers Llama-style model with random weights (bf16 parameters, AdamW), times steady-state
steps (after warm-up) under DistributedDataParallel and under FSDP (full shard), and writes
``OUT_DIR/ddp_fsdp.json``. The prediction for the same layouts is made anywhere with
``python benchmarks/bench_plan_ddp.py --predict RESULTS_JSON``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

CONFIG = {"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 8,
          "num_hidden_layers": 16, "vocab_size": 32000, "max_position_embeddings": 4096}
BATCH, SEQ = 4, 2048  # per GPU


def _model(device):
    import torch
    import transformers

    cfg = transformers.LlamaConfig(**CONFIG)
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)


def _time(model, device, steps=8, warmup=3) -> float:
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ), device=device)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def measure(out: Path) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    result = {"world_size": dist.get_world_size(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "config": CONFIG, "batch_per_gpu": BATCH, "seq": SEQ, "date": time.strftime("%Y-%m-%d")}
    torch.manual_seed(0)
    model = _model(device)
    result["params"] = sum(p.numel() for p in model.parameters())
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    result["ddp_step_s"] = _time(ddp, device)
    result["ddp_peak_bytes"] = torch.cuda.max_memory_allocated()
    del ddp, model
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    model = _model(device)
    try:
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        result["fsdp_api"] = "fully_shard (FSDP2), one unit per decoder layer"
        result["fsdp_step_s"] = _time(model, device)
        result["fsdp_peak_bytes"] = torch.cuda.max_memory_allocated()
    except Exception as exc:  # noqa: BLE001 - reported, the DDP number still stands
        result["fsdp_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        (out / "ddp_fsdp.json").write_text(json.dumps(result, indent=1))
        print(json.dumps({k: v for k, v in result.items() if k != "config"}))
    dist.destroy_process_group()


def predict(results: Path) -> None:
    """Price the measured layouts with plan.train (H200 datasheet, NVLink preset) and print the table."""
    from gpudoctor.hardware.specs import find_spec
    from gpudoctor.memory.spec import from_hf_config
    from gpudoctor.plan.train import Layout, make_net, predict_step

    m = json.loads(results.read_text())
    spec = from_hf_config({"model_type": "llama", **m["config"]}, name="bench-llama")
    hw = find_spec(m["gpu"])
    net = make_net(hw.key, m["world_size"], None)
    gb = m["batch_per_gpu"] * m["world_size"]
    rows = ["| layout | measured step | predicted step | error | predicted compute / memory-bound / comm / optimizer |",
            "|---|---:|---:|---:|---|"]
    for name, zero, key in (("DDP (dp=2)", 0, "ddp_step_s"), ("FSDP full shard (dp=2, ZeRO-3)", 3, "fsdp_step_s")):
        if key not in m:
            continue
        lay = Layout(dp=m["world_size"], tp=1, pp=1, zero=zero, microbatch=m["batch_per_gpu"])
        p = predict_step(spec, lay, global_batch=gb, seq=m["seq"], peak_flops=hw.matrix_flops["bf16"], net=net,
                         hbm_bytes_per_s=hw.hbm_bytes_per_s)
        comm = sum(v for k, v in p.items() if k.endswith("_comm_s"))
        err = p["step_s"] / m[key] - 1
        rows.append(f"| {name} | {1e3 * m[key]:.1f} ms | {1e3 * p['step_s']:.1f} ms | {100 * err:+.1f}% | "
                    f"{1e3 * p['compute_s']:.1f} / {1e3 * p.get('memory_s', 0):.1f} / {1e3 * comm:.1f} / "
                    f"{1e3 * p.get('optimizer_s', 0):.1f} ms |")
    print("\n".join(rows))


if __name__ == "__main__":
    if sys.argv[1] == "--predict":
        predict(Path(sys.argv[2]))
    else:
        measure(Path(sys.argv[1]))
