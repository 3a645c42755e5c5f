"""input-pipeline: the GPU waits while the host fetches the next batch (DataLoader ``__next__``)."""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.intervals import union
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import sources_of_host, top_names
from gpudoctor.rules.finding import ALL_IDLE, Evidence, Finding, Fix, make_finding

ID = "input-pipeline"


def check(a: Analysis) -> Finding | None:
    idle = a.idle.ms(ID)
    culprits = a.idle.culprits.get(ID, np.empty(0, np.int64))
    if idle <= 0 or culprits.size == 0:
        return None
    trace, host = a.trace, a.trace.host
    s, e = union(host.ts[culprits], host.end[culprits])
    loader_ms = float((e - s).sum()) / 1e6 / max(len(a.steps), 1)
    evidence = Evidence(
        numbers={
            "gpu_idle_waiting_for_data_ms_per_step": round(idle, 3),
            "host_time_in_dataloader_ms_per_step": round(loader_ms, 3),
            "share_of_step_pct": round(100 * idle / a.step_ms, 1),
        },
        ops=top_names(trace, host.name[culprits], host.dur[culprits].astype(float)),
        sources=sources_of_host(trace, culprits, a.idle.culprit_idle_ns[ID].astype(float)),
    )
    return make_finding(
        ID,
        "The GPU waits for the input pipeline",
        a.step_ms,
        idle,
        f"The GPU sits idle {idle:.2f} ms per step while the host runs the DataLoader "
        f"({loader_ms:.2f} ms per step in __next__): batches are produced on the training thread.",
        evidence,
        (
            Fix("Load batches in worker processes and pin them",
                "DataLoader(ds, batch_size=B, num_workers=8, pin_memory=True,\n"
                "           persistent_workers=True, prefetch_factor=4)"),
            Fix("Copy asynchronously so the next batch's transfer overlaps compute",
                "x = x.to('cuda', non_blocking=True)"),
            Fix("Move heavy preprocessing off the step: precompute it, or run it on the GPU",
                "# decode/augment once offline, or on the GPU in batch (torchvision.transforms.v2 on cuda tensors)"),
        ),
        wrong_fix="A faster GPU or a bigger model will not help: the card is waiting for data.",
        idle_ms=ALL_IDLE,
    )


RULE = Rule(ID, "GPU idle waiting for the input pipeline", check, __doc__ or "")
