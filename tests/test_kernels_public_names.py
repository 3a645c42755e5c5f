"""`gpudoctor.kernels`' public names are the functions and classes, whatever was imported before.

Issue 16: after `K.layer_norm` (or anything importing the `rms_norm` submodule), `K.rms_norm(x, w)`
raised "'module' object is not callable": importing a submodule binds its name on the package, and
the submodule `gpudoctor.kernels.rms_norm` shadowed the function. The ops now live in modules named
unlike any public name; these tests import them in every order, each order from a clean import state.
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpudoctor.kernels as K

pytestmark = pytest.mark.e2e  # every test here runs fresh Python-with-torch processes

SRC = Path(__file__).parent.parent / "src"
pytest.importorskip("torch")

# run in a fresh interpreter; one per first module, the remaining orders after purging the package
PROBE = r"""
import importlib, inspect, itertools, json, sys
import torch

first, modules = sys.argv[1], json.loads(sys.argv[2])
x, w, b = torch.randn(3, 8), torch.rand(8) + 0.5, torch.zeros(8)
checked = 0

def purge():
    for name in [m for m in sys.modules if m == "gpudoctor.kernels" or m.startswith("gpudoctor.kernels.")]:
        del sys.modules[name]
    import gpudoctor
    gpudoctor.__dict__.pop("kernels", None)

def check(order, step):
    global checked
    K = importlib.import_module("gpudoctor.kernels")
    for name in K.__all__:
        value = getattr(K, name)
        if inspect.ismodule(value) or not callable(value):
            raise SystemExit(f"after importing {order[:step]}: gpudoctor.kernels.{name} is {value!r}")
        checked += 1

rest = [m for m in modules if m != first]
for n, tail in enumerate(itertools.permutations(rest)):
    if n:
        purge()
    order = (first,) + tail
    for step, module in enumerate(order, 1):
        importlib.import_module(module)
        check(order, step)
    from gpudoctor import kernels as K
    assert K.rms_norm(x, w).shape == x.shape and K.layer_norm(x, w, b).shape == x.shape
    assert K.swiglu(x, x).shape == x.shape and K.geglu(x, x).shape == x.shape
print(json.dumps({"orders": n + 1, "checked": checked}))
"""


def op_modules() -> list[str]:
    return sorted(set(K._WHERE.values()))


def test_no_submodule_is_named_like_a_public_name():
    submodules = {m.name for m in pkgutil.iter_modules(K.__path__)}
    assert submodules & set(K.__all__) == set()
    assert {m.rsplit(".", 1)[1] for m in op_modules()} <= submodules
    assert set(K._WHERE) == set(K.__all__)


@pytest.mark.parametrize("first", op_modules())
def test_public_names_are_callables_in_every_import_order(first):
    modules = op_modules()
    env = dict(os.environ, PYTHONPATH=str(SRC))
    env.pop(
        "TRITON_INTERPRET", None
    )  # the native CPU path: the names are under test, not the kernels
    out = subprocess.run(
        [sys.executable, "-c", PROBE, first, json.dumps(modules)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    n = len(modules) - 1
    orders = 1
    for k in range(2, n + 1):
        orders *= k
    assert result == {"orders": orders, "checked": orders * len(modules) * len(K.__all__)}


def test_the_issue_sequence_in_a_fresh_process():
    """The issue's own steps: use K.layer_norm, then call K.rms_norm (and layer_norm again)."""
    code = (
        "import torch\nfrom gpudoctor import kernels as K\nx, w, b = torch.randn(4, 8), torch.ones(8), "
        "torch.zeros(8)\nK.layer_norm(x, w, b)\nK.rms_norm(x, w)\nK.layer_norm(x, w, b)\n"
        "import gpudoctor.kernels.patching\nK.rms_norm(x, w)\nprint('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    env.pop("TRITON_INTERPRET", None)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
