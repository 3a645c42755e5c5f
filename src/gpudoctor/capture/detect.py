"""Where one iteration of an arbitrary program ends: the step detector.

A program tells us nothing about its loop, so every hook (capture/hooks.py) reports what it saw
and this state machine decides which of those events are step boundaries. Sources, strongest
first:

1. ``gpudoctor.step()``: the program (or a framework callback) says so.
2. The optimizer step: one step of the *first* optimizer stepped (a GAN's two optimizers make
   one step, not two; gradient accumulation's N forwards make one step; a closure's forward and
   backward run inside it).
3. ``model.generate``: one outermost call is one step; its forwards are tokens.
4. The backward pass (``loss.backward()``), in a training loop that steps no torch.optim
   optimizer (a hand-written update): after ``patience`` backward calls with no optimizer step,
   so that gradient accumulation's micro-batches are not taken for steps.
5. The outermost module's forward: the module with the most parameters among those called when
   no other module is running (the model, not the loss function). Training-like forwards (grad
   enabled, module in train mode) are steps only when no backward ever comes (4 x ``patience``
   of them): an RNN cell called 64 times before one backward is not 64 steps. Forwards taken as
   steps while the model was evaluated stop being steps when it starts training (an evaluation
   before training, Lightning's sanity check).
6. A CUDA graph replay, for programs that replay a captured graph and call no module.

Before the window opens, a stronger source that appears replaces a weaker one (``epoch``
counts the changes, so the session can restart its count); once the window opens the source
is locked. No torch here: the rules are unit-tested on plain events.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Source(str, Enum):
    EXPLICIT = "gpudoctor-step"
    OPTIMIZER = "optimizer-step"
    GENERATE = "generate-call"
    BACKWARD = "backward-call"
    FORWARD = "module-forward"
    GRAPH = "cuda-graph-replay"
    TIME = "time-window"


# the step source of a window the program's own torch.profiler recorded (capture/session.py borrows
# it); not one the detector chooses
PROGRAM_PROFILER = "program-profiler"

_RANK = {Source.EXPLICIT: 0, Source.OPTIMIZER: 1, Source.GENERATE: 2, Source.BACKWARD: 3,
         Source.FORWARD: 4, Source.GRAPH: 5}


@dataclass
class StepDetector:
    patience: int = 64
    """Training-like forwards to wait for an optimizer step before forwards count as steps."""

    source: Source | None = None
    epoch: int = 0  # bumped each time the source (or the root module) changes
    locked: bool = False
    leader: int | None = None  # id of the first optimizer stepped
    root: int | None = None  # id of the outermost module with the most parameters
    root_params: int = -1
    root_name: str = ""
    training_forwards: int = 0
    backwards: int = 0
    optimizer_seen: bool = False
    generate_seen: bool = False
    forwards_from_eval: bool = False  # the forward source was taken from eval / no-grad forwards

    def lock(self) -> None:
        """The window opened: the source no longer changes."""
        self.locked = True

    def explicit(self) -> bool:
        return self._adopt(Source.EXPLICIT)

    def optimizer_step(self, key: int) -> bool:
        if self.leader is None:
            self.leader = key
        if key != self.leader:
            return False
        self.optimizer_seen = True
        return self._adopt(Source.OPTIMIZER)

    def generate_call(self) -> bool:
        self.generate_seen = True
        return self._adopt(Source.GENERATE)

    def backward_call(self) -> bool:
        self.backwards += 1
        if self.optimizer_seen or self.backwards <= self.patience:
            return False
        return self._adopt(Source.BACKWARD)

    def see_module(self, key: int, params: int, name: str = "") -> None:
        """A module called with no other module running (a step candidate, or a generate()
        token): the outermost module is the one with the most parameters."""
        if not self.locked and key != self.root and params > self.root_params:
            self.root, self.root_params, self.root_name = key, params, name
            if self.source is Source.FORWARD:
                self.epoch += 1  # a bigger model: restart the count on it

    def outer_forward(self, key: int, params: int, training_like: bool, name: str = "") -> bool:
        """A module called with no other module running. ``params``: its parameter count."""
        self.see_module(key, params, name)
        if key != self.root:
            return False
        if training_like and self.source is Source.FORWARD and self.forwards_from_eval and not self.locked:
            # evaluation forwards came first (Lightning's sanity check runs 2 before training) and
            # training starts now: its steps are its optimizer's or its backward's, as for any
            # training loop; the forward source is dropped until one of them or patience decides
            self.source, self.forwards_from_eval = None, False
            self.epoch += 1
        if training_like and not self.optimizer_seen and self.source is not Source.FORWARD:
            self.training_forwards += 1
            if self.backwards or self.training_forwards <= 4 * self.patience:
                return False
        adopted = self.source is not Source.FORWARD
        boundary = self._adopt(Source.FORWARD)
        if adopted and self.source is Source.FORWARD:
            self.forwards_from_eval = not training_like
        return boundary

    def graph_replay(self) -> bool:
        if self.root is not None:
            # a module drives the replays (torch.compile's CUDA graphs): its forward counts
            return False
        return self._adopt(Source.GRAPH)

    def _adopt(self, source: Source) -> bool:
        """Is this event a boundary? It is when ``source`` is (or may become) the chosen one."""
        if self.source is source:
            return True
        if self.locked:
            return False
        if self.source is not None and _RANK[source] > _RANK[self.source]:
            return False
        self.source = source
        self.epoch += 1
        return True
