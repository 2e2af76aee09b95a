"""The checks of the tuning records' fields.

Every record of :mod:`mdband.kernels.tuning` checks its fields in ``__post_init__`` with these
(so a bad value in :func:`~mdband.kernels.tuning.override` fails before anything changes): a
ValueError naming the record, the field, what it must be and the value it got.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType


def check(ok: bool, record: object, name: str, value: object, want: str) -> None:
    if not ok:
        raise ValueError(f"{type(record).__name__}.{name} must be {want}, got {value!r}")


def power_of_two(record, *names: str, allow_none: bool = False) -> None:
    for name in names:
        value = getattr(record, name)
        if allow_none and value is None:
            continue
        ok = type(value) is int and value >= 1 and value & (value - 1) == 0
        check(ok, record, name, value, "a power of two" + (" or None" if allow_none else ""))


def at_least_one(record, *names: str) -> None:
    for name in names:
        value = getattr(record, name)
        check(type(value) is int and value >= 1, record, name, value, "an int ≥ 1")


def choice(record, name: str, choices: tuple) -> None:
    value = getattr(record, name)
    check(value in choices, record, name, value, f"one of {choices}")


def instances(record, name: str, values, cls: type) -> None:
    for value in values:
        check(isinstance(value, cls), record, name, value, f"{cls.__name__} values")


def frozen(record, name: str, mapping) -> MappingProxyType:
    """Return a read-only copy of a mapping field (stored back on the frozen record)."""
    check(isinstance(mapping, Mapping), record, name, mapping, "a mapping")
    proxy = MappingProxyType(dict(mapping))
    object.__setattr__(record, name, proxy)
    return proxy
