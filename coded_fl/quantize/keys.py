"""Rounding keys: the public, per-partition keys of the stochastic-rounding hash.

:class:`RoundingKey` makes the uniforms of stochastic rounding a keyed counter-based hash of the
element index (:mod:`coded_fl.quantize`), so that every replica of a partition rounds the same
way on any device; :func:`as_numpy_keys` lays keys out for the fused CPU kernel.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from coded_fl.errors import InputError

__all__ = ["MAX_ELEMENTS", "RoundingKey", "as_numpy_keys"]

#: Largest index a rounding key covers; vectors are limited to this many elements.
MAX_ELEMENTS = 2**32


@dataclass(frozen=True)
class RoundingKey:
    """The key of the stochastic-rounding hash: two 32-bit words.

    Not secret: it only has to be the same on every replica of a partition and different
    between partitions and rounds. Derive it with :meth:`derive` from public context.
    """

    k0: int
    k1: int

    def __post_init__(self) -> None:
        for name in ("k0", "k1"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 0 <= v < 2**32:
                raise InputError(f"RoundingKey.{name} must be an int in [0, 2**32), got {v!r}")

    @classmethod
    def for_partition(cls, run_id: int | str, server_round: int, partition: int) -> RoundingKey:
        """The key every replica of ``partition`` uses in ``server_round`` of run ``run_id``.

        ``k0`` depends on (run, round) only, so the fused encoder hashes each index once for all
        the partitions a silo holds; ``k1`` adds the partition.

        Parameters
        ----------
        run_id
            The public run id (ProtocolConfig.seed_id).
        server_round
            The protocol round.
        partition
            The partition's index.

        Returns
        -------
        RoundingKey
        """
        k0 = cls._word(("round", run_id, server_round))
        k1 = cls._word(("partition", run_id, server_round, partition))
        return cls(k0, k1)

    @classmethod
    def derive(cls, *context: int | str | bytes) -> RoundingKey:
        """Key from any context tuple (both words depend on all of it).

        Parameters
        ----------
        *context
            Public parts (int, str or bytes).

        Returns
        -------
        RoundingKey
        """
        v = cls._word(context, digest_size=8)
        return cls(v & 0xFFFFFFFF, v >> 32)

    @staticmethod
    def _word(context: tuple[int | str | bytes, ...], digest_size: int = 4) -> int:
        """BLAKE2b over an unambiguous encoding (each part typed and length-prefixed)."""
        h = hashlib.blake2b(digest_size=digest_size, person=b"codedfl-round")
        for part in context:
            if isinstance(part, bool) or not isinstance(part, (int, str, bytes)):
                raise InputError(
                    f"context parts must be int, str or bytes, got {type(part).__name__}"
                )
            if isinstance(part, int):
                raw, tag = part.to_bytes(16, "little", signed=True), b"i"
            elif isinstance(part, str):
                raw, tag = part.encode(), b"s"
            else:
                raw, tag = part, b"b"
            h.update(tag + len(raw).to_bytes(4, "little") + raw)
        return int.from_bytes(h.digest(), "little")


def as_numpy_keys(keys: list[RoundingKey]) -> np.ndarray:
    """Keys as a (k, 2) ``int64`` array for the fused CPU kernel.

    Parameters
    ----------
    keys
        The rounding keys.

    Returns
    -------
    np.ndarray
    """
    return np.array([[k.k0, k.k1] for k in keys], dtype=np.int64).reshape(-1, 2)
