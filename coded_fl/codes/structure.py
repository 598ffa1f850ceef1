"""What every gradient code is made of: sizes, placement, the matrix B and input validation.

:class:`CodeStructure` builds a code's placement and matrix from its construction hooks and
answers the facts (support, holders, coefficients, storage); it also validates silo ids and
field vectors for the operations :class:`~coded_fl.codes.base.GradientCode` adds on top
(encoding, decoding, the consistency checks). :func:`check_count` validates an int setting.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from coded_fl.errors import ConfigurationError, DecodingError, InputError
from coded_fl.field import PrimeField

__all__ = ["CodeStructure", "check_count"]


def check_count(name: str, value: object, *, minimum: int) -> int:
    """An int setting >= ``minimum`` (bool refused), else ConfigurationError naming it.

    Parameters
    ----------
    name
        The setting's name (for the message).
    value
        Its value.
    minimum
        The smallest value allowed.

    Returns
    -------
    int

    Raises
    ------
    ConfigurationError
        If ``value`` is not an int (bool included) or is below ``minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigurationError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ConfigurationError(f"{name}={value} must be >= {minimum}")
    return int(value)


class CodeStructure(ABC):
    """The placement, matrix and validation of a gradient code (the base of
    :class:`~coded_fl.codes.base.GradientCode`, which documents the attributes).

    Parameters
    ----------
    n, s, num_partitions, field
        As for :class:`~coded_fl.codes.base.GradientCode`.
    """

    def __init__(
        self,
        n: int,
        s: int,
        *,
        num_partitions: int | None = None,
        field: PrimeField | None = None,
    ) -> None:
        self.n = check_count("n", n, minimum=1)
        self.s = check_count("s", s, minimum=0)
        if self.s >= self.n:
            raise ConfigurationError(
                f"s={self.s} must be < n={self.n}: at least one reply is needed"
            )
        self.K = check_count(
            "num_partitions", self.n if num_partitions is None else num_partitions, minimum=1
        )
        if field is None:
            field = PrimeField()
        if not isinstance(field, PrimeField):
            raise ConfigurationError(f"field must be a PrimeField, got {type(field).__name__}")
        self.field = field
        holders = self._place()
        self._holders = tuple(tuple(sorted(h)) for h in holders)
        support: list[list[int]] = [[] for _ in range(self.n)]
        for j, hs in enumerate(self._holders):
            for i in hs:
                support[i].append(j)
        self._support = tuple(tuple(row) for row in support)
        matrix = np.ascontiguousarray(self._build_matrix(), dtype=np.int64)
        matrix.setflags(write=False)
        self._matrix = matrix
        # GradientCode's decoding vectors and parity checks, cached per survivor set
        self._vectors: OrderedDict[frozenset[int], np.ndarray] = OrderedDict()
        self._checks: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()

    # ------------------------------------------------------------------ construction hooks
    @abstractmethod
    def _place(self) -> Sequence[Sequence[int]]:
        """The holders of each partition (K lists of silo ids); validates the placement."""

    @abstractmethod
    def _build_matrix(self) -> np.ndarray:
        """B (n x K, canonical), zero outside the placement."""

    # ------------------------------------------------------------------ facts
    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, s={self.s}, K={self.K}, p={self.field.p})"

    @property
    def num_partitions(self) -> int:
        """K."""
        return self.K

    @property
    def matrix(self) -> np.ndarray:
        """B, n x K, ``int64`` canonical elements, read-only."""
        return self._matrix

    @property
    def min_replies(self) -> int:
        """Replies the server waits for: :math:`n - s`."""
        return self.n - self.s

    def support(self, silo: int) -> tuple[int, ...]:
        """The partitions silo ``silo`` holds, sorted.

        Parameters
        ----------
        silo
            The silo's index.

        Returns
        -------
        tuple[int, ...]
        """
        return self._support[self._silo(silo)]

    def holders(self, partition: int) -> tuple[int, ...]:
        """The silos holding ``partition``, sorted.

        Parameters
        ----------
        partition
            The partition's index.

        Returns
        -------
        tuple[int, ...]
        """
        if isinstance(partition, bool) or not isinstance(partition, (int, np.integer)):
            raise InputError(f"partition ids are ints, got {partition!r}")
        if not 0 <= partition < self.K:
            raise InputError(f"unknown partition {partition}: ids are 0..{self.K - 1}")
        return self._holders[int(partition)]

    def coefficients(self, silo: int) -> np.ndarray:
        """:math:`B_{i, \\text{support}(i)}`: the silo's encoding coefficients, aligned with
        :meth:`support` (what :func:`coded_fl.pipeline.encode_upload` takes).

        Parameters
        ----------
        silo
            The silo's index.

        Returns
        -------
        np.ndarray
        """
        i = self._silo(silo)
        return self._matrix[i, list(self._support[i])].copy()

    @property
    def storage(self) -> int:
        """Partitions held by the busiest silo."""
        return max(len(sp) for sp in self._support)

    @property
    def replication(self) -> int:
        """Holders of the least replicated partition (at least s + 1 for an exact code)."""
        return min(len(h) for h in self._holders)

    @property
    def storage_lower_bound(self) -> int:
        """:math:`\\lceil K r / n \\rceil` for replication r: K r partition copies over n silos.

        For an exact code :math:`r \\ge s + 1` is necessary (a partition with at most s holders
        is lost when they all straggle), so no exact code stores less on its busiest silo.
        """
        return math.ceil(self.K * self.replication / self.n)

    # ------------------------------------------------------------------ validation
    def _silo(self, silo: object) -> int:
        if isinstance(silo, bool) or not isinstance(silo, (int, np.integer)):
            raise InputError(f"silo ids are ints, got {silo!r}")
        if not 0 <= silo < self.n:
            raise InputError(f"unknown silo id {silo}: ids are 0..{self.n - 1}")
        return int(silo)

    def _distinct(self, survivors: Sequence[int]) -> tuple[int, ...]:
        ids = tuple(self._silo(i) for i in survivors)
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise InputError(f"duplicated replies from silo(s) {dup}")
        return ids

    def _survivors(self, survivors: Sequence[int]) -> tuple[int, ...]:
        ids = self._distinct(survivors)
        if len(ids) < self.min_replies:
            raise DecodingError(
                f"need at least n-s = {self.min_replies} replies (n={self.n}, s={self.s}), "
                f"got {len(ids)}"
            )
        return ids

    def _replies(
        self, replies: Mapping[int, torch.Tensor]
    ) -> tuple[tuple[int, ...], list[torch.Tensor]]:
        if not isinstance(replies, Mapping):
            raise InputError(f"replies must map silo id -> tensor, got {type(replies).__name__}")
        ids = self._survivors(list(replies))
        vectors = [replies[i] for i in ids]
        self._same_shape([(f"reply of silo {i}", v) for i, v in zip(ids, vectors, strict=True)])
        return ids, vectors

    @staticmethod
    def _same_shape(named: Sequence[tuple[str, torch.Tensor]]) -> None:
        first_name, first = named[0]
        for name, v in named:
            if not isinstance(v, torch.Tensor) or v.dtype != torch.uint32:
                got = v.dtype if isinstance(v, torch.Tensor) else type(v).__name__
                raise InputError(f"{name} must be a torch.uint32 field vector, got {got}")
            if v.shape != first.shape:
                raise InputError(
                    f"vector length mismatch: {name} has shape {tuple(v.shape)}, "
                    f"{first_name} has {tuple(first.shape)}"
                )
            if v.device != first.device:
                raise InputError(f"{name} is on {v.device}, {first_name} on {first.device}")

    def _validated(self, named: Sequence[tuple[str, torch.Tensor]]) -> None:
        for name, v in named:
            self.field.validate(v, name=name)
