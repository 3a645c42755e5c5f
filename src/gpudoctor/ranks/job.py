"""Whether several traces are the ranks of one distributed job, from what each recorded.

Ranks of one job carry Kineto's ``distributedInfo`` with the same world size and backend and
distinct ranks (every rank of a torch.distributed job writes it, torch >= 2.0). A trace without it
counts as a rank only when no trace has it (an older exporter) and every one records collectives
or send/recv. Anything else (single-GPU traces given together, as a shell glob does; two ranks 0;
different world sizes or backends; more traces than the world size) is traces to diagnose one by
one: combined, all but one rank's findings would be hidden behind the ranks table."""

from __future__ import annotations

from collections.abc import Sequence

from gpudoctor.trace.job import JobFacts

_SAME = ("world_size", "backend")


def apart(jobs: Sequence[JobFacts]) -> str:
    """Why ``jobs`` are not the ranks of one job, in a clause naming the traces; "" when they
    are."""
    recorded = [j for j in jobs if j.distributed is not None]
    if not recorded:
        silent = next((j for j in jobs if not j.communicates), None)
        return "" if silent is None else (f"{silent.source} records no process group "
                                          "(distributedInfo) and no collective or send/recv")
    if len(recorded) < len(jobs):
        lone = next(j for j in jobs if j.distributed is None)
        return f"{lone.source} records no process group (distributedInfo) while {recorded[0].source} does"
    first = recorded[0]
    for j in recorded[1:]:
        for key in _SAME:
            a, b = (first.distributed or {}).get(key), (j.distributed or {}).get(key)
            if a != b:
                return f"{first.source} and {j.source} come from different jobs ({key} {a} and {b})"
    seen: dict[object, JobFacts] = {}
    for j in recorded:
        rank = (j.distributed or {}).get("rank")
        if rank in seen:
            return f"{seen[rank].source} and {j.source} are both rank {rank}"
        seen[rank] = j
    world = (first.distributed or {}).get("world_size")
    if isinstance(world, int) and len(jobs) > world:
        return f"{len(jobs)} traces for a world size of {world}"
    return ""
