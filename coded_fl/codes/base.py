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

The placement, the matrix and the checks of silo ids and vectors are built by
:class:`~coded_fl.codes.structure.CodeStructure`; :class:`GradientCode` adds the operations.

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

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import torch

from coded_fl.codes.consistency import check_replies
from coded_fl.codes.structure import CodeStructure, check_count
from coded_fl.errors import InputError
from coded_fl.linalg import left_null_space

__all__ = ["GradientCode", "check_count"]

#: Survivor sets whose decoding vectors (and parity checks) are kept, most recent first.
CACHE_SIZE = 4096


class GradientCode(CodeStructure):
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

    @abstractmethod
    def _solve(self, survivors: tuple[int, ...]) -> np.ndarray:
        """a for sorted, validated survivors with ``len >= min_replies`` (same order)."""

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
