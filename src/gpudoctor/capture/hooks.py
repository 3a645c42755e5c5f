"""The hooks that see a program's iterations, installed and removed as one unit.

Every hook runs in ordinary Python code on the program's own thread: an optimizer step, a module
call, ``generate``, a CUDA graph replay, a DataLoader batch. Those are the only places where
the profiler is started or stopped (never a signal handler, which can fire in the middle of an
import). Hooks ignore other threads (the autograd engine re-running checkpointed forwards,
DataParallel replicas) and other processes (forked DataLoader workers inherit them).

Cost: the global module hooks put every module call on ``nn.Module``'s slow path, so they stay
only while the step source is being discovered. Once it is known they are replaced by one hook
on the outermost module (or none), unless torch.compile has already traced code with them in
place: removing them then would force a recompilation, and compiled modules call no hooks inside
their graphs anyway (each hook returns at once under ``torch.compiler.is_compiling()``). Once
the window is over, ``keep_only`` leaves only what marks the steps for the timing after it.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

# torch warns that global hooks fire once more for torch.compile's wrapper module; that is ours
# to handle (depth counting), not the program's to read
_COMPILE_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"


# One pair of global module hooks per process, shared by every session: dynamo guards on the number
# of global hooks, so a pair removed after torch.compile traced with it forces a recompilation.
# Such a pair stays installed, inert (``_CURRENT`` is None), and the next session reuses it.
_GLOBAL_PAIR: list[Any] = []
_CURRENT: list[Hooks] = []
_GRAPHS_BEFORE_PAIR = [0]  # torch.compile graphs traced before the pair was installed


def _module_pre(module: Any, *args: Any) -> None:
    # the compile check comes first: dynamo folds it to a constant and guards on nothing else
    if _is_compiling() or not _CURRENT:
        return
    _CURRENT[-1]._on_module_pre(module)


def _module_post(module: Any, *args: Any) -> None:
    if _is_compiling() or not _CURRENT:
        return
    _CURRENT[-1]._on_module_post()


def _is_compiling() -> bool:
    """torch.compiler.is_compiling once torch is in use (kept from importing torch at import
    time)."""
    torch = sys.modules.get("torch")
    check = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(check()) if check is not None else False


class Listener:
    """What the hooks report to (the capture session implements it)."""

    def optimizer_step(self, optimizer: Any) -> None: ...
    def outer_forward(self, module: Any) -> None: ...
    def token_forward(self, module: Any) -> None: ...
    def generate_start(self) -> None: ...
    def generate_end(self) -> None: ...
    def graph_replay(self) -> None: ...
    def safe_point(self) -> None: ...
    def batch(self, iterator: Any) -> None: ...
    def batch_fetched(self, seconds: float) -> None: ...
    def backward_call(self) -> None: ...
    def foreign_profiler(self, profiler: Any, starting: bool) -> None: ...
    def foreign_export(self, profiler: Any, path: str) -> None: ...
    def broke(self, exc: Exception) -> None:
        """One of the calls above raised: it is gpudoctor's failure, never the program's."""


class Hooks:
    def __init__(self, torch: Any, listener: Listener) -> None:
        self.torch = torch
        self.listener = listener
        self.pid = os.getpid()
        self.thread = threading.get_ident()
        self.depth = 0  # module calls running on the program's thread
        self.generating = 0  # nested generate() calls running
        self._unwrapped_generate: Any = None  # the frame of a generate() that began before we patched it
        self._handles: list[Any] = []
        self._global = False  # listening to the global module hooks
        self._root_handle: Any = None
        self._patches: list[tuple[Any, str, Any]] = []
        self._generate_patched = False
        self._is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling",
                                     lambda: False)
        self._params: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    # -- install / remove ------------------------------------------------------------------------

    def install(self) -> None:
        from torch.nn.modules import module as nn_module
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handles.append(register_optimizer_step_post_hook(self._on_optimizer_step))
        if not _GLOBAL_PAIR:
            _GRAPHS_BEFORE_PAIR[0] = _graphs_compiled()
            _GLOBAL_PAIR.extend([nn_module.register_module_forward_pre_hook(_module_pre),
                                 nn_module.register_module_forward_hook(_module_post,
                                                                        always_call=True)])
        _CURRENT.append(self)
        self._global = True
        warnings.filterwarnings("ignore", message=_COMPILE_WARNING)
        listener = self.listener
        self._patch(self.torch.cuda.CUDAGraph, "replay", self._before(listener.graph_replay))
        self._patch(self.torch.autograd, "backward", self._before(listener.backward_call))
        from torch.utils.data import dataloader

        self._patch(dataloader._BaseDataLoaderIter, "__next__", self._timed_fetch)
        from torch.profiler import profiler as torch_profiler

        kineto = torch_profiler._KinetoProfile
        self._patch(kineto, "prepare_trace",
                    lambda original: self._wrap_profiler(original, starting=True))
        self._patch(kineto, "stop_trace",
                    lambda original: self._wrap_profiler(original, starting=False))
        self._patch(kineto, "export_chrome_trace", self._wrap_export)
        self._maybe_patch_generate()

    def narrow_to(self, module: Any | None) -> None:
        """The source is known: drop the global module hooks, keep one on ``module`` (if any)."""
        if not self._global or self._compiled_with_hooks():
            return
        self._release_global()
        self.depth = 0
        if module is not None:
            self._root_handle = module.register_forward_pre_hook(self._on_root_pre)

    def keep_only(self, *, optimizer: bool, backward: bool, generate: bool, replay: bool,
                  root: Any | None, loader: bool = False) -> None:
        """After the window: remove every hook and wrapper except those that mark the steps (the
        optimizer-step hook, the ``autograd.backward`` wrapper, the ``generate`` wrapper, the
        graph-replay wrapper, a hook on ``root``, the outermost module, when its forwards are
        steps or tokens), and where the program fetches from a DataLoader (``loader``) its wrapper,
        which times each fetch of the steps timed after the window. The profiler wrappers go:
        nothing after the window needs them."""
        if not optimizer:
            for handle in self._handles:
                handle.remove()
            self._handles = []
        if root is None:
            if self._root_handle is not None:
                self._root_handle.remove()
                self._root_handle = None
            self._release_global()
        elif self._global:
            self.narrow_to(root)  # a no-op where compiled code guards on the global hooks
        kept = {name
                for name, keep in (("replay", replay), ("backward", backward), ("generate", generate),
                                   ("__next__", loader)) if keep}
        for owner, name, original in reversed(self._patches):
            if name not in kept:
                setattr(owner, name, original)
        self._patches = [p for p in self._patches if p[1] in kept]
        self._generate_patched = True  # a transformers imported from now on is not wrapped

    def installed(self) -> list[str]:
        """What is attached now: ``optimizer-hook``, ``global-module-hooks``, ``root-hook`` and the
        wrapped methods' names (for tests and the capture-overhead benchmark)."""
        names = ["optimizer-hook"] * bool(self._handles) + ["global-module-hooks"] * self._global
        names += ["root-hook"] * (self._root_handle is not None)
        return names + [name for _, name, _ in self._patches]

    def remove(self) -> None:
        for handle in [*self._handles, self._root_handle]:
            if handle is not None:
                handle.remove()
        self._handles, self._root_handle = [], None
        self._release_global()
        for owner, name, original in reversed(self._patches):
            setattr(owner, name, original)
        self._patches = []

    def _release_global(self) -> None:
        """Stop listening to the global module hooks; remove them unless compiled code guards on
        them."""
        if self._global:
            self._global = False
            if self in _CURRENT:
                _CURRENT.remove(self)
        if _GLOBAL_PAIR and not _CURRENT and not self._compiled_with_hooks():
            for handle in _GLOBAL_PAIR:
                handle.remove()
            _GLOBAL_PAIR.clear()

    # -- the hooks -------------------------------------------------------------------------------

    def _ours(self) -> bool:
        # is_compiling() first: under torch.compile it folds to True and dynamo traces nothing else
        return not self._is_compiling() and os.getpid() == self.pid and threading.get_ident() == self.thread

    # Every hook runs inside the program's own call (its opt.step(), its model(x)): what the
    # listener raises there is gpudoctor's failure (a trace it cannot write), and goes to
    # ``listener.broke``, never up through the program's frames. StopProgram (--exit-after) and
    # Ctrl-C are BaseExceptions: they pass.

    def _on_optimizer_step(self, optimizer: Any, *_: Any) -> None:
        if self._ours():
            try:
                self.listener.optimizer_step(optimizer)
                self.listener.safe_point()
            except Exception as exc:  # noqa: BLE001 - see above
                self.listener.broke(exc)

    def _on_module_pre(self, module: Any) -> None:
        if not self._ours():
            return
        outer = self.depth == 0
        self.depth += 1
        try:
            if outer:
                self._outer(module)
            self.listener.safe_point()
        except Exception as exc:  # noqa: BLE001 - gpudoctor's failure, not the program's
            self.listener.broke(exc)

    def _on_module_post(self) -> None:
        if self._ours() and self.depth > 0:
            self.depth -= 1

    def _on_root_pre(self, module: Any, *_: Any) -> None:
        if self._ours():
            try:
                self._outer(module)
                self.listener.safe_point()
            except Exception as exc:  # noqa: BLE001 - gpudoctor's failure, not the program's
                self.listener.broke(exc)

    def _outer(self, module: Any) -> None:
        if not self._generate_patched:
            self._maybe_patch_generate()
        if self.generating or self._inside_unwrapped_generate():
            self.listener.token_forward(module)
        else:
            self.listener.outer_forward(module)

    def _tell(self, event: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        """``event(*args, **kwargs)``, what it raises handed to ``listener.broke``."""
        try:
            event(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - gpudoctor's failure, not the program's
            self.listener.broke(exc)

    # -- wrapped methods -------------------------------------------------------------------------

    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = owner.__dict__.get(name)
        if original is None:
            return
        setattr(owner, name, make(original))
        self._patches.append((owner, name, original))

    def _timed_fetch(self, original: Any) -> Any:
        """The DataLoader's ``__next__``: the listener hears of the batch before it is fetched and
        how long the fetch took on the program's thread (the loader's share of an unprofiled step,
        which the profiled one cannot tell: replay/observer.py)."""
        from gpudoctor.capture.fetch_clock import timed_fetch

        def before(iterator: Any) -> None:
            self._tell(self.listener.batch, iterator)
            self._tell(self.listener.safe_point)

        return timed_fetch(original, self._ours, before,
                           lambda seconds: self._tell(self.listener.batch_fetched, seconds))

    def _before(self, event: Callable[..., None], with_self: bool = False) -> Callable[[Any], Any]:
        """A wrapper maker: on the program's own thread, tell the listener ``event`` (given the
        call's first argument when ``with_self``) and that this is a safe point, then run the
        original method or function."""
        hooks = self

        def make(original: Any) -> Any:
            @functools.wraps(original)
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                if hooks._ours():
                    try:
                        event(args[0]) if with_self else event()
                        hooks.listener.safe_point()
                    except Exception as exc:  # noqa: BLE001 - gpudoctor's failure, not the program's
                        hooks.listener.broke(exc)
                return original(*args, **kwargs)

            return wrapped

        return make

    def _wrap_profiler(self, original: Any, starting: bool) -> Any:
        """The program's own torch.profiler: told before it starts (our window must close first:
        two profilers cannot record at once) and after it stops (its window can be diagnosed)."""
        hooks = self

        @functools.wraps(original)
        def wrapped(profiler: Any, *args: Any, **kwargs: Any) -> Any:
            if os.getpid() != hooks.pid:
                return original(profiler, *args, **kwargs)
            if starting:
                hooks._tell(hooks.listener.foreign_profiler, profiler, starting=True)
            result = original(profiler, *args, **kwargs)
            if not starting:
                hooks._tell(hooks.listener.foreign_profiler, profiler, starting=False)
            return result

        return wrapped

    def _wrap_export(self, original: Any) -> Any:
        hooks = self

        @functools.wraps(original)
        def export_chrome_trace(profiler: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(profiler, path, *args, **kwargs)
            if os.getpid() == hooks.pid:
                hooks._tell(hooks.listener.foreign_export, profiler, str(path))
            return result

        return export_chrome_trace

    def _wrap_generate(self, original: Any) -> Any:
        hooks = self

        @functools.wraps(original)
        def generate(model: Any, *args: Any, **kwargs: Any) -> Any:
            if not hooks._ours():
                return original(model, *args, **kwargs)
            hooks.generating += 1
            if hooks.generating == 1:
                hooks._unwrapped_generate = None
                hooks._tell(hooks.listener.generate_start)
            try:
                return original(model, *args, **kwargs)
            finally:
                hooks.generating -= 1
                if hooks.generating == 0:
                    hooks._tell(hooks.listener.generate_end)

        return generate

    def _maybe_patch_generate(self) -> None:
        """Wrap transformers' generate() once transformers is imported (never import it
        ourselves)."""
        utils = sys.modules.get("transformers.generation.utils")
        mixin = getattr(utils, "GenerationMixin", None)
        if mixin is None or "generate" not in mixin.__dict__:
            return
        self._generate_patched = True
        code = getattr(inspect.unwrap(mixin.__dict__["generate"]), "__code__", None)
        self._patch(mixin, "generate", self._wrap_generate)
        # a generate() already running when we patched: its forwards are tokens all the same
        frame = sys._getframe()
        while frame is not None:
            if frame.f_code is code:
                self._unwrapped_generate = frame
                break
            frame = frame.f_back

    def _inside_unwrapped_generate(self) -> bool:
        target = self._unwrapped_generate
        if target is None:
            return False
        frame = sys._getframe()
        while frame is not None:
            if frame is target:
                return True
            frame = frame.f_back
        self._unwrapped_generate = None
        return False

    # -- helpers ---------------------------------------------------------------------------------

    def parameter_count(self, module: Any) -> int:
        try:
            count = self._params.get(module)
        except TypeError:
            count = None
        if count is None:
            try:
                count = sum(p.numel() for p in module.parameters())
            except Exception:  # noqa: BLE001 - a module whose parameters() fails still runs
                count = 0
            try:
                self._params[module] = count
            except TypeError:
                pass
        return count

    @staticmethod
    def _compiled_with_hooks() -> bool:
        """Has torch.compile traced code while the global hooks were installed?"""
        return bool(_GLOBAL_PAIR) and _graphs_compiled() > _GRAPHS_BEFORE_PAIR[0]


def _graphs_compiled() -> int:
    dynamo = sys.modules.get("torch._dynamo.utils")
    counters = getattr(dynamo, "counters", None)
    try:
        return int(counters["stats"].get("unique_graphs", 0)) if counters is not None else 0
    except (TypeError, KeyError, AttributeError, ValueError):
        return 0
