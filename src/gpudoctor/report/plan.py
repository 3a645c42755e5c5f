"""Render ``gpudoctor plan`` results: one collective's prediction, the ranked training layouts and
the serving sizes. Sizes are in GiB (2^30 bytes), as in the messages; a table wider than the
terminal is printed whole (the terminal wraps it), never with cut-off cells."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.plan.collective_cost import CommPrediction
from gpudoctor.plan.infer import ServingPlan
from gpudoctor.plan.train import Plan, TrainPlanResult


def size(n: float) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:,.4g} {unit}"
    return f"{n:,.0f} B"


def seconds(t: float) -> str:
    if t >= 1000:
        return f"{t:,.0f} s"
    if t >= 1:
        return f"{t:,.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:,.3f} ms"
    return f"{t * 1e6:,.1f} us"


def count(v: float) -> str:
    """A count or rate in at most ~6 characters: 35, 8,202, 35.9k, 6.16M, 2.1e+10."""
    if v < 10_000:
        return f"{v:,.0f}"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale and v / scale < 1000:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.2g}"


def rate(v: float) -> str:
    """A QPS: 0.0004, 0.1, 36.1, 289, 35.9k."""
    if v >= 100:
        return count(v)
    if v >= 0.1 or v == 0:
        return f"{v:.1f}"
    return f"{v:.1g}"


def print_whole(console: Console, table: Table) -> None:
    """Print ``table`` at its natural width even past the console's: rich would cut cells with
    '…'."""
    need = console.measure(table, options=console.options.update_width(100_000)).maximum
    width = console.width
    if need <= width:
        console.print(table)
        return
    console.width = need
    try:
        console.print(table, crop=False)
    finally:
        console.width = width


def render_comm(pred: CommPrediction, console: Console) -> None:
    console.print(Text.assemble(("gpudoctor plan comm", "bold"),
                                f"  {pred.op}  ·  {size(pred.bytes)}  ·  "
                                f"{pred.gpus:,} GPUs ({pred.gpus_per_node} per node)"))
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for name, justify in (("op", "left"), ("size", "right"), ("GPUs", "right"),
                          ("algorithm", "left"),
                          ("time", "right"), ("algbw", "right"), ("busbw", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_row(pred.op, size(pred.bytes), f"{pred.gpus:,}", pred.algorithm,
                  Text(seconds(pred.time_s), style="bold"),
                  f"{pred.algbw_GBps:,.1f} GB/s", f"{pred.busbw_GBps:,.1f} GB/s")
    print_whole(console, table)
    others = [f"{name} {seconds(t)}" for name, t in pred.candidates.items()
              if name != pred.algorithm]
    if others:
        console.print(Text(f"other algorithms: {', '.join(others)}", style="dim"))
    console.print(Text(f"source: {pred.source}", style="dim"))
    for note in pred.notes:
        console.print(Text(f"note: {note}", style="dim"))


_TRAIN_HEADERS = ("dp", "tp", "pp", "cp", "zero", "microbatch", "checkpointing", "step s", "mfu",
                  "peak bytes")


def _train_row(p: Plan) -> tuple[str, ...]:
    """One layout's cells, in the order of ``_TRAIN_HEADERS``."""
    return (str(p.dp), str(p.tp), str(p.pp), str(p.cp), str(p.zero), str(p.microbatch),
            p.checkpointing, seconds(p.step_s), f"{100 * p.mfu:.1f}%", size(p.peak_bytes))


def render_train(result: TrainPlanResult, console: Console) -> None:
    """The ranked layouts, then what priced them, why the winner wins or why nothing fits."""
    console.print(Text("gpudoctor plan train", style="bold"))
    if result.plans:
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        table.add_column("#", justify="right")
        for header in _TRAIN_HEADERS:
            table.add_column(header, justify="left" if header == "checkpointing" else "right",
                             no_wrap=True)
        for i, p in enumerate(result.plans, 1):
            table.add_row(str(i), *_train_row(p))
        print_whole(console, table)
    else:
        console.print("no layout fits")
    if result.compute_model:
        console.print(Text(f"compute: {result.compute_model}", style="dim"))
    if result.memory_model:
        console.print(Text(f"memory: {result.memory_model} (gpudoctor memory's estimate, per GPU)",
                           style="dim"))
    if result.explanation:
        console.print(Text(result.explanation))
    if result.infeasible:
        console.print(Text(f"infeasible: {result.infeasible}", style="dim"))


def render_serving(plan: ServingPlan, console: Console) -> None:
    """One row per tensor-parallel degree, the chosen one marked, then why."""
    console.print(f"[bold]gpudoctor plan infer[/bold]  {plan.model} on {plan.gpu}  ·  {plan.qps:g} "
                  f"QPS  ·  {plan.prompt:,} prompt + {plan.new:,} new tokens")
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("TP", "weights", "KV", "seqs", "prefill", "step", "tok/s", "flight", "sat.QPS",
                "limit", ""):
        table.add_column(col, justify="right", no_wrap=True)
    for o in plan.options:
        mark = "<-" if plan.choice == o.tp else ("ok" if o.meets_qps else "")
        if not o.fits:  # not one request fits: no speed to print
            table.add_row(str(o.tp), _gib(o.weights_bytes_per_gpu),
                          _gib(o.kv_budget_bytes_per_gpu), "0",
                          "-", "-", "-", "-", "-", "no fit", "")
            continue
        table.add_row(str(o.tp), _gib(o.weights_bytes_per_gpu), _gib(o.kv_budget_bytes_per_gpu),
                      count(o.max_sequences), _short_seconds(o.prefill_s),
                      _short_seconds(o.decode_step_s), count(o.tokens_per_s_per_user),
                      count(o.concurrency), rate(o.saturation_qps),
                      o.limited_by.replace("-cache", ""), mark)
    print_whole(console, table)
    console.print("[dim]weights, KV: GiB per GPU; seqs: requests the KV budget holds; flight: "
                  "requests in flight at this load[/dim]")
    console.print(plan.explanation)
    for a in plan.assumptions:
        console.print(f"[dim]assumed: {a}[/dim]")


def _short_seconds(t: float) -> str:
    """3 significant digits: 3.46 ms, 122 ms, 11.4 s, 2,705 s."""
    value, unit = (t, "s") if t >= 1 else (t * 1e3, "ms") if t >= 1e-3 else (t * 1e6, "us")
    return (f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}") + f" {unit}"


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f}"
