"""Import a script of the repository (benchmarks/, scripts/: folders that are not packages) as a
module, once per session."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parent.parent


def load(name: str, folder: str = "benchmarks") -> ModuleType:
    """``<folder>/<name>.py`` as the module ``name``, registered in sys.modules before it runs
    (dataclasses and typing look their module up by name) and cached there."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
        assert spec is not None and spec.loader is not None, name
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
