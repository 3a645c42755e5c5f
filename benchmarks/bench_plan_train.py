"""gpudoctor plan train vs published results: Megatron-LM, Narayanan et al. 2021 (arXiv:2104.04473), Table 1.

Inputs taken from the paper (Table 1, weak scaling on Selene: DGX A100 80GB, 8 GPUs per node with
NVLink 3 / NVSwitch, 8 x HDR 200 Gb/s InfiniBand per node): model shape (heads, hidden, layers),
vocabulary 51,200, sequence 2,048, tensor- and pipeline-parallel sizes, GPU count and global batch;
DP = GPUs / (TP x PP). The paper's metric is teraFLOP/s per GPU with their eq. 3,
96 B s l h^2 (1 + s/6h + V/16lh): full activation recomputation counted, non-causal attention.

Our assumptions (not from the paper): micro-batch 1, 1F1B schedule, no ZeRO, DDP-style gradient
all-reduce, no sequence parallelism (it came in 2022), Megatron's pipeline scatter/gather, Megatron's fused
elementwise kernels and fused Adam (impl="fused", plan/traffic.py), and the planner's GEMM_EFFICIENCY constants and collective
presets (ib-hdr fabric).
The rows were transcribed from the paper's Table 1; check them against the PDF before quoting.

Run: python benchmarks/bench_plan_train.py  (--llama3: Llama 3 Table 4; --korthikanti [--interleaved]:
Korthikanti et al. 2022 Tables 3 and 5, full vs selective recomputation)
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpudoctor.core.layout import Layout
from gpudoctor.core.spec import ModelSpec
from gpudoctor.hardware.specs import find_spec
from gpudoctor.plan.train import GEMM_EFFICIENCY, make_net, predict_step

# params (B), heads, hidden, layers, TP, PP, GPUs, batch, published TFLOP/s per GPU, % of peak
TABLE_1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52),
]
SEQ, VOCAB, GPU, FABRIC = 2048, 51200, "a100-sxm-80gb", "ib-hdr"
# Megatron-LM in 2021-22 (both papers): fused kernels and Adam, attention scores materialized (no flash
# attention yet), attention and hidden dropout 0.1 (its --attention-dropout / --hidden-dropout defaults)
IMPL = "fused-noflash"


def gpt(hidden: int, layers: int, heads: int) -> ModelSpec:
    return ModelSpec(
        name=f"gpt-{hidden}x{layers}",
        family="gpt2",
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // heads,
        intermediate=4 * hidden,
        vocab=VOCAB,
        tied_embeddings=False,
        gated_mlp=False,
        attn_dropout=0.1,
        resid_dropout=0.1,
    )


def main() -> list[dict]:
    hw = find_spec(GPU)
    peak = hw.matrix_flops["bf16"]
    net = make_net(hw.key, 8, FABRIC)
    rows = []
    for params, heads, hidden, layers, tp, pp, gpus, batch, pub_tf, pub_pct in TABLE_1:
        spec = gpt(hidden, layers, heads)
        lay = Layout(
            dp=gpus // (tp * pp), tp=tp, pp=pp, microbatch=1, checkpointing="full", sp=False
        )
        r = predict_step(
            spec,
            lay,
            global_batch=batch,
            seq=SEQ,
            peak_flops=peak,
            net=net,
            hbm_bytes_per_s=hw.hbm_bytes_per_s,
            causal=False,
            impl=IMPL,
        )
        tf = r["hardware_flops"] / (r["step_s"] * gpus) / 1e12
        rows.append(
            {
                "params_b": params,
                "tp": tp,
                "pp": pp,
                "dp": lay.dp,
                "gpus": gpus,
                "batch": batch,
                "published_tflops": pub_tf,
                "predicted_tflops": tf,
                "error": tf / pub_tf - 1,
                "published_pct": pub_pct,
                "predicted_pct": 100 * tf * 1e12 / peak,
                "step_s": r["step_s"],
                "bubble_s": r["bubble_s"],
                "tp_comm_s": r["tp_comm_s"],
                "eff": r["gemm_efficiency"],
            }
        )
    return rows


# The Llama 3 Herd of Models (Grattafiori et al. 2024, arXiv:2407.21783), Table 4: Llama 3 405B on H100
# (RoCE, 400 Gb/s per GPU), 16M tokens per batch; TFLOP/s per GPU and BF16 MFU as published.
# (GPUs, TP, CP, PP, sequence, published TFLOP/s per GPU, published MFU %)
LLAMA3_TABLE_4 = [
    (8192, 8, 1, 16, 8192, 430, 43),
    (16384, 8, 1, 16, 8192, 400, 41),
    (16384, 8, 16, 16, 131072, 380, 38),
]
# The paper's schedule is interleaved 1F1B (its sec. 3.3.2, bubble (PP-1)/(V M)) but it does not give V;
# 405B's 126 layers over 16 stages are 8 per stage (7 on the first and last), so V is one of 1, 2, 4, 8.
# Every row is priced for each; ("1f1b", 1) is the plain schedule.
LLAMA3_SCHEDULES = (("1f1b", 1), ("interleaved", 2), ("interleaved", 4), ("interleaved", 8))
# gpudoctor bench --json on one H100 SXM 80GB (torch 2.11.0+cu130, 2026-11-24): GEMM and attention grids,
# elementwise and optimizer rates; the calibrated columns use it.
H100_BENCH = Path(__file__).parent / "results" / "bench-h100-grid-2026-11-24.json"


def llama3(bench: Path | None = None) -> list[dict]:
    """Llama 3 405B at the paper's layouts, for each of LLAMA3_SCHEDULES; with ``bench`` (a gpudoctor bench
    JSON of an H100) calibrated from it. Not from the paper, assumed: micro-batch 1, ZeRO-1, no activation
    recomputation, sequence parallelism, the roce preset, V (above)."""
    from gpudoctor.core.presets import from_preset
    from gpudoctor.plan.calibration import load_calibration

    spec = from_preset("llama-3.1-405b")
    hw = find_spec("h100-sxm")
    net = make_net(hw.key, 8, "roce")
    cal = load_calibration(bench, hw.key) if bench else None
    rows = []
    for gpus, tp, cp, pp, seq, pub_tf, pub_pct in LLAMA3_TABLE_4:
        batch = 16 * 2**20 // seq
        row = {
            "gpus": gpus,
            "tp": tp,
            "cp": cp,
            "pp": pp,
            "dp": gpus // (tp * pp * cp),
            "seq": seq,
            "batch": batch,
            "published_tflops": pub_tf,
            "published_pct": pub_pct,
            "by_schedule": {},
        }
        for schedule, v in LLAMA3_SCHEDULES:
            lay = Layout(
                dp=row["dp"],
                tp=tp,
                pp=pp,
                cp=cp,
                zero=1,
                microbatch=1,
                checkpointing="none",
                schedule=schedule,
                virtual_stages=max(v, 2),
            )
            r = predict_step(
                spec,
                lay,
                global_batch=batch,
                seq=seq,
                peak_flops=hw.matrix_flops["bf16"],
                net=net,
                hbm_bytes_per_s=hw.hbm_bytes_per_s,
                impl="fused",
                calibration=cal,
            )
            tf = r["model_flops"] / (r["step_s"] * gpus) / 1e12
            row["by_schedule"][f"{schedule} v={v}"] = {
                "predicted_tflops": tf,
                "error": tf / pub_tf - 1,
                "step_s": r["step_s"],
                "bubble_s": r["bubble_s"],
            }
        rows.append(row)
    return rows


def print_llama3() -> None:
    heads = " | ".join(f"{s} v={v}" if s != "1f1b" else "1F1B" for s, v in LLAMA3_SCHEDULES)
    for label, bench in (
        ("assumed GEMM_EFFICIENCY (no bench)", None),
        (f"calibrated: {H100_BENCH.name}", H100_BENCH),
    ):
        print(f"\nLlama 3 405B, Table 4; {label}; predicted TFLOP/s per GPU (error) by schedule")
        print(
            f"| GPUs | TP | CP | PP | DP | seq | sequences/batch | published TFLOP/s/GPU (MFU) | {heads} |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(LLAMA3_SCHEDULES))
        for r in llama3(bench):
            cells = " | ".join(
                f"{x['predicted_tflops']:.0f} ({x['error']:+.0%})"
                for x in r["by_schedule"].values()
            )
            print(
                f"| {r['gpus']} | {r['tp']} | {r['cp']} | {r['pp']} | {r['dp']} | {r['seq']} | {r['batch']} | "
                f"{r['published_tflops']} ({r['published_pct']}%) | {cells} |"
            )


# Reducing Activation Recomputation in Large Transformer Models (Korthikanti et al. 2022, arXiv:2205.05198).
# Not read from the PDF: taken from a public transcription of Tables 3 and 5; the MFU/HFU column is
# also quoted by NVIDIA/Megatron-LM's README (2022-23, "Training Speed and Scalability"), and
# tests/test_plan_published.py checks every time against it with the paper's eq. 7 and 8.
# Table 3: the configurations, on Selene (A100 80GB, 8 per node, HDR InfiniBand), sequence 2048,
# vocabulary 51,200, no data parallelism (GPUs = TP x PP).
# (name, heads, hidden, layers, TP, PP, GPUs, global batch, micro-batch)
KORTHIKANTI_TABLE_3 = [
    ("22B", 64, 6144, 48, 8, 1, 8, 4, 4),
    ("175B (GPT-3)", 96, 12288, 96, 8, 8, 64, 64, 1),
    ("530B (MT-NLG)", 128, 20480, 105, 8, 35, 280, 280, 1),
    ("1T", 160, 25600, 128, 8, 64, 512, 512, 1),
]
# Table 5: end-to-end iteration time with full recomputation and with the paper's method (sequence
# parallelism + selective recomputation), its throughput increase and, for the latter, MFU and HFU.
# name: (full recompute s, selective + SP s, throughput increase %, MFU %, HFU %)
KORTHIKANTI_TABLE_5 = {
    "22B": (1.42, 1.10, 29.0, 41.5, 43.7),
    "175B (GPT-3)": (18.13, 13.75, 31.8, 51.4, 52.8),
    "530B (MT-NLG)": (49.05, 37.83, 29.7, 56.0, 57.0),
    "1T": (94.42, 71.49, 32.1, 56.3, 57.0),
}
A100_PEAK = 312e12  # the paper's footnote: A100 bf16 dense peak


def korthikanti_model_flops(
    batch: int, layers: int, hidden: int, seq: int = SEQ, vocab: int = VOCAB
) -> float:
    """The paper's eq. 7, model FLOPs per iteration: 72 B L s h^2 (1 + s/6h + V/12hL)."""
    return (
        72
        * batch
        * layers
        * seq
        * hidden**2
        * (1 + seq / (6 * hidden) + vocab / (12 * hidden * layers))
    )


def korthikanti_hardware_flops(
    batch: int, layers: int, hidden: int, seq: int = SEQ, vocab: int = VOCAB
) -> float:
    """The paper's eq. 8, hardware FLOPs with selective recomputation: 72 B L s h^2 (1 + s/3h + V/12hL)."""
    return (
        72
        * batch
        * layers
        * seq
        * hidden**2
        * (1 + seq / (3 * hidden) + vocab / (12 * hidden * layers))
    )


def korthikanti(schedule: str = "1f1b") -> list[dict]:
    """Each Table 3 row priced with predict_step for full recomputation and for the paper's method.
    Full recomputation without sequence parallelism, selective with it (the paper's two settings).
    Not from the paper, assumed: the schedule (1F1B, or interleaved with 3 virtual stages where the
    stage's layers divide by 3, else 2), no ZeRO, the ib-hdr preset, non-causal attention (the
    paper counts the full s x s), Megatron's pipeline scatter/gather without SP."""
    hw = find_spec(GPU)
    peak = hw.matrix_flops["bf16"]
    net = make_net(hw.key, 8, FABRIC)
    rows = []
    for name, heads, hidden, layers, tp, pp, gpus, batch, micro in KORTHIKANTI_TABLE_3:
        spec = gpt(hidden, layers, heads)
        v = 3 if (layers // pp) % 3 == 0 else 2
        pred = {}
        for ckpt, sp in (("full", False), ("selective", True)):
            lay = Layout(
                dp=gpus // (tp * pp),
                tp=tp,
                pp=pp,
                microbatch=micro,
                checkpointing=ckpt,
                schedule=schedule,
                virtual_stages=v,
                sp=sp,
            )
            pred[ckpt] = predict_step(
                spec,
                lay,
                global_batch=batch,
                seq=SEQ,
                peak_flops=peak,
                net=net,
                hbm_bytes_per_s=hw.hbm_bytes_per_s,
                causal=False,
                impl=IMPL,
            )
        full, sel = pred["full"], pred["selective"]
        pub_full, pub_sel, pub_gain, _, _ = KORTHIKANTI_TABLE_5[name]
        rows.append(
            {
                "name": name,
                "tp": tp,
                "pp": pp,
                "gpus": gpus,
                "batch": batch,
                "micro": micro,
                "v": v if schedule == "interleaved" and pp > 1 else 1,
                "published_full_s": pub_full,
                "predicted_full_s": full["step_s"],
                "error_full": full["step_s"] / pub_full - 1,
                "published_sel_s": pub_sel,
                "predicted_sel_s": sel["step_s"],
                "error_sel": sel["step_s"] / pub_sel - 1,
                "published_speedup": pub_full / pub_sel,
                "published_gain_pct": pub_gain,
                "predicted_speedup": full["step_s"] / sel["step_s"],
                "recompute_s": full["recompute_s"],
                "selective_recompute_s": sel["recompute_s"],
                "bubble_s": sel["bubble_s"],
                "tp_comm_s": sel["tp_comm_s"],
                "pp_comm_full_s": full["pp_comm_s"],
                "pp_comm_s": sel["pp_comm_s"],
                "eff": sel["gemm_efficiency"],
            }
        )
    return rows


def print_korthikanti(schedule: str) -> None:
    print(
        f"GPU {GPU}, fabric {FABRIC}, seq {SEQ}, schedule {schedule}, DP=1; Korthikanti et al. 2022 Tables 3 and 5"
    )
    print(
        "| model | TP | PP | GPUs | batch | micro-batch | full: published s | predicted s | error |"
        " selective + SP: published s | predicted s | error | speedup published | predicted |"
        " GEMM eff. | bubble s (sel.) | PP comm s: full / sel. | recompute s: full / sel. |"
    )
    print(
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for r in korthikanti(schedule):
        print(
            f"| {r['name']} | {r['tp']} | {r['pp']} | {r['gpus']} | {r['batch']} | {r['micro']} | "
            f"{r['published_full_s']:.2f} | {r['predicted_full_s']:.2f} | {r['error_full']:+.1%} | "
            f"{r['published_sel_s']:.2f} | {r['predicted_sel_s']:.2f} | {r['error_sel']:+.1%} | "
            f"{r['published_speedup']:.3f} | {r['predicted_speedup']:.3f} | {r['eff']:.2f} | "
            f"{r['bubble_s']:.2f} | {r['pp_comm_full_s']:.2f} / {r['pp_comm_s']:.2f} | "
            f"{r['recompute_s']:.2f} / {r['selective_recompute_s']:.2f} |"
        )


if __name__ == "__main__":
    if "--korthikanti" in sys.argv:
        print_korthikanti("interleaved" if "--interleaved" in sys.argv else "1f1b")
        sys.exit(0)
    if "--llama3" in sys.argv:
        print_llama3()
        sys.exit(0)
    rows = main()
    print(
        f"GPU {GPU} (bf16 peak {find_spec(GPU).matrix_flops['bf16'] / 1e12:.0f} TFLOP/s), fabric {FABRIC}, "
        f"seq {SEQ}, micro-batch 1, 1F1B, full recompute; GEMM_EFFICIENCY = {GEMM_EFFICIENCY}"
    )
    print(
        "| params (B) | TP | PP | DP | GPUs | batch | published TFLOP/s/GPU (% peak) | predicted (% peak) | error |"
        " GEMM eff. | bubble s | TP comm s | step s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['params_b']} | {r['tp']} | {r['pp']} | {r['dp']} | {r['gpus']} | {r['batch']} | "
            f"{r['published_tflops']} ({r['published_pct']}%) | {r['predicted_tflops']:.0f} "
            f"({r['predicted_pct']:.0f}%) | {r['error']:+.0%} | {r['eff']:.2f} | {r['bubble_s']:.2f} | "
            f"{r['tp_comm_s']:.2f} | {r['step_s']:.2f} |"
        )
    errs = [abs(r["error"]) for r in rows]
    print(f"\nmean |error| {sum(errs) / len(errs):.0%}, max {max(errs):.0%}")
