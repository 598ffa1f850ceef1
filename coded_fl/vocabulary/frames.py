"""Framed records: encoded bytes as the one 1-D uint8 array of a Flower record
(:func:`frame`, :func:`frame_npy`), and read back with every header checked before the payload
is touched (:func:`unframe`, :func:`read_frame`, :func:`read_npy_header`).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coded_fl.errors import RemoteProtocolError

__all__ = [
    "FRAME_ARRAY",
    "NPY_HEADER_LIMIT",
    "frame",
    "frame_npy",
    "read_frame",
    "read_npy_header",
    "unframe",
]

#: Name of the one uint8 array inside a framed record.
FRAME_ARRAY = "msg"


def frame(raw: bytes) -> np.ndarray:
    """Encoded bytes as the 1-D uint8 array that travels under :data:`FRAME_ARRAY` (Flower
    chunks large arrays like any model, so big uploads need nothing special).

    Parameters
    ----------
    raw
        The encoded message or packet.

    Returns
    -------
    numpy.ndarray
        A read-only uint8 view of ``raw``.
    """
    return np.frombuffer(raw, dtype=np.uint8)


def frame_npy(parts: Sequence[bytes | memoryview]) -> tuple[int, bytes]:
    """What ``np.save(frame(b"".join(parts)))`` writes, built with one copy of the payload.

    A Flower ``Array`` made from an ndarray serialises it with ``np.save`` (two more copies of
    the payload); an adapter that builds the ``Array`` from these bytes directly
    (``Array("uint8", (n,), "numpy.ndarray", data)``) sends the same thing.

    Parameters
    ----------
    parts
        The encoded message in pieces (:func:`coded_fl.secagg.messages.encode_parts`).

    Returns
    -------
    tuple[int, bytes]
        The payload's length n and the ``.npy`` bytes of the 1-D uint8 array.
    """
    n = sum(memoryview(p).nbytes for p in parts)
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": "|u1", "fortran_order": False, "shape": (n,)}
    )
    return n, b"".join([head.getvalue(), *parts])


def unframe(array: np.ndarray) -> bytes:
    """The bytes :func:`frame` made, after checking the array's type and shape.

    Parameters
    ----------
    array
        What arrived under :data:`FRAME_ARRAY`.

    Returns
    -------
    bytes
        The encoded message or packet.

    Raises
    ------
    RemoteProtocolError
        If ``array`` is not a 1-D uint8 array.
    """
    if not isinstance(array, np.ndarray) or array.dtype != np.uint8 or array.ndim != 1:
        raise RemoteProtocolError(f"'{FRAME_ARRAY}' must be a 1-D uint8 array")
    return array.tobytes()


def read_frame(content: Mapping[str, Any], key: str) -> bytes | None:
    """The framed bytes under ``key`` of a message's content, or None if there is no ``key``.

    Reads Flower's ``RecordDict``/``ArrayRecord``/``Array`` by their mapping interface and the
    Array's ``stype``, ``dtype``, ``shape`` and ``data``, so the core needs no Flower import.
    The Array's metadata and its npy header are checked before its payload is touched (a
    forged header could otherwise make numpy allocate whatever size it claims): a 1-D uint8
    array whose length is the payload's. Any failure to read is the sender's fault.

    Parameters
    ----------
    content
        A message's content (a Flower ``RecordDict``).
    key
        The record key, e.g. :data:`MSG_KEY`.

    Returns
    -------
    bytes | None

    Raises
    ------
    RemoteProtocolError
        If the record under ``key`` is not a framed record.
    """
    if key not in content:
        return None
    shape = f"an ArrayRecord holding one 1-D uint8 Array '{FRAME_ARRAY}'"
    try:
        record = content[key]
        if len(record) != 1:
            raise RemoteProtocolError(f"'{key}' must be {shape}, it holds {len(record)} items")
        array = record[FRAME_ARRAY]
        stype, dtype, dims, data = array.stype, array.dtype, tuple(array.shape), array.data
    except RemoteProtocolError:
        raise
    except Exception as exc:  # any failure to read a peer's record is the peer's fault
        raise RemoteProtocolError(
            f"'{key}' must be {shape} (reading it failed: {type(exc).__name__})"
        ) from None
    if stype != "numpy.ndarray" or dtype != "uint8" or not isinstance(data, bytes):
        raise RemoteProtocolError(f"'{key}' must be {shape}; got stype {stype!r}, dtype {dtype!r}")
    payload = _npy_payload(data)
    if payload is None or dims != (len(data) - payload,):
        raise RemoteProtocolError(
            f"'{key}' must be {shape}; its shape or npy header does not match its data"
        )
    return data[payload:]


#: The longest npy header read (a header of numeric arrays of any sensible rank fits).
NPY_HEADER_LIMIT = 4096


def read_npy_header(data: bytes) -> tuple[tuple[int, ...], bool, np.dtype[Any], int]:
    """(shape, Fortran order, dtype, payload offset) of ``np.save`` bytes, from the header alone
    (the payload is not read or copied).

    Parameters
    ----------
    data
        Bytes that should start with a version 1.0 or 2.0 npy header.

    Returns
    -------
    tuple[tuple[int, ...], bool, numpy.dtype, int]

    Raises
    ------
    ValueError
        If they do not: another version, a header numpy cannot read (whatever numpy raised), or
        one longer than :data:`NPY_HEADER_LIMIT` bytes.
    """
    fp = io.BytesIO(data[:NPY_HEADER_LIMIT])
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            read = np.lib.format.read_array_header_1_0
        elif version == (2, 0):
            read = np.lib.format.read_array_header_2_0
        else:
            raise ValueError(f"npy version {version} (1.0 and 2.0 are read)")
        shape, fortran, dtype = read(fp, max_header_size=NPY_HEADER_LIMIT)
    except Exception as exc:  # numpy raises ValueError, OSError, EOFError, SyntaxError...
        raise ValueError(f"not a readable npy header: {exc}") from None
    return tuple(int(x) for x in shape), bool(fortran), dtype, fp.tell()


def _npy_payload(data: bytes) -> int | None:
    """Where the payload of a 1-D uint8 array saved with ``np.save`` starts, or None if
    ``data`` is not one (read from the npy header alone)."""
    try:
        dims, _, dtype, start = read_npy_header(data)
    except ValueError:  # a header numpy cannot read, whatever the reason, is the peer's fault
        return None
    if dtype != np.dtype(np.uint8) or dims != (len(data) - start,):
        return None
    return start
