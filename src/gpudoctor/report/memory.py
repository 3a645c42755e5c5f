"""Render a memory estimate: the per-GPU breakdown as a bar, the peak and its phase, the verdict
on ``--gpu`` and, when it does not fit, the changes that make it fit with their new peaks."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.memory.estimate import RESERVED_OVER_ALLOCATED, MemoryEstimate

_LABELS = {
    "weights": "weights",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "master_weights": "fp32 master weights",
    "activations": "activations",
    "kv_cache": "KV cache",
    "cuda_workspaces": "cuBLAS workspaces",
    "optimizer_step_temporaries": "optimizer step temporaries",
    "transient": "transient at the peak",
}
_PHASES = {"optimizer": "optimizer step"}
_COLORS = ("cyan", "magenta", "yellow", "green", "blue", "red", "bright_black", "white",
           "bright_cyan")


def gib(n: float) -> str:
    return f"{n / 1024**3:,.2f} GiB"


def to_json(est: MemoryEstimate) -> str:
    return json.dumps(est.to_dict(), indent=1)


def render_console(est: MemoryEstimate, console: Console) -> None:
    mode = "training step" if est.mode == "train" else "generation"
    console.print(Text.assemble(("gpudoctor memory", "bold"),
                                f"  {est.model}  ·  {est.n_params / 1e9:,.2f} B params  ·  {mode}"))
    err = est.extra.get("measured_error")
    spread = f" ±{100 * abs(err):.0f}% (measured, see the accuracy note)" if err is not None else ""
    console.print(Text.assemble("peak allocated ",
                                (("~" if spread else "") + gib(est.peak_bytes), "bold"), spread,
                                f" during the {est.phase}",
                                f"   (reserved ≈ {gib(est.reserved_bytes)}, + CUDA context "
                                f"{gib(est.context_bytes)})"))
    _bar(est, console)
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("component")
    table.add_column("per GPU", justify="right")
    table.add_column("share", justify="right")
    for i, (key, value) in enumerate(est.breakdown.items()):
        if value == 0:
            continue
        share = value / est.peak_bytes if est.peak_bytes else 0.0
        table.add_row(Text("■ ", style=_COLORS[i % len(_COLORS)])
                      + _LABELS.get(key, key.replace("_", " ")), gib(value), f"{100 * share:.1f}%")
    console.print(table)
    detail = est.extra.get("activations_by_component")
    if detail:
        parts = ", ".join(f"{k.replace('_', ' ')} {gib(v)}"
                          for k, v in sorted(detail.items(), key=lambda kv: -kv[1]) if v)
        console.print(Text(f"activations: {parts}", style="dim"))
    if est.mode == "infer":
        extra = est.extra
        console.print(f"KV cache: {extra['kv_bytes_per_token'] / 1024:,.1f} KiB per token; "
                      f"{gib(extra['kv_cache_full_context_bytes'])} for the whole batch at "
                      "full context")
    for line in est.assumptions:
        console.print(Text(f"assumed: {line}", style="dim"))
    for note in est.notes:
        console.print(Text(f"note: {note}", style="dim"))
    if est.capacity_bytes:
        verdict = est.fits
        line = (f"{'fits' if verdict else 'does NOT fit'} on {est.gpu}: needs "
                f"{gib(est.total_bytes)} (peak x {RESERVED_OVER_ALLOCATED:g} allocator reserve + "
                f"{gib(est.context_bytes)} CUDA context) of {gib(est.capacity_bytes)}")
        console.print(Text(line, style="bold green" if verdict else "bold red"))
        console.print(Text(f"usable: {gib(est.capacity_bytes)} on the card "
                           f"({est.capacity_source}) - {gib(est.context_bytes)} CUDA context = "
                           f"{gib(est.capacity_bytes - est.context_bytes)}; the allocator reserves "
                           f"~{RESERVED_OVER_ALLOCATED:g}x its peak (median of 18 measured runs), "
                           f"so a peak up to {gib(est.usable_peak_bytes)} fits", style="dim"))
        if est.mode == "infer":
            x = est.extra
            tp = x.get("gpus_needed_tp")
            longest = f"{x.get('max_context', 0):,} tokens"
            if x.get("max_context_limited_by") == "model":
                longest += (f" (the model's limit: its {x.get('model_positions', 0):,} positions, "
                            f"not memory, which would hold {x.get('max_context_by_memory', 0):,})")
            console.print(f"largest batch at this context: {x.get('max_batch', 0)}; longest "
                          f"context at this batch: {longest}; GPUs needed (tensor parallel): "
                          f"{tp or 'more than 8'}")
    if est.suggestions:
        console.print(Text.assemble(("What makes it fit, cheapest first", "bold"),
                                    f" (new peak; it fits up to {gib(est.usable_peak_bytes)}):"))
        for i, s in enumerate(est.suggestions, 1):
            mark = Text("fits      ", style="green") if s.fits else Text("still over", style="red")
            console.print(Text.assemble(f" {i}. ", mark, f" {gib(s.peak_bytes):>11}  ", s.change))
            saved = f"saves {gib(est.peak_bytes - s.peak_bytes)}"
            if s.phase and s.phase != est.phase:
                saved += f", then the {_PHASES.get(s.phase, s.phase)} sets the peak"
            console.print(Text(f"       {saved}; cost: {s.cost};  options: {_flags(s.options)}",
                               style="dim"))


def _flags(options: dict) -> str:
    out = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is not False:
            out.append(f"{flag} {value}")
    return " ".join(out)


def _bar(est: MemoryEstimate, console: Console) -> None:
    width = max(20, min(console.width - 2, 100))
    total = est.capacity_bytes or est.peak_bytes
    bar = Text()
    used = 0
    for i, (_, value) in enumerate(est.breakdown.items()):
        cells = round(width * value / total) if total else 0
        bar.append("█" * cells, style=_COLORS[i % len(_COLORS)])
        used += cells
    if est.capacity_bytes:
        if used < width:
            bar.append("░" * (width - used), style="bright_black")
        elif used > width:
            bar = bar[:width]
            bar.append("▶", style="bold red")
    console.print(bar)
