"""The gradient-code interface over GF(p): placement, encoding, decoding vectors, decoding.

A gradient code for n silos and K partitions is an n x K matrix B over GF(p). Silo i holds the
partitions in its *support* (the nonzero entries of row i) and replies with the coded
combination :math:`y_i = \\sum_j B_{ij} g_j` of its partial vectors. From the replies of a
survivor set S with :math:`|S| \\ge n - s` the server forms :math:`\\sum_{i \\in S} a_i y_i`
with :math:`a^T B_S = 1^T`, which is exactly :math:`\\sum_j g_j`: no rounding, no conditioning.

Codes are deterministic and public: anyone holding the same parameters recomputes the same
:math:`B` and the same :math:`a` for a given S (a client can check the weights a server asks
for). Decoding vectors are cached per survivor set.

Weighted sums (FedAvg): a silo multiplies each partial update by its partition's weight before
quantizing and appends the weight as one extra coordinate (:mod:`coded_fl.layout`); the
decoded sum then carries :math:`\\sum_j w_j u_j` and :math:`\\sum_j w_j` and nothing in the code
changes.

>>> from coded_fl.codes import make_code
>>> code = make_code(4, 1)  # 4 silos, any 3 replies suffice
>>> code.support(0), code.min_replies
((0, 1), 3)
>>> F = code.field
>>> g = [F.element([j, 10 * j]) for j in range(4)]  # partition j's vector
>>> replies = {i: code.encode(i, [g[j] for j in code.support(i)]) for i in (0, 2, 3)}
>>> code.decode(replies).tolist()  # silo 1 straggled
[6, 60]
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import torch

from coded_fl.codes.consistency import check_replies
from coded_fl.errors import ConfigurationError, DecodingError, InputError
from coded_fl.field import PrimeField
from coded_fl.linalg import left_null_space

__all__ = ["GradientCode", "check_count"]

#: Survivor sets whose decoding vectors (and parity checks) are kept, most recent first.
CACHE_SIZE = 4096


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


class GradientCode(ABC):
    """A gradient code over GF(p) for n silos, K partitions and s stragglers.

    Parameters
    ----------
    n
        Number of silos (rows of B), :math:`n \\ge 1`.
    s
        Stragglers tolerated, :math:`0 \\le s < n`: any :math:`n - s` replies decode.
    num_partitions
        K, the number of data partitions (columns of B); default n.
    field
        The field; default GF(2^31 - 1).

    Attributes
    ----------
    n, K, s, field
        As above (``K`` is ``num_partitions``).
    exact
        True when every survivor set of at least :attr:`min_replies` silos decodes exactly.
    """

    exact: ClassVar[bool] = True
    #: Short name used by :func:`coded_fl.codes.make_code` and in messages.
    kind: ClassVar[str] = "abstract"

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
        self._vectors: OrderedDict[frozenset[int], np.ndarray] = OrderedDict()
        self._checks: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()

    # ------------------------------------------------------------------ construction hooks
    @abstractmethod
    def _place(self) -> Sequence[Sequence[int]]:
        """The holders of each partition (K lists of silo ids); validates the placement."""

    @abstractmethod
    def _build_matrix(self) -> np.ndarray:
        """B (n x K, canonical), zero outside the placement."""

    @abstractmethod
    def _solve(self, survivors: tuple[int, ...]) -> np.ndarray:
        """a for sorted, validated survivors with ``len >= min_replies`` (same order)."""

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

    # ------------------------------------------------------------------ encoding
    def encode(
        self,
        silo: int,
        partials: Sequence[torch.Tensor],
        *,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Silo ``silo``'s reply :math:`\\sum_{j \\in \\text{support}} B_{ij} g_j` (one fused pass).

        ``partials`` are field vectors (``uint32``, one shape) aligned with :meth:`support`;
        ``out`` as in :meth:`PrimeField.lincomb`.

        Parameters
        ----------
        silo
            The silo's index.
        partials
            Its partitions' field vectors, aligned with support(silo).
        out
            Where to write the reply (optional).

        Returns
        -------
        torch.Tensor
            The coded reply.
        """
        i = self._silo(silo)
        held = self._support[i]
        partials = list(partials)
        if len(partials) != len(held):
            raise InputError(
                f"silo {i} holds {len(held)} partition(s) {list(held)}, "
                f"got {len(partials)} partial vector(s)"
            )
        named = [
            (f"partial vector of partition {j}", v) for j, v in zip(held, partials, strict=True)
        ]
        self._same_shape(named)
        try:
            return self.field.lincomb(self.coefficients(i), partials, validate=True, out=out)
        except InputError:
            self._validated(named)
            raise

    # ------------------------------------------------------------------ decoding
    def decoding_vector(self, survivors: Sequence[int]) -> np.ndarray:
        """a with :math:`a^T B_S = 1^T`, aligned with ``survivors`` (``int64``, canonical).

        Raises :class:`DecodingError` for fewer than :attr:`min_replies` survivors and
        :class:`InputError` for unknown or repeated ids. The result depends on the set only and
        is cached per set; entries may be zero (replies the decoder does not need).

        Parameters
        ----------
        survivors
            The silos whose replies came.

        Returns
        -------
        np.ndarray
        """
        return self._decoding_vector(self._survivors(survivors))

    def _decoding_vector(self, ids: tuple[int, ...]) -> np.ndarray:
        key = frozenset(ids)
        ordered = tuple(sorted(ids))
        a_sorted = self._vectors.get(key)
        if a_sorted is None:
            a_sorted = np.remainder(np.asarray(self._solve(ordered), dtype=np.int64), self.field.p)
            a_sorted.setflags(write=False)
            self._vectors[key] = a_sorted
            if len(self._vectors) > CACHE_SIZE:
                self._vectors.popitem(last=False)
        else:
            self._vectors.move_to_end(key)
        if ids == ordered:
            return a_sorted.copy()
        position = {silo: k for k, silo in enumerate(ordered)}
        return a_sorted[[position[i] for i in ids]]

    def decode(
        self,
        replies: Mapping[int, torch.Tensor],
        *,
        check: bool = True,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The exact sum :math:`\\sum_j g_j` of all K partitions' vectors from the replies of S.

        Validates the ids (known, distinct, at least :attr:`min_replies`) and the vectors
        (uint32, one shape, one device; every vector that is read must hold elements < p).
        With ``check`` (default) replies beyond what decoding needs are first used by
        :meth:`check_consistency` and a :class:`DecodingError` is raised rather than a wrong
        sum formed from inconsistent replicas (the polynomial code's check validates every reply;
        a repetition code's compares each extra reply bit for bit with the one decoded). With
        ``check=False`` the replies whose decoding coefficient is zero are not read at all.
        ``out`` as in :meth:`PrimeField.lincomb`.

        Parameters
        ----------
        replies
            Silo -> its reply.
        check
            Check the replies beyond what decoding needs against each other.
        out
            Where to write the sum (optional).

        Returns
        -------
        torch.Tensor
            The sum of all K partitions' vectors.
        """
        ids, vectors = self._replies(replies)
        a = self._decoding_vector(ids)
        if check:
            self._run_check(ids, vectors)
        used = np.flatnonzero(a)
        try:
            vs = [vectors[k] for k in used]
            return self.field.lincomb(a[used], vs, validate=True, out=out)
        except InputError:
            self._validated([(f"reply of silo {ids[k]}", vectors[k]) for k in used])
            raise

    def parity_checks(self, survivors: Sequence[int]) -> np.ndarray:
        """A basis H (e x |S|, rows) of :math:`\\{h : h^T B_S = 0\\}`, aligned with ``survivors``.

        Honest replies satisfy :math:`H Y = 0`; see :mod:`coded_fl.codes.consistency`.

        Parameters
        ----------
        survivors
            The silos whose replies came.

        Returns
        -------
        np.ndarray
        """
        return self._parity_checks(self._distinct(survivors))

    def _parity_checks(self, ids: tuple[int, ...]) -> np.ndarray:
        h = self._checks.get(ids)
        if h is None:
            h = left_null_space(self._matrix[list(ids)], self.field.p)
            h.setflags(write=False)
            self._checks[ids] = h
            if len(self._checks) > CACHE_SIZE:
                self._checks.popitem(last=False)
        return h

    def check_consistency(self, replies: Mapping[int, torch.Tensor]) -> int:
        """Check the replies against each other; return how many independent checks passed.

        Returns 0 when nothing can be checked (no redundancy among these replies). Raises
        :class:`DecodingError` when replies disagree, with ``suspects`` naming the silos located
        as corrupted (see the code's class documentation for what it detects and locates).

        Parameters
        ----------
        replies
            Silo -> its reply.
        """
        ids, vectors = self._replies(replies)
        return self._run_check(ids, vectors)

    def _run_check(self, ids: tuple[int, ...], vectors: list[torch.Tensor]) -> int:
        try:
            return self._check(ids, vectors)
        except InputError:  # name the silo whose reply is not a field vector
            self._validated([(f"reply of silo {i}", v) for i, v in zip(ids, vectors, strict=True)])
            raise

    def _check(self, ids: tuple[int, ...], vectors: list[torch.Tensor]) -> int:
        radius = self._locate_radius(len(ids))
        return check_replies(self.field, self._parity_checks(ids), ids, vectors, radius=radius)

    def _locate_radius(self, replies: int) -> int | None:
        """Most corrupted replies located uniquely among ``replies`` (None: half the checks)."""
        return None
