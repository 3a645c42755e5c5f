"""The answer of `gpudoctor memory`: bytes per component, the peak and when it happens."""

from __future__ import annotations

from dataclasses import dataclass, field

# The caching allocator keeps more than it hands out: reserved / allocated at the peak ranged from
# 1.06 to 1.36 (median 1.12) over the 18 runs of benchmarks/bench_memory.py
# (benchmarks/BENCHMARKS-memory.md "Evidence moved from the source: memory"). The median is the
# estimate; fragmentation-heavy workloads go higher.
RESERVED_OVER_ALLOCATED = 1.12

# Per process, outside the allocator: the CUDA context, cuBLAS/cuDNN handles and kernels loaded.
# Measured: used memory (cudaMemGetInfo) minus torch.cuda.memory_reserved() after a first matmul (an
# H200 with CUDA 13; benchmarks/BENCHMARKS-memory.md "Evidence moved from the source: memory").
# Other drivers and cards differ by a few hundred MB.
CUDA_CONTEXT_BYTES = 718_077_952

# cuBLAS keeps one workspace per handle, and a training step uses two threads (the forward's and
# autograd's): 64 MiB of allocated memory on an H200 with torch 2.11 (measured: the constant left
# over after weights and optimizer states in every training run), 32 MiB in generation.
CUBLAS_WORKSPACE_BYTES = 32 * 1024**2


@dataclass(frozen=True)
class Suggestion:
    change: str  # what to change, in words
    options: dict  # the options that change, as `gpudoctor memory` takes them
    peak_bytes: int  # the new peak of allocated memory
    fits: bool
    cost: str  # what it costs (compute, communication, accuracy)
    phase: str = ""  # when the new peak happens

    def to_dict(self) -> dict:
        return {"change": self.change, "options": self.options, "peak_bytes": self.peak_bytes,
                "peak_phase": self.phase or None, "fits": self.fits, "cost": self.cost}


@dataclass(frozen=True)
class MemoryEstimate:
    mode: str  # "train" or "infer"
    model: str
    n_params: int
    breakdown: dict[str, int]  # component -> bytes at the peak (they sum to peak_bytes)
    peak_bytes: int  # what torch.cuda.max_memory_allocated would report
    phase: str  # when the peak happens
    reserved_bytes: int  # the allocator's reservation at the peak (estimate)
    context_bytes: int  # CUDA context, outside the allocator
    capacity_bytes: int = 0  # the GPU's memory as CUDA reports it (0: no --gpu); capacity.capacity_of
    gpu: str = ""
    capacity_source: str = ""  # where capacity_bytes comes from, in words
    options: dict = field(default_factory=dict)
    phases: dict[str, int] = field(default_factory=dict)  # phase -> peak allocated bytes
    notes: tuple[str, ...] = ()
    # what the estimate takes as given (precision, optimizer, attention), one line each, printed
    # with it
    assumptions: tuple[str, ...] = ()
    suggestions: tuple[Suggestion, ...] = ()
    # mode-specific answers (inference: max batch, TP needed)
    extra: dict = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        """What the process needs from the card: reserved memory plus the context."""
        return self.reserved_bytes + self.context_bytes

    @property
    def fits(self) -> bool | None:
        return None if not self.capacity_bytes else self.total_bytes <= self.capacity_bytes

    @property
    def usable_peak_bytes(self) -> int:
        """The largest peak of allocated memory that fits: the card less the CUDA context, over the
        allocator's reserve (``fits`` is ``peak_bytes <= usable_peak_bytes``, to rounding)."""
        return max(int((self.capacity_bytes - self.context_bytes) / RESERVED_OVER_ALLOCATED), 0) if self.capacity_bytes else 0

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "model": self.model,
            "n_params": self.n_params,
            "peak_bytes": self.peak_bytes,
            "peak_phase": self.phase,
            "breakdown": dict(self.breakdown),
            "phases": dict(self.phases),
            "reserved_bytes": self.reserved_bytes,
            "context_bytes": self.context_bytes,
            "total_bytes": self.total_bytes,
            "gpu": self.gpu or None,
            "capacity_bytes": self.capacity_bytes or None,
            "capacity_source": self.capacity_source or None,
            "usable_peak_bytes": self.usable_peak_bytes or None,
            "fits": self.fits,
            "options": dict(self.options),
            "notes": list(self.notes),
            "assumptions": list(self.assumptions),
            "suggestions": [s.to_dict() for s in self.suggestions],
            **({"extra": self.extra} if self.extra else {}),
        }
