"""A real multi-GPU training step under DDP, FSDP2 and TP=2 x FSDP2, to check `gpudoctor plan train`'s step time.

On a 2- or 4-GPU machine: ``torchrun --nproc_per_node N benchmarks/bench_plan_ddp.py OUT_DIR``. Builds a
transformers Llama-style model with random weights (bf16 parameters, AdamW), times steady-state
steps (after warm-up) under DistributedDataParallel, under FSDP2 (full shard) and, with an even
N >= 4, under TP=2 x FSDP2 (torch's 2D recipe, the same global batch), and writes
``OUT_DIR/ddp_fsdp.json``. ``--layouts ddp,fsdp,tp_dp`` (or env BENCH_LAYOUTS) runs some of them;
``--tiny --cpu`` runs a tiny model on CPU with gloo, a check of the code paths. The prediction for the same layouts is made anywhere with
``python benchmarks/bench_plan_ddp.py --predict RESULTS_JSON [BENCH_JSON [SINGLE_JSON]]``, the
bench file (``gpudoctor bench --json``) calibrating it; it ends with the predicted and measured order
of the layouts. ``--predict-ahead WORLD GPU BENCH_JSON OUT``
writes the prediction for a GPU count not measured yet (committed before the run: a held-out check). ``--single OUT_DIR`` times the same model
on one GPU and profiles it (kernel time by kind) to separate compute from communication.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

CONFIG = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 16,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}
BATCH, SEQ = 4, 2048  # per GPU
# --tiny: the same code paths on a model small enough for CPU (gloo) in seconds; heads and KV heads
# even, so that TP=2 splits both
TINY_CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 256,
    "max_position_embeddings": 128,
}
TINY_BATCH, TINY_SEQ = 2, 32
LAYOUTS = ("ddp", "fsdp", "tp_dp")
# the torch tensor-parallel plan of one Hugging Face Llama decoder layer (Megatron's split): the
# projections that make heads / the MLP width column-wise, the ones that sum them back row-wise
TP_PLAN = {
    "self_attn.q_proj": "colwise",
    "self_attn.k_proj": "colwise",
    "self_attn.v_proj": "colwise",
    "self_attn.o_proj": "rowwise",
    "mlp.gate_proj": "colwise",
    "mlp.up_proj": "colwise",
    "mlp.down_proj": "rowwise",
}


def _model(device, config=None):
    import torch
    import transformers

    cfg = transformers.LlamaConfig(**(config or CONFIG))
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _time(model, device, steps=8, warmup=3, ids=None) -> float:
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    if ids is None:
        ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ), device=device)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return (time.perf_counter() - t0) / steps


def _tp_dp(model, device, world: int) -> str:
    """TP=2 inside each pair of ranks, FSDP2 over the pairs: the 2D recipe of torch's tensor-parallel
    tutorial. Embedding, norms and lm_head stay whole on every TP rank (no sequence parallelism)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh(device.type, (world // 2, 2), mesh_dim_names=("dp", "tp"))
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    for layer in model.model.layers:
        parallelize_module(layer, mesh["tp"], {name: styles[s]() for name, s in TP_PLAN.items()})
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return (
        f"TP=2 x DP={world // 2}: parallelize_module per decoder layer (q/k/v, gate/up ColwiseParallel; o_proj, "
        "down_proj RowwiseParallel; embedding, norms and lm_head replicated), fully_shard over the dp mesh per "
        "layer and the root"
    )


def _layouts(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in LAYOUTS]
    if bad or not names:
        raise SystemExit(
            f"--layouts: {', '.join(bad) or repr(text)} not among {', '.join(LAYOUTS)}"
        )
    return names


def _run_layout(
    name: str, result: dict, device, world: int, rank: int, config: dict, batch: int, seq: int
) -> None:
    """Build the model fresh, wrap it as ``name``, time it; ``result`` gets ``<name>_step_s`` and
    ``<name>_peak_bytes``, or ``<name>_error`` (the other layouts' numbers still stand)."""
    import torch

    torch.manual_seed(0)  # the same weights on every rank
    model = _model(device, config)
    result.setdefault("params", sum(p.numel() for p in model.parameters()))
    dp_rank, per_replica = rank, batch
    try:
        if name == "ddp":
            ids_dev = [device.index] if device.type == "cuda" else None
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids_dev)
        elif name == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh(device.type, (world,))
            for layer in model.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            result["fsdp_api"] = "fully_shard (FSDP2), one unit per decoder layer"
        else:
            if world < 4 or world % 2:
                raise ValueError(f"TP=2 x DP needs an even world size of at least 4, got {world}")
            result["tp_dp_layout"] = _tp_dp(model, device, world)
            # the same global batch as DP over every GPU: each TP pair is one replica with two GPUs' share;
            # both ranks of a pair must see the same ids (ranks are laid out TP innermost)
            dp_rank, per_replica = rank // 2, 2 * batch
            result["tp_dp_batch_per_replica"] = per_replica
        gen = torch.Generator().manual_seed(dp_rank)
        ids = torch.randint(0, config["vocab_size"], (per_replica, seq), generator=gen).to(device)
        result[f"{name}_step_s"] = _time(model, device, ids=ids)
        if device.type == "cuda":
            result[f"{name}_peak_bytes"] = torch.cuda.max_memory_allocated()
    except Exception as exc:  # noqa: BLE001 - reported, the other layouts' numbers still stand
        result[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:300]
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def measure(
    out: Path, layouts: tuple[str, ...] = LAYOUTS, cpu: bool = False, tiny: bool = False
) -> None:
    """Time one training step under each of ``layouts`` (DDP, FSDP2, and with 4 or more GPUs TP=2 x
    FSDP2) and write ``out/ddp_fsdp.json`` from rank 0. ``cpu``: gloo and CPU tensors (a check of
    the code paths, not a timing); ``tiny``: ``TINY_CONFIG``."""
    import torch
    import torch.distributed as dist
    import transformers

    # a collective that hangs (one rank out of memory, the others waiting) aborts after this, not NCCL's 10 minutes
    dist.init_process_group("gloo" if cpu else "nccl", timeout=datetime.timedelta(seconds=240))
    rank, world = dist.get_rank(), dist.get_world_size()
    if cpu:
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    config, batch, seq = (TINY_CONFIG, TINY_BATCH, TINY_SEQ) if tiny else (CONFIG, BATCH, SEQ)
    if "tp_dp" in layouts and (world < 4 or world % 2):
        layouts = tuple(n for n in layouts if n != "tp_dp")  # TP=2 x DP needs two pairs at least
    result = {
        "world_size": world,
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "config": config,
        "batch_per_gpu": batch,
        "seq": seq,
        "date": time.strftime("%Y-%m-%d"),
        "layouts": list(layouts),
    }
    for name in layouts:
        _run_layout(name, result, device, world, rank, config, batch, seq)
        if (
            rank == 0
        ):  # after each layout: a later one that hangs or dies leaves the earlier numbers
            out.mkdir(parents=True, exist_ok=True)
            (out / "ddp_fsdp.json").write_text(json.dumps(result, indent=1))
    if rank == 0:
        print(json.dumps({k: v for k, v in result.items() if k != "config"}))
        print("\n".join(measured_table(result)))
    dist.destroy_process_group()


def measured_table(result: dict) -> list[str]:
    """``measure``'s results as a short table: step time and peak memory per layout, or its error."""
    rows = ["| layout | step | peak memory per GPU |", "|---|---:|---:|"]
    for name, (label, _) in _names(result["world_size"]).items():
        if f"{name}_error" in result:
            rows.append(f"| {label} | failed: {result[name + '_error'][:80]} | - |")
        elif f"{name}_step_s" in result:
            peak = result.get(f"{name}_peak_bytes")
            rows.append(
                f"| {label} | {1e3 * result[name + '_step_s']:.1f} ms | "
                f"{'-' if peak is None else f'{peak / 1e9:.1f} GB'} |"
            )
    return rows


# kernel name -> category, first match wins (attention before GEMM: flash kernels are CUTLASS too)
_KINDS = (
    ("attention", ("flash", "fmha", "attention", "sdpa")),
    ("gemm", ("nvjet", "gemm", "xmma", "cutlass", "cublas")),
    ("optimizer", ("multi_tensor", "foreach", "adam")),
)


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
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True
    ) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = [
        e
        for e in prof.events()
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
        and not e.name.startswith(("Memcpy", "Memset"))
    ]
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
            ops.append(
                {
                    "op": evt.key,
                    "shapes": [list(x) for x in evt.input_shapes if x],
                    "count": evt.count // steps,
                    "device_s": t / 1e6 / steps,
                }
            )
    top = sorted(names.items(), key=lambda kv: -kv[1])[:25]
    return {
        "steps": steps,
        "kernels_per_step": len(kernels) // steps,
        "busy_s": busy / 1e6 / steps,
        "span_s": (spans[-1][1] - spans[0][0]) / 1e6 / steps if spans else 0.0,
        "by_kind": by_kind,
        "ops": sorted(ops, key=lambda o: -o["device_s"]),
        "top_kernels": [{"name": n[:160], "s": t} for n, t in top],
    }


def single(out: Path) -> None:
    """The same model and micro-batch on one GPU, no DDP: the compute side of the step, alone;
    then a profiled window that splits its GPU time by kernel kind."""
    import torch

    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = _model(device)
    result = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "config": CONFIG,
        "batch": BATCH,
        "seq": SEQ,
        "date": time.strftime("%Y-%m-%d"),
        "params": sum(p.numel() for p in model.parameters()),
        "step_s": _time(model, device),
    }
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


def _layout(name: str, world: int, batch: int):
    """The plan.train Layout of one measured layout; ``batch`` sequences per GPU, so every layout has
    the global batch ``batch * world``. TP=2 x DP runs torch's ColwiseParallel / RowwiseParallel
    without sequence parallelism (``sp=False``: norms and residual adds see the whole hidden width)."""
    from gpudoctor.core.layout import Layout

    if name == "tp_dp":
        return Layout(dp=world // 2, tp=2, pp=1, zero=3, microbatch=2 * batch, sp=False)
    return Layout(dp=world, tp=1, pp=1, zero=3 if name == "fsdp" else 0, microbatch=batch)


def _price(spec, hw, net, lay, seq: int, calibration=None) -> dict:
    """plan.train.predict_step for ``lay`` (one micro-batch per step, as measured)."""
    from gpudoctor.plan.train import predict_step

    return predict_step(
        spec,
        lay,
        global_batch=lay.dp * lay.microbatch,
        seq=seq,
        peak_flops=hw.matrix_flops["bf16"],
        net=net,
        hbm_bytes_per_s=hw.hbm_bytes_per_s,
        calibration=calibration,
    )


def _names(world: int) -> dict[str, tuple[str, str]]:
    """layout -> (table label, short name for the order line), the layouts a ``world``-GPU run times."""
    names = {
        "ddp": (f"DDP (dp={world})", "DDP"),
        "fsdp": (f"FSDP full shard (dp={world}, ZeRO-3)", "FSDP"),
    }
    if world >= 4 and world % 2 == 0:
        names["tp_dp"] = (f"TP=2 x FSDP (dp={world // 2}, ZeRO-3)", f"TP=2 x DP={world // 2}")
    return names


def order_line(predicted: dict[str, float], measured: dict[str, float], basis: str) -> str:
    """The layouts fastest first by predicted and by measured step time (short names -> seconds), and
    whether the two orders agree; ``measured`` empty: not measured yet."""
    pred = " < ".join(sorted(predicted, key=predicted.__getitem__))
    if not measured:
        return f"order by step time, fastest first ({basis}): predicted {pred}; measured: not yet"
    meas = " < ".join(sorted(measured, key=measured.__getitem__))
    same = sorted(predicted, key=predicted.__getitem__) == sorted(
        measured, key=measured.__getitem__
    )
    return (
        f"order by step time, fastest first ({basis}): predicted {pred}; measured {meas}; "
        f"ranking matches: {'yes' if same else 'no'}"
    )


def _parts(p: dict) -> str:
    comm = sum(v for k, v in p.items() if k.endswith("_comm_s"))
    return (
        f"{1e3 * p['compute_s']:.1f} / {1e3 * p['memory_s']:.1f} / {1e3 * p['launch_s']:.1f} / "
        f"{1e3 * comm:.1f} / {1e3 * p['overlap_s']:.1f} / {1e3 * p['dp_copy_s']:.1f} / "
        f"{1e3 * p['optimizer_s']:.1f} ms"
    )


def predict_table(m: dict, bench: Path | None = None, single: dict | None = None) -> list[str]:
    """The table of ``predict`` for a results dict ``m`` (``measure``'s JSON), its last line the
    order of the multi-GPU layouts, predicted (calibrated when ``bench`` is given) vs measured."""
    from gpudoctor.core.hf_config import from_hf_config
    from gpudoctor.hardware.specs import find_spec
    from gpudoctor.plan.calibration import load_calibration
    from gpudoctor.plan.train import make_net

    spec = from_hf_config({"model_type": "llama", **m["config"]}, name="bench-llama")
    hw = find_spec(m["gpu"])
    w, batch, seq = m["world_size"], m["batch_per_gpu"], m["seq"]
    net = make_net(hw.key, w, None)
    cal = load_calibration(bench, hw.key) if bench else None
    rows = [
        (
            "| layout | measured step | predicted, assumed | error | predicted, calibrated | error | "
            "calibrated: compute / elementwise / launch gap / comm / compute slowed by comm / DP copies / optimizer |"
        ),
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    layouts = [
        (label, short, _layout(name, w, batch), m.get(f"{name}_step_s"), m.get(f"{name}_error"))
        for name, (label, short) in _names(w).items()
    ]
    if single:
        layouts.append(("one GPU, no DP", None, _layout("ddp", 1, batch), single["step_s"], None))
    predicted, measured = {}, {}
    for label, short, lay, seconds, error in layouts:
        if seconds is None:
            if error:  # priced all the same, not ranked
                a = _price(spec, hw, net, lay, seq)
                c = f"{1e3 * _price(spec, hw, net, lay, seq, cal)['step_s']:.1f} ms" if cal else "-"
                rows.append(
                    f"| {label} | failed: {error[:60]} | {1e3 * a['step_s']:.1f} ms | - | {c} | - | - |"
                )
            continue
        a = _price(spec, hw, net, lay, seq)
        c = _price(spec, hw, net, lay, seq, cal) if cal else None
        cells = (
            f"{1e3 * c['step_s']:.1f} ms | {100 * (c['step_s'] / seconds - 1):+.1f}% | {_parts(c)}"
            if c
            else "- | - | -"
        )
        rows.append(
            f"| {label} | {1e3 * seconds:.1f} ms | {1e3 * a['step_s']:.1f} ms | "
            f"{100 * (a['step_s'] / seconds - 1):+.1f}% | {cells} |"
        )
        if short:  # the one-GPU row has another global batch: not ranked with the others
            predicted[short], measured[short] = (c or a)["step_s"], seconds
    rows.append(order_line(predicted, measured, "calibrated" if cal else "assumed"))
    return rows


def predict(results: Path, bench: Path | None = None, single_json: Path | None = None) -> None:
    """Price the measured layouts with plan.train (H200 datasheet, NVLink preset, impl="eager-hf":
    Hugging Face eager, torch.optim.AdamW foreach, DDP / FSDP2 defaults, torch's TP styles) and print
    the table: assumed efficiencies, and with ``bench`` (a gpudoctor bench JSON) calibrated ones; last,
    the predicted and measured order of the layouts. With ``single_json`` (``--single``'s output), the
    one-GPU step's GPU time by kernel kind beside the calibrated prediction's parts."""
    m = json.loads(results.read_text())
    single = json.loads(single_json.read_text()) if single_json else None
    print("\n".join(predict_table(m, bench, single)))
    if single and bench and "profile" in single:
        from gpudoctor.core.hf_config import from_hf_config
        from gpudoctor.hardware.specs import find_spec
        from gpudoctor.plan.calibration import load_calibration
        from gpudoctor.plan.train import make_net

        spec = from_hf_config({"model_type": "llama", **m["config"]}, name="bench-llama")
        hw = find_spec(m["gpu"])
        net, one = make_net(hw.key, m["world_size"], None), _layout("ddp", 1, m["batch_per_gpu"])
        _by_kind(
            single,
            _price(spec, hw, net, one, m["seq"], load_calibration(bench, hw.key)),
            _price(spec, hw, net, one, m["seq"]),
        )


def predict_ahead(world: int, gpu: str, bench: Path, out: Path) -> None:
    """The prediction for a ``world``-GPU run not measured yet, written (and committed) before it is:
    a held-out check of the model. Communication from the interconnect preset (no curve measured at
    this GPU count), compute and elementwise rates from ``bench``."""
    from gpudoctor.core.hf_config import from_hf_config
    from gpudoctor.hardware.specs import require_spec
    from gpudoctor.plan.calibration import load_calibration
    from gpudoctor.plan.train import make_net

    spec = from_hf_config({"model_type": "llama", **CONFIG}, name="bench-llama")
    hw = require_spec(gpu)
    cal = load_calibration(bench, hw.key)
    net = make_net(hw.key, world, None)
    rows, calibrated = {}, {}
    for name, (_, short) in _names(world).items():
        for label, c in (("assumed", None), ("calibrated", cal)):
            rows[f"{name}_{label}_step_s"] = _price(
                spec, hw, net, _layout(name, world, BATCH), SEQ, c
            )["step_s"]
        calibrated[short] = rows[f"{name}_calibrated_step_s"]
    result = {
        "world_size": world,
        "gpu": hw.key,
        "bench": str(bench),
        "config": CONFIG,
        "batch_per_gpu": BATCH,
        "seq": SEQ,
        "predicted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **rows,
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(rows))
    print(order_line(calibrated, {}, "calibrated"))


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

    rows = [
        "| part | measured (profiler) | predicted, assumed | predicted, calibrated |",
        "|---|---:|---:|---:|",
        row(
            "matmuls + attention core",
            kinds.get("gemm", 0) + kinds.get("attention", 0),
            assumed["compute_s"],
            cal["compute_s"],
        ),
        row(
            "other kernels (elementwise, norms, loss)",
            kinds.get("other", 0),
            assumed["memory_s"],
            cal["memory_s"],
        ),
        row("optimizer kernels", kinds["optimizer"], assumed["optimizer_s"], cal["optimizer_s"]),
        row("GPU idle (launch gaps, syncs)", idle, 0.0, cal["launch_s"]),
    ]
    print()
    print("\n".join(rows))


if __name__ == "__main__":
    if sys.argv[1] == "--predict":  # --predict RESULTS [BENCH_JSON [SINGLE_JSON]]
        predict(Path(sys.argv[2]), *(Path(a) for a in sys.argv[3:5]))
    elif sys.argv[1] == "--predict-ahead":  # --predict-ahead WORLD GPU BENCH_JSON OUT_JSON
        predict_ahead(int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), Path(sys.argv[5]))
    elif sys.argv[1] == "--single":
        single(Path(sys.argv[2]))
    else:  # [--tiny] [--cpu] [--layouts ddp,fsdp,tp_dp] OUT_DIR
        import argparse

        ap = argparse.ArgumentParser(
            description="time DDP, FSDP2 and TP=2 x FSDP2 steps (under torchrun)"
        )
        ap.add_argument("out", type=Path)
        ap.add_argument(
            "--tiny", action="store_true", help="a tiny model (checks the code paths in seconds)"
        )
        ap.add_argument(
            "--cpu", action="store_true", help="gloo and CPU tensors instead of NCCL and CUDA"
        )
        ap.add_argument(
            "--layouts",
            default=os.environ.get("BENCH_LAYOUTS", ",".join(LAYOUTS)),
            help=f"comma-separated, of {', '.join(LAYOUTS)} (default all; env BENCH_LAYOUTS)",
        )
        a = ap.parse_args()
        measure(a.out, _layouts(a.layouts), cpu=a.cpu, tiny=a.tiny)
