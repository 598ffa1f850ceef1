"""Named arrays: reading a model's arrays (Flower's ``ArrayRecord`` or a dict of NumPy arrays)
without importing Flower.

:func:`flatten` turns the floating point arrays into one vector (reading ``np.save`` bytes in
place where it can), :func:`npy_header` reads an array's shape and dtype from its header, and
:func:`array_layout` / :func:`check_same_layout` compare two records' names, shapes and dtypes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from coded_fl.errors import InputError
from coded_fl.vocabulary import read_npy_header

__all__ = ["ArrayLayout", "array_layout", "check_same_layout", "flatten", "npy_header"]

# ----------------------------------------------------------------------------- named arrays
ArrayLayout = tuple[tuple[str, tuple[int, ...], str], ...]


def _numpy(array: Any) -> np.ndarray:
    """The array's values without a copy where that is possible.

    A Flower ``Array`` holds ``np.save`` bytes; its ``numpy()`` copies them out through a file
    object. For a C-ordered numeric array the values are read in place instead
    (``np.frombuffer`` past the header: read-only, no copy); anything else takes ``numpy()``.
    """
    if isinstance(array, np.ndarray):
        return array
    data = getattr(array, "data", None)
    if getattr(array, "stype", None) == "numpy.ndarray" and isinstance(data, bytes):
        view = _npy_view(data)
        if view is not None:
            return view
    return array.numpy()


def _floating(name: str, array: Any) -> np.ndarray:
    """The array's values, flat (a view where possible); refused unless floating point."""
    a = _numpy(array)
    if not np.issubdtype(a.dtype, np.floating):
        raise InputError(
            f"array '{name}' has dtype {a.dtype} where the run's model has a floating point "
            "array: a train function must return each array with the kind of dtype (integer "
            "or floating point) it has in the model the run started with"
        )
    return a.reshape(-1)


def _npy_view(data: bytes) -> np.ndarray | None:
    """A read-only view of ``np.save`` bytes (None unless C-ordered, numeric and complete)."""
    try:
        shape, fortran, dtype, offset = read_npy_header(data)
    except ValueError:
        return None
    if fortran or dtype.hasobject or dtype.kind not in "fiu":
        return None
    count = math.prod(shape)
    if len(data) != offset + count * dtype.itemsize:
        return None
    return np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)


def flatten(arrays: Mapping[str, Any], *, integers: Sequence[str] = ()) -> torch.Tensor:
    """All floating point arrays of a record, in key order, as one float32 vector.

    Parameters
    ----------
    arrays
        Named arrays: NumPy arrays, or objects with a ``numpy()`` method (Flower ``Array``).
    integers
        The names of the model's integer arrays (:func:`integer_names` of the run's initial
        model): left out, whatever their dtype here (Flower's FedAvg turns them into float64).

    Returns
    -------
    torch.Tensor
        float32, the arrays' elements one after the other.

    Raises
    ------
    InputError
        If an array not named in ``integers`` is not floating point, or there is none.
    """
    parts = [_floating(name, arr) for name, arr in arrays.items() if name not in integers]
    if not parts:
        raise InputError("the ArrayRecord is empty: nothing to aggregate")
    return torch.from_numpy(np.concatenate(parts, dtype=np.float32))  # one copy, writable


def npy_header(data: bytes) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """(shape, dtype) of an array serialised with ``np.save``, read from its header only.

    Flower's legacy ``Parameters`` carry such bytes without metadata; reading the header lets
    an adapter label them (name, shape, dtype) without deserialising and serialising the data.

    >>> import io
    >>> buf = io.BytesIO(); np.save(buf, np.zeros((2, 3), np.float32))
    >>> npy_header(buf.getvalue())
    ((2, 3), dtype('float32'))

    Parameters
    ----------
    data
        The ``.npy`` bytes.

    Returns
    -------
    tuple[tuple[int, ...], numpy.dtype]

    Raises
    ------
    InputError
        If the bytes are not a ``.npy`` array (or hold a Fortran-ordered or object array).
    """
    try:
        shape, fortran, dtype, _ = read_npy_header(data)
    except ValueError as exc:
        raise InputError(f"not a NumPy .npy array: {exc}") from None
    if fortran or dtype.hasobject:
        raise InputError("a Fortran-ordered or object .npy array: send C-ordered numbers")
    return shape, dtype


def array_layout(arrays: Mapping[str, Any]) -> ArrayLayout:
    """(name, shape, dtype) of every array, in order: what must match between two records.

    Read from the arrays' metadata (``shape``, ``dtype``); nothing is deserialised.

    Parameters
    ----------
    arrays
        Named arrays (Flower ``ArrayRecord`` or a dict of NumPy arrays).

    Returns
    -------
    tuple[tuple[str, tuple[int, ...], str], ...]
    """
    return tuple((name, tuple(arr.shape), str(arr.dtype)) for name, arr in arrays.items())


def check_same_layout(
    got: Mapping[str, Any],
    expected: Mapping[str, Any],
    *,
    who: str,
    integers: Sequence[str] = (),
) -> None:
    """Refuse a record whose arrays differ from ``expected`` in name, shape or dtype.

    Parameters
    ----------
    got, expected
        Named arrays.
    who
        Who produced ``got`` (for the message).
    integers
        The model's integer arrays: their dtype in ``expected`` may be float64 (Flower's
        FedAvg averages an integer array to float64) while ``got`` has an integer dtype
        (checked by :func:`integer_values`); only their names and shapes must match.

    Raises
    ------
    InputError
        Naming ``who`` and both layouts.
    """

    def lay(arrays: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...], str]]:
        return [(n, s, "int" if n in integers else t) for n, s, t in array_layout(arrays)]

    if lay(got) != lay(expected):
        raise InputError(
            f"{who} returned arrays whose names/shapes/dtypes differ from the model it received: "
            f"{_describe(array_layout(got))} vs {_describe(array_layout(expected))}"
        )


def _describe(lay: Sequence[tuple[str, tuple[int, ...], str]]) -> str:
    shown = ", ".join(f"{n}{list(s)}" for n, s, _ in lay[:4])
    return f"[{shown}{', ...' if len(lay) > 4 else ''}]"
