"""Synthetic rank sets from the recorded 2-GPU DDP trace (rank 0 only): the trace copied to N ranks,
each rank's clock shifted by a known offset, one rank held up before a collective by a known host
delay, a collective stretched by a known amount. Times in the trace are us (floats)."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

DDP = Path(__file__).parent / "data" / "ddp_train" / "trace.json.gz"
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def base() -> dict[str, Any]:
    return json.loads(gzip.decompress(DDP.read_bytes()))


def collectives(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The NCCL kernels, in start order."""
    return sorted(
        (e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"].lower()),
        key=lambda e: e["ts"],
    )


def _shift_after(
    doc: dict[str, Any], t: float, d: float, stretch: list[dict[str, Any]] = ()
) -> None:
    """Everything that starts at or after ``t`` happens ``d`` later; host ranges (and the
    ``stretch`` events) running across ``t`` last ``d`` longer."""
    keep = {id(e) for e in stretch}
    for e in doc["traceEvents"]:
        if "ts" not in e or e.get("ph") not in ("X", "i", "I", "f", "s"):
            continue
        if e["ts"] >= t:
            e["ts"] += d
        elif (
            "dur" in e
            and e["ts"] + e["dur"] >= t
            and (e.get("cat") not in DEVICE_CATS or id(e) in keep)
        ):
            e["dur"] += d


def delay_before(doc: dict[str, Any], k: int, delay_us: float, waits: bool) -> None:
    """Collective ``k`` (index into collectives()) reached ``delay_us`` late. On the late rank
    (``waits`` False) a DataLoader fetch of ``delay_us`` is inserted on the host at the
    collective's launch and everything after it moves; on the others (``waits`` True) the
    collective's kernel waits ``delay_us`` longer and what follows its end moves."""
    c = collectives(doc)[k]
    if waits:
        end = c["ts"] + c["dur"]
        _shift_after(doc, end, delay_us, [c] + _annotations(doc, c))
        return
    launch = _launch_of(doc, c)
    host = launch["ts"] - 1.0
    thread = next(e for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep"))
    gpu_t = min(host, c["ts"] - 1.0)
    _shift_after(doc, gpu_t, delay_us)
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": LOADER,
            "pid": thread["pid"],
            "tid": thread["tid"],
            "ts": gpu_t,
            "dur": delay_us,
            "args": {},
        }
    )


def stretch(doc: dict[str, Any], k: int, extra_us: float) -> None:
    """Collective ``k`` takes ``extra_us`` longer (on every rank: call it on each) and what starts
    after its end moves."""
    c = collectives(doc)[k]
    _shift_after(doc, c["ts"] + c["dur"], extra_us, [c] + _annotations(doc, c))


def offset(doc: dict[str, Any], us: float) -> None:
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] += us


def _annotations(doc: dict[str, Any], c: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e
        for e in doc["traceEvents"]
        if e.get("cat") == "gpu_user_annotation"
        and abs(e["ts"] + e["dur"] - c["ts"] - c["dur"]) < 50
        and e["ts"] <= c["ts"]
    ]


def _launch_of(doc: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    corr = c["args"]["correlation"]
    return next(
        e
        for e in doc["traceEvents"]
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and e.get("args", {}).get("correlation") == corr
    )


def rank_set(
    folder: Path,
    n: int,
    offsets_us: list[float] | None = None,
    late: int | None = None,
    late_k: list[int] = (),
    delay_us: float = 0.0,
    stretched_k: list[int] = (),
    extra_us: float = 0.0,
    layout: str = "dirs",
    env: dict[int, dict] | None = None,
) -> Path:
    """Write ``n`` ranks under ``folder`` (layout "dirs": rank{R}/trace.json.gz + env.json;
    "legacy": trace.rank{R}.json.gz side by side) and return ``folder``."""
    src = base()
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(n):
        doc = copy.deepcopy(src)
        for k in sorted(late_k, reverse=True):
            delay_before(doc, k, delay_us, waits=(r != late))
        for k in sorted(stretched_k, reverse=True):
            stretch(doc, k, extra_us)
        if offsets_us:
            offset(doc, offsets_us[r])
        data = gzip.compress(json.dumps(doc).encode(), compresslevel=1)
        e = {
            "rank": r,
            "world_size": n,
            "local_rank": r,
            "hostname": "node0",
            **((env or {}).get(r, {})),
        }
        if layout == "dirs":
            (folder / f"rank{r}").mkdir(exist_ok=True)
            (folder / f"rank{r}" / "trace.json.gz").write_bytes(data)
            (folder / f"rank{r}" / "env.json").write_text(json.dumps(e))
        else:
            (folder / f"trace.rank{r}.json.gz").write_bytes(data)
    return folder


def offset_run(src: Path, dst: Path, offsets_us: dict[int, float]) -> Path:
    """A copy of the recorded run ``src`` (rank{R}/trace.json.gz + env.json) under ``dst`` with every
    timestamp of rank R's trace moved by ``offsets_us[R]``: its clock reads that much ahead."""
    for rank_dir in sorted(src.glob("rank*")):
        out = dst / rank_dir.name
        out.mkdir(parents=True, exist_ok=True)
        doc = json.loads(gzip.decompress((rank_dir / "trace.json.gz").read_bytes()))
        offset(doc, offsets_us.get(int(rank_dir.name[4:]), 0.0))
        (out / "trace.json.gz").write_bytes(
            gzip.compress(json.dumps(doc).encode(), compresslevel=1)
        )
        (out / "env.json").write_bytes((rank_dir / "env.json").read_bytes())
    return dst
