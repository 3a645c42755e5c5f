"""``slow-collective``: collectives moving data well below the bus bandwidth the interconnect should
give. Each matched instance's transfer time is the latest arriver's kernel (it waits for no one);
its achieved bus bandwidth (nccl-tests convention, hardware/collective_bandwidth.py ``bus_factor``)
is compared per op and size with plan/collective_cost.py's prediction for the card's interconnect.
Priced as the time above the prediction, at most the exposed transfer (hidden time costs
nothing)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from gpudoctor.core.arrays import median
from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.errors import GpuDoctorError
from gpudoctor.hardware.collective_bandwidth import bus_factor
from gpudoctor.hardware.specs import find_spec
from gpudoctor.plan.collective_cost import OPS, predict
from gpudoctor.ranks.aligned import Aligned
from gpudoctor.ranks.comm import CommSplit

ID = "slow-collective"
TITLE = "Collectives well below the interconnect's bus bandwidth"  # the rule's line in `gpudoctor rules`
SLOW = 0.5  # achieved under half the predicted bus bandwidth
SMALL_BYTES = 1 << 20  # below 1 MiB a collective is latency-bound (nccl-tests curves flatten above)
MIN_MS = 0.05


@dataclass(frozen=True)
class SizeClass:
    op: str
    nbytes: int  # median size of the class
    count_per_step: float
    achieved_busbw_GBps: float
    predicted_busbw_GBps: float
    excess_ms_per_step: float  # time above the prediction, per step (all instances)

    @property
    def ratio(self) -> float:
        return self.achieved_busbw_GBps / self.predicted_busbw_GBps if self.predicted_busbw_GBps else 1.0


def size_classes(al: Aligned, busbw_table: str | None = None) -> list[SizeClass]:
    """Per op and power-of-two size: achieved vs predicted bus bandwidth (read off this machine's
    measured curves when ``busbw_table``, a ``gpudoctor bench`` profile with collectives, is
    given)."""
    gpu = _gpu_key(al)
    n = len(al.summaries)
    rows = np.flatnonzero(al.in_steps() & (al.nbytes > 0))
    if gpu is None or n < 2 or not len(rows):
        return []
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for m in rows.tolist():
        if al.ops[m] in OPS:
            groups[(al.ops[m], int(al.nbytes[m]).bit_length())].append(m)
    transfer = al.transfer
    per_node = _per_node(al)
    out = []
    for (op, _), ms in sorted(groups.items()):
        size = int(median(al.nbytes[ms]))
        seconds = transfer[ms] / 1e9
        # bytes over time summed across the class: one slow instance among fast ones shows
        achieved = bus_factor(op, n) * float(al.nbytes[ms].sum()) / max(float(seconds.sum()), 1e-9) / 1e9
        try:
            p = predict(op, size, gpus=n, gpus_per_node=per_node, gpu=gpu, busbw_table=busbw_table)
        except GpuDoctorError:
            continue
        excess = float(np.clip(seconds - p.time_s, 0, None).sum()) * 1e3 / max(al.steps, 1)
        out.append(SizeClass(op, size, len(ms) / max(al.steps, 1), achieved, p.busbw_GBps, excess))
    return out


def check(al: Aligned, split: CommSplit, busbw_table: str | None = None) -> Finding | None:
    slow = [c for c in size_classes(al, busbw_table) if c.ratio < SLOW]
    if not slow:
        return None
    exposed_transfer = split.mean("transfer") + split.mean("not_overlapped")
    saving = min(sum(c.excess_ms_per_step for c in slow), exposed_transfer)
    worst = min(slow, key=lambda c: c.ratio)
    cause = _cause(al, worst)
    numbers = {"op": worst.op, "bytes": worst.nbytes,
               "achieved_busbw_GBps": round(worst.achieved_busbw_GBps, 2),
               "predicted_busbw_GBps": round(worst.predicted_busbw_GBps, 2),
               "ratio": round(worst.ratio, 3), "classes": len(slow), "cause": cause,
               "excess_ms_per_step": round(worst.excess_ms_per_step, 4)}
    if saving < MIN_MS:
        return None
    return make_finding(
        ID,
        f"{worst.op} of {_size(worst.nbytes)} reaches {worst.achieved_busbw_GBps:.0f} GB/s bus "
        f"bandwidth, {worst.ratio:.0%} of the {worst.predicted_busbw_GBps:.0f} GB/s expected",
        al.step_ms, saving,
        f"{len(slow)} kind(s) of collective run under half the bus bandwidth "
        f"{'measured on this machine (gpudoctor bench)' if busbw_table else 'plan comm predicts for this interconnect'}"
        f"; likely cause: {cause}. Exposed, they cost {saving:.2f} ms per step.",
        Evidence(numbers=numbers), _fixes(cause),
    )


def _cause(al: Aligned, c: SizeClass) -> str:
    if c.nbytes < SMALL_BYTES:
        return "small messages (latency-bound)"
    spec = find_spec(al.summaries[0].gpu)
    if spec is not None and not spec.nvlink_bytes_per_s:
        return "a PCIe path between the GPUs"
    return "below the NVLink rate: peer-to-peer off, a PCIe hop, or the NCCL algorithm/protocol choice"


def _fixes(cause: str) -> tuple[Fix, ...]:
    if cause.startswith("small"):
        return (Fix("Send fewer, larger messages: bigger DDP buckets or coalesced collectives",
                    "DDP(model, bucket_cap_mb=50)"),)
    if cause.startswith("a PCIe"):
        return (
            Fix("Check the topology (nvidia-smi topo -m): GPUs under one PCIe switch, or NVLink "
                "machines"),)
    return (Fix("Check the topology and peer access: nvidia-smi topo -m, NCCL_P2P_DISABLE unset"),
            Fix("Run with NCCL_DEBUG=INFO and compare the chosen algorithm and protocol with "
                "nccl-tests' best"),
            Fix("Measure this machine's collectives (gpudoctor bench --collectives) and compare"))


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 1024:.0f} KiB"


def _gpu_key(al: Aligned) -> str | None:
    spec = find_spec(al.summaries[0].gpu) if al.summaries and al.summaries[0].gpu else None
    return spec.key if spec is not None else None


def _per_node(al: Aligned) -> int:
    hosts = [s.env.get("hostname") for s in al.summaries]
    if all(isinstance(h, str) for h in hosts):
        return max(hosts.count(h) for h in set(hosts))
    return min(len(al.summaries), 8)
