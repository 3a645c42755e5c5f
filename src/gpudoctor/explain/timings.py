"""Timing tables -> ranked hypotheses (a slow rank, all-reduce scaling, a pipeline's bubble).

- ``rank_hypotheses``: per-rank step times (``rank,step,step_ms``): stragglers by a robust z-score
  of each rank's median step time, a change point in the step time (MFU collapse), periodic spikes.
- ``collective_hypotheses``: all-reduce time vs GPU count (``gpus,allreduce_ms[,bytes][,algo]`` and
  optionally the machine: ``gpu``, ``fabric``, ``gpus_per_node``): the count where the measurement
  leaves the expected curve, ``plan.collective_cost``' model of the machine when it is named, else the
  ring model fitted on the smaller counts.
- ``pipeline_hypotheses``: a pipeline's measured bubble against its schedule's formula
  (``core.layout.bubble_fraction``).

Pure functions: text (or numbers) in, findings out; bad input raises InputError with one line.
"""

from gpudoctor.explain.allreduce_scaling import collective_hypotheses
from gpudoctor.explain.rank_times import rank_hypotheses
from gpudoctor.explain.schedule_bubble import pipeline_hypotheses

__all__ = ["collective_hypotheses", "pipeline_hypotheses", "rank_hypotheses"]
