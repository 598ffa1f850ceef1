"""A unit's bytes: named arrays with a common first dimension as an uncompressed ``.npz``."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import numpy as np

from coded_fl.errors import InputError

__all__ = ["pack_examples", "unpack_examples"]


def pack_examples(arrays: Mapping[str, np.ndarray]) -> bytes:
    """One unit's bytes: the arrays (same first dimension) as an uncompressed ``.npz``.

    Parameters
    ----------
    arrays
        Name -> array (plain dtypes; the first dimension counts examples).

    Returns
    -------
    bytes

    Raises
    ------
    InputError
        If there are no arrays or their first dimensions differ.
    """
    sizes = {len(np.asarray(a)) for a in arrays.values()}
    if len(sizes) != 1:
        raise InputError(f"a unit needs arrays with one common first dimension, got {sizes}")
    buf = io.BytesIO()
    named: dict[str, Any] = {k: np.ascontiguousarray(v) for k, v in sorted(arrays.items())}
    np.savez(buf, **named)
    return buf.getvalue()


def unpack_examples(raw: bytes) -> dict[str, np.ndarray]:
    """The arrays of one unit (:func:`pack_examples`).

    Parameters
    ----------
    raw
        The unit's bytes.

    Returns
    -------
    dict of str to numpy.ndarray

    Raises
    ------
    InputError
        Not a ``.npz`` of plain arrays (object arrays, pickles are refused).
    """
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError) as exc:
        raise InputError(f"a unit is not a .npz of plain arrays: {exc}") from None
