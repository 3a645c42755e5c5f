"""One window for every rank of a distributed job, agreed through the job's key-value store.

Under ``torchrun`` every rank runs its own capture session. Each counts its own steps; the
ranks must record the same step indices, so the window's first step is agreed, never read off a
wall clock (ranks' clocks and start times differ):

1. a rank that has run ``skip`` steps is *ready*: it writes ``ready/<rank> = <its step count>``;
2. rank 0 waits (at most ``timeout_s``) for every rank's ready key, opens the window at the
   largest count (no rank has passed it: each waits for the decision where it became ready),
   names the run directory, and writes ``window``; the other ranks wait for that key;
3. every rank opens its profiler at that count, so each records steps
   ``first_step .. first_step + steps - 1`` (0-based) into ``RUN/rank<R>/``, then writes
   ``done/<rank>``; rank 0 waits (bounded again) for every bundle and writes the combined report.

A rank whose program ends before it is ready writes ``left/<rank>`` so rank 0 stops waiting for
it. Every wait is bounded: a rank that dies, hangs or runs fewer steps costs the others at most
``timeout_s`` (rank 0) or twice that (the others, who wait for rank 0's own wait), and the
report says which rank was left out and why.

The store is the process group's (``torch.distributed``'s default store once the program called
``init_process_group``, under its prefixes), else torchrun's agent store at
``MASTER_ADDR:MASTER_PORT`` (the same server the process group would use), else one that rank 0
hosts at ``MASTER_PORT + 1``. Keys live under ``gpudoctor/<run id>/<restart>/<capture #>/``, so a
restarted job or a second capture in one process never reads an earlier decision.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpudoctor.capture.bundle import new_run_dir, rank_and_world
from gpudoctor.core.clock import SYSTEM_CLOCK, Clock

OWN_STORE_PORT_OFFSET = 1  # rank 0 hosts a store at MASTER_PORT + 1 when no other store exists
DEFAULT_TIMEOUT_S = 120.0
POLL_S = 0.02  # a rank waiting at a step boundary asks the store this often
# captures started per rank (one rank per process in a job): every rank starts them in the same
# order
_CAPTURES: dict[int, itertools.count[int]] = {}


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    hostname: str

    def facts(self) -> dict[str, Any]:
        """The rank's keys of env.json."""
        return {"rank": self.rank, "world_size": self.world_size, "local_rank": self.local_rank,
                "hostname": self.hostname}


def rank_info(rank: int | None = None, world_size: int | None = None,
              local_rank: int | None = None) -> RankInfo | None:
    """This process's place in a distributed job (None for a single process): the values given (a
    framework's own: Lightning's ``trainer.global_rank``), else torch.distributed once the program
    initialized it, else the launcher's variables (torchrun, SLURM, MPI)."""
    if rank is None:
        rank, world_size = rank_and_world()
    if rank is None or not ((world_size or 0) > 1 or rank > 0):
        return None
    if local_rank is None:
        value = os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", ""))
        local_rank = int(value) if value.isdecimal() else rank
    return RankInfo(int(rank), int(world_size or rank + 1), int(local_rank), socket.gethostname())


@dataclass(frozen=True)
class Window:
    """The steps this rank records, as agreed (or, failing that, chosen alone)."""

    open_at: int  # the step count at whose boundary the profiler opens (a warm-up step follows)
    steps: int  # recorded steps
    run_name: str  # the run directory's name under the base folder, shared by the ranks
    ranks: tuple[int, ...]  # the ranks that joined the agreement (rank 0 waits for their bundles)
    agreed: bool  # False: this rank chose alone (no store, or no decision in time)
    notes: tuple[str, ...] = ()
    left: tuple[int, ...] = ()  # the ranks whose program ended before the window

    @property
    def first_step(self) -> int:
        """0-based index of the first recorded step: the step after the warm-up step."""
        return self.open_at + 1

    def facts(self) -> dict[str, int]:
        return {"first_step": self.first_step, "steps": self.steps}


@dataclass
class RankSync:
    """The agreement and the end-of-run handshake of one capture in a distributed job."""

    info: RankInfo
    base: Path  # where run directories are made
    name: str  # the run's name (the script's stem)
    steps: int
    timeout_s: float = DEFAULT_TIMEOUT_S
    store: Any = None  # a torch.distributed Store; found when first needed if None
    clock: Clock = field(default=SYSTEM_CLOCK, repr=False, compare=False)  # the waits' deadlines (core/clock.py)
    window: Window | None = field(default=None, init=False)  # set by agree()
    _prefix: str = field(default="", init=False)  # the keys of this capture: job, restart, capture number
    _store_error: str = field(default="", init=False)  # why there is no store
    _alone_name: str = field(default="", init=False)  # this rank's own run directory, should it record alone

    def __post_init__(self) -> None:
        run_id = os.environ.get("TORCHELASTIC_RUN_ID", "job")
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        nth = next(_CAPTURES.setdefault(self.info.rank, itertools.count()))
        self._prefix = f"gpudoctor/{run_id}/{restart}/{nth}/"

    # -- the window ----------------------------------------------------------------------------

    def agree(self, ready_at: int) -> Window:
        """Called once, at the boundary where this rank has run ``skip`` steps: blocks (bounded)
        until rank 0 has decided, and returns the window."""
        store = self._store()
        if store is None:
            return self._alone(ready_at, self._store_error)
        try:
            store.set(self._key(f"ready/{self.info.rank}"), str(ready_at))
            if self.info.rank == 0:
                decision = self._decide(store)
            else:
                waited = 2 * self.timeout_s  # rank 0 itself waits up to timeout_s for the last rank
                if not _wait_all(store, [self._key("window")], waited, self.clock):
                    return self._alone(ready_at, f"rank 0 published no window within {waited:g} s")
                decision = json.loads(store.get(self._key("window")))
                if "abandoned" in decision:
                    return self._alone(ready_at,
                                       f"rank 0 ended after {decision['abandoned']} steps, before "
                                       "the window")
        except (RuntimeError, ValueError, OSError) as exc:  # a store that went away: carry on alone
            return self._alone(ready_at, f"the store failed ({type(exc).__name__}: {exc})")
        return self._adopt(decision, ready_at)

    def _decide(self, store: Any) -> dict[str, Any]:
        everyone = list(range(self.info.world_size))
        ready: dict[int, int] = {}
        left: dict[int, int] = {}
        deadline = self.clock.now() + self.timeout_s
        while True:
            for r in [r for r in everyone if r not in ready and r not in left]:
                if store.check([self._key(f"ready/{r}")]):
                    ready[r] = int(store.get(self._key(f"ready/{r}")))
                elif store.check([self._key(f"left/{r}")]):
                    left[r] = int(store.get(self._key(f"left/{r}")))
            if len(ready) + len(left) == len(everyone) or self.clock.now() >= deadline:
                break
            self.clock.sleep(POLL_S)
        missing = [r for r in everyone if r not in ready and r not in left]
        name = new_run_dir(self.base, self.name).name
        decision = {"open_at": max(ready.values()), "run": name, "ranks": sorted(ready),
                    "left": {str(r): n for r, n in sorted(left.items())}, "missing": missing}
        store.set(self._key("window"), json.dumps(decision))
        return decision

    def _adopt(self, decision: dict[str, Any], ready_at: int) -> Window:
        open_at = int(decision["open_at"])
        notes = [f"rank {r} ended after {n} steps, before the window (--skip): it has no bundle"
                 for r, n in decision.get("left", {}).items()]
        notes += [f"rank {r} was not ready within {self.timeout_s:g} s (it ran fewer steps, hung "
                  "or died): the window was agreed without it" for r in decision.get("missing", [])]
        if open_at < ready_at:  # this rank came after rank 0 stopped waiting for it
            notes.append(f"rank {self.info.rank} was ready at step {ready_at}, after the other "
                         f"ranks agreed on step {open_at}: its window starts {ready_at - open_at} "
                         "steps later than theirs")
        self.window = Window(max(open_at, ready_at), self.steps, str(decision["run"]),
                             tuple(int(r) for r in decision["ranks"]), open_at >= ready_at,
                             tuple(notes), tuple(int(r) for r in decision.get("left", {})))
        return self.window

    def _alone(self, ready_at: int, why: str) -> Window:
        note = (f"rank {self.info.rank} could not agree its window with the other ranks ({why}): "
                f"it recorded from its own step {ready_at + 1}, which may not be the other "
                "ranks' steps")
        self.window = Window(ready_at, self.steps, self._own_name(), (self.info.rank,),
                             False, (note,))
        return self.window

    def leave(self, steps_seen: int) -> None:
        """The program ended before this rank was ready: rank 0 need not wait for it, and when
        rank 0 itself leaves, the others need not wait for its decision."""
        if self.window is not None or self._store() is None:
            return
        try:
            self.store.set(self._key(f"left/{self.info.rank}"), str(steps_seen))
            if self.info.rank == 0:
                self.store.set(self._key("window"), json.dumps({"abandoned": steps_seen}))
        except (RuntimeError, OSError):
            pass  # rank 0 then waits out its bound for this rank

    # -- the bundles -----------------------------------------------------------------------------

    def run_dir(self) -> Path:
        """The run directory the ranks share (this rank's own one when they did not agree)."""
        return self.base / (self.window.run_name if self.window is not None else self._own_name())

    def bundle_dir(self) -> Path:
        return self.run_dir() / f"rank{self.info.rank}"

    def env_facts(self) -> dict[str, Any]:
        """The keys a rank adds to its env.json: its place in the job and the window it recorded."""
        facts = self.info.facts()
        if self.window is not None:
            facts["window"] = self.window.facts()
            facts["window_agreed"] = self.window.agreed
        return facts

    def bundle_done(self, written: bool) -> None:
        """This rank's bundle is complete (``written``) or will never come."""
        if self.store is None or self.window is None or not self.window.agreed:
            return
        try:
            self.store.set(self._key(f"done/{self.info.rank}"), "1" if written else "0")
        except (RuntimeError, OSError):
            pass  # rank 0 then finds the bundle on disk, or waits out its bound

    def wait_bundles(self) -> tuple[dict[int, str], list[str]]:
        """Rank 0: wait (at most ``timeout_s``) until every rank that joined has written its
        bundle or said it has none. Returns each rank's state ("ok", "elsewhere": done but not on
        this file system, "none": it recorded nothing, "left": its program ended before the
        window, "missing") and a note per rank left out (those not in the window have theirs)."""
        window = self.window
        if window is None:
            return {}, []
        run = self.run_dir()
        state: dict[int, str] = {}
        deadline = self.clock.now() + self.timeout_s
        while True:
            for r in [r for r in window.ranks if r not in state]:
                found = self._bundle_state(run, r)
                if found:
                    state[r] = found
            if len(state) == len(window.ranks) or self.clock.now() >= deadline:
                break
            self.clock.sleep(POLL_S * 5)
        notes = []
        for r in range(self.info.world_size):
            state.setdefault(r, "left" if r in window.left else "missing")
            if state[r] == "missing" and r in window.ranks:
                notes.append(f"rank {r}'s bundle did not appear within {self.timeout_s:g} s: the "
                             "combined report leaves it out")
            elif state[r] == "elsewhere":
                notes.append(f"rank {r} wrote its bundle on another file system "
                             f"({run / f'rank{r}'} is not here): copy it here and run gpudoctor "
                             "analyze on the run directory")
            elif state[r] == "none" and r in window.ranks:
                notes.append(f"rank {r} recorded no window: the combined report leaves it out")
        return state, notes

    def _bundle_state(self, run: Path, r: int) -> str:
        if (run / f"rank{r}" / "env.json").is_file():  # env.json is the last file a rank writes
            return "ok"
        store = self.store
        if store is None:
            return ""
        try:
            if not store.check([self._key(f"done/{r}")]):
                return ""
            return "elsewhere" if store.get(self._key(f"done/{r}")) == b"1" else "none"
        except (RuntimeError, OSError):
            return ""

    # -- the store -------------------------------------------------------------------------------

    def _key(self, name: str) -> str:
        return self._prefix + name

    def _own_name(self) -> str:
        if not self._alone_name:
            self._alone_name = new_run_dir(self.base, f"{self.name}-rank{self.info.rank}").name
        return self._alone_name

    def _store(self) -> Any:
        if self.store is None and not self._store_error:
            try:
                self.store = find_store(self.info, self.timeout_s)
            except (RuntimeError, ValueError, OSError) as exc:
                self._store_error = f"the store could not be reached: {type(exc).__name__}: {exc}"
            if self.store is None and not self._store_error:
                self._store_error = "no process group, and no MASTER_ADDR / MASTER_PORT: no store to agree through"
        return self.store


def find_store(info: RankInfo, timeout_s: float) -> Any:
    """The store every rank of the job reaches (see the module docstring), or None."""
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    if dist.is_available() and dist.is_initialized():
        # a private function (torch 2.1-2.13): absent, the launcher's variables lead to the same
        # server
        try:
            from torch.distributed.distributed_c10d import _get_default_store

            store = _get_default_store()
            # "default_pg/": the raw server every rank shares
            while isinstance(store, dist.PrefixStore):
                store = store.underlying_store
            return store
        except (ImportError, AttributeError, RuntimeError):
            pass
    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if not addr or not port.isdecimal():
        return None
    # torchrun's agent hosts it already
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return dist.TCPStore(addr, int(port), is_master=False, timeout=timeout,
                             wait_for_workers=False)
    return dist.TCPStore(addr, int(port) + OWN_STORE_PORT_OFFSET, is_master=info.rank == 0,
                         timeout=timeout, wait_for_workers=False)


def _wait_all(store: Any, keys: list[str], timeout_s: float, clock: Clock = SYSTEM_CLOCK) -> bool:
    """Wait until every key exists, polling (a blocking get would wait for the store's own
    timeout, 30 minutes by default); False after ``timeout_s``."""
    deadline = clock.now() + timeout_s
    while not store.check(keys):
        if clock.now() >= deadline:
            return False
        clock.sleep(POLL_S)
    return True
