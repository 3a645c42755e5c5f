"""Does a patched model still run under torch.compile? ``python benchmarks/probes/probe_patch_compile.py OUT_DIR``
on a GPU builds a small Llama-style transformers model (random init), patches it with
``gpudoctor.kernels.patch(compiled="op")`` (each patched module its op under compile), and runs three
training steps each: eager, patched, and patched under ``torch.compile`` (default and
``mode="max-autotune-no-cudagraphs"``), recording the losses, the step time and the graph breaks dynamo
reports. Writes ``OUT_DIR/patch_compile.json``.
"""

from __future__ import annotations

import copy
import json
import sys
import time
import traceback
from pathlib import Path

import torch


def model():
    import transformers

    cfg = transformers.LlamaConfig(
        hidden_size=512,
        intermediate_size=1408,
        num_attention_heads=8,
        num_key_value_heads=4,
        num_hidden_layers=2,
        vocab_size=32000,
        max_position_embeddings=1024,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).cuda().to(torch.bfloat16)


def steps(m, ids, n=3) -> tuple[list[float], float]:
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    losses = []
    for i in range(n):
        if i == n - 1:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    torch.cuda.synchronize()
    return losses, (time.perf_counter() - t0) * 1e3


def main() -> None:
    from gpudoctor.kernels import patch

    out = Path(sys.argv[1])
    base = model()
    ids = torch.randint(0, 32000, (4, 512), device="cuda")
    result: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": {}}
    for name in (
        "eager",
        "patched",
        "patched + compile",
        "patched + compile (max-autotune-no-cudagraphs)",
    ):
        m = copy.deepcopy(base)
        try:
            if name != "eager":
                result["patch"] = str(
                    patch(m, compiled="op")
                )  # every patched module an op under compile
            if "compile" in name:
                torch._dynamo.reset()
                kw = {"mode": "max-autotune-no-cudagraphs"} if "max-autotune" in name else {}
                explanation = torch._dynamo.explain(m)(input_ids=ids, labels=ids)
                result.setdefault("graph_breaks", {})[name] = {
                    "graphs": explanation.graph_count,
                    "breaks": explanation.graph_break_count,
                    "reasons": sorted({str(b.reason)[:160] for b in explanation.break_reasons})[:8],
                }
                m = torch.compile(m, **kw)
            losses, ms = steps(m, ids)
            result["runs"][name] = {"losses": losses, "last_step_ms": round(ms, 2)}
        except Exception as exc:  # noqa: BLE001 - the point is to record what fails
            result["runs"][name] = {
                "error": f"{type(exc).__name__}: {exc}"[:600],
                "trace": traceback.format_exc()[-2000:],
            }
        print(
            name,
            result["runs"][name]
            if "error" not in result["runs"][name]
            else result["runs"][name]["error"],
            flush=True,
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "patch_compile.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result.get("graph_breaks"), indent=1))


if __name__ == "__main__":
    main()
