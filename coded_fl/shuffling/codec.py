"""Encode and decode shuffle messages on real bytes: vectorised XOR over padded unit buffers.

A party's data lives in a :class:`SegmentBuffer`: one zero-initialised ``uint8`` array of
``n_units x unit_size`` bytes, seen as rows of ``piece_size`` bytes (one row per segment of the
plan), plus a mask of the rows the party knows (its units in full, its cached subfiles, what it
decoded). Encoding message i XORs its term rows; decoding writes ``payload ^ (XOR of the known
terms)`` into the one row the silo is meant to learn. A segment meant for several receivers
(the relay's fan-out) appears as consecutive equal terms, one per receiver, and is XORed once.
Both run in one fused numba loop over
64-bit words (bytes when the piece size is not a multiple of 8): every source byte is read once.

Nothing is decoded from rows the party does not know: a missing term raises
:class:`~coded_fl.errors.DecodingError` (or :class:`~coded_fl.errors.InputError` for a sender),
naming the units.

>>> from coded_fl.shuffling.plan.units import UnitManifest
>>> from coded_fl.shuffling.plan.planner import plan_shuffle
>>> data = {u: bytes([65 + u]) * 6 for u in range(2)}
>>> plan = plan_shuffle(UnitManifest.from_data(data), {0: {0}, 1: {1}}, {0: {1}, 1: {0}}, K=2, t=1)
>>> sender = SegmentBuffer.for_plan(plan)
>>> for n, u in enumerate(plan.manifest.ids): sender.put_unit(n, plan.layout.pad(data[u]))
>>> payloads = encode(plan, sender)
>>> silo0 = SegmentBuffer.for_plan(plan)
>>> silo0.put_unit(0, plan.layout.pad(data[0])); silo0.put_cache(1, silo=0, plan=plan,
...     subfiles=sender.unit(1)[cached_subfiles(plan, 0)].reshape(-1))
>>> got = decode(plan, 0, silo0, plan.messages_to(0), payloads[plan.messages_to(0)])
>>> bytes(silo0.unit(1).reshape(-1)[:6])
b'BBBBBB'
"""

from __future__ import annotations

import numba
import numpy as np

from coded_fl.errors import DecodingError, InputError
from coded_fl.shuffling.plan.placement import subsets
from coded_fl.shuffling.plan.planner import ShufflePlan
from coded_fl.shuffling.plan.units import Layout

__all__ = ["SegmentBuffer", "cached_subfiles", "decode", "encode"]


@numba.njit(cache=True, nogil=True)
def _xor_encode(src, ptr, rows, idx, out):  # pragma: no cover - compiled
    width = src.shape[1]
    for b in range(idx.size):
        m = idx[b]
        o = out[b]
        r0 = rows[ptr[m]]
        first = src[r0]
        for x in range(width):
            o[x] = first[x]
        for j in range(ptr[m] + 1, ptr[m + 1]):
            if rows[j] == rows[j - 1]:  # the same segment for another receiver: XORed once
                continue
            s = src[rows[j]]
            for x in range(width):
                o[x] ^= s[x]


@numba.njit(cache=True, nogil=True)
def _xor_decode(buf, ptr, rows, idx, target, payloads):  # pragma: no cover - compiled
    width = buf.shape[1]
    for b in range(idx.size):
        m = idx[b]
        o = buf[rows[target[b]]]
        p = payloads[b]
        for x in range(width):
            o[x] = p[x]
        r = rows[target[b]]
        for j in range(ptr[m], ptr[m + 1]):
            # every other distinct segment once: its own segment and repeats are skipped
            if rows[j] != r and (j == ptr[m] or rows[j] != rows[j - 1]):
                s = buf[rows[j]]
                for x in range(width):
                    o[x] ^= s[x]


def _words(a: np.ndarray) -> np.ndarray:
    """The same bytes as 64-bit words when rows allow it (8x fewer loop steps)."""
    return a.view(np.uint64) if a.shape[-1] % 8 == 0 and a.flags.c_contiguous else a


def cached_subfiles(plan: ShufflePlan | tuple[int, int], silo: int) -> np.ndarray:
    """Indices of the subfiles a silo caches of every unit: those whose set T contains it.

    Subfile j of a unit is :math:`W_{n,T}` for the t-subset T of colex rank j
    (:func:`~coded_fl.shuffling.plan.placement.subsets`); silo k caches the
    :math:`\\binom{K-1}{t-1}` subfiles with :math:`k \\in T`, the same ones of every unit.

    Parameters
    ----------
    plan
        The plan, or just its ``(K, t)``: K silos, storage level t.
    silo
        The silo's index, ``0..K-1``.

    Returns
    -------
    numpy.ndarray
        The subfile indices, int64, increasing; empty at t = 0 (no cache).

    Raises
    ------
    ConfigurationError
        If :math:`\\binom{K}{t}` exceeds :data:`~coded_fl.shuffling.plan.placement.MAX_SUBFILES`.

    Examples
    --------
    >>> cached_subfiles((4, 2), 1).tolist()   # T = {0,1}, {1,2}, {1,3}
    [0, 2, 4]
    """
    K, t = (plan.K, plan.t) if isinstance(plan, ShufflePlan) else plan
    if t == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero((subsets(K, t) == silo).any(axis=1))


class SegmentBuffer:
    """Padded units of one party, as rows of ``piece_size`` bytes, with a mask of known rows.

    Row r of the buffer is piece ``r % P`` of subfile ``(r // P) % n_subfiles`` of unit
    ``r // segments_per_unit`` (P = ``layout.n_pieces``), the numbering of
    :class:`~coded_fl.shuffling.plan.planner.ShufflePlan`'s ``term_row``. Everything starts zero and
    unknown; :meth:`put_unit`, :meth:`put_cache` and :func:`decode` fill rows and mark them known.

    Parameters
    ----------
    layout
        How a padded unit splits into subfiles and pieces.
    n_units
        N, the number of units (the plan's manifest, in its canonical order).

    Attributes
    ----------
    layout : Layout
        As given.
    data : numpy.ndarray
        ``(n_units, layout.unit_size)`` uint8: the padded units (zeros where unknown).
    known : numpy.ndarray
        ``(n_units * layout.segments_per_unit,)`` bool: which rows the party knows.
    """

    def __init__(self, layout: Layout, n_units: int) -> None:
        self.layout = layout
        self.data = np.zeros((n_units, layout.unit_size), dtype=np.uint8)
        self.known = np.zeros(n_units * layout.segments_per_unit, dtype=bool)

    @classmethod
    def for_plan(cls, plan: ShufflePlan) -> SegmentBuffer:
        """An empty buffer for a plan's N units in the plan's layout.

        Parameters
        ----------
        plan
            The plan whose manifest and layout size the buffer.

        Returns
        -------
        SegmentBuffer
            All zeros, no row known.
        """
        return cls(plan.layout, len(plan.manifest))

    @property
    def rows(self) -> np.ndarray:
        """:attr:`data` as ``(n_units * segments_per_unit, piece_size)`` rows (a view)."""
        return self.data.reshape(-1, self.layout.piece_size)

    def unit(self, n: int) -> np.ndarray:
        """Unit n as ``(n_subfiles, subfile_size)`` (a view).

        Parameters
        ----------
        n
            The unit's position in the manifest.

        Returns
        -------
        np.ndarray
        """
        return self.data[n].reshape(self.layout.n_subfiles, self.layout.subfile_size)

    def _unit_rows(self, n: int) -> slice:
        s = self.layout.segments_per_unit
        return slice(n * s, (n + 1) * s)

    def put_unit(self, n: int, padded: np.ndarray) -> None:
        """Know unit n in full (``padded``: ``unit_size`` bytes).

        Parameters
        ----------
        n
            The unit's position in the manifest.
        padded
            Its bytes, padded to unit_size.
        """
        self.data[n] = padded
        self.known[self._unit_rows(n)] = True

    def put_cache(self, n: int, *, silo: int, plan: ShufflePlan, subfiles: np.ndarray) -> None:
        """Know the cached subfiles of unit n (concatenated in subfile order).

        Parameters
        ----------
        n
            The unit's position in the manifest.
        silo
            The silo whose cache it is.
        plan
            The epoch's plan (which subfiles the silo caches).
        subfiles
            The cached subfiles, concatenated.
        """
        idx = cached_subfiles(plan, silo)
        size = self.layout.subfile_size
        if subfiles.size != idx.size * size:
            raise InputError(f"cache of unit {n}: expected {idx.size * size} bytes")
        self.unit(n)[idx] = subfiles.reshape(idx.size, size)
        mask = np.zeros(self.layout.n_subfiles, dtype=bool)
        mask[idx] = True
        self.known[self._unit_rows(n)] |= np.repeat(mask, self.layout.n_pieces)


def _term_index(ptr: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Term indices of messages ``idx`` (concatenated) and each message's term count."""
    counts = ptr[idx + 1] - ptr[idx]
    starts = np.repeat(ptr[idx] - np.cumsum(counts) + counts, counts)
    return starts + np.arange(int(counts.sum())), counts


def encode(
    plan: ShufflePlan,
    buf: SegmentBuffer,
    indices: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Payloads of the messages ``indices``: each the XOR of its term rows.

    Parameters
    ----------
    plan
        The plan that defines the messages.
    buf
        The sender's buffer: the central sender's (every unit) or a silo's (its units and
        cache, decentralized). Only read.
    indices
        Message indices to encode (default: every message of the plan).
    out
        Optional C-contiguous ``(len(indices), piece_size)`` uint8 array to write into.

    Returns
    -------
    numpy.ndarray
        ``(len(indices), layout.piece_size)`` uint8, row b the payload of message
        ``indices[b]`` (``out`` when given).

    Raises
    ------
    InputError
        If ``buf`` does not know a row some requested message needs (names the units), or
        ``out`` is not a C-contiguous uint8 array of that shape (the kernel writes words).
    """
    idx = np.arange(plan.n_messages) if indices is None else np.asarray(indices, dtype=np.int64)
    shape = (idx.size, plan.layout.piece_size)
    if out is not None and (
        out.dtype != np.uint8 or out.shape != shape or not out.flags["C_CONTIGUOUS"]
    ):
        raise InputError(f"out must be a C-contiguous uint8 array of shape {shape}")
    ptr, rows = plan.msg_ptr, plan.term_row
    used = rows[_term_index(ptr, idx)[0]]
    if not buf.known[used].all():
        missing = np.unique(plan.unit_of_row(used[~buf.known[used]]))
        names = [plan.manifest.ids[int(n)] for n in missing]
        raise InputError(f"the sender lacks data of units {names} that its messages need")
    if out is None:
        out = np.empty((idx.size, plan.layout.piece_size), dtype=np.uint8)
    if idx.size:
        _xor_encode(_words(buf.rows), ptr, rows, idx, _words(out))
    return out


def decode(
    plan: ShufflePlan, silo: int, buf: SegmentBuffer, indices: np.ndarray, payloads: np.ndarray
) -> np.ndarray:
    """Decode messages ``indices`` (payloads row by row) into a silo's buffer.

    For each message, the one term meant for ``silo`` is ``payload ^ (XOR of the other distinct
    segments)`` (a segment repeated for several receivers is XORed once, its own not at all);
    it is written into ``buf`` and marked known. Nothing is written unless every message
    passes the checks.

    Parameters
    ----------
    plan
        The plan that defines the messages.
    silo
        The decoding silo's index, ``0..K-1``.
    buf
        The silo's buffer (its units, cache and what it decoded so far); updated in place.
    indices
        Message indices, one per payload.
    payloads
        The messages' payloads, ``len(indices) * layout.piece_size`` bytes (any shape, uint8).

    Returns
    -------
    numpy.ndarray
        int64, the buffer row learned from each message, in the order of ``indices``.

    Raises
    ------
    DecodingError
        If a message carries other than exactly one term for ``silo``, or the silo lacks a
        row of another term (its units or cache do not match the plan); names the message.
    InputError
        If ``payloads`` do not hold ``len(indices) * piece_size`` bytes.
    """
    idx = np.asarray(indices, dtype=np.int64)
    flat = np.ascontiguousarray(payloads, dtype=np.uint8).reshape(-1)
    if flat.size != idx.size * plan.layout.piece_size:
        raise InputError(
            f"payloads must be {plan.layout.piece_size} bytes each for {idx.size} messages, "
            f"got {flat.size} bytes"
        )
    payloads = flat.reshape(idx.size, plan.layout.piece_size)
    ptr, rows, silos = plan.msg_ptr, plan.term_row, plan.term_silo
    ti, counts = _term_index(ptr, idx)
    mine = silos[ti] == silo
    per_msg = (
        np.add.reduceat(mine.astype(np.int64), np.cumsum(counts) - counts) if idx.size else counts
    )
    if idx.size and (per_msg != 1).any():
        bad = int(np.flatnonzero(per_msg != 1)[0])
        raise DecodingError(
            f"message {int(idx[bad])} carries {int(per_msg[bad])} terms for silo {silo}, not 1"
        )
    target = ti[mine]
    msg_of = np.repeat(idx, counts - 1)
    others = ti[~mine]
    own_row = np.repeat(rows[target], counts - 1)
    lacking_rows = ~buf.known[rows[others]] & (rows[others] != own_row)
    if lacking_rows.any():
        m = int(msg_of[np.flatnonzero(lacking_rows)[0]])
        units = plan.unit_of_row(rows[others][lacking_rows & (msg_of == m)])
        lacking = sorted({plan.manifest.ids[int(n)] for n in units}, key=repr)
        raise DecodingError(
            f"silo {silo} cannot decode message {m}: it lacks side information of "
            f"units {lacking} (its cache or units do not match the plan)"
        )
    if idx.size:
        _xor_decode(_words(buf.rows), ptr, rows, idx, target, _words(payloads))
    learned = rows[target]
    buf.known[learned] = True
    return learned
