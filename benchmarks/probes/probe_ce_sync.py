"""linear_cross_entropy on a GPU without host syncs: ``python benchmarks/probes/probe_ce_sync.py OUT_DIR`` runs the
loss forward + backward under ``torch.cuda.set_sync_debug_mode("error")`` (any host sync raises), checks
it against eager PyTorch (loss and gradients, bf16, mean with ignored rows, grad_output 0.5), counts
dynamo's graph breaks for the op under torch.compile, and checks in a child process that an
out-of-range target stops the run with a device-side assert. Writes ``OUT_DIR/ce_sync.json``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from gpudoctor.kernels.cross_entropy import linear_cross_entropy


def inputs(n=4096, h=1024, v=32000):
    torch.manual_seed(0)
    x = torch.randn(n, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(v, h, device="cuda", dtype=torch.bfloat16) * h**-0.5).requires_grad_()
    t = torch.randint(0, v, (n,), device="cuda")
    t[::7] = -100
    return x, w, t


def main() -> None:
    out = Path(sys.argv[1])
    if len(sys.argv) > 2 and sys.argv[2] == "--bad-target":
        x, w, t = inputs()
        t[3] = 10**6
        linear_cross_entropy(x, w, t).backward()
        torch.cuda.synchronize()
        return
    result: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    x, w, t = inputs()
    linear_cross_entropy(x, w, t).backward(
        torch.tensor(0.5, device="cuda")
    )  # compile + warm the launcher
    x.grad = w.grad = None
    half = torch.full(
        (), 0.5, device="cuda"
    )  # made outside: a tensor from a host scalar is itself a copy
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss = linear_cross_entropy(x, w, t)
        loss.backward(half)
        result["host_sync"] = "none"
    except RuntimeError as exc:
        import traceback

        result["host_sync"] = str(exc)[:300]
        result["host_sync_where"] = traceback.format_exc()[-1500:]
        print(result["host_sync_where"], flush=True)
        x.grad = w.grad = None
        loss = linear_cross_entropy(x, w, t)
        loss.backward(half)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = F.cross_entropy((xr @ wr.t()).float(), t, ignore_index=-100)
    ref.backward(half)
    result["loss"], result["loss_ref"] = float(loss.detach()), float(ref.detach())
    result["dx_max_rel"] = float(
        (x.grad.float() - xr.grad.float()).abs().max() / xr.grad.float().abs().max()
    )
    result["dw_max_rel"] = float(
        (w.grad.float() - wr.grad.float()).abs().max() / wr.grad.float().abs().max()
    )
    torch._dynamo.reset()
    exp = torch._dynamo.explain(lambda a, b, c: linear_cross_entropy(a, b, c))(x, w, t)
    result["compile"] = {
        "graphs": exp.graph_count,
        "breaks": exp.graph_break_count,
        "reasons": sorted({str(b.reason)[:200] for b in exp.break_reasons}),
    }
    child = subprocess.run(
        [sys.executable, __file__, str(out), "--bad-target"],
        check=False,
        capture_output=True,
        text=True,
    )
    result["bad_target"] = {
        "returncode": child.returncode,
        "stderr_tail": [ln for ln in child.stderr.splitlines() if "assert" in ln.lower()][-3:],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "ce_sync.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
