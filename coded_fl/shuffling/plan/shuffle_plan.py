"""The plan object: a placement plus the coded messages that deliver the next assignment.

:class:`ShufflePlan` holds a plan's messages in CSR form and answers who sends what to whom
(:meth:`~ShufflePlan.messages_from`, :meth:`~ShufflePlan.messages_to`, ...) and what it costs
(:attr:`~ShufflePlan.load`, :meth:`~ShufflePlan.formula_load`); :data:`CENTRAL` is the central
sender's id and :data:`Mode` the two settings. Plans are made by
:func:`~coded_fl.shuffling.plan.planner.plan_shuffle`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from coded_fl.shuffling.plan.loads import (
    centralized_load,
    decentralized_load,
    swap_fanout_load,
    uncoded_load,
)
from coded_fl.shuffling.plan.sources import source_counts, sourced_load
from coded_fl.shuffling.plan.units import Layout, UnitManifest

__all__ = ["CENTRAL", "Mode", "ShufflePlan"]

#: Sender id of the central sender (the one party that holds all data) in centralized plans.
CENTRAL = -1

Mode = Literal["centralized", "decentralized"]


@dataclass(frozen=True, eq=False)
class ShufflePlan:
    """A placement plus the coded messages that deliver the next assignment.

    Message i is the XOR of the segments ``term_row[msg_ptr[i]:msg_ptr[i+1]]`` (row r is piece
    ``r % P`` of subfile ``(r // P) % n_subfiles`` of unit ``r // (P * n_subfiles)``, P =
    ``layout.n_pieces``), sent by ``msg_sender[i]`` (:data:`CENTRAL` or a silo); the silo
    ``term_silo[j]`` decodes term j and is a receiver of its message.

    Made by :func:`~coded_fl.shuffling.plan.planner.plan_shuffle`; the arrays are in CSR form
    (``msg_ptr`` has one entry more than there are messages).

    Attributes
    ----------
    K, t : int
        Silos and storage level.
    mode : Mode
        ``"centralized"`` or ``"decentralized"``.
    coded : bool
        False for the uncoded baseline (one segment per message).
    manifest : UnitManifest
        The N units; unit n is ``manifest.ids[n]``.
    layout : Layout
        :math:`\\binom{K}{t}` subfiles per unit, t pieces per subfile in the decentralized
        setting (t >= 1), else 1.
    holders, target : tuple of frozenset of int
        The current and next holders of each unit, in manifest order.
    needs : tuple of tuple of int
        ``needs[k]``: the units (indices) silo k must receive, in the target but not held now.
    msg_sender, msg_ptr, term_row, term_silo : numpy.ndarray
        int64 arrays described above.
    plan_id : bytes
        16 bytes: SHA-256 over K, t, mode, coded, the layout, the manifest's fingerprint and
        both assignments. Equal plan ids mean equal plans.
    sources : tuple of tuple of int, or None
        Decentralized, t >= 1, holder-sourced delivery (:mod:`~coded_fl.shuffling.plan.
        sources`): ``sources[k][i]`` sends ``needs[k][i]``; None for the clique cover and the
        other schemes.
    """

    K: int
    t: int
    mode: Mode
    coded: bool
    manifest: UnitManifest
    layout: Layout
    holders: tuple[frozenset[int], ...]
    target: tuple[frozenset[int], ...]
    needs: tuple[tuple[int, ...], ...]
    msg_sender: np.ndarray
    msg_ptr: np.ndarray
    term_row: np.ndarray
    term_silo: np.ndarray
    plan_id: bytes = field(repr=False)
    sources: tuple[tuple[int, ...], ...] | None = field(default=None, repr=False)

    # -- sizes -------------------------------------------------------------------------------
    @property
    def n_messages(self) -> int:
        """The number of coded messages."""
        return int(self.msg_sender.size)

    @property
    def bytes_moved(self) -> int:
        """Payload bytes on the shared link (one broadcast per message)."""
        return self.n_messages * self.layout.piece_size

    @property
    def load(self) -> float:
        """Measured load in units: messages times the fraction of a unit each one carries."""
        return self.n_messages / self.layout.segments_per_unit

    def need_counts(self) -> list[int]:
        """:math:`m_k`: how many units each silo k must receive."""
        return [len(n) for n in self.needs]

    def formula_load(self) -> float:
        """The load the scheme's formula predicts for these needs (theory module)."""
        m = self.need_counts()
        if not self.coded:
            return uncoded_load(self.K, self.t, m)
        if self.mode == "centralized":
            return centralized_load(self.K, self.t, m)
        if self.t == 0:
            return swap_fanout_load(self.holders, self.target)
        if self.sources is not None:
            return sourced_load(self.K, self.t, source_counts(self.K, self.sources))
        return decentralized_load(self.K, self.t, m)

    # -- routing -----------------------------------------------------------------------------
    def terms(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(segment rows, decoding silos) of message i.

        Parameters
        ----------
        i
            The message's index.

        Returns
        -------
        tuple[np.ndarray, np.ndarray]
        """
        a, b = int(self.msg_ptr[i]), int(self.msg_ptr[i + 1])
        return self.term_row[a:b], self.term_silo[a:b]

    def receivers(self, i: int) -> frozenset[int]:
        """The silos that decode something from message i (the relay forwards it to them).

        Parameters
        ----------
        i
            The message's index.

        Returns
        -------
        frozenset[int]
        """
        return frozenset(int(k) for k in self.terms(i)[1])

    def messages_from(self, sender: int) -> np.ndarray:
        """Indices of the messages ``sender`` (a silo, or :data:`CENTRAL`) sends, increasing.

        Parameters
        ----------
        sender
            A silo index or :data:`CENTRAL`.

        Returns
        -------
        numpy.ndarray
            int64 message indices (empty if it sends none).
        """
        return np.flatnonzero(self.msg_sender == sender)

    def messages_to(self, silo: int) -> np.ndarray:
        """Indices of the messages silo decodes a term of (those routed to it), increasing.

        Parameters
        ----------
        silo
            The silo's index, ``0..K-1``.

        Returns
        -------
        numpy.ndarray
            int64 message indices (empty if it needs nothing).
        """
        return np.unique(self.term_message()[self.term_silo == silo])

    def term_message(self) -> np.ndarray:
        """The message index of every term (int64, aligned with ``term_row``)."""
        return np.repeat(np.arange(self.n_messages), np.diff(self.msg_ptr))

    def unit_of_row(self, rows: np.ndarray) -> np.ndarray:
        """The unit index (position in the manifest) of each segment row.

        Parameters
        ----------
        rows
            Segment rows, as in ``term_row``.

        Returns
        -------
        numpy.ndarray
            ``rows // layout.segments_per_unit``, element by element.
        """
        return np.asarray(rows) // self.layout.segments_per_unit

    def summary(self) -> dict[str, Any]:
        """Plain figures for printing or JSON."""
        return {
            "K": self.K,
            "t": self.t,
            "mode": self.mode,
            "coded": self.coded,
            "units": len(self.manifest),
            "subfiles_per_unit": self.layout.n_subfiles,
            "pieces_per_subfile": self.layout.n_pieces,
            "message_bytes": self.layout.piece_size,
            "messages": self.n_messages,
            "load_units": self.load,
            "formula_load_units": self.formula_load(),
            "bytes_moved": self.bytes_moved,
            "units_to_receive": sum(self.need_counts()),
            "plan_id": self.plan_id.hex(),
        }
