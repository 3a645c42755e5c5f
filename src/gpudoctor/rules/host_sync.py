"""host-sync: ``.item()``, ``.cpu()``, ``nonzero`` or explicit synchronizes drain the GPU queue."""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.core.finding import ALL_IDLE, Evidence, Finding, Fix, make_finding
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import sources_of_host, top_names

ID = "host-sync"


def check(a: Analysis) -> Finding | None:
    idle = a.idle.ms(ID)
    culprits = a.idle.culprits.get(ID, np.empty(0, np.int64))
    if idle <= 0 or culprits.size == 0:
        return None
    trace, host = a.trace, a.trace.host
    weights = a.idle.culprit_idle_ns[ID].astype(float)
    # name each sync by the operator the user called (aten::item rather than cudaStreamSynchronize)
    named = np.where(host.top_op[culprits] >= 0, host.top_op[culprits], culprits)
    n_steps = max(len(a.steps), 1)
    distinct = np.unique(named).size
    if distinct == 0 or round(idle, 3) <= 0:
        return None  # no sync, or no idle to show for it: nothing to report
    shown = f"{idle:.2f}" if idle >= 0.005 else f"{idle:.3f}"  # never "0.00 ms"
    evidence = Evidence(
        numbers={
            "gpu_idle_after_syncs_ms_per_step": round(idle, 3),
            "syncs_per_step": round(distinct / n_steps, 2),
            "share_of_step_pct": round(100 * idle / a.step_ms, 1),
        },
        ops=top_names(trace, host.name[named], weights),
        sources=sources_of_host(trace, culprits, weights),
    )
    return make_finding(
        ID,
        "Host-device syncs stall the GPU",
        a.step_ms,
        idle,
        f"{_how_often(distinct, n_steps)} the host wait for the GPU, then the GPU wait for the host to refill "
        f"its queue: {shown} ms idle per step.",
        evidence,
        (
            Fix("Keep values on the GPU; read them back every N steps, not every step",
                "running_loss += loss.detach()          # no sync\n"
                "if step % 100 == 0:\n    print((running_loss / 100).item())"),
            Fix("Replace data-dependent Python branches with tensor ops",
                "x = torch.where(cond, a, b)   # instead of: if cond.item(): ..."),
            Fix("Find every hidden sync (.item, .cpu, .tolist, nonzero, bool(tensor))",
                "torch.cuda.set_sync_debug_mode('warn')"),
        ),
        wrong_fix="Adding DataLoader workers or CUDA streams will not help while the loop itself blocks.",
        idle_ms=ALL_IDLE,
    )


def _how_often(syncs: int, n_steps: int) -> str:
    """"3 blocking syncs per step make", or "1 blocking sync in 3 steps makes" when there are
    fewer than one a step (never "0 ... per step")."""
    per_step = syncs / n_steps
    count, where = (round(per_step), "per step") if per_step >= 1 else (syncs, f"in {n_steps} steps")
    return f"{count} blocking sync{'s' if count > 1 else ''} {where} make{'' if count > 1 else 's'}"


RULE = Rule(
    ID, "Host-device synchronization in the step", check, __doc__ or "", needs=("launch_links",),
    order=10, idle_cause="host-sync",
)
