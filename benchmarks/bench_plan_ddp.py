"""A real 2-GPU training step under DDP and FSDP, to check `gpudoctor plan train`'s step time.

On a 2-GPU machine: ``torchrun --nproc_per_node 2 benchmarks/bench_plan_ddp.py OUT_DIR``. Builds a
transformers Llama-style model with random weights (bf16 parameters, AdamW), times steady-state
steps (after warm-up) under DistributedDataParallel and under FSDP (full shard), and writes
``OUT_DIR/ddp_fsdp.json``. The prediction for the same layouts is made anywhere with
``python benchmarks/bench_plan_ddp.py --predict RESULTS_JSON [BENCH_JSON [SINGLE_JSON]]``, the
bench file (``gpudoctor bench --json``) calibrating it; ``--predict-ahead WORLD GPU BENCH_JSON OUT``
writes the prediction for a GPU count not measured yet (committed before the run: a held-out check). ``--single OUT_DIR`` times the same model
on one GPU and profiles it (kernel time by kind) to separate compute from communication.
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
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
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


# kernel name -> category, first match wins (attention before GEMM: flash kernels are CUTLASS too)
_KINDS = (("attention", ("flash", "fmha", "attention", "sdpa")),
          ("gemm", ("nvjet", "gemm", "xmma", "cutlass", "cublas")),
          ("optimizer", ("multi_tensor", "foreach", "adam")))


def _kind(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in _KINDS if any(k in low for k in keys)), "other")


def _profile(model, steps: int = 2) -> dict:
    """One profiled window of ``steps`` steps: GPU kernel time by kind, kernel counts, busy vs wall,
    and the device time of each matmul / attention op by input shape."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ), device="cuda")

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset"))]
    spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    busy, end = 0.0, float("-inf")
    for a, b in spans:  # union of kernel intervals (us)
        if b > end:
            busy += b - max(a, end)
            end = b
    by_kind: dict = {}
    names: dict = {}
    for e in kernels:
        k = by_kind.setdefault(_kind(e.name), {"kernels": 0, "s": 0.0})
        k["kernels"] += 1
        k["s"] += e.time_range.elapsed_us() / 1e6 / steps
        names[e.name] = names.get(e.name, 0.0) + e.time_range.elapsed_us() / 1e6 / steps
    for k in by_kind.values():
        k["kernels"] //= steps
    ops = []
    for evt in prof.key_averages(group_by_input_shape=True):
        if evt.key in ("aten::mm", "aten::addmm", "aten::bmm") or "attention" in evt.key:
            t = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0.0)
            ops.append({"op": evt.key, "shapes": [list(x) for x in evt.input_shapes if x], "count": evt.count // steps,
                        "device_s": t / 1e6 / steps})
    top = sorted(names.items(), key=lambda kv: -kv[1])[:25]
    return {"steps": steps, "kernels_per_step": len(kernels) // steps, "busy_s": busy / 1e6 / steps,
            "span_s": (spans[-1][1] - spans[0][0]) / 1e6 / steps if spans else 0.0, "by_kind": by_kind,
            "ops": sorted(ops, key=lambda o: -o["device_s"]), "top_kernels": [{"name": n[:160], "s": t} for n, t in top]}


def single(out: Path) -> None:
    """The same model and micro-batch on one GPU, no DDP: the compute side of the step, alone;
    then a profiled window that splits its GPU time by kernel kind."""
    import torch

    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = _model(device)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "config": CONFIG,
              "batch": BATCH, "seq": SEQ, "date": time.strftime("%Y-%m-%d"),
              "params": sum(p.numel() for p in model.parameters()), "step_s": _time(model, device)}
    try:
        import transformers

        result["transformers"] = transformers.__version__
        result["profile"] = _profile(model)
    except Exception as exc:  # noqa: BLE001 - the timing stands without the profile
        result["profile_error"] = f"{type(exc).__name__}: {exc}"[:300]
    out.mkdir(parents=True, exist_ok=True)
    (out / "single_gpu_step.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("config", "profile")}))
    prof = result.get("profile") or {}
    print(json.dumps({k: prof.get(k) for k in ("kernels_per_step", "busy_s", "span_s", "by_kind")}))


def _price(spec, hw, net, zero: int, world: int, batch: int, seq: int, calibration=None) -> dict:
    """plan.train.predict_step for DP over ``world`` GPUs (ZeRO ``zero``), ``batch`` sequences per GPU."""
    from gpudoctor.core.layout import Layout
    from gpudoctor.plan.train import predict_step

    lay = Layout(dp=world, tp=1, pp=1, zero=zero, microbatch=batch)
    return predict_step(spec, lay, global_batch=batch * world, seq=seq, peak_flops=hw.matrix_flops["bf16"], net=net,
                        hbm_bytes_per_s=hw.hbm_bytes_per_s, calibration=calibration)


def predict(results: Path, bench: Path | None = None, single_json: Path | None = None) -> None:
    """Price the measured layouts with plan.train (H200 datasheet, NVLink preset, impl="eager-hf":
    Hugging Face eager, torch.optim.AdamW foreach, DDP / FSDP2 defaults) and print the table: assumed efficiencies, and with ``bench`` (a gpudoctor bench JSON) calibrated ones. With
    ``single_json`` (``--single``'s output), the one-GPU step's GPU time by kernel kind beside the
    calibrated prediction's parts."""
    from gpudoctor.core.spec import from_hf_config
    from gpudoctor.hardware.specs import find_spec
    from gpudoctor.plan.calibration import load_calibration
    from gpudoctor.plan.train import make_net

    m = json.loads(results.read_text())
    spec = from_hf_config({"model_type": "llama", **m["config"]}, name="bench-llama")
    hw = find_spec(m["gpu"])
    net = make_net(hw.key, m["world_size"], None)
    cal = load_calibration(bench, hw.key) if bench else None

    def price(zero: int, world: int, calibration=None) -> dict:
        return _price(spec, hw, net, zero, world, m["batch_per_gpu"], m["seq"], calibration)

    def parts(p: dict) -> str:
        comm = sum(v for k, v in p.items() if k.endswith("_comm_s"))
        return (f"{1e3 * p['compute_s']:.1f} / {1e3 * p['memory_s']:.1f} / {1e3 * p['launch_s']:.1f} / "
                f"{1e3 * comm:.1f} / {1e3 * p['overlap_s']:.1f} / {1e3 * p['dp_copy_s']:.1f} / "
                f"{1e3 * p['optimizer_s']:.1f} ms")

    rows = [("| layout | measured step | predicted, assumed | error | predicted, calibrated | error | "
             "calibrated: compute / elementwise / launch gap / comm / compute slowed by comm / DP copies / optimizer |"),
            "|---|---:|---:|---:|---:|---:|---|"]
    w = m["world_size"]
    layouts = [(f"DDP (dp={w})", 0, w, m.get("ddp_step_s")),
               (f"FSDP full shard (dp={w}, ZeRO-3)", 3, w, m.get("fsdp_step_s"))]
    single = json.loads(single_json.read_text()) if single_json else None
    if single:
        layouts.append(("one GPU, no DP", 0, 1, single["step_s"]))
    for name, zero, world, measured in layouts:
        if measured is None:
            continue
        a = price(zero, world)
        c = price(zero, world, cal) if cal else None
        cells = (f"{1e3 * c['step_s']:.1f} ms | {100 * (c['step_s'] / measured - 1):+.1f}% | {parts(c)}"
                 if c else "- | - | -")
        rows.append(f"| {name} | {1e3 * measured:.1f} ms | {1e3 * a['step_s']:.1f} ms | "
                    f"{100 * (a['step_s'] / measured - 1):+.1f}% | {cells} |")
    print("\n".join(rows))
    if single and cal and "profile" in single:
        _by_kind(single, price(0, 1, cal), price(0, 1))


def predict_ahead(world: int, gpu: str, bench: Path, out: Path) -> None:
    """The prediction for a ``world``-GPU run not measured yet, written (and committed) before it is:
    a held-out check of the model. Communication from the interconnect preset (no curve measured at
    this GPU count), compute and elementwise rates from ``bench``."""
    from gpudoctor.core.spec import from_hf_config
    from gpudoctor.hardware.specs import require_spec
    from gpudoctor.plan.calibration import load_calibration
    from gpudoctor.plan.train import make_net

    spec = from_hf_config({"model_type": "llama", **CONFIG}, name="bench-llama")
    hw = require_spec(gpu)
    cal = load_calibration(bench, hw.key)
    net = make_net(hw.key, world, None)
    rows = {}
    for name, zero in (("ddp", 0), ("fsdp", 3)):
        for label, c in (("assumed", None), ("calibrated", cal)):
            rows[f"{name}_{label}_step_s"] = _price(spec, hw, net, zero, world, BATCH, SEQ, c)["step_s"]
    result = {"world_size": world, "gpu": hw.key, "bench": str(bench), "config": CONFIG, "batch_per_gpu": BATCH,
              "seq": SEQ, "predicted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **rows}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(rows))


def _by_kind(single: dict, cal: dict, assumed: dict) -> None:
    """The one-GPU step's kernel time by kind (torch.profiler) vs the prediction's matching parts.
    The profiler's GPU-side 'Optimizer.step#AdamW.step' range is not a kernel: left out."""
    prof = single["profile"]
    annotation = sum(k["s"] for k in prof["top_kernels"] if k["name"].startswith("Optimizer.step#"))
    kinds = {k: v["s"] for k, v in prof["by_kind"].items()}
    kinds["optimizer"] = kinds.get("optimizer", 0.0) - annotation
    idle = single["step_s"] - prof["busy_s"]
    def row(part: str, measured: float, assumed_s: float, cal_s: float) -> str:
        return f"| {part} | {1e3 * measured:.1f} ms | {1e3 * assumed_s:.1f} ms | {1e3 * cal_s:.1f} ms |"

    rows = ["| part | measured (profiler) | predicted, assumed | predicted, calibrated |", "|---|---:|---:|---:|",
            row("matmuls + attention core", kinds.get("gemm", 0) + kinds.get("attention", 0), assumed["compute_s"],
                cal["compute_s"]),
            row("other kernels (elementwise, norms, loss)", kinds.get("other", 0), assumed["memory_s"], cal["memory_s"]),
            row("optimizer kernels", kinds["optimizer"], assumed["optimizer_s"], cal["optimizer_s"]),
            row("GPU idle (launch gaps, syncs)", idle, 0.0, cal["launch_s"])]
    print()
    print("\n".join(rows))


if __name__ == "__main__":
    if sys.argv[1] == "--predict":  # --predict RESULTS [BENCH_JSON [SINGLE_JSON]]
        predict(Path(sys.argv[2]), *(Path(a) for a in sys.argv[3:5]))
    elif sys.argv[1] == "--predict-ahead":  # --predict-ahead WORLD GPU BENCH_JSON OUT_JSON
        predict_ahead(int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), Path(sys.argv[5]))
    elif sys.argv[1] == "--single":
        single(Path(sys.argv[2]))
    else:
        measure(Path(sys.argv[1]))
