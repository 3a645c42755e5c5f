"""NVML sampling during the profiled window: utilization, SM clock, power, throttle reasons.

A daemon thread reads nvidia-ml-py every ``interval`` seconds; a missing library or driver turns
sampling off (the summary says why) rather than failing the capture.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
from typing import Any

from gpudoctor.core.card import reason_names


def current_device_handle(pynvml: Any) -> Any:
    """NVML's handle of torch's current CUDA device. NVML numbers every GPU of the machine and
    CUDA only the visible ones (CUDA_VISIBLE_DEVICES), so under torchrun rank R's ``cuda:R`` need
    not be NVML's GPU R: the two are matched by UUID, by index only when torch gives none."""
    import torch

    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is not None:
        # pynvml's NVMLError (a MIG slice, an old driver): the index is the next best guess
        with contextlib.suppress(Exception):
            return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
    return pynvml.nvmlDeviceGetHandleByIndex(index)


class NvmlSampler:
    def __init__(self, interval_s: float, device_index: int | None = None) -> None:
        self.interval_s = interval_s
        self.device_index = device_index
        self.samples: list[dict[str, float]] = []
        self.reasons: set[str] = set()
        self.error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._handle: Any = None
        self._max_sm_clock = 0

    def start(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = (current_device_handle(pynvml) if self.device_index is None
                            else pynvml.nvmlDeviceGetHandleByIndex(self.device_index))
            self._max_sm_clock = pynvml.nvmlDeviceGetMaxClockInfo(self._handle,
                                                                  pynvml.NVML_CLOCK_SM)
        except Exception as exc:  # noqa: BLE001 - no library, no driver, no permission: sampling is optional
            self.error = f"NVML unavailable: {type(exc).__name__}: {exc}"
            return
        self._thread = threading.Thread(target=self._run, name="gpudoctor-nvml", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        nvml, handle = self._nvml, self._handle
        while not self._stop.wait(self.interval_s):
            try:
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                reasons = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
                self.samples.append(
                    {
                        "gpu_util_pct": float(util.gpu),
                        "mem_util_pct": float(util.memory),
                        "sm_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(handle,
                                                                          nvml.NVML_CLOCK_SM)),
                        "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                    }
                )
                self.reasons |= reason_names(reasons)
            except Exception as exc:  # noqa: BLE001 - NVML is optional: the error is kept and reported
                self.error = f"NVML sampling stopped: {type(exc).__name__}: {exc}"
                return

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {"samples": 0,
                    "error": self.error or "no sample taken (window shorter than the interval)"}
        def col(key: str) -> list[float]:
            return [s[key] for s in self.samples]

        return {
            "samples": len(self.samples),
            "interval_s": self.interval_s,
            "gpu_util_pct_mean": round(statistics.fmean(col("gpu_util_pct")), 1),
            "sm_clock_mhz_mean": round(statistics.fmean(col("sm_clock_mhz")), 0),
            "sm_clock_mhz_min": min(col("sm_clock_mhz")),
            "sm_clock_mhz_max_supported": self._max_sm_clock,
            "power_w_mean": round(statistics.fmean(col("power_w")), 1),
            "throttle_reasons_seen": sorted(self.reasons),
            "error": self.error,
        }
