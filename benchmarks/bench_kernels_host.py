"""Host cost and torch.compile visibility of gpudoctor.kernels as ``gpudoctor::`` custom ops (issue 22), on
one GPU.

``PYTHONPATH=src python3 benchmarks/bench_kernels_host.py --out OUT_DIR [--quick] [--parts host,gpu,model]``
writes ``OUT_DIR/kernels_host.json`` and prints a table last, each row against the issue's target:

- ``host``: host time of one RMSNorm forward + backward call, 4 x 4096 bf16 (GPU work of a few us, so the
  wall clock of N calls is the CPU's time to issue them): ``torch.nn.RMSNorm`` (fp32 math, bf16 weight),
  ``gpudoctor rms_norm`` eager (the autograd.Function path the public function takes outside compile, both
  castings), the same through ``torch.ops.gpudoctor.rms_norm`` (the dispatcher and the op's generated
  autograd node), the forward alone without grad, and Liger's RMSNorm if importable. Target: ours <=
  1.5x torch.nn.RMSNorm.
- ``gpu``: GPU time (sum of kernels, memsets and copies in a torch.profiler trace) of forward + backward at
  2048 x 4096 bf16: torch's F.rms_norm, ours eager, ours through the op, and ``torch.compile`` of a
  function calling ours (Inductor sees the Triton kernels through triton_op). Target: ours through the op
  and compiled no slower than ours eager (BENCHMARKS.md: 33.9 us on the H100 of 2026-11-25).
- ``model``: a Llama-style transformers model (4 layers, H 1024, V 32000, bf16, batch 4 x 512, AdamW),
  unpatched and ``patch``-ed, each eager, ``torch.compile`` and ``torch.compile(mode="reduce-overhead")``
  (CUDA graphs), plus Liger if importable: median step time of 10 steps after 5 warm-ups, peak memory,
  the first step's loss, and the graph breaks ``torch._dynamo.explain`` counts for the forward with labels.
  Targets: patched compiled 0 graph breaks; patched compiled step <= compiled step and < patched eager;
  patched reduce-overhead step <= unpatched reduce-overhead step (and <= unpatched compiled step).

Every candidate is caught on its own: a failure is recorded with its message, and the run goes on.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import gpu_events

DT = torch.bfloat16
RESULTS: dict = {}


def liger_available() -> bool:
    try:
        import liger_kernel  # noqa: F401 - importable is the question
    except ImportError:
        return False
    return True


def gpu_us(fn, iters: int = 20) -> float:
    """GPU time per call (us): every kernel, memset and copy of ``iters`` calls (bench_kernels.gpu_events)."""
    return sum(e.get("dur", 0) for e in gpu_events(fn, iters)) / iters


def host_us(fn, calls: int, repeats: int = 7) -> float:
    """Median over ``repeats`` of the wall clock per call of ``calls`` back-to-back calls (synchronized once
    at the end). With a few us of GPU work a call, the GPU never holds the CPU back: this is host time."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per_call)


def fwd_bwd(f, x: torch.Tensor, w: torch.Tensor):
    """Forward + backward of f(x, w), the output gradient made once, the input gradients dropped each call."""
    dy = torch.ones_like(x)

    def run():
        x.grad = None
        w.grad = None
        f(x, w).backward(dy)
    return run


def rms_candidates(hidden: int) -> dict:
    from gpudoctor.kernels import rms_norm

    torch_mod = torch.nn.RMSNorm(hidden, eps=1e-6, device="cuda", dtype=DT)
    out = {
        "torch.nn.RMSNorm": lambda x, w: torch_mod(x),
        "ours eager (llama)": lambda x, w: rms_norm(x, w, 1e-6),
        "ours eager (gemma casting, torch's math)": lambda x, w: rms_norm(x, w, 1e-6, casting="gemma"),
        "ours through torch.ops.gpudoctor": lambda x, w: torch.ops.gpudoctor.rms_norm(x, w, 1e-6, 0.0, True)[0],
    }
    if liger_available():
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        out["liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)
    return out


def part_host(quick: bool) -> None:
    hidden = 4096
    x = torch.randn(4, hidden, device="cuda", dtype=DT, requires_grad=True)
    w = torch.ones(hidden, device="cuda", dtype=DT, requires_grad=True)
    calls = 200 if quick else 1000
    rows = []
    for name, f in rms_candidates(hidden).items():
        try:
            rows.append({"candidate": name, "host_us_fwd_bwd": round(host_us(fwd_bwd(f, x, w), calls), 1)})
        except Exception as exc:  # noqa: BLE001 - one failing candidate does not stop the run; it is reported
            rows.append({"candidate": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
    from gpudoctor.kernels import rms_norm

    xi = x.detach()
    with torch.no_grad():  # the forward alone, no autograd node: the launcher's own cost
        rows.append({"candidate": "ours forward only, no grad",
                     "host_us_fwd": round(host_us(lambda: rms_norm(xi, w.detach(), 1e-6), calls), 1)})
        rows.append({"candidate": "F.rms_norm forward only, no grad",
                     "host_us_fwd": round(host_us(lambda: F.rms_norm(xi, (hidden,), w.detach(), 1e-6), calls), 1)})
    if not liger_available():
        rows.append({"candidate": "liger", "error": "liger-kernel not installed: skipped"})
    RESULTS["host"] = {"shape": [4, hidden], "dtype": "bf16", "calls": calls, "rows": rows}


def part_gpu(quick: bool) -> None:
    from gpudoctor.kernels import rms_norm

    m, hidden = 2048, 4096
    x = torch.randn(m, hidden, device="cuda", dtype=DT, requires_grad=True)
    w = (torch.rand(hidden, device="cuda", dtype=DT) + 0.5).requires_grad_(True)
    candidates = rms_candidates(hidden)
    candidates["torch F.rms_norm (bf16 weight)"] = lambda x, w: F.rms_norm(x, (hidden,), w, 1e-6)
    torch._dynamo.reset()
    candidates["torch.compile(ours)"] = torch.compile(lambda x, w: rms_norm(x, w, 1e-6))
    rows = []
    for name, f in candidates.items():
        try:
            rows.append({"candidate": name, "gpu_us_fwd_bwd": round(gpu_us(fwd_bwd(f, x, w)), 1)})
        except Exception as exc:  # noqa: BLE001 - one failing candidate does not stop the run; it is reported
            rows.append({"candidate": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
    RESULTS["gpu"] = {"shape": [m, hidden], "dtype": "bf16", "rows": rows}


def llama(layers: int):
    import transformers

    cfg = transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
                                   num_key_value_heads=4, num_hidden_layers=layers, vocab_size=32000,
                                   max_position_embeddings=2048)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        return transformers.LlamaForCausalLM(cfg).to(DT)


def graph_breaks(model, ids) -> dict:
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(input_ids=ids, labels=ids)
    return {"graphs": explained.graph_count, "breaks": explained.graph_break_count,
            "reasons": sorted({str(b.reason)[:200] for b in explained.break_reasons})[:6]}


def run_steps(model, step_model, ids, mode: str | None, warmup: int, timed: int) -> dict:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    losses, times = [], []

    def step() -> float:
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # a new step: the graph's outputs may be overwritten
        loss = step_model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        # a copy: a CUDA graph's output is overwritten by its next replay (reduce-overhead), and
        # the first step's loss is read after the run
        return loss.detach().clone()

    for _ in range(warmup):
        losses.append(step())
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(timed):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return {"step_ms": round(statistics.median(times), 2), "step_ms_min": round(min(times), 2),
            "peak_GB": round(torch.cuda.max_memory_allocated() / 1e9, 3), "first_loss": float(losses[0])}


def part_model(quick: bool) -> None:
    from gpudoctor.kernels import patch

    layers, batch, seq = (2, 2, 256) if quick else (4, 4, 512)
    warmup, timed = (3, 5) if quick else (5, 10)
    base = llama(layers)
    torch.manual_seed(1)
    ids = torch.randint(0, 32000, (batch, seq), device="cuda")
    variants = [(p, mode) for p in ("unpatched", "patched") for mode in ("eager", "default", "reduce-overhead")]
    variants.append(("liger", "eager"))
    rows = []
    for kind, mode in variants:
        row = {"model": kind, "mode": mode}
        model = step_model = None
        try:
            if kind == "liger" and not liger_available():
                rows.append({**row, "error": "liger-kernel not installed: skipped"})
                continue
            model = copy.deepcopy(base)
            if kind == "patched":
                report = patch(model)
                row["patch"], row["path"] = str(report).split("; path: ")[0], report.path
            elif kind == "liger":
                from liger_kernel.transformers import apply_liger_kernel_to_llama

                apply_liger_kernel_to_llama(model=model, rope=False)
            if mode != "eager":
                row["dynamo"] = graph_breaks(model, ids)
                torch._dynamo.reset()
                step_model = torch.compile(model, **({"mode": mode} if mode != "default" else {}))
            else:
                step_model = model
            row.update(run_steps(model, step_model, ids, mode, warmup, timed))
        except Exception as exc:  # noqa: BLE001 - one failing variant does not stop the run; it is reported
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
            row["trace"] = traceback.format_exc()[-1500:]
        finally:
            model = step_model = None
            gc.collect()
            torch.cuda.empty_cache()
            torch._dynamo.reset()
        rows.append(row)
        print(row.get("model"), row.get("mode"), row.get("step_ms", row.get("error")), flush=True)
    RESULTS["model"] = {"layers": layers, "batch": batch, "seq": seq, "hidden": 1024, "vocab": 32000,
                        "rows": rows}


# -- the table and the targets -------------------------------------------------------------------------


def _find(part: str, key: str, value: str, field: str):
    for row in RESULTS.get(part, {}).get("rows", []):
        if row.get(key) == value:
            return row.get(field)
    return None


def _model(kind: str, mode: str, field: str):
    for row in RESULTS.get("model", {}).get("rows", []):
        if row.get("model") == kind and row.get("mode") == mode:
            return row.get("dynamo", {}).get("breaks") if field == "breaks" else row.get(field)
    return None


def _verdict(ok) -> str:
    return "n/a" if ok is None else ("MET" if ok else "NOT MET")


def targets() -> list[tuple[str, str, str]]:
    """(target, measured, verdict) rows."""
    out = []
    ours = _find("host", "candidate", "ours eager (llama)", "host_us_fwd_bwd")
    ref = _find("host", "candidate", "torch.nn.RMSNorm", "host_us_fwd_bwd")
    op = _find("host", "candidate", "ours through torch.ops.gpudoctor", "host_us_fwd_bwd")
    ratio = ours / ref if ours and ref else None
    out.append(("host fwd+bwd <= 1.5x torch.nn.RMSNorm",
                f"ours {ours} us, via op {op} us, torch {ref} us" + (f" ({ratio:.2f}x)" if ratio else ""),
                _verdict(None if ratio is None else ratio <= 1.5)))
    eager = _find("gpu", "candidate", "ours eager (llama)", "gpu_us_fwd_bwd")
    via_op = _find("gpu", "candidate", "ours through torch.ops.gpudoctor", "gpu_us_fwd_bwd")
    comp = _find("gpu", "candidate", "torch.compile(ours)", "gpu_us_fwd_bwd")
    torch_us = _find("gpu", "candidate", "torch.nn.RMSNorm", "gpu_us_fwd_bwd")
    ok = None if not (eager and via_op and comp) else max(via_op, comp) <= eager * 1.03  # 3%: run-to-run noise
    out.append(("GPU fwd+bwd 2048x4096: op / compiled <= eager ours",
                f"eager {eager}, op {via_op}, compiled {comp}, torch {torch_us} us", _verdict(ok)))
    breaks = _model("patched", "default", "breaks")
    out.append(("patched + compile: 0 graph breaks", f"{breaks} (unpatched: {_model('unpatched', 'default', 'breaks')})",
                _verdict(None if breaks is None else breaks == 0)))
    pc, uc, pe = (_model("patched", "default", "step_ms"), _model("unpatched", "default", "step_ms"),
                  _model("patched", "eager", "step_ms"))
    out.append(("patched compiled <= compiled, < patched eager", f"{pc} / {uc} / {pe} ms",
                _verdict(None if None in (pc, uc, pe) else pc <= uc and pc < pe)))
    pr, ur = _model("patched", "reduce-overhead", "step_ms"), _model("unpatched", "reduce-overhead", "step_ms")
    out.append(("reduce-overhead: patched <= unpatched (and <= unpatched compiled)", f"{pr} / {ur} ({uc}) ms",
                _verdict(None if None in (pr, ur, uc) else pr <= ur and pr <= uc)))
    return out


def print_table() -> None:
    print()
    for part in ("host", "gpu"):
        for row in RESULTS.get(part, {}).get("rows", []):
            value = row.get("host_us_fwd_bwd", row.get("host_us_fwd", row.get("gpu_us_fwd_bwd", row.get("error"))))
            print(f"{part:5} {row['candidate'][:44]:44} {value}")
    for row in RESULTS.get("model", {}).get("rows", []):
        print(f"model {row['model']:9} {row['mode']:15} step {row.get('step_ms', '-')} ms, peak "
              f"{row.get('peak_GB', '-')} GB, breaks {row.get('dynamo', {}).get('breaks', '-')}, loss "
              f"{row.get('first_loss', '-')}" + (f"  ERROR {row['error'][:120]}" if "error" in row else ""))
    print(f"\n{'target':62} {'measured':52} verdict")
    for target, measured, verdict in targets():
        print(f"{target:62} {measured:52} {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--parts", default="host,gpu,model")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_kernels_host.py needs a CUDA GPU")
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - {"host", "gpu", "model"})
    if unknown:
        sys.exit(f"unknown --parts {','.join(unknown)}; choose from host, gpu, model")
    args.out.mkdir(parents=True, exist_ok=True)
    import triton

    from gpudoctor.kernels import _common, _rms_norm, cross_entropy, glu  # noqa: F401 - registers the ops

    RESULTS.update(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   date=time.strftime("%Y-%m-%d"), registration_api=_common.API, ops=dict(_common.REGISTERED),
                   liger=liger_available())
    for part in parts:
        t0 = time.time()
        try:
            globals()["part_" + part](args.quick)
        except Exception:  # noqa: BLE001 - one failing part does not stop the run; it is reported
            RESULTS[part + "_error"] = traceback.format_exc()[-2000:]
            print(RESULTS[part + "_error"], flush=True)
        RESULTS.setdefault("seconds", {})[part] = round(time.time() - t0, 1)
        RESULTS["targets"] = targets()
        (args.out / "kernels_host.json").write_text(json.dumps(RESULTS, indent=1, default=str))
        print(f"[{part}] {RESULTS['seconds'][part]} s", flush=True)
    print_table()


if __name__ == "__main__":
    main()
