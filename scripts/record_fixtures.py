"""Record real profiler traces of the trap lab's workloads, for gpudoctor's test fixtures.

Run on a CUDA machine from the repository root:

    PYTHONUNBUFFERED=1 PYTHONPATH=src python3 scripts/record_fixtures.py --out OUTDIR
    PYTHONPATH=src python3 scripts/record_fixtures.py --out /tmp/smoke --device cpu --only host_sync
    PYTHONPATH=src python3 scripts/record_fixtures.py --out OUTDIR --fixed-only --only host_sync

For every scenario (each trap's sick workload and the healthy baselines) it warms up, times
unprofiled steps (device-synchronized wall time, median), records five steps under
``torch.profiler`` (schedule wait=0, warmup=2, active=3) and writes ``<scenario>/trace.json.gz``;
for traps it also times the fixed twin. It then records a large training trace for benchmarks
(``bench/bench_170k.json.gz``), measures the profiler's per-op host overhead, and writes
``manifest.json`` and ``kernel_names.txt``. Everything is packed into ``fixtures.tar`` (split into
``fixtures.tar.NN`` parts if it is larger than ``--max-part-mib``). A failing scenario is recorded
in the manifest with its error and the others go on.

With ``--trace-fixed`` each trap's fixed twin is also profiled, with the same settings as its sick
workload, into ``<scenario>_fixed/trace.json.gz``; its manifest entry gains ``fixed_trace``,
``fixed_trace_events``, ``fixed_profiled_step_ms`` and the other trace facts prefixed ``fixed_``.
``--fixed-only`` does that without writing the sick traces (sick workloads are still timed).

Besides the lab's baselines, the script defines ``healthy_compiled``: healthy_train's model and
training step under ``torch.compile`` (default mode, so Inductor's Triton kernels and no CUDA
graphs), with more warm-up steps so that compilation ends before timing and profiling.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import gc
import gzip
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule

from gpudoctor.lab.common import TinyGPT, adamw, autocast, gpt_flops, seed, size
from gpudoctor.lab.healthy import VOCAB, build_bench_train
from gpudoctor.lab.registry import BASELINE_IDS as LAB_BASELINE_IDS
from gpudoctor.lab.registry import TRAP_IDS, load_baselines, load_trap
from gpudoctor.lab.trap import Baseline, Workload

LAST = ("memory_pressure",)
BENCH = "bench"
OVERHEAD = "profiler_overhead"
BENCH_TARGET_EVENTS = 170_000
COMPILED = "healthy_compiled"
BASELINE_IDS = LAB_BASELINE_IDS + (COMPILED,)
# Warm-up steps per scenario where the default (--warmup) is not enough.
MIN_WARMUP = {COMPILED: 5}


def build_compiled_train(device: str, n_layers: int = 2) -> Workload:
    """healthy_train under torch.compile: the forward and loss are compiled (their backward too,
    through AOTAutograd); the fused AdamW step stays eager, as in healthy_train."""
    seed(22)
    batch, seq, d = size(device, 8, 2), size(device, 1024, 64), size(device, 2048, 64)
    model = TinyGPT(VOCAB, d, n_layers, max(d // 128, 1), seq).to(device)
    opt = adamw(model.parameters(), device)
    idx = torch.randint(0, VOCAB, (batch, seq), device=device)
    targets = torch.randint(0, VOCAB, (batch, seq), device=device)

    @torch.compile
    def forward_loss(idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with autocast(device):
            logits = model(idx)
            return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def step() -> None:
        loss = forward_loss(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def close() -> None:
        torch._dynamo.reset()

    return Workload(
        step, close, flops_per_step=gpt_flops(batch, seq, d, n_layers, VOCAB, train=True)
    )


HEALTHY_COMPILED = Baseline(
    id=COMPILED,
    title="GPT-like training step under torch.compile (Inductor, default mode)",
    build=build_compiled_train,
    with_stack=False,
    description="healthy_train's architecture with 2 layers (d_model 2048, 16 heads, seq 1024, "
    "batch 8, vocab 8192); forward and loss in torch.compile (default mode: Inductor Triton "
    "kernels, no CUDA graphs), bf16 autocast, fused AdamW eager, data on the GPU, no syncs; "
    "5 warm-up steps so compilation is done before timing and profiling.",
)


def baselines() -> dict[str, Baseline]:
    return {b.id: b for b in [*load_baselines(), HEALTHY_COMPILED]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument(
        "--only",
        default="",
        help=f"comma-separated scenario names (incl. bench, {OVERHEAD}); default: all",
    )
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu for a smoke test")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20, help="timed unprofiled steps (at most)")
    p.add_argument("--budget-s", type=float, default=4.0, help="time budget of one timing loop")
    p.add_argument("--max-part-mib", type=float, default=15.0)
    p.add_argument(
        "--trace-fixed",
        action="store_true",
        help="also profile each trap's fixed twin into <scenario>_fixed/trace.json.gz",
    )
    p.add_argument(
        "--fixed-only",
        action="store_true",
        help="like --trace-fixed, but write no sick trap traces (sick is still timed)",
    )
    args = p.parse_args(argv)
    if args.fixed_only:
        args.trace_fixed = True
    return args


class Device:
    def __init__(self, name: str) -> None:
        self.name = name
        self.cuda = torch.device(name).type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def activities(self) -> list[ProfilerActivity]:
        acts = [ProfilerActivity.CPU]
        if self.cuda:
            acts.append(ProfilerActivity.CUDA)
        return acts

    def cleanup(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


def environment(dev: Device) -> dict:
    env = {
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "device": dev.name,
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if dev.cuda:
        props = torch.cuda.get_device_properties(0)
        env["gpu_name"] = torch.cuda.get_device_name(0)
        env["gpu_total_memory_bytes"] = props.total_memory
        env["gpu_sm_count"] = props.multi_processor_count
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout.strip()
            env["driver"] = out.splitlines()[0] if out else None
        except (OSError, subprocess.SubprocessError) as exc:
            env["driver"] = f"unavailable: {exc}"
    return env


def time_steps(wl, dev: Device, args: argparse.Namespace, warmup: int | None = None) -> list[float]:
    for _ in range(args.warmup if warmup is None else warmup):
        wl.step()
    dev.sync()
    times: list[float] = []
    deadline = time.perf_counter() + args.budget_s
    for _ in range(args.steps):
        start = time.perf_counter()
        wl.step()
        dev.sync()
        times.append((time.perf_counter() - start) * 1e3)
        if len(times) >= 5 and time.perf_counter() > deadline:
            break
    return times


def record_trace(wl, dev: Device, with_stack: bool, path: Path, active: int = 3) -> None:
    dev.sync()
    with profile(
        activities=dev.activities(),
        schedule=schedule(wait=0, warmup=2, active=active, repeat=1),
        record_shapes=True,
        with_flops=True,
        profile_memory=True,
        with_stack=with_stack,
    ) as prof:
        for _ in range(2 + active):
            wl.step()
            prof.step()
    prof.export_chrome_trace(str(path))


def summarize_trace(raw: Path) -> dict:
    """Event counts, kernel names and GPU busy time within the ProfilerStep ranges."""
    events = json.loads(raw.read_text())["traceEvents"]
    kernels = collections.Counter(e.get("name") for e in events if e.get("cat") == "kernel")
    steps = [
        e
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#")
        and e.get("ph") == "X"
        and e.get("cat") == "user_annotation"
    ]
    info = {
        "trace_events": len(events),
        "kernel_events": sum(kernels.values()),
        "distinct_kernels": len(kernels),
        "top_kernels": kernels.most_common(12),
        "profiler_steps": len(steps),
    }
    if steps:
        lo = min(e["ts"] for e in steps)
        hi = max(e["ts"] + e["dur"] for e in steps)
        spans = sorted(
            (max(e["ts"], lo), min(e["ts"] + e.get("dur", 0), hi))
            for e in events
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"
        )
        busy, cur_s, cur_e = 0.0, None, None
        for s, e in spans:
            if e <= s:
                continue
            if cur_e is None or s > cur_e:
                busy += (cur_e - cur_s) if cur_e is not None else 0.0
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        busy += (cur_e - cur_s) if cur_e is not None else 0.0
        info["profiled_step_ms"] = round((hi - lo) / len(steps) / 1e3, 3)
        info["gpu_busy_fraction"] = round(busy / (hi - lo), 4) if hi > lo else None
    return info


def gzip_file(raw: Path, dest: Path) -> int:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with raw.open("rb") as src, dest.open("wb") as fh:
        with gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=9, mtime=0) as gz:
            shutil.copyfileobj(src, gz)
    return dest.stat().st_size


def median_ms(times: list[float]) -> float | None:
    return round(statistics.median(times), 4) if times else None


def tflops(flops: float | None, ms: float | None) -> float | None:
    if not flops or not ms:
        return None
    return round(flops / (ms * 1e-3) / 1e12, 2)


def run_workload(
    build,
    dev: Device,
    args,
    entry: dict,
    key: str,
    trace_to: Path | None,
    with_stack: bool,
    trace_prefix: str = "",
    warmup: int | None = None,
) -> None:
    """Build, time (and optionally profile) one workload; results go into entry[key_*], the trace's
    facts into entry[trace_prefix + name]."""
    wl = build(dev.name)
    try:
        times = time_steps(wl, dev, args, warmup)
        entry[f"{key}_median_ms"] = median_ms(times)
        entry[f"{key}_times_ms"] = [round(t, 3) for t in times]
        entry[f"{key}_flops_per_step"] = wl.flops_per_step
        entry[f"{key}_tflops"] = tflops(wl.flops_per_step, median_ms(times))
        if trace_to is not None:
            raw = Path(tempfile.mkdtemp()) / "trace.json"
            record_trace(wl, dev, with_stack, raw)
            summary = summarize_trace(raw)
            summary["trace_json_bytes"] = raw.stat().st_size
            summary["trace_gz_bytes"] = gzip_file(raw, trace_to)
            entry.update({trace_prefix + k: v for k, v in summary.items()})
            shutil.rmtree(raw.parent, ignore_errors=True)
        info = wl.info()
        if info:
            entry[f"{key}_info"] = info
    finally:
        wl.close()
        del wl
        dev.cleanup()


def record_scenario(sid: str, dev: Device, args, out: Path) -> dict:
    if sid in BASELINE_IDS:
        scenario = baselines()[sid]
        sick, fixed = scenario.build, None
    else:
        scenario = load_trap(sid)
        sick, fixed = scenario.build_sick, scenario.build_fixed
    sick_traced = fixed is None or not args.fixed_only
    entry: dict = {
        "title": scenario.title,
        "description": scenario.description,
        "expected_finding": scenario.expected_finding,
        "profiled": sick_traced,
        "with_stack": scenario.with_stack,
        "trace": f"{sid}/trace.json.gz" if sick_traced else None,
        "recorded_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    warmup = max(args.warmup, MIN_WARMUP.get(sid, 0))
    if warmup != args.warmup:
        entry["warmup_steps"] = warmup
    start = time.perf_counter()
    try:
        trace_to = out / sid / "trace.json.gz" if sick_traced else None
        run_workload(sick, dev, args, entry, "sick", trace_to, scenario.with_stack, warmup=warmup)
    except Exception as exc:  # one failing scenario must not stop the others
        entry["error"] = f"sick: {type(exc).__name__}: {exc}"
        entry["traceback"] = traceback.format_exc(limit=6)
        dev.cleanup()
    if fixed is not None:
        fixed_to = out / f"{sid}_fixed" / "trace.json.gz" if args.trace_fixed else None
        if fixed_to is not None:
            entry["fixed_trace"] = f"{sid}_fixed/trace.json.gz"
        try:
            run_workload(
                fixed,
                dev,
                args,
                entry,
                "fixed",
                fixed_to,
                scenario.with_stack,
                trace_prefix="fixed_",
                warmup=warmup,
            )
        except Exception as exc:
            if fixed_to is not None and not fixed_to.exists():
                entry.pop("fixed_trace", None)
            entry["fixed_error"] = f"{type(exc).__name__}: {exc}"
            entry["fixed_traceback"] = traceback.format_exc(limit=6)
            dev.cleanup()
        if entry.get("sick_median_ms") and entry.get("fixed_median_ms"):
            entry["speedup"] = round(entry["sick_median_ms"] / entry["fixed_median_ms"], 3)
    entry["seconds"] = round(time.perf_counter() - start, 1)
    return entry


def record_bench(dev: Device, args, out: Path, manifest: dict) -> dict:
    entry: dict = {
        "description": "healthy_train architecture with more layers; record_shapes and with_stack; "
        f"active steps chosen to land near {BENCH_TARGET_EVENTS} events",
        "expected_finding": None,
        "profiled": True,
        "with_stack": True,
        "trace": "bench/bench_170k.json.gz",
    }
    wl = build_bench_train(dev.name)
    try:
        probe_dir = Path(tempfile.mkdtemp())
        for _ in range(args.warmup):
            wl.step()
        record_trace(wl, dev, True, probe_dir / "probe.json", active=1)
        per_step = summarize_trace(probe_dir / "probe.json")["trace_events"]
        active = max(3, min(400, round(BENCH_TARGET_EVENTS / max(per_step, 1))))
        entry["probe_events_per_step"] = per_step
        entry["active_steps"] = active
        raw = probe_dir / "bench.json"
        record_trace(wl, dev, True, raw, active=active)
        summary = summarize_trace(raw)
        summary.pop("top_kernels", None)
        entry.update(summary)
        entry["trace_json_bytes"] = raw.stat().st_size
        entry["trace_gz_bytes"] = gzip_file(raw, out / "bench" / "bench_170k.json.gz")
        shutil.rmtree(probe_dir, ignore_errors=True)
    except Exception as exc:
        entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["traceback"] = traceback.format_exc(limit=6)
    finally:
        wl.close()
        del wl
        dev.cleanup()
    return entry


def measure_overhead(dev: Device, n_ops: int = 2000, repeats: int = 3) -> dict:
    x = torch.randn(1024, device=dev.name)

    def loop() -> float:
        dev.sync()
        start = time.perf_counter()
        for _ in range(n_ops):
            x.add_(1)
        dev.sync()
        return (time.perf_counter() - start) / n_ops * 1e6

    loop()
    result = {"ops": n_ops, "op": "x.add_(1) on a 1024-element float32 tensor"}
    result["unprofiled_us_per_op"] = round(statistics.median(loop() for _ in range(repeats)), 3)
    for label, stack in (("profiled_us_per_op", False), ("profiled_with_stack_us_per_op", True)):
        samples = []
        for _ in range(repeats):
            with profile(
                activities=dev.activities(),
                record_shapes=True,
                with_flops=True,
                profile_memory=True,
                with_stack=stack,
            ):
                samples.append(loop())
        result[label] = round(statistics.median(samples), 3)
    return result


def kernel_report(scenarios: dict) -> str:
    lines = []
    for sid, entry in scenarios.items():
        for prefix, name in (("", sid), ("fixed_", f"{sid}_fixed")):
            if prefix + "top_kernels" not in entry:
                continue
            lines.append(
                f"== {name} ({entry.get(prefix + 'kernel_events', 0)} kernel events, "
                f"{entry.get(prefix + 'distinct_kernels', 0)} distinct)"
            )
            lines.extend(f"{count:6d}  {k}" for k, count in entry[prefix + "top_kernels"])
            lines.append("")
    return "\n".join(lines)


def pack(stage: Path, out: Path, max_part: int) -> list[str]:
    tar_path = out / "fixtures.tar"
    with tarfile.open(tar_path, "w") as tar:
        for item in sorted(stage.iterdir()):
            tar.add(item, arcname=item.name)
    if tar_path.stat().st_size <= max_part:
        return [tar_path.name]
    names = []
    with tar_path.open("rb") as fh:
        for i in range(100):
            chunk = fh.read(max_part)
            if not chunk:
                break
            part = out / f"fixtures.tar.{i:02d}"
            part.write_bytes(chunk)
            names.append(part.name)
    tar_path.unlink()
    return names


def fmt(value, width: int, digits: int = 2) -> str:
    if value is None:
        return "-".rjust(width)
    if isinstance(value, float):
        return f"{value:.{digits}f}".rjust(width)
    return str(value).rjust(width)


def print_summary(manifest: dict) -> None:
    env = manifest["environment"]
    print(
        f"\n{env.get('gpu_name', env['device'])} | driver {env.get('driver')} "
        f"| torch {env['torch']} | CUDA {env['cuda']} | triton {env['triton']} "
        f"| {env['date_utc']}"
    )
    print(
        f"{'scenario':22} {'sick ms':>9} {'fixed ms':>9} {'x':>6} {'prof ms':>8} {'busy':>5} "
        f"{'events':>7} {'gz KB':>7}  notes"
    )
    for sid, e in manifest["scenarios"].items():
        notes = []
        if "error" in e:
            notes.append("ERROR " + e["error"][:60])
        if "fixed_error" in e:
            notes.append("FIXED ERROR " + e["fixed_error"][:60])
        info = e.get("sick_info", {})
        if "num_alloc_retries" in info:
            notes.append(
                f"retries={info['num_alloc_retries']} "
                f"peak_reserved={info.get('peak_reserved_fraction', 0):.3f}"
            )
        if e.get("sick_tflops") is not None:
            notes.append(f"TF/s {e.get('sick_tflops')}/{e.get('fixed_tflops')}")
        print(
            f"{sid:22} {fmt(e.get('sick_median_ms'), 9)} {fmt(e.get('fixed_median_ms'), 9)} "
            f"{fmt(e.get('speedup'), 6)} {fmt(e.get('profiled_step_ms'), 8)} "
            f"{fmt(e.get('gpu_busy_fraction'), 5)} {fmt(e.get('trace_events'), 7)} "
            f"{fmt((e.get('trace_gz_bytes') or 0) / 1024, 7, 0)}  {'; '.join(notes)}"
        )
        if "fixed_trace" in e:
            print(
                f"{sid + '_fixed':22} {'':9} {'':9} {'':6} "
                f"{fmt(e.get('fixed_profiled_step_ms'), 8)} "
                f"{fmt(e.get('fixed_gpu_busy_fraction'), 5)} {fmt(e.get('fixed_trace_events'), 7)} "
                f"{fmt((e.get('fixed_trace_gz_bytes') or 0) / 1024, 7, 0)}"
            )
    bench = manifest.get("bench")
    if bench:
        print(
            f"bench: {bench.get('trace_events')} events, {bench.get('trace_json_bytes')} JSON "
            f"bytes, {bench.get('trace_gz_bytes')} gz bytes, {bench.get('active_steps')} steps"
            + (f" ERROR {bench['error']}" if "error" in bench else "")
        )
    if manifest.get(OVERHEAD):
        print(f"profiler overhead (us/op): {manifest[OVERHEAD]}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dev = Device(args.device)
    if dev.cuda and not torch.cuda.is_available():
        print("CUDA is not available; use --device cpu for a smoke test", file=sys.stderr)
        return 2
    wanted = [s for s in args.only.split(",") if s] or None
    order = [s for s in TRAP_IDS if s not in LAST] + list(BASELINE_IDS) + [BENCH, OVERHEAD]
    order += list(LAST)
    if wanted:
        unknown = sorted(set(wanted) - set(order))
        if unknown:
            print(f"unknown scenarios: {unknown}; known: {order}", file=sys.stderr)
            return 2
        order = [s for s in order if s in wanted]

    args.out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix="gpudoctor-fixtures-"))
    manifest: dict = {"environment": environment(dev), "scenarios": {}}
    print(json.dumps(manifest["environment"]), flush=True)
    started = time.perf_counter()
    for sid in order:
        t0 = time.perf_counter()
        if sid == BENCH:
            manifest["bench"] = record_bench(dev, args, stage, manifest)
        elif sid == OVERHEAD:
            try:
                manifest[OVERHEAD] = measure_overhead(dev)
            except Exception as exc:
                manifest[OVERHEAD] = {"error": f"{type(exc).__name__}: {exc}"}
        else:
            manifest["scenarios"][sid] = record_scenario(sid, dev, args, stage)
        entry = manifest["scenarios"].get(sid) or manifest.get("bench" if sid == BENCH else sid, {})
        print(
            f"[{time.perf_counter() - started:7.1f}s] {sid}: {time.perf_counter() - t0:.1f}s "
            f"sick={entry.get('sick_median_ms')} fixed={entry.get('fixed_median_ms')} "
            f"events={entry.get('trace_events')} gz={entry.get('trace_gz_bytes')}"
            + (
                f" fixed_events={entry.get('fixed_trace_events')} "
                f"fixed_gz={entry.get('fixed_trace_gz_bytes')}"
                if "fixed_trace" in entry
                else ""
            )
            + (f" ERROR={entry.get('error')}" if entry.get("error") else "")
            + (f" FIXED_ERROR={entry.get('fixed_error')}" if entry.get("fixed_error") else ""),
            flush=True,
        )
    manifest["total_seconds"] = round(time.perf_counter() - started, 1)
    (stage / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    (stage / "kernel_names.txt").write_text(kernel_report(manifest["scenarios"]))
    parts = pack(stage, args.out, int(args.max_part_mib * 1024 * 1024))
    shutil.rmtree(stage, ignore_errors=True)
    print("packed:", ", ".join(parts))
    print(kernel_report(manifest["scenarios"])[-5000:])
    print_summary(manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
