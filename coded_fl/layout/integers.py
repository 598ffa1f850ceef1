"""The model's integer arrays, summed exactly: which arrays they are, their values, and the
balanced base-:data:`INTEGER_BASE` digits they travel as (:mod:`coded_fl.layout`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coded_fl.errors import InputError
from coded_fl.layout.arrays import _numpy

__all__ = [
    "INTEGER_BASE",
    "INTEGER_DIGITS",
    "INTEGER_KINDS",
    "MAX_INTEGER_WEIGHT",
    "element_count",
    "integer_digits",
    "integer_names",
    "integer_values",
    "integers_from_digits",
]

#: B: integer model elements travel as balanced base-B digits, each in [-B/2, B/2).
INTEGER_BASE = 256

#: R: digits per integer element: R balanced base-256 digits (each in [-128, 127]) hold every
#: integer in [-128 (B^R - 1) / 255, 127 (B^R - 1) / 255], which contains
#: :math:`\pm 2^{38} \cdot 2^{64}` (a ``num-examples`` below :data:`MAX_INTEGER_WEIGHT` times
#: any int64 or uint64 value).
INTEGER_DIGITS = 13

#: The ``num-examples`` a partition may report when the model has integer arrays: whole numbers
#: below 2^38 (the digits then hold every product).
MAX_INTEGER_WEIGHT = 2**38

#: Dtype kinds summed exactly as integers (signed, unsigned, bool).
INTEGER_KINDS = "iub"


def integer_names(arrays: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the integer arrays (dtype kind ``i``, ``u`` or ``b``), in key order.

    Read from the arrays' metadata. Integer arrays are averaged exactly (module docstring);
    arrays of any other kind than these and floating point are refused.

    >>> integer_names({"w": np.zeros(2, np.float32), "bn.num_batches_tracked": np.int64(3)})
    ('bn.num_batches_tracked',)

    Parameters
    ----------
    arrays
        Named arrays (Flower ``ArrayRecord`` or NumPy arrays).

    Returns
    -------
    tuple[str, ...]

    Raises
    ------
    InputError
        If an array is neither integer nor floating point (complex, string, object).
    """
    out = []
    for name, arr in arrays.items():
        kind = np.dtype(arr.dtype).kind
        if kind in INTEGER_KINDS:
            out.append(name)
        elif kind != "f":
            raise InputError(
                f"array '{name}' has dtype {arr.dtype}: coded-fl averages floating point and "
                "integer arrays only"
            )
    return tuple(out)


def element_count(arrays: Mapping[str, Any], names: Sequence[str]) -> int:
    """The number of elements of the arrays ``names`` (read from their shapes): the e of
    :attr:`UpdateLayout.integer_size`.

    >>> element_count({"a": np.zeros((2, 3)), "b": np.int64(1)}, ["a", "b"])
    7

    Parameters
    ----------
    arrays
        Named arrays (Flower ``ArrayRecord`` or NumPy arrays).
    names
        The arrays to count.

    Returns
    -------
    int
    """
    return sum(math.prod(tuple(arrays[name].shape)) for name in names)


def integer_values(arrays: Mapping[str, Any], names: Sequence[str]) -> np.ndarray:
    """The elements of the integer arrays ``names``, flat, in that order.

    Parameters
    ----------
    arrays
        Named arrays holding every name of ``names``.
    names
        The integer arrays (:attr:`UpdateLayout.integer_names`).

    Returns
    -------
    numpy.ndarray
        int64, or object (Python ints) where a uint64 value exceeds int64.

    Raises
    ------
    InputError
        If an array is missing or its dtype is not an integer (or bool) dtype.
    """
    parts = []
    for name in names:
        if name not in arrays:
            raise InputError(f"integer array '{name}' is missing from the update")
        a = _numpy(arrays[name])
        if a.dtype.kind not in INTEGER_KINDS:
            raise InputError(
                f"array '{name}' has dtype {a.dtype} where the run's model has an integer "
                "array: a train function must return it with an integer dtype (as "
                "torch's state_dict() does for BatchNorm's num_batches_tracked)"
            )
        parts.append(a.reshape(-1))
    if any(p.dtype == np.uint64 for p in parts):
        return np.concatenate([p.astype(object) for p in parts])
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def integer_digits(values: np.ndarray) -> np.ndarray:
    """Balanced base-:data:`INTEGER_BASE` digits, least significant first.

    >>> integer_digits(np.array([300, -1, 2**64], dtype=object))[:, :3].tolist()
    [[44, 1, 0], [-1, 0, 0], [0, 0, 0]]

    Parameters
    ----------
    values
        Integers (any integer dtype, or object holding Python ints) with
        :math:`|v| \\le (B^R - 1) / 2`.

    Returns
    -------
    numpy.ndarray
        int64, shape ``(values.size, INTEGER_DIGITS)``, each digit in [-B/2, B/2), with
        :math:`v = \\sum_r d_r B^r`.

    Raises
    ------
    InputError
        If a value needs more than :data:`INTEGER_DIGITS` digits.
    """
    v = np.asarray(values).reshape(-1).astype(object)
    half, base = INTEGER_BASE // 2, INTEGER_BASE
    out = np.empty((v.size, INTEGER_DIGITS), dtype=np.int64)
    for r in range(INTEGER_DIGITS):
        d = (v + half) % base - half  # Python ints: % is floored, d in [-B/2, B/2)
        out[:, r] = d.astype(np.int64)
        v = (v - d) // base
    if v.size and np.any(v != 0):
        raise InputError(
            f"an integer value times num-examples needs more than {INTEGER_DIGITS} base-"
            f"{INTEGER_BASE} digits"
        )
    return out


def integers_from_digits(digits: np.ndarray) -> np.ndarray:
    """Python ints :math:`\\sum_r d_r B^r` of rows of digits (any integers, e.g. sums of
    digits over partitions): the inverse of :func:`integer_digits`.

    >>> integers_from_digits(integer_digits(np.array([300, -1], dtype=object))).tolist()
    [300, -1]

    Parameters
    ----------
    digits
        Shape ``(rows, R)``, least significant first.

    Returns
    -------
    numpy.ndarray
        object, one Python int per row.
    """
    rows = np.asarray(digits).astype(object)
    out = np.zeros(rows.shape[0], dtype=object)
    for r in reversed(range(rows.shape[1])):
        out = out * INTEGER_BASE + rows[:, r]
    return out
