"""Hand-built Kineto-style traces for edge cases (times in microseconds, like the real files)."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from typing import Any

H100 = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85_045_624_832,
    "computeMajor": 9,
    "computeMinor": 0,
    "numSms": 132,
}
PID, TID = 100, 100


@dataclass
class TraceBuilder:
    events: list[dict[str, Any]] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=lambda: [dict(H100)])
    _corr: int = 1

    def step(self, n: int, ts: float, dur: float) -> None:
        self.annotation(f"ProfilerStep#{n}", ts, dur)

    def annotation(self, name: str, ts: float, dur: float, tid: int = TID) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {},
            }
        )

    def python(self, name: str, ts: float, dur: float, tid: int = TID) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {},
            }
        )

    def op(
        self,
        name: str,
        ts: float,
        dur: float,
        dims: list | None = None,
        types: list | None = None,
        flops: float | None = None,
        tid: int = TID,
        concrete: list | None = None,
    ) -> None:
        args: dict[str, Any] = {"External id": len(self.events)}
        if dims is not None:
            args["Input Dims"] = dims
            args["Input type"] = types or ["c10::BFloat16"] * len(dims)
        if concrete is not None:  # the profiler's "Concrete Inputs": scalar arguments as strings
            args["Concrete Inputs"] = concrete
        if flops is not None:
            args["flops"] = flops
        self.events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": args,
            }
        )

    def runtime(
        self, name: str, ts: float, dur: float, tid: int = TID, correlation: int | None = None
    ) -> int:
        corr = self._corr if correlation is None else correlation
        self._corr += 1
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {"correlation": corr},
            }
        )
        return corr

    def kernel(
        self,
        name: str,
        ts: float,
        dur: float,
        correlation: int,
        stream: int = 7,
        cat: str = "kernel",
        nbytes: int | None = None,
    ) -> None:
        args: dict[str, Any] = {
            "device": 0,
            "stream": stream,
            "correlation": correlation,
            "grid": [132, 1, 1],
            "block": [128, 1, 1],
        }
        if nbytes is not None:
            args["bytes"] = nbytes
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 0,
                "tid": stream,
                "ts": ts,
                "dur": dur,
                "args": args,
            }
        )

    def launch(
        self,
        kernel: str,
        host_ts: float,
        gpu_ts: float,
        gpu_dur: float,
        op: str | None = None,
        dims: list | None = None,
        flops: float | None = None,
        launch_dur: float = 4.0,
        tid: int = TID,
    ) -> None:
        """An op (optional) wrapping cudaLaunchKernel, and the kernel it launched."""
        if op is not None:
            self.op(op, host_ts, launch_dur + 2, dims=dims, flops=flops, tid=tid)
        corr = self.runtime("cudaLaunchKernel", host_ts + 1, launch_dur, tid=tid)
        self.kernel(kernel, gpu_ts, gpu_dur, corr)

    def memory(self, ts: float, delta: int, allocated: int, reserved: int) -> None:
        self.events.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": PID,
                "tid": TID,
                "ts": ts,
                "args": {
                    "Device Type": 1,
                    "Device Id": 0,
                    "Bytes": delta,
                    "Total Allocated": allocated,
                    "Total Reserved": reserved,
                    "Addr": 1,
                },
            }
        )

    def to_dict(self) -> dict[str, Any]:
        return {"schemaVersion": 1, "deviceProperties": self.gpus, "traceEvents": self.events}

    def to_bytes(self, gz: bool = False) -> bytes:
        data = json.dumps(self.to_dict()).encode()
        return gzip.compress(data) if gz else data

    def write(self, path: Any, gz: bool = False) -> Any:
        path.write_bytes(self.to_bytes(gz))
        return path


def kernel_loop(
    iterations: list[list[str]],
    pause_us: float = 50.0,
    launch_us: float = 5.0,
    kernel_us: float = 3.0,
    gpus: bool = True,
) -> TraceBuilder:
    """A host-bound loop: each iteration pauses ``pause_us`` (data loading), then launches its kernels
    one by one (one ``aten::op_<name>`` each); the GPU runs each kernel 10 us after its launch."""
    t = TraceBuilder() if gpus else TraceBuilder(gpus=[])
    host = 0.0
    for names in iterations:
        host += pause_us
        for name in names:
            t.launch(name, host, host + 10, kernel_us, op=f"aten::op_{name}")
            host += launch_us + 2
    return t


def trace_columns(trace: Any) -> dict[str, Any]:
    """Everything a Trace holds, comparable with ==."""
    out: dict[str, Any] = {}
    for table in ("host", "device", "memory"):
        for name in getattr(trace, table).__struct_fields__:
            value = getattr(getattr(trace, table), name)
            # RawArgs.take reads all rows a block at a time; iterating would read one row per call
            out[f"{table}.{name}"] = (
                [bytes(r) for r in value.take(range(len(value)))]
                if name == "raw_args"
                else value.tolist()
            )
    for name in (
        "strings",
        "threads",
        "gpus",
        "span",
        "origin_ns",
        "event_count",
        "skipped_events",
        "bad_times",
        "negative_durations",
        "bad_args",
        "unreadable_gpu_fields",
    ):
        out[name] = getattr(trace, name)
    return out
