"""Every rule, by id: the product's vocabulary, found by looking through this package for the
modules that define ``RULE``. ``find`` runs them; ``rank`` orders findings (rules/calibrate.py's
``price`` prices and ranks them for a report, once)."""

from __future__ import annotations

import importlib
import pkgutil

import gpudoctor.rules as _package
from gpudoctor.analysis import Analysis
from gpudoctor.core.finding import Finding
from gpudoctor.errors import InputError
from gpudoctor.rules.base import Rule
from gpudoctor.trace.model import Trace


def discover() -> dict[str, Rule]:
    """Every module of this package that defines ``RULE``, by id, in the rules' declared order."""
    found: list[Rule] = []
    for info in pkgutil.iter_modules(_package.__path__):
        if info.name == "registry" or info.ispkg:
            continue
        rule = getattr(importlib.import_module(f"{_package.__name__}.{info.name}"), "RULE", None)
        if isinstance(rule, Rule):
            found.append(rule)
    found.sort(key=lambda r: (r.order, r.id))
    rules: dict[str, Rule] = {}
    for rule in found:
        if rule.id in rules:
            raise ValueError(f"two rules declare the id {rule.id!r}")
        rules[rule.id] = rule
    return rules


RULES: dict[str, Rule] = discover()

# The rules priced from the card's peak rates (its roofs, its HBM rate): on a card with no
# ceilings (hardware/ceilings.py ``unavailable``) they do not run, rather than price from made-up
# peaks. tests/test_unknown_gpu.py checks that every rule reading ``a.ceilings`` is listed here
# (pageable-copy reads only the host link, which keeps its Gen4 rate).
PEAK_PRICED = ("fp32-matmul", "small-gemm", "misaligned-gemm", "naive-attention",
               "unfused-elementwise", "optimizer-loop", "per-sample-loop")

_SEVERITY_ORDER = {"critical": 0, "major": 1, "minor": 2, "info": 3}

# A finding whose fix cannot be applied before another's comes after it, whatever its saving
# (each rule declares its ``blocked_by``): a CUDA graph (launch-bound's first fix) cannot capture
# a step that synchronizes with the host. Only a blocker that matters (major or critical) holds
# the other back.
_BLOCKING_SEVERITIES = ("critical", "major")


# Savings within this many ms are a tie, broken by the larger saving in the profiled window: two
# findings capped at the same bound (no fix removes more idle than the unprofiled step has beyond
# the GPU's work) can price alike to the microsecond (benchmarks/BENCHMARKS-twins.md "Evidence moved
# from the source: rule pricing", ties).
TIE_MS = 0.01


def _profiled_saving(f: Finding) -> float:
    return float(f.evidence.numbers.get("saving_in_profiled_trace_ms", f.saving_ms))


def rank(findings: list[Finding]) -> list[Finding]:
    """Largest saving first (within TIE_MS: severity, then the saving in the profiled window,
    break ties), then each blocked finding after its blockers."""
    ordered = sorted(findings,
                     key=lambda f: (-round(f.saving_ms / TIE_MS), _SEVERITY_ORDER[f.severity],
                                              -_profiled_saving(f), f.id))
    for blocked, rule in RULES.items():
        blockers = rule.blocked_by
        if not blockers:
            continue
        ids = [f.id for f in ordered]
        if blocked not in ids:
            continue
        last_blocker = max(
            (i for i, f in enumerate(ordered) if f.id in blockers and f.severity in _BLOCKING_SEVERITIES), default=-1
        )
        here = ids.index(blocked)
        if last_blocker > here:
            ordered.insert(last_blocker, ordered.pop(here))
    return ordered


def get_rule(rule_id: str) -> Rule:
    try:
        return RULES[rule_id]
    except KeyError:
        raise InputError(f"unknown rule {rule_id!r}; known rules: {', '.join(RULES)}") from None


def runs_on(rule: Rule, analysis: Analysis) -> bool:
    """Whether ``rule`` runs on this analysis: the trace has what it needs, and a card with
    ceilings where it prices from the peaks."""
    return not analysis.trace.capabilities.lacks(rule.needs) and (
        analysis.ceilings.available or rule.id not in PEAK_PRICED)


def find(analysis: Analysis, rules: dict[str, Rule] | None = None) -> list[Finding]:
    """Findings of every rule the trace has the data for, as each rule priced it, in rule order
    (unranked). A rule whose ``needs`` the trace lacks does not run (see ``skipped_rules``), nor
    one of ``PEAK_PRICED`` when the card has no ceilings."""
    findings = []
    for rule in (rules or RULES).values():
        if not runs_on(rule, analysis):
            continue
        finding = rule.check(analysis)
        if finding is not None:
            findings.append(finding)
    return findings


def run_rules(analysis: Analysis, rules: dict[str, Rule] | None = None) -> list[Finding]:
    """``find``, largest saving first (severity breaks ties), priced against the profiled step."""
    return rank(find(analysis, rules))


def skipped_rules(trace: Trace, rules: dict[str, Rule] | None = None) -> dict[str, list[str]]:
    """need -> ids of the rules that need what the trace lacks (a rule under each need it lacks)."""
    skipped: dict[str, list[str]] = {}
    for rule in (rules or RULES).values():
        for need in trace.capabilities.lacks(rule.needs):
            skipped.setdefault(need, []).append(rule.id)
    return skipped
