"""input-pipeline: the GPU waits while the host fetches the next batch (DataLoader ``__next__``).

Priced as what the prescribed loader can deliver, not as all the waiting:

- batches made on the training thread (``_SingleProcessDataLoaderIter``): the time in
  ``__next__`` is one batch's cost on one core; WORKERS worker processes deliver a batch every
  cost / WORKERS, so the step after the fix is max(step - idle, cost / WORKERS);
- batches from workers already (``_MultiProcessingDataLoaderIter``) and still late: the workers'
  throughput sets the step, and doubling them at most halves it: max(step - idle, step / 2).
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.intervals import union
from gpudoctor.core.finding import ALL_IDLE, STEP_FLOOR_AFTER_FIX, Evidence, Finding, Fix, make_finding
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import sources_of_host, top_names

ID = "input-pipeline"
WORKERS = 8  # what the first fix prescribes
_MULTIPROCESS = "MultiProcessingDataLoaderIter"


def check(a: Analysis) -> Finding | None:
    idle = a.idle.ms(ID)
    culprits = a.idle.culprits.get(ID, np.empty(0, np.int64))
    if idle <= 0 or culprits.size == 0:
        return None
    trace, host = a.trace, a.trace.host
    s, e = union(host.ts[culprits], host.end[culprits])
    loader_ms = float((e - s).sum()) / 1e6 / max(len(a.steps), 1)
    names = {trace.strings[i] for i in np.unique(host.name[culprits]).tolist()}
    from_workers = any(_MULTIPROCESS in name for name in names)
    floor = a.step_ms / 2 if from_workers else loader_ms / WORKERS
    saving = a.step_ms - max(a.step_ms - idle, floor)
    evidence = Evidence(
        numbers={
            "gpu_idle_waiting_for_data_ms_per_step": round(idle, 3),
            "host_time_in_dataloader_ms_per_step": round(loader_ms, 3),
            "share_of_step_pct": round(100 * idle / a.step_ms, 1),
            "loader_workers_already": from_workers,
            STEP_FLOOR_AFTER_FIX: round(floor, 3),
        },
        ops=top_names(trace, host.name[culprits], host.dur[culprits].astype(float)),
        sources=sources_of_host(trace, culprits, a.idle.culprit_idle_ns[ID].astype(float)),
    )
    where = ("the worker processes do not keep up: the loader's throughput sets the step" if from_workers
             else "batches are produced on the training thread")
    return make_finding(
        ID,
        "The GPU waits for the input pipeline",
        a.step_ms,
        saving,
        f"The GPU sits idle {idle:.2f} ms per step while the host runs the DataLoader "
        f"({loader_ms:.2f} ms per step in __next__): {where}.",
        evidence,
        (
            Fix("More worker processes (twice as many as now), batches pinned" if from_workers
                else "Load batches in worker processes and pin them",
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


RULE = Rule(
    ID, "GPU idle waiting for the input pipeline", check, __doc__ or "", needs=("launch_links",),
    order=0, idle_cause="input-pipeline",
)
