"""The shared vocabulary, on the ground floor: the types and figures every layer speaks.

Nothing here imports a gpudoctor module above it (only ``gpudoctor.errors``), so any layer may
import from here without closing a cycle (the contracts in pyproject.toml, tests/test_layering.py).
"""
