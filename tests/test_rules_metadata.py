"""Each rule declares its own metadata; the registry finds every rule module; no rule imports another."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import gpudoctor.rules as rules_package
from gpudoctor.analysis.idle import CAUSES
from gpudoctor.rules.base import CALIBRATIONS, Rule
from gpudoctor.rules.registry import RULES, discover

RULES_DIR = Path(rules_package.__file__).parent


def _rule_modules() -> dict[str, Path]:
    """module name -> file, for every module under rules/ that assigns ``RULE`` at top level."""
    found = {}
    for path in sorted(RULES_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == "RULE" for t in targets):
                found[path.stem] = path
    return found


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_declares_valid_metadata(rule_id: str) -> None:
    rule = RULES[rule_id]
    assert rule.idle_cause == "" or rule.idle_cause in CAUSES, rule.idle_cause
    assert rule.calibration in CALIBRATIONS
    assert all(b in RULES and b != rule_id for b in rule.blocked_by), rule.blocked_by
    assert all(c in CAUSES for c in rule.owns_idle), rule.owns_idle
    assert isinstance(rule.order, int)


def test_rule_orders_are_distinct() -> None:
    orders = [r.order for r in RULES.values()]
    assert len(set(orders)) == len(orders)
    assert orders == sorted(orders)


def test_unknown_calibration_is_refused() -> None:
    with pytest.raises(ValueError, match="calibration"):
        Rule("x", "x", lambda a: None, calibration="sometimes")


def test_registry_discovers_every_rule_module() -> None:
    modules = _rule_modules()
    assert modules, "no rule modules found"
    ids = set()
    for name in modules:
        module = importlib.import_module(f"gpudoctor.rules.{name}")
        ids.add(module.RULE.id)
        assert RULES[module.RULE.id] is module.RULE
    assert ids == set(RULES)
    # every module the package lists is either a rule or a helper that defines no RULE
    listed = {info.name for info in pkgutil.iter_modules(rules_package.__path__)}
    assert set(modules) <= listed
    assert list(discover()) == list(RULES)


def _imported_modules(path: Path) -> set[str]:
    """Names of gpudoctor.rules.* modules a file imports (anywhere in it, lazy imports included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {
                a.name.rsplit(".", 1)[-1]
                for a in node.names
                if a.name.startswith("gpudoctor.rules.")
            }
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "gpudoctor.rules":
                out |= {a.name for a in node.names}
            elif node.module.startswith("gpudoctor.rules."):
                out.add(node.module.rsplit(".", 1)[-1])
    return out


def test_no_rule_imports_another_rule() -> None:
    modules = _rule_modules()
    offenders = {
        name: sorted((_imported_modules(path) & set(modules)) - {name})
        for name, path in modules.items()
    }
    assert not {k: v for k, v in offenders.items() if v}, offenders


def test_a_tie_goes_to_the_larger_saving_in_the_profiled_window() -> None:
    # an accelerate loop on an H100 (gallery call 9): both capped at the unprofiled step's idle
    from gpudoctor.core.finding import Evidence, make_finding
    from gpudoctor.rules.registry import rank

    def priced(rule_id: str, saving: float, profiled: float):  # type: ignore[no-untyped-def]
        return make_finding(
            rule_id,
            rule_id,
            24.573,
            saving,
            "",
            Evidence(numbers={"saving_in_profiled_trace_ms": profiled}),
            (),
        )

    sync, loader = priced("host-sync", 2.6610, 3.23), priced("input-pipeline", 2.6606, 5.86)
    assert [f.id for f in rank([sync, loader])] == ["input-pipeline", "host-sync"]
    # beyond the tie the saving decides, whatever the profiled window saw
    assert [f.id for f in rank([priced("host-sync", 2.70, 3.23), loader])] == [
        "host-sync",
        "input-pipeline",
    ]


def test_launch_bound_waits_behind_a_major_dynamic_shapes_finding() -> None:
    """A CUDA graph cannot replay a shape new every step: a major dynamic-shapes finding comes
    first whatever launch-bound saves; a minor one does not hold it back."""
    from gpudoctor.core.finding import Evidence, make_finding
    from gpudoctor.rules.registry import rank

    def priced(rule_id: str, saving: float):  # type: ignore[no-untyped-def]
        return make_finding(rule_id, rule_id, 32.257, saving, "", Evidence(numbers={}), ())

    graph, shapes = priced("launch-bound", 21.39), priced("dynamic-shapes", 2.58)
    assert shapes.severity == "major" and graph.severity == "critical"
    assert [f.id for f in rank([graph, shapes])] == ["dynamic-shapes", "launch-bound"]
    small = priced("dynamic-shapes", 0.2)
    assert small.severity not in ("major", "critical")
    assert [f.id for f in rank([graph, small])] == ["launch-bound", "dynamic-shapes"]
