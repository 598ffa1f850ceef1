"""Data units: their identity, size, hash, and the padded layout the codes work on.

A unit is a file of bytes (a data partition, a shard of a dataset). Units of unequal sizes are
padded with zeros to one common padded size U, chosen so that a unit splits evenly into
``n_subfiles`` subfiles of ``n_pieces`` pieces each (``piece_size`` bytes, the size of every coded
message). Padding never reaches a silo's store: a decoded unit is cut back to its length and
checked against its SHA-256 before anyone sees it.

>>> m = UnitManifest.from_data({"a": b"hello", "b": b"hi"})
>>> lay = Layout.for_manifest(m, n_subfiles=3, n_pieces=2)
>>> lay.piece_size, lay.unit_size, len(lay.pad(b"hi"))
(1, 6, 6)
>>> m.spec("a").verify(b"hello")
True
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from coded_fl.errors import ConfigurationError, InputError

__all__ = ["Layout", "UnitId", "UnitManifest", "UnitSpec", "digest"]

#: Units are named by strings or ints (a partition index, a file name).
UnitId = str | int


def digest(data: bytes | bytearray | memoryview | np.ndarray) -> bytes:
    """SHA-256 of a byte buffer.

    Parameters
    ----------
    data
        The bytes; a numpy array is hashed as its raw bytes in C order (any dtype).

    Returns
    -------
    bytes
        The 32-byte digest.

    Examples
    --------
    >>> digest(b"abc") == digest(np.frombuffer(b"abc", dtype=np.uint8))
    True
    """
    if isinstance(data, np.ndarray):
        return hashlib.sha256(np.ascontiguousarray(data).view(np.uint8).data).digest()
    return hashlib.sha256(data).digest()


@dataclass(frozen=True)
class UnitSpec:
    """What every silo agrees on about one unit: its id, true length and SHA-256."""

    unit_id: UnitId
    length: int
    sha256: bytes

    def __post_init__(self) -> None:
        if self.length < 0 or len(self.sha256) != 32:
            raise InputError(f"unit {self.unit_id!r}: length must be >= 0 and sha256 32 bytes")

    def verify(self, data: bytes | bytearray | memoryview) -> bool:
        """True if ``data`` is exactly this unit (length and hash).

        Parameters
        ----------
        data
            The bytes to check.

        Returns
        -------
        bool
        """
        return len(data) == self.length and digest(data) == self.sha256


@dataclass(frozen=True)
class UnitManifest:
    """The units of one shuffle, in a canonical order (sorted by ``(type name, id)``)."""

    specs: tuple[UnitSpec, ...]

    def __post_init__(self) -> None:
        ids = [s.unit_id for s in self.specs]
        if len(set(ids)) != len(ids):
            raise InputError("unit ids must be distinct")
        if list(self.specs) != sorted(self.specs, key=lambda s: _key(s.unit_id)):
            object.__setattr__(
                self, "specs", tuple(sorted(self.specs, key=lambda s: _key(s.unit_id)))
            )
        object.__setattr__(self, "_index", {s.unit_id: i for i, s in enumerate(self.specs)})

    @classmethod
    def from_data(cls, data: Mapping[UnitId, bytes]) -> UnitManifest:
        """Manifest of units given as bytes (hashes computed here).

        Parameters
        ----------
        data
            Unit -> its bytes.

        Returns
        -------
        UnitManifest
        """
        return cls(tuple(UnitSpec(u, len(b), digest(b)) for u, b in data.items()))

    def __len__(self) -> int:
        return len(self.specs)

    def __iter__(self) -> Iterator[UnitSpec]:
        return iter(self.specs)

    @property
    def ids(self) -> tuple[UnitId, ...]:
        """The unit ids in canonical order (unit n of a plan is ``ids[n]``)."""
        return tuple(s.unit_id for s in self.specs)

    def index(self, unit_id: UnitId) -> int:
        """Position of a unit in the canonical order; InputError naming it if unknown.

        Parameters
        ----------
        unit_id
            The unit.

        Returns
        -------
        int
        """
        try:
            return int(self._index[unit_id])  # type: ignore[attr-defined]
        except KeyError:
            raise InputError(f"unit {unit_id!r} is not in the manifest") from None

    def spec(self, unit_id: UnitId) -> UnitSpec:
        """The spec (length, SHA-256) of a unit.

        Parameters
        ----------
        unit_id
            The unit.

        Returns
        -------
        UnitSpec
            Its entry in the manifest.

        Raises
        ------
        InputError
            If the unit is not in the manifest.
        """
        return self.specs[self.index(unit_id)]

    def fingerprint(self) -> bytes:
        """SHA-256 over ids, lengths and hashes: two silos with equal fingerprints agree."""
        h = hashlib.sha256(b"codedfl-manifest-v1")
        for s in self.specs:
            uid = repr(s.unit_id).encode()
            h.update(len(uid).to_bytes(4, "big") + uid + s.length.to_bytes(8, "big") + s.sha256)
        return h.digest()


def _key(unit_id: UnitId) -> tuple[str, str | int]:
    return (type(unit_id).__name__, unit_id)


@dataclass(frozen=True)
class Layout:
    """How a padded unit of ``unit_size`` bytes splits into subfiles and pieces.

    Byte range of piece p of subfile j: ``(j * n_pieces + p) * piece_size`` onwards.
    """

    n_subfiles: int
    n_pieces: int
    piece_size: int

    def __post_init__(self) -> None:
        if self.n_subfiles < 1 or self.n_pieces < 1 or self.piece_size < 1:
            raise ConfigurationError("n_subfiles, n_pieces and piece_size must all be >= 1")

    @classmethod
    def for_manifest(
        cls, manifest: UnitManifest, *, n_subfiles: int, n_pieces: int, subfile_align: int = 1
    ) -> Layout:
        """The smallest layout that fits the longest unit (at least one byte per piece) whose
        subfile size is a multiple of ``subfile_align`` (and of ``n_pieces``).

        The planner aligns subfiles to t, so the centralized (1 piece) and decentralized
        (t pieces) layouts of the same units at the same level cut the units at the same
        places: a silo's cache serves both settings.

        Parameters
        ----------
        manifest
            The units.
        n_subfiles
            Subfiles per unit.
        n_pieces
            Pieces per subfile.
        subfile_align
            The subfile size's required multiple.

        Returns
        -------
        Layout
        """
        if n_subfiles < 1 or n_pieces < 1 or subfile_align < 1:
            raise ConfigurationError("n_subfiles, n_pieces and subfile_align must all be >= 1")
        longest = max((s.length for s in manifest), default=0)
        step = math.lcm(n_pieces, subfile_align)
        subfile = max(1, -(-longest // n_subfiles))
        subfile = -(-subfile // step) * step
        return cls(n_subfiles, n_pieces, subfile // n_pieces)

    @property
    def subfile_size(self) -> int:
        """Bytes per subfile: ``n_pieces * piece_size``."""
        return self.n_pieces * self.piece_size

    @property
    def unit_size(self) -> int:
        """The padded unit size U in bytes: ``n_subfiles * subfile_size``."""
        return self.n_subfiles * self.subfile_size

    @property
    def segments_per_unit(self) -> int:
        """Segments (rows of ``piece_size`` bytes) per unit: ``n_subfiles * n_pieces``."""
        return self.n_subfiles * self.n_pieces

    def pad(self, data: bytes | bytearray | memoryview) -> np.ndarray:
        """``data`` zero-padded to ``unit_size`` as a fresh uint8 array.

        Parameters
        ----------
        data
            A unit's bytes.

        Returns
        -------
        np.ndarray
        """
        if len(data) > self.unit_size:
            raise InputError(f"a unit of {len(data)} bytes exceeds the layout's {self.unit_size}")
        out = np.zeros(self.unit_size, dtype=np.uint8)
        out[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        return out

    def padding_overhead(self, manifest: UnitManifest) -> float:
        """Padded bytes over true bytes, minus one (0.0 when no unit is padded).

        Parameters
        ----------
        manifest
            The units.

        Returns
        -------
        float
        """
        true = sum(s.length for s in manifest)
        return len(manifest) * self.unit_size / true - 1.0 if true else 0.0
