"""Reading a node's config values (``codedfl.*`` keys) for
:class:`coded_fl.secagg.policy.ClientPolicy`: numbers, integers and flags as Flower's node
config or ``--node-config`` text gives them, and the identity and trust files, read again only
when they change. Each error names the key."""

from __future__ import annotations

import functools
import math
import os
from typing import Any

from coded_fl.errors import ConfigurationError
from coded_fl.secagg.identity import (
    IDENTITY_KEY_SETTING,
    TRUSTED_KEYS_SETTING,
    load_identity,
)

__all__ = ["cached", "flag", "integer", "number"]


def cached(load: Any, raw: object) -> Any:
    """``load(path)``, read again only when the path's files change (the mod builds the
    policy for every message).

    Parameters
    ----------
    load
        :func:`~coded_fl.secagg.identity.load_identity` or ``load_trusted``.
    raw
        The node config's value (a path).

    Returns
    -------
    Any
        What ``load`` returns.
    """
    key = IDENTITY_KEY_SETTING if load is load_identity else TRUSTED_KEYS_SETTING
    if not isinstance(raw, str) or not raw:
        raise ConfigurationError(f"node config {key} must be a path (a string)")
    try:
        st = os.stat(raw)
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError as exc:
        raise ConfigurationError(
            f"node config {key}: cannot read {raw}: {type(exc).__name__}"
        ) from None
    return _load_cached(load, raw, stamp)


@functools.lru_cache(maxsize=16)
def _load_cached(load: Any, path: str, stamp: tuple[int, int, int]) -> Any:
    return load(path)


def flag(raw: object, key: str) -> bool:
    """A node-config boolean: a bool, or ``true``/``false`` (any case), ``1``/``0``.

    Parameters
    ----------
    raw
        The node config's value.
    key
        Its key (named in the error).

    Returns
    -------
    bool

    Raises
    ------
    ConfigurationError
        If the value is not one.
    """
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise ConfigurationError(f"node config {key}={raw!r}: expected true or false")


def number(raw: object, key: str) -> float:
    """A node-config number >= 0 (an int, a float or their text; not a bool).

    Parameters
    ----------
    raw
        The node config's value.
    key
        Its key (named in the error).

    Returns
    -------
    float

    Raises
    ------
    ConfigurationError
        If the value is not one.
    """
    try:
        if isinstance(raw, bool):
            raise ValueError
        value = float(str(raw))
    except ValueError:
        raise ConfigurationError(f"node config {key}={raw!r}: expected a number") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"node config {key}={raw!r}: expected a finite number >= 0")
    return value


def integer(raw: object, key: str) -> int:
    """A node-config integer >= 0 (an int or its text).

    Parameters
    ----------
    raw
        The node config's value.
    key
        Its key (named in the error).

    Returns
    -------
    int

    Raises
    ------
    ConfigurationError
        If the value is not one.
    """
    try:
        value = int(str(raw))
    except ValueError:
        raise ConfigurationError(f"node config {key}={raw!r}: expected an integer") from None
    if value < 0:
        raise ConfigurationError(f"node config {key}={raw!r}: expected an integer >= 0")
    return value
