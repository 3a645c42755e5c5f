"""Host cost per call of gpudoctor.kernels and the compiled path against plain torch.compile (issue 22), on
one GPU.

``PYTHONPATH=src python3 benchmarks/bench_kernels_host.py --out OUT_DIR [--quick] [--parts host,gpu,model]
[--compiled op,native] [--budget-s S]`` writes ``OUT_DIR/kernels_host.json`` after each part and prints a
table last, each row against the issue's target. ``--quick`` (2-layer model, 200 host calls) finishes in
about 2-3 minutes on an H100; rows that would start past ``--budget-s`` (default 210 s with ``--quick``)
are skipped and say so.

- ``host``: host time of one RMSNorm forward + backward call, 4 x 4096 bf16 (a few us of GPU work, so the
  wall clock of N calls is the CPU's time to issue them): ``torch.nn.RMSNorm`` (fp32 math, bf16 weight);
  ours with the direct launch (``CompiledKernel.run``), with the fallback (``CompiledKernel[grid]``, every
  Launcher's ``direct`` off), and with the backward's stage two kept (``WHOLE_MAX_TILES = 0``: three
  launches instead of two); the Gemma casting; through ``torch.ops.gpudoctor.rms_norm``; the forward alone
  without grad, ours (direct and fallback) and ``F.rms_norm``; the forward with grad and no backward, ours and
  torch's; and an autograd.Function that computes nothing (the floor of a Python op). The candidates take
  turns in each of 15 (31) rounds, and the ratio to torch's is the median of the rounds' ratios. Also whether
  the direct and the fallback launch give bit-identical outputs and gradients. Target: ours <= 1.5x
  torch.nn.RMSNorm.
- ``gpu``: GPU time (sum of kernels, memsets and copies in a torch.profiler trace) of forward + backward at
  2048 x 4096 bf16 (torch's F.rms_norm and nn.RMSNorm, ours eager, through the op, ``torch.compile`` of a
  function calling ours (the op, Triton kernels seen through triton_op) and of the same math in plain torch
  ops) and at 4 x 4096 (ours with the one-program backward and with stage two, torch).
- ``model``: a Llama-style transformers model (2 layers with ``--quick``, else 4; H 1024, V 32000, bf16,
  batch 2 x 256 with ``--quick``, else 4 x 512, or ``--batch-seq``; AdamW): unpatched, ``patch(compiled="op")``
  and ``patch(compiled="native")`` (the norms and gated MLPs run their own forward under compile, the loss
  its own too up to ``patching.NATIVE_LOSS_MAX_LOGITS`` logits, else its op), each eager, ``torch.compile`` and ``mode="reduce-overhead"`` (CUDA graphs); median step of 5 (10)
  after 3 (5) warm-ups, peak memory, first loss, the graph breaks ``torch._dynamo.explain`` counts (once a
  variant), and the seconds each row took (compile included). Targets: 0 graph breaks; compiled patched
  <= compiled unpatched and < patched eager; reduce-overhead patched <= unpatched.

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
sys.path.insert(0, str(Path(__file__).resolve().parent / "probes"))
from bench_kernels import gpu_events
from probe_host_path import EmptyFunction  # an autograd.Function that computes nothing: the floor

DT = torch.bfloat16
RESULTS: dict = {}
DEADLINE = [float("inf")]  # time.time() past which no new model row starts


def liger_available() -> bool:
    try:
        import liger_kernel  # noqa: F401 - importable is the question
    except ImportError:
        return False
    return True


def gpu_us(fn, iters: int = 20) -> float:
    """GPU time per call (us): every kernel, memset and copy of ``iters`` calls (bench_kernels.gpu_events)."""
    return sum(e.get("dur", 0) for e in gpu_events(fn, iters)) / iters


def fwd_bwd(f, x: torch.Tensor, w: torch.Tensor):
    """Forward + backward of f(x, w), the output gradient made once, the input gradients dropped each call."""
    dy = torch.ones_like(x)

    def run():
        x.grad = None
        w.grad = None
        f(x, w).backward(dy)

    return run


# -- switches the rows flip: the launch path and the one-program backward ----------------------------------


def launchers() -> list:
    from gpudoctor.kernels import _common, _layer_norm, _rms_norm, cross_entropy, glu

    return [
        v
        for m in (_rms_norm, _layer_norm, glu, cross_entropy)
        for v in vars(m).values()
        if isinstance(v, _common.Launcher)
    ]


class Setting:
    """``with Setting(direct=False, whole=False):`` the fallback launch / the backward's stage two kept."""

    def __init__(self, direct: bool = True, whole: bool = True) -> None:
        self.direct, self.whole = direct, whole

    def __enter__(self) -> None:
        from gpudoctor.kernels import _rms_norm

        self.saved = [(launch, launch.direct) for launch in launchers()], _rms_norm.WHOLE_MAX_TILES
        for launch in launchers():
            launch.direct = self.direct and launch.direct
        _rms_norm.WHOLE_MAX_TILES = _rms_norm.WHOLE_MAX_TILES if self.whole else 0
        _rms_norm._BWD_PLANS.clear()

    def __exit__(self, *exc) -> None:
        from gpudoctor.kernels import _rms_norm

        for launch, direct in self.saved[0]:
            launch.direct = direct
        _rms_norm.WHOLE_MAX_TILES = self.saved[1]
        _rms_norm._BWD_PLANS.clear()


def measure(rows: list, name: str, key: str, fn, setting: Setting | None = None) -> None:
    try:
        with setting or Setting():
            rows.append({"candidate": name, key: round(fn(), 1)})
    except Exception as exc:  # noqa: BLE001 - one failing candidate does not stop the run; it is reported
        rows.append({"candidate": name, "error": f"{type(exc).__name__}: {exc}"[:300]})


# -- host ------------------------------------------------------------------------------------------------


def same_results(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether the direct and the fallback launch give bit-identical y, dx and dw."""
    from gpudoctor.kernels import rms_norm

    def run(setting: Setting) -> list[torch.Tensor]:
        with setting:
            x.grad = w.grad = None
            y = rms_norm(x, w, 1e-6)
            y.backward(torch.ones_like(y))
            return [y.detach().clone(), x.grad.clone(), w.grad.clone()]

    direct, fallback = run(Setting()), run(Setting(direct=False))
    return all(torch.equal(a, b) for a, b in zip(direct, fallback, strict=True))


def host_rounds(candidates: list, calls: int, rounds: int) -> dict:
    """{name: [us per call, one per round]}: the candidates take turns within each round, so that a host
    whose speed drifts (a shared VM: the same row read 93.5 and 122.5 us in two calls, H100, 2026-11-26)
    moves them all alike; their ratio is then read round by round. Each candidate is (name, fn, setting);
    one that fails is recorded with its message and leaves the rounds."""
    times: dict = {}
    alive = []
    for name, fn, setting in candidates:
        try:
            with setting or Setting():
                for _ in range(50):
                    fn()
            torch.cuda.synchronize()
            alive.append((name, fn, setting))
            times[name] = []
        except Exception as exc:  # noqa: BLE001 - one failing candidate does not stop the run; it is reported
            times[name] = f"{type(exc).__name__}: {exc}"[:300]
    for _ in range(rounds):
        for name, fn, setting in alive:
            with setting or Setting():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                torch.cuda.synchronize()
                times[name].append((time.perf_counter() - t0) / calls * 1e6)
    return times


def part_host(quick: bool) -> None:
    from gpudoctor.kernels import rms_norm

    hidden = 4096
    x = torch.randn(4, hidden, device="cuda", dtype=DT, requires_grad=True)
    w = torch.ones(hidden, device="cuda", dtype=DT, requires_grad=True)
    calls, rounds = (200, 15) if quick else (1000, 31)
    torch_mod = torch.nn.RMSNorm(hidden, eps=1e-6, device="cuda", dtype=DT)
    ours = lambda x, w: rms_norm(x, w, 1e-6)  # noqa: E731

    def forward_only(f):  # the forward with grad on (its autograd node built), no backward
        return lambda: f(x, w)

    fwd_bwd_rows = [
        ("torch.nn.RMSNorm", fwd_bwd(lambda x, w: torch_mod(x), x, w), None),
        ("ours, direct launch", fwd_bwd(ours, x, w), None),
        ("ours, fallback launch", fwd_bwd(ours, x, w), Setting(direct=False)),
        ("ours, direct, stage two kept (3 launches)", fwd_bwd(ours, x, w), Setting(whole=False)),
        (
            "ours, gemma casting",
            fwd_bwd(lambda x, w: rms_norm(x, w, 1e-6, casting="gemma"), x, w),
            None,
        ),
        (
            "ours through torch.ops.gpudoctor",
            fwd_bwd(lambda x, w: torch.ops.gpudoctor.rms_norm(x, w, 1e-6, 0.0, True)[0], x, w),
            None,
        ),
        ("an empty Python autograd.Function (floor)", fwd_bwd(EmptyFunction.apply, x, w), None),
    ]
    if liger_available():
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        fwd_bwd_rows.append(
            (
                "liger",
                fwd_bwd(
                    lambda x, w: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False), x, w
                ),
                None,
            )
        )
    forward_rows = [
        (
            "torch.nn.RMSNorm forward with grad, no backward",
            forward_only(lambda x, w: torch_mod(x)),
            None,
        ),
        ("ours forward with grad, no backward", forward_only(ours), None),
    ]
    times = host_rounds(fwd_bwd_rows + forward_rows, calls, rounds)
    xi, wi = x.detach(), w.detach()
    with torch.no_grad():  # the forward alone, no autograd node: the launcher's own cost
        times.update(
            host_rounds(
                [
                    ("ours forward only, no grad, direct", lambda: rms_norm(xi, wi, 1e-6), None),
                    (
                        "ours forward only, no grad, fallback",
                        lambda: rms_norm(xi, wi, 1e-6),
                        Setting(direct=False),
                    ),
                    (
                        "F.rms_norm forward only, no grad",
                        lambda: F.rms_norm(xi, (hidden,), wi, 1e-6),
                        None,
                    ),
                ],
                calls,
                rounds,
            )
        )
    rows = []
    fwd_bwd_names = {name for name, _, _ in fwd_bwd_rows}
    for name, value in times.items():
        key = "host_us_fwd_bwd" if name in fwd_bwd_names else "host_us_fwd"
        if isinstance(value, str):
            rows.append({"candidate": name, "error": value})
        else:
            rows.append(
                {
                    "candidate": name,
                    key: round(statistics.median(value), 1),
                    "rounds_us": [round(v, 1) for v in value],
                }
            )
    ref = times.get("torch.nn.RMSNorm")
    ratios = {}
    for name in (
        "ours, direct launch",
        "ours, fallback launch",
        "an empty Python autograd.Function (floor)",
    ):
        mine = times.get(name)
        if isinstance(ref, list) and isinstance(mine, list) and ref:
            ratios[name] = round(
                statistics.median(m / r for m, r in zip(mine, ref, strict=True)), 3
            )
    RESULTS["host"] = {
        "shape": [4, hidden],
        "dtype": "bf16",
        "calls": calls,
        "rounds": rounds,
        "rows": rows,
        "ratio_to_torch": ratios,
        "direct_equals_fallback": same_results(x, w),
    }


# -- GPU time --------------------------------------------------------------------------------------------


def part_gpu(quick: bool) -> None:
    from gpudoctor.kernels import rms_norm
    from gpudoctor.kernels._rms_norm import _rms_norm_native

    rows: list = []
    for m in (2048, 4):
        hidden = 4096
        x = torch.randn(m, hidden, device="cuda", dtype=DT, requires_grad=True)
        w = (torch.rand(hidden, device="cuda", dtype=DT) + 0.5).requires_grad_(True)
        torch_mod = torch.nn.RMSNorm(hidden, eps=1e-6, device="cuda", dtype=DT)
        shape = f"{m}x{hidden}"

        def gpu(f, x=x, w=w):
            return lambda: gpu_us(fwd_bwd(f, x, w))

        measure(
            rows,
            f"{shape} torch.nn.RMSNorm",
            "gpu_us_fwd_bwd",
            gpu(lambda x, w, mod=torch_mod: mod(x)),
        )
        measure(
            rows,
            f"{shape} torch F.rms_norm (bf16 weight)",
            "gpu_us_fwd_bwd",
            gpu(lambda x, w, h=hidden: F.rms_norm(x, (h,), w, 1e-6)),
        )
        measure(
            rows, f"{shape} ours eager", "gpu_us_fwd_bwd", gpu(lambda x, w: rms_norm(x, w, 1e-6))
        )
        if m == 4:
            measure(
                rows,
                f"{shape} ours eager, stage two kept",
                "gpu_us_fwd_bwd",
                gpu(lambda x, w: rms_norm(x, w, 1e-6)),
                Setting(whole=False),
            )
            continue
        measure(
            rows,
            f"{shape} ours through torch.ops.gpudoctor",
            "gpu_us_fwd_bwd",
            gpu(lambda x, w: torch.ops.gpudoctor.rms_norm(x, w, 1e-6, 0.0, True)[0]),
        )
        torch._dynamo.reset()
        measure(
            rows,
            f"{shape} torch.compile(ours), the op",
            "gpu_us_fwd_bwd",
            gpu(torch.compile(lambda x, w: rms_norm(x, w, 1e-6))),
        )
        measure(
            rows,
            f"{shape} torch.compile(the same math in torch ops)",
            "gpu_us_fwd_bwd",
            gpu(torch.compile(lambda x, w: _rms_norm_native(x, w, 1e-6, 0.0, True))),
        )
    RESULTS["gpu"] = {"dtype": "bf16", "rows": rows}


# -- the model step --------------------------------------------------------------------------------------


def llama(layers: int):
    import transformers

    cfg = transformers.LlamaConfig(
        hidden_size=1024,
        intermediate_size=2816,
        num_attention_heads=16,
        num_key_value_heads=4,
        num_hidden_layers=layers,
        vocab_size=32000,
        max_position_embeddings=2048,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        return transformers.LlamaForCausalLM(cfg).to(DT)


def graph_breaks(model, ids) -> dict:
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(input_ids=ids, labels=ids)
    return {
        "graphs": explained.graph_count,
        "breaks": explained.graph_break_count,
        "reasons": sorted({str(b.reason)[:200] for b in explained.break_reasons})[:6],
    }


def run_steps(model, step_model, ids, mode: str, warmup: int, timed: int) -> dict:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    losses, times = [], []

    def step() -> torch.Tensor:
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # a new step: the graph's outputs may be overwritten
        loss = step_model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        # a copy: a CUDA graph's output is overwritten by its next replay (reduce-overhead), and
        # the first step's loss is read after the run
        return loss.detach().clone()

    t0 = time.time()
    for _ in range(warmup):
        losses.append(step())
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    torch.cuda.reset_peak_memory_stats()
    for _ in range(timed):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return {
        "step_ms": round(statistics.median(times), 2),
        "step_ms_min": round(min(times), 2),
        "peak_GB": round(torch.cuda.max_memory_allocated() / 1e9, 3),
        "first_loss": float(losses[0]),
        "warmup_s": round(warm_s, 1),
    }


def build(base, kind: str):
    """A copy of the model, patched as ``kind`` says; the PatchReport line where patched."""
    from gpudoctor.kernels import patch

    model = copy.deepcopy(base)
    note = {}
    if kind.startswith("patched-"):
        report = patch(model, compiled=kind.split("-", 1)[1])
        note = {"patch": str(report).split("; path: ")[0], "path": report.path}
    elif kind == "liger":
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(model=model, rope=False)
    return model, note


def model_row(base, ids, kind: str, mode: str, warmup: int, timed: int, breaks: dict) -> dict:
    row: dict = {"model": kind, "mode": mode}
    if time.time() > DEADLINE[0]:
        return {**row, "error": "skipped: past --budget-s"}
    t0 = time.time()
    model = step_model = None
    try:
        model, note = build(base, kind)
        row.update(note)
        if mode != "eager":
            if (
                kind not in breaks
            ):  # the same graphs in both compiled modes: explained once a variant
                breaks[kind] = graph_breaks(model, ids)
            row["dynamo"] = breaks[kind]
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
    row["row_s"] = round(time.time() - t0, 1)
    print(kind, mode, row.get("step_ms", row.get("error")), f"{row['row_s']} s", flush=True)
    return row


def part_model(quick: bool) -> None:
    layers, batch, seq = (2, 2, 256) if quick else (4, 4, 512)
    if MODEL_SHAPE:
        batch, seq = MODEL_SHAPE
    warmup, timed = (3, 5) if quick else (5, 10)
    base = llama(layers)
    torch.manual_seed(1)
    ids = torch.randint(0, 32000, (batch, seq), device="cuda")
    kinds = ["unpatched", *(f"patched-{c}" for c in COMPILED)]
    # the compiled rows first (the targets), eager last: a row past the budget is the cheapest to lose
    variants = [(k, m) for m in ("default", "reduce-overhead", "eager") for k in kinds]
    if liger_available():
        variants.append(("liger", "eager"))
    breaks: dict = {}
    rows = [model_row(base, ids, kind, mode, warmup, timed, breaks) for kind, mode in variants]
    if not liger_available():
        rows.append(
            {"model": "liger", "mode": "eager", "error": "liger-kernel not installed: skipped"}
        )
    RESULTS["model"] = {
        "layers": layers,
        "batch": batch,
        "seq": seq,
        "hidden": 1024,
        "vocab": 32000,
        "warmup": warmup,
        "timed": timed,
        "rows": rows,
    }


COMPILED = ["op", "native"]
MODEL_SHAPE: list[int] = []  # --batch-seq: the model rows' batch and sequence length, when given


# -- the table and the targets -------------------------------------------------------------------------


def _find(part: str, name: str, field: str):
    for row in RESULTS.get(part, {}).get("rows", []):
        if row.get("candidate") == name:
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
    ref = _find("host", "torch.nn.RMSNorm", "host_us_fwd_bwd")
    ours = _find("host", "ours, direct launch", "host_us_fwd_bwd")
    fallback = _find("host", "ours, fallback launch", "host_us_fwd_bwd")
    ratios = RESULTS.get("host", {}).get("ratio_to_torch", {})
    ratio = ratios.get("ours, direct launch")  # the median of the rounds' ratios (host_rounds)
    out.append(
        (
            "host fwd+bwd <= 1.5x torch.nn.RMSNorm",
            f"ours {ours} (fallback {fallback}), torch {ref} us"
            + (f": {ratio:.2f}x a round" if ratio else ""),
            _verdict(None if ratio is None else ratio <= 1.5),
        )
    )
    eager = _find("gpu", "2048x4096 ours eager", "gpu_us_fwd_bwd")
    via_op = _find("gpu", "2048x4096 ours through torch.ops.gpudoctor", "gpu_us_fwd_bwd")
    comp = _find("gpu", "2048x4096 torch.compile(ours), the op", "gpu_us_fwd_bwd")
    native = _find("gpu", "2048x4096 torch.compile(the same math in torch ops)", "gpu_us_fwd_bwd")
    ok = None if not (eager and via_op) else via_op <= eager * 1.03  # 3%: run-to-run noise
    out.append(
        (
            "GPU fwd+bwd 2048x4096: op <= eager ours (compiled: info)",
            f"eager {eager}, op {via_op}, compiled op {comp}, compiled torch math {native} us",
            _verdict(ok),
        )
    )
    for c in COMPILED:
        kind = f"patched-{c}"
        breaks = _model(kind, "default", "breaks")
        pc, uc, pe = (
            _model(kind, "default", "step_ms"),
            _model("unpatched", "default", "step_ms"),
            _model(kind, "eager", "step_ms"),
        )
        pr, ur = (
            _model(kind, "reduce-overhead", "step_ms"),
            _model("unpatched", "reduce-overhead", "step_ms"),
        )
        out.append(
            (
                f"{kind} + compile: 0 graph breaks",
                f"{breaks}",
                _verdict(None if breaks is None else breaks == 0),
            )
        )
        out.append(
            (
                f"{kind} compiled <= compiled, < patched eager",
                f"{pc} / {uc} / {pe} ms",
                _verdict(None if None in (pc, uc, pe) else pc <= uc and pc < pe),
            )
        )
        out.append(
            (
                f"{kind} reduce-overhead <= unpatched reduce-overhead",
                f"{pr} / {ur} ms",
                _verdict(None if None in (pr, ur) else pr <= ur),
            )
        )
    return out


def print_table() -> None:
    print()
    host = RESULTS.get("host", {})
    for row in host.get("rows", []):
        value = row.get("host_us_fwd_bwd", row.get("host_us_fwd", row.get("error")))
        print(f"host us {row['candidate'][:46]:46} {value}")
    if host:
        for name, ratio in host.get("ratio_to_torch", {}).items():
            print(
                f"host    {name[:46]:46} {ratio}x torch.nn.RMSNorm (median of the rounds' ratios)"
            )
        print(
            f"host    direct launch == fallback launch, bit for bit: {host.get('direct_equals_fallback')}"
        )
    for row in RESULTS.get("gpu", {}).get("rows", []):
        print(f"GPU us  {row['candidate'][:60]:60} {row.get('gpu_us_fwd_bwd', row.get('error'))}")
    model = RESULTS.get("model", {})
    if model:
        print(
            f"\nmodel step ms (graph breaks): {model['layers']} layers, batch {model['batch']} x {model['seq']}"
        )
        print(f"{'':18}{'eager':>14}{'compile':>18}{'reduce-overhead':>18}")
        for kind in ["unpatched", *(f"patched-{c}" for c in COMPILED), "liger"]:
            cells = []
            for mode in ("eager", "default", "reduce-overhead"):
                ms, breaks = _model(kind, mode, "step_ms"), _model(kind, mode, "breaks")
                cells.append(
                    "-" if ms is None else f"{ms}" + ("" if breaks is None else f" ({breaks})")
                )
            if any(c != "-" for c in cells):
                print(f"{kind:18}{cells[0]:>14}{cells[1]:>18}{cells[2]:>18}")
        for row in model.get("rows", []):
            if "error" in row and "not installed" not in row["error"]:
                print(f"  {row['model']} {row['mode']}: {row['error'][:150]}")
    print(f"\n{'target':58} {'measured':64} verdict")
    for target, measured, verdict in targets():
        print(f"{target:58} {measured:64} {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--parts", default="host,gpu,model")
    parser.add_argument(
        "--compiled",
        "--compiled-norms",
        default="op,native",
        help="the patch(compiled=...) variants of the model rows: op, native or both (op,native)",
    )
    parser.add_argument(
        "--batch-seq",
        default="",
        help="the model rows' batch x sequence, e.g. 8x1024 (default: 2x256 with --quick, else 4x512)",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="no model row starts after this many seconds (default: 210 with --quick, none without)",
    )
    args = parser.parse_args()
    parts, compiled = args.parts.split(","), args.compiled.split(",")
    unknown = sorted(set(parts) - {"host", "gpu", "model"}) + sorted(
        set(compiled) - {"op", "native"}
    )
    if unknown:
        sys.exit(
            f"unknown --parts / --compiled value(s) {','.join(unknown)}; parts: host, gpu, model; "
            "compiled: op, native"
        )
    if args.batch_seq:
        try:
            MODEL_SHAPE[:] = [int(v) for v in args.batch_seq.lower().split("x")]
            if len(MODEL_SHAPE) != 2 or min(MODEL_SHAPE) < 1:
                raise ValueError
        except ValueError:
            sys.exit(f"--batch-seq takes BATCHxSEQ, e.g. 8x1024; got {args.batch_seq!r}")
    if not torch.cuda.is_available():
        sys.exit("bench_kernels_host.py needs a CUDA GPU")
    COMPILED[:] = [c for c in ("op", "native") if c in compiled]
    start = time.time()
    budget = args.budget_s if args.budget_s is not None else (210.0 if args.quick else None)
    if budget is not None:
        DEADLINE[0] = start + budget
    args.out.mkdir(parents=True, exist_ok=True)
    import triton

    from gpudoctor.kernels import _common, _rms_norm, cross_entropy, glu  # noqa: F401 - registers the ops

    RESULTS.update(
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        triton=triton.__version__,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        registration_api=_common.API,
        ops=dict(_common.REGISTERED),
        liger=liger_available(),
        quick=args.quick,
        compiled=COMPILED,
        whole_max_tiles=_rms_norm.WHOLE_MAX_TILES,
    )
    for part in parts:
        t0 = time.time()
        try:
            globals()["part_" + part](args.quick)
        except Exception:  # noqa: BLE001 - one failing part does not stop the run; it is reported
            RESULTS[part + "_error"] = traceback.format_exc()[-2000:]
            print(RESULTS[part + "_error"], flush=True)
        RESULTS.setdefault("seconds", {})[part] = round(time.time() - t0, 1)
        RESULTS["direct_launch"] = [
            launch.direct for launch in launchers()
        ]  # False: a launcher fell back
        RESULTS["targets"] = targets()
        (args.out / "kernels_host.json").write_text(json.dumps(RESULTS, indent=1, default=str))
        print(f"[{part}] {RESULTS['seconds'][part]} s", flush=True)
    RESULTS["seconds"]["total"] = round(time.time() - start, 1)
    (args.out / "kernels_host.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    print_table()
    print(f"\ntotal {RESULTS['seconds']['total']} s")


if __name__ == "__main__":
    main()
