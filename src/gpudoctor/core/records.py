"""Records as dicts. The analysis's and the report's records are msgspec Structs: a Struct class is
made in C, where ``@dataclass`` compiles each class's methods as the module is imported
(benchmarks/BENCHMARKS-loading.md, "Records made in C")."""

from __future__ import annotations

from typing import Any

import msgspec


def as_dict(record: msgspec.Struct) -> dict[str, Any]:
    """``record``'s fields by name, in their order, with the records, lists, tuples and dicts
    inside them made plain too (what ``dataclasses.asdict`` does for a dataclass)."""
    return {name: _plain(getattr(record, name)) for name in record.__struct_fields__}


def _plain(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        return as_dict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        items = [_plain(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # a namedtuple
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if hasattr(type(value), "__dataclass_fields__"):  # a record of the kind still a dataclass
        import dataclasses

        return dataclasses.asdict(value)
    return value
