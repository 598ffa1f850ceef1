"""The bounds-checked readers of a shuffle packet's JSON fields and the unit-id check, shared
by the job, the codecs of what packets carry and the packet decoder (each raises
:class:`~coded_fl.errors.RemoteProtocolError` for a missing or mistyped field)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coded_fl.errors import InputError, RemoteProtocolError
from coded_fl.shuffling.plan.units import UnitId

__all__: list[str] = []


def _check_unit_id(u: object) -> UnitId:
    if isinstance(u, bool) or not isinstance(u, (str, int)):
        raise InputError(f"unit ids must be str or int, got {u!r}")
    return u


def _typed(d: Mapping[str, Any], key: str, kind: type) -> Any:
    v = d[key]
    if kind is int and isinstance(v, bool):
        raise RemoteProtocolError(f"field {key!r} must be an integer")
    if not isinstance(v, kind):
        raise RemoteProtocolError(f"field {key!r} must be {kind.__name__}")
    return v


def _int_list(v: Any) -> list[int]:
    if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
        raise RemoteProtocolError("expected a list of integers")
    return list(v)


def _unit_list(d: Mapping[str, Any], key: str) -> list[UnitId]:
    v = _typed(d, key, list)
    try:
        return [_check_unit_id(u) for u in v]
    except InputError as exc:
        raise RemoteProtocolError(str(exc)) from None


def _opt_int(d: Mapping[str, Any], key: str) -> int | None:
    return None if d.get(key) is None else _typed(d, key, int)
