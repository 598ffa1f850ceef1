"""Mask sharing with privacy T and recovery threshold U (LightSecAgg-style, So et al. 2022).

Silo i draws one stream of :math:`U m` field elements from a fresh seed, :math:`m = \\lceil d /
(U-T) \\rceil`, and reads it as U pieces of length m: the first :math:`U-T` pieces hold its mask
:math:`z_i` (its first d elements; the rest of the last piece is padding), the last T pieces are
uniform noise. With distinct points :math:`\\beta_1..\\beta_U` and :math:`\\alpha_1..\\alpha_n`
(pseudo-random and public: :func:`sharing_points`),
let :math:`f_i` be the polynomial of degree :math:`< U` with :math:`f_i(\\beta_k) =` piece k;
silo j's share is :math:`f_i(\\alpha_j)`, i.e. share = W pieces with :math:`W_{jk} =
\\ell_k(\\alpha_j)` (Lagrange basis on the betas).

- **Privacy.** Any T shares of :math:`z_i` are uniform and independent of :math:`z_i`: for fixed
  data pieces, the map from the T noise pieces to T shares is the T x T matrix
  :math:`\\ell_t(\\alpha_j)`, which is invertible because a nonzero polynomial of degree
  :math:`< U` cannot vanish at the :math:`U-T` data betas and at T alphas (U roots).
- **Recovery.** Shares are linear in the pieces, so for any weights :math:`a`, silo j's
  :math:`\\sum_i a_i f_i(\\alpha_j)` is an evaluation of :math:`F = \\sum_i a_i f_i`; any U such
  evaluations determine F, whose values at the data betas are the pieces of
  :math:`\\sum_i a_i z_i`. One shot, linear in a, whatever a is (gradient-code weights included).

Cost per silo: the :math:`n \\times U` by :math:`U \\times m` product (:meth:`PrimeField.matmul`),
:math:`n d U / (U - T)` multiply-adds; shares add :math:`n d / (U - T)` elements to the upload.

>>> F = PrimeField(101)
>>> ms = MaskSharing(n=4, privacy=1, threshold=3, length=5, field=F)
>>> stream = torch.arange(ms.stream_length, dtype=torch.int64).to(torch.uint32)
>>> pieces = ms.pieces_from_stream(stream)
>>> shares = ms.encode(pieces)
>>> ms.decode({0: shares[0:1], 2: shares[2:3], 3: shares[3:4]})[0].tolist()  # the mask back
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from coded_fl.codes.consistency import locate
from coded_fl.errors import ConfigurationError, DecodingError, InputError
from coded_fl.field import PrimeField
from coded_fl.linalg import lagrange_basis, left_null_space

__all__ = ["MaskSharing", "sharing_points"]


def sharing_points(count: int, p: int) -> np.ndarray:
    """``count`` distinct nonzero points of GF(p), pseudo-random and public.

    The points are where the mask polynomials are read (the U betas) and evaluated (the n
    alphas). Any distinct points give privacy and recovery; pseudo-random ones also make the
    Lagrange coefficients that carry a corrupted recovery reply into the decoded mask sum
    random-looking field elements, so that the range check refuses the aggregate with
    probability :math:`1 - 2^{-h}` per affected coordinate. (Small integer points kept a
    bit-flipped reply's error small enough to pass the check: 228 of 372 single-bit flips did.)

    Parameters
    ----------
    count
        U + n.
    p
        The modulus, with ``count < p``.

    Returns
    -------
    numpy.ndarray
        int64, ``count`` distinct elements of ``1..p-1``, the same for every (count, p).

    Raises
    ------
    ConfigurationError
        If GF(p) has fewer than ``count`` nonzero elements.

    Examples
    --------
    >>> pts = sharing_points(5, 2**31 - 1)
    >>> len(set(pts.tolist())), bool((pts > 0).all())
    (5, True)
    """
    if count >= p:
        raise ConfigurationError(f"GF({p}) is too small for {count} points")
    out: list[int] = []
    seen: set[int] = set()
    counter = 0
    while len(out) < count:  # ends: each draw is new with probability >= 1/(p - 1)
        digest = hashlib.sha256(f"coded-fl/sharing-points/v1/{p}/{counter}".encode()).digest()
        counter += 1
        point = int.from_bytes(digest[:8], "little") % (p - 1) + 1
        if point not in seen:
            seen.add(point)
            out.append(point)
    return np.asarray(out, dtype=np.int64)


class MaskSharing:
    """Shares of a d-element mask among n silos: any T reveal nothing, any U recover sums.

    Parameters
    ----------
    n
        Number of silos (share holders), indexed 0..n-1.
    privacy
        T, the number of colluding share holders that learn nothing (T >= 0).
    threshold
        U, the number of share holders needed to recover a weighted sum (T < U <= n).
    length
        d, the mask length.
    field
        The field (the points U + n must fit in it).
    """

    def __init__(self, *, n: int, privacy: int, threshold: int, length: int, field: PrimeField):
        if not 0 <= privacy < threshold <= n:
            raise ConfigurationError(
                f"mask sharing needs 0 <= T < U <= n, got T={privacy}, U={threshold}, n={n}"
            )
        if threshold + n >= field.p:
            raise ConfigurationError(f"GF({field.p}) is too small for {threshold + n} points")
        if length < 1:
            raise ConfigurationError(f"mask length must be >= 1, got {length}")
        self.n, self.T, self.U, self.d, self.field = n, privacy, threshold, length, field
        self.piece_length = -(-length // (threshold - privacy))
        points = sharing_points(threshold + n, field.p)
        self.betas, self.alphas = points[:threshold], points[threshold:]
        #: W (n x U): share j = sum_k W[j, k] * piece k.
        self.encoding_matrix = lagrange_basis(self.betas, self.alphas, field.p)

    @property
    def stream_length(self) -> int:
        """How many field elements of the silo's seed stream make its U pieces (U m)."""
        return self.U * self.piece_length

    def pieces_from_stream(self, stream: torch.Tensor) -> torch.Tensor:
        """The (U, m) pieces in a ``stream_length`` stream; its first d elements are the mask.

        Parameters
        ----------
        stream
            A stream_length field vector (the mask first).

        Returns
        -------
        torch.Tensor
        """
        if stream.numel() != self.stream_length:
            raise InputError(f"need {self.stream_length} stream elements, got {stream.numel()}")
        return stream.reshape(self.U, self.piece_length)

    def encode(self, pieces: torch.Tensor) -> torch.Tensor:
        """The n shares (n, m) of one silo's pieces.

        Parameters
        ----------
        pieces
            The (U, m) pieces of one silo's mask stream.

        Returns
        -------
        torch.Tensor
        """
        return self.field.matmul(self.encoding_matrix, pieces)

    def derived_set(self, sender: int, members: Sequence[int]) -> tuple[int, ...]:
        """:math:`P_i`: the U members whose shares of ``sender``'s mask are derived, not sent.

        The U members after ``sender`` cyclically (in silo order), ``sender`` included: public
        and deterministic, so the server and every silo agree on it. Silos without keys are
        not members (the fallback: the next member with keys takes their place).

        Parameters
        ----------
        sender
            Silo i (a member).
        members
            The roster: the silos with keys this round (at least U of them).

        Returns
        -------
        tuple[int, ...]
            U silo ids, ascending.

        Raises
        ------
        InputError
            If ``sender`` is not a member or there are fewer than U members.
        """
        ids = sorted(set(members))
        if sender not in ids or len(ids) < self.U:
            raise InputError(
                f"silo {sender} needs to be one of at least U={self.U} members, got {ids}"
            )
        at = ids.index(sender)
        return tuple(sorted(ids[(at + t) % len(ids)] for t in range(self.U)))

    @functools.lru_cache(maxsize=256)  # noqa: B019 - the instance is long-lived and hashable
    def _completion_matrix(self, derived: tuple[int, ...], others: tuple[int, ...]) -> np.ndarray:
        targets = np.concatenate([self.betas[: self.U - self.T], self.alphas[list(others)]])
        return lagrange_basis(self.alphas[list(derived)], targets, self.field.p)

    def complete(
        self, derived: tuple[int, ...], values: torch.Tensor, others: tuple[int, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The mask and the shares for ``others`` from the U shares of ``derived``.

        The U values :math:`f_i(\\alpha_j), j \\in P_i` fix :math:`f_i`; one fixed
        ((U - T) + |others|) x U Lagrange matrix per (P_i, others), cached, gives the U - T data
        pieces (the mask: their first d elements) and the shares :math:`f_i(\\alpha_j)` of
        the others. If the U values are uniform, so is :math:`f_i`: the same distribution as
        sharing a uniform mask with uniform noise pieces.

        Parameters
        ----------
        derived
            :math:`P_i` (U silo ids).
        values
            (U, m) uint32: the derived shares, in the order of ``derived``.
        others
            The silos whose shares are sent.

        Returns
        -------
        tuple[torch.Tensor, torch.Tensor]
            The mask (d,) and the others' shares (len(others), m).
        """
        if len(derived) != self.U or tuple(values.shape) != (self.U, self.piece_length):
            raise InputError(
                f"need U={self.U} derived shares of {self.piece_length}, got "
                f"{len(derived)} ids and shape {tuple(values.shape)}"
            )
        matrix = self._completion_matrix(tuple(derived), tuple(others))
        out = self.field.matmul(matrix, values, validate=False)  # PRF output: in the field
        data = self.U - self.T
        return out[:data].reshape(-1)[: self.d], out[data:]

    @functools.lru_cache(maxsize=256)  # noqa: B019 - the instance is long-lived and hashable
    def _decoding_matrix(self, holders: tuple[int, ...]) -> np.ndarray:
        return lagrange_basis(
            self.alphas[list(holders)], self.betas[: self.U - self.T], self.field.p
        )

    def verified(
        self, replies: Mapping[int, torch.Tensor]
    ) -> tuple[dict[int, torch.Tensor], tuple[int, ...]]:
        """The replies that are consistent with one mask sum, and the silos whose are not.

        The replies of the silos R are :math:`W_R P` for the aggregate pieces P (every weight
        row alike): a Reed-Solomon codeword of length |R| and dimension U. With |R| > U the
        left null space of :math:`W_R` gives |R| - U parity checks
        (:func:`coded_fl.codes.consistency.check_replies`): one detects a wrong reply, two
        locate it (:func:`coded_fl.codes.consistency.locate`). A located silo's reply is left out
        and the rest checked again.

        Parameters
        ----------
        replies
            Silo -> its (R, m) weighted share sums.

        Returns
        -------
        tuple[dict[int, torch.Tensor], tuple[int, ...]]
            The consistent replies (at least U of them), and the silos located as wrong.

        Raises
        ------
        DecodingError
            If the replies are inconsistent and the wrong ones cannot be located, or too few
            consistent ones remain (``suspects`` names what could be located).
        """
        good = dict(replies)
        located: list[int] = []
        while len(good) > self.U:
            ids = tuple(sorted(good))
            checks = left_null_space(self.encoding_matrix[list(ids)], self.field.p)
            vectors = [good[j].reshape(-1) for j in ids]
            syndromes = self.field.matmul(checks, vectors)
            found = locate(self.field, checks, syndromes.reshape(checks.shape[0], -1))
            if found.sets == ((),):  # every check passed
                break
            if len(found.sets) != 1 or len(good) - len(found.sets[0]) < self.U:
                raise DecodingError(
                    f"recovery replies are inconsistent ({checks.shape[0]} check(s) fail) and "
                    "the wrong ones cannot be told apart"
                    + (f" ({found.why})" if found.why else "")
                    + "; more recovery replies (recovery_threshold below n - s) would locate them",
                    suspects=tuple(sorted(located)),
                )
            for k in found.sets[0]:
                located.append(ids[k])
                del good[ids[k]]
        return good, tuple(sorted(located))

    def decode(self, replies: Mapping[int, torch.Tensor]) -> torch.Tensor:
        """From silo -> (R, m) weighted share sums of at least U silos, the R weighted mask sums.

        Returns an (R, d) tensor: row r is :math:`\\sum_i a^{(r)}_i z_i`. Uses the U lowest
        silo ids among the replies (any U give the same answer).

        Parameters
        ----------
        replies
            Silo -> its (R, m) weighted share sums.
        """
        if len(replies) < self.U:
            raise DecodingError(
                f"mask recovery needs replies from U={self.U} silos, got {len(replies)}"
            )
        holders = tuple(sorted(replies)[: self.U])
        for j in holders:
            if not 0 <= j < self.n:
                raise InputError(f"unknown silo {j} (silos are 0..{self.n - 1})")
        rows = {tuple(replies[j].shape) for j in holders}
        if len(rows) != 1 or next(iter(rows))[-1] != self.piece_length:
            raise InputError(f"replies must all be (R, {self.piece_length}), got {sorted(rows)}")
        per = [replies[j].reshape(-1, self.piece_length) for j in holders]
        dec = self._decoding_matrix(holders)
        R = per[0].shape[0]
        out = np.empty((R, self.d), dtype=np.uint32)  # rows filled with numpy (see below)
        for r in range(R):
            # the kernel reads the U replies' row r in place: no stacking copy (a torch copy of
            # uint32 rows is slow, and its intra-op threads stall when the cores are busy)
            pieces = self.field.matmul(dec, [v[r] for v in per])
            out[r] = pieces.reshape(-1)[: self.d].numpy()
        return torch.from_numpy(out)
