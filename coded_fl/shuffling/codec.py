"""Encode and decode shuffle messages on real bytes: vectorised XOR over padded unit buffers.

A party's data lives in a :class:`SegmentBuffer`: one zero-initialised ``uint8`` array of
``n_units x unit_size`` bytes, seen as rows of ``piece_size`` bytes (one row per segment of the
plan), plus a mask of the rows the party knows (its units in full, its cached subfiles, what it
decoded). Encoding message i XORs its term rows; decoding writes ``payload ^ (XOR of the known
terms)`` into the one row the silo is meant to learn. Both run in one fused numba loop over
64-bit words (bytes when the piece size is not a multiple of 8): every source byte is read once.

Nothing is decoded from rows the party does not know: a missing term raises
:class:`~coded_fl.errors.DecodingError` (or :class:`~coded_fl.errors.InputError` for a sender),
naming the units.

>>> from coded_fl.shuffling.units import UnitManifest
>>> from coded_fl.shuffling.planner import plan_shuffle
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
from coded_fl.shuffling.placement import subsets
from coded_fl.shuffling.planner import ShufflePlan
from coded_fl.shuffling.units import Layout

__all__ = ["SegmentBuffer", "cached_subfiles", "decode", "encode"]


@numba.njit(cache=True, nogil=True)
def _xor_encode(src, ptr, rows, idx, out):  # pragma: no cover - compiled
    width = src.shape[1]
    for b in range(idx.size):
        m = idx[b]
        o = out[b]
        first = src[rows[ptr[m]]]
        for x in range(width):
            o[x] = first[x]
        for j in range(ptr[m] + 1, ptr[m + 1]):
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
        for j in range(ptr[m], ptr[m + 1]):
            if j != target[b]:
                s = buf[rows[j]]
                for x in range(width):
                    o[x] ^= s[x]


def _words(a: np.ndarray) -> np.ndarray:
    """The same bytes as 64-bit words when rows allow it (8x fewer loop steps)."""
    return a.view(np.uint64) if a.shape[-1] % 8 == 0 and a.flags.c_contiguous else a


def cached_subfiles(plan: ShufflePlan | tuple[int, int], silo: int) -> np.ndarray:
    """Indices of the subfiles silo caches of every unit (those whose set T contains it)."""
    K, t = (plan.K, plan.t) if isinstance(plan, ShufflePlan) else plan
    if t == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero((subsets(K, t) == silo).any(axis=1))


class SegmentBuffer:
    """Padded units of one party, as rows of ``piece_size`` bytes, with a mask of known rows."""

    def __init__(self, layout: Layout, n_units: int) -> None:
        self.layout = layout
        self.data = np.zeros((n_units, layout.unit_size), dtype=np.uint8)
        self.known = np.zeros(n_units * layout.segments_per_unit, dtype=bool)

    @classmethod
    def for_plan(cls, plan: ShufflePlan) -> SegmentBuffer:
        return cls(plan.layout, len(plan.manifest))

    @property
    def rows(self) -> np.ndarray:
        return self.data.reshape(-1, self.layout.piece_size)

    def unit(self, n: int) -> np.ndarray:
        """Unit n as ``(n_subfiles, subfile_size)`` (a view)."""
        return self.data[n].reshape(self.layout.n_subfiles, self.layout.subfile_size)

    def _unit_rows(self, n: int) -> slice:
        s = self.layout.segments_per_unit
        return slice(n * s, (n + 1) * s)

    def put_unit(self, n: int, padded: np.ndarray) -> None:
        """Know unit n in full (``padded``: ``unit_size`` bytes)."""
        self.data[n] = padded
        self.known[self._unit_rows(n)] = True

    def put_cache(self, n: int, *, silo: int, plan: ShufflePlan, subfiles: np.ndarray) -> None:
        """Know the cached subfiles of unit n (concatenated in subfile order)."""
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
    """Payloads of the messages ``indices`` (default: all) as ``(len, piece_size)`` uint8."""
    idx = np.arange(plan.n_messages) if indices is None else np.asarray(indices, dtype=np.int64)
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
    """Decode messages ``indices`` (payloads row by row) into silo's buffer.

    Returns the rows learned. Each message must carry exactly one term for this silo and every
    other term must be known to it; otherwise :class:`DecodingError` names the message.
    """
    idx = np.asarray(indices, dtype=np.int64)
    payloads = np.ascontiguousarray(payloads, dtype=np.uint8).reshape(
        idx.size, plan.layout.piece_size
    )
    if payloads.shape[1] != plan.layout.piece_size:
        raise InputError(f"payloads must be {plan.layout.piece_size} bytes each")
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
    others = ti[~mine]
    lacking_rows = ~buf.known[rows[others]]
    if lacking_rows.any():
        msg_of = np.repeat(idx, counts - 1)
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
