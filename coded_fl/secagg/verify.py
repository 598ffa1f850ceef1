"""Which weighted mask sums a silo may help recover, decided from public facts only.

The server asks each silo for :math:`\\sum_{i \\in S} w_i [z_i]_j` for a few weight rows w. A
dishonest server could ask for a unit vector and unmask one silo, so every silo checks the rows:

- row 0 must equal the gradient code's decoding vector for S (``a`` with
  :math:`a^T B_S = 1^T`): unmasking with it reveals only :math:`\\sum_k q(g_k)`, the sum;
- every further row h must be a nonzero parity check of the code on S (:math:`h^T B_S = 0`): for
  consistent replies :math:`\\sum_i h_i c_i = 0`, so unmasking it reveals nothing, and for
  inconsistent ones it reveals only a combination of the errors. At most |S| - (n - s) of them.
- with a group code (the repetition code) the rows are fixed by S: row 0 and the comparisons of
  :func:`comparison_pairs`, each the difference of two members of one group (a silo compares
  them with the rows it recomputes, bit for bit, and answers nothing else).

The server builds the same rows with :func:`weight_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coded_fl.codes.repetition import GroupCode
from coded_fl.errors import RemoteProtocolError
from coded_fl.linalg import mat_mul
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.messages import SERVER

__all__ = ["check_survivors", "check_weight_rows", "comparison_pairs", "weight_rows"]


def check_survivors(cfg: ProtocolConfig, survivors: Sequence[int]) -> tuple[int, ...]:
    """The announced survivor set S, checked: strictly increasing silo ids, enough of them.

    Parameters
    ----------
    cfg
        The run's configuration (n, s, U).
    survivors
        S as the server announced it.

    Returns
    -------
    tuple[int, ...]
        S as Python ints.

    Raises
    ------
    RemoteProtocolError
        Blaming the server, if S is not strictly increasing ids in 0..n-1 or has fewer than
        max(n - s, U) silos.
    """
    s = tuple(int(i) for i in survivors)
    if list(s) != sorted(set(s)) or any(not 0 <= i < cfg.n for i in s):
        raise RemoteProtocolError(
            f"survivor set must be strictly increasing silo ids in 0..{cfg.n - 1}", sender=SERVER
        )
    if len(s) < cfg.min_uploads:
        raise RemoteProtocolError(
            f"survivor set has {len(s)} silos; the configuration needs at least {cfg.min_uploads}",
            sender=SERVER,
        )
    return s


def comparison_pairs(
    cfg: ProtocolConfig, survivors: Sequence[int], *, group_masked: bool = False
) -> tuple[tuple[int, int], ...] | None:
    """With a group code: the (reference, member) positions the rows after row 0 compare.

    In a group-masked round every survivor that is not its group's reference is compared with
    it (the masks cancel in a comparison: the server finds them in one pass over the uploads,
    and nobody sends anything). In a round with shared masks each comparison is one more
    recovered mask sum per survivor (m elements): with more than n - s survivors every one is
    made (a subset would leave some group's reference unchecked, and a deviating reference
    there would move the sum unseen); with exactly n - s, none (as before extra replies).

    Parameters
    ----------
    cfg
        The run's configuration.
    survivors
        S, strictly increasing silo ids.
    group_masked
        True for a round whose masks cancel within the weight rows (``masking="aligned"``
        once the edge keys are dealt): no recovery request is sent.

    Returns
    -------
    tuple[tuple[int, int], ...] | None
        The pairs of positions in S, or None when the code is not a group code (its rows are
        parity checks located by :mod:`coded_fl.codes.resolve`).
    """
    code = cfg.gradient_code
    if not isinstance(code, GroupCode):
        return None
    s = check_survivors(cfg, survivors)
    pairs = code.comparisons(s)
    return pairs if group_masked or len(s) > cfg.n - cfg.s else ()


def weight_rows(
    cfg: ProtocolConfig, survivors: Sequence[int], *, group_masked: bool = False
) -> np.ndarray:
    """The rows the server asks the survivors to unmask with.

    Row 0 is the decoding vector a for S. With a group code the rows after it are the
    comparisons of :func:`comparison_pairs`; with any other code the first |S| - (n - s) rows
    of the code's parity checks on S (:meth:`~coded_fl.codes.GradientCode.parity_checks`,
    computed once per survivor set and cached by the code). Silos recompute a and check the
    other rows with :func:`check_weight_rows`.

    Parameters
    ----------
    cfg
        The run's configuration; its gradient code is public.
    survivors
        S, strictly increasing silo ids.
    group_masked
        As in :func:`comparison_pairs`.

    Returns
    -------
    numpy.ndarray
        A (1 + min(e, |S| - (n - s))) x |S| ``int64`` matrix of field elements (a new array),
        e the number of parity checks on S.

    Raises
    ------
    RemoteProtocolError
        If the survivor set is malformed (see :func:`check_survivors`).
    """
    s = check_survivors(cfg, survivors)
    code = cfg.gradient_code
    a = np.asarray(code.decoding_vector(list(s)), dtype=np.int64).reshape(1, -1)
    pairs = comparison_pairs(cfg, s, group_masked=group_masked)
    if pairs is not None and isinstance(code, GroupCode):
        return np.concatenate([a, code.comparison_rows(s, pairs)], axis=0)
    checks = code.parity_checks(list(s))
    return np.concatenate([a, checks[: len(s) - (cfg.n - cfg.s)]], axis=0)


def check_weight_rows(
    cfg: ProtocolConfig, survivors: Sequence[int], weights: Sequence[Sequence[int]]
) -> np.ndarray:
    """The weight rows a silo was asked to answer, refused unless answering is harmless.

    Row 0 must be the code's decoding vector for S; every further row must be a nonzero parity
    check of the code on S (:math:`h^T B_S = 0`, checked directly: the server may send any basis
    of checks, not only the one :func:`weight_rows` builds), at most |S| - (n - s) of them.

    Parameters
    ----------
    cfg
        The run's configuration; its gradient code is public.
    survivors
        S as the server announced it.
    weights
        The rows the server sent.

    Returns
    -------
    numpy.ndarray
        ``weights`` as an ``int64`` matrix.

    Raises
    ------
    RemoteProtocolError
        Blaming the server, for a malformed survivor set or any row a silo must not answer.
    """
    s = check_survivors(cfg, survivors)
    w = np.asarray(weights, dtype=np.int64)
    if w.ndim != 2 or w.shape[0] < 1 or w.shape[1] != len(s):
        raise RemoteProtocolError(
            f"weights must be rows of {len(s)} entries, got shape {w.shape}", sender=SERVER
        )
    if np.any((w < 0) | (w >= cfg.p)):
        raise RemoteProtocolError("weights must be field elements", sender=SERVER)
    expected = np.asarray(cfg.gradient_code.decoding_vector(list(s)), dtype=np.int64)
    if not np.array_equal(w[0], expected):
        raise RemoteProtocolError(
            "weight row 0 is not the public code's decoding vector for the announced survivors: "
            "refused (it could unmask individual silos)",
            sender=SERVER,
        )
    if isinstance(cfg.gradient_code, GroupCode):
        if not np.array_equal(w, weight_rows(cfg, s)):
            raise RemoteProtocolError(
                "the weight rows are not the public code's decoding vector and group "
                "comparisons for the announced survivors: refused",
                sender=SERVER,
            )
        return w
    extra = w[1:]
    if extra.shape[0] > len(s) - (cfg.n - cfg.s):
        raise RemoteProtocolError(
            f"{extra.shape[0]} check rows requested; at most |S| - (n - s) = "
            f"{len(s) - (cfg.n - cfg.s)} are parity checks",
            sender=SERVER,
        )
    if extra.shape[0]:
        if np.any(~extra.any(axis=1)):
            raise RemoteProtocolError("a check row is all zero", sender=SERVER)
        product = mat_mul(extra, cfg.gradient_code.matrix[list(s)], cfg.p)
        if np.any(product):
            raise RemoteProtocolError(
                "a check row is not a parity check of the code on the survivors: refused",
                sender=SERVER,
            )
    return w
