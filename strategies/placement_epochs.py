"""The shuffle epochs of a :class:`~strategies.placement.ShuffledTraining` run, and their figures.

:class:`ShuffleEpochs` moves the units from what the silos hold (the server's
:class:`~coded_fl.shuffling.partitions.Holdings`) to the placement the gradient code needs for a
partition map: one decentralized epoch on the relay, planned again when the view of the stores
was stale, and run again without the failing senders while more than s silos lack their
partitions. :class:`EpochBytes` is what one epoch moved.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from coded_fl.shuffling.partitions import Holdings, code_assignment, partition_holders
from coded_fl.shuffling.transport.results import ShuffleResult
from coded_fl.shuffling.transport.routing import suspect_senders
from coded_fl.shuffling.transport.wire import ShuffleJob

if TYPE_CHECKING:
    from coded_fl.shuffling.plan.units import UnitId

    from .coded_secagg import CodedSecAgg
    from .shuffle import ShuffleRelay

__all__ = ["EpochBytes", "ShuffleEpochs"]


@dataclass(frozen=True)
class EpochBytes:
    """What one placement or reshuffle moved (payload bytes on the relay's incoming link).

    Attributes
    ----------
    epoch, before_round
        The shuffle epoch and the round it preceded.
    coded_bytes, plain_bytes
        Bytes of the coded plan and of plain copying (the uncoded plan, same message size).
    load, formula_load, plain_load
        The same in units: measured, the scheme's formula, uncoded.
    t
        The storage level.
    complete, incomplete
        Silos whose store reached the epoch, and the others (stragglers until repaired).
    seconds
        Wall time of the epoch (a reshuffle's includes the wait for the previous round's
        stragglers before it, :meth:`CodedSecAgg.settle`).
    """

    epoch: int
    before_round: int
    coded_bytes: int
    plain_bytes: int
    load: float
    formula_load: float
    plain_load: float
    t: int
    complete: tuple[int, ...]
    incomplete: tuple[int, ...]
    seconds: float

    def line(self) -> str:
        """The progress line of the epoch."""
        kind = "placement" if self.before_round == 1 else "reshuffle"
        ratio = self.coded_bytes / self.plain_bytes if self.plain_bytes else 0.0
        miss = f"; incomplete silos {list(self.incomplete)}" if self.incomplete else ""
        return (
            f"[coded-fl shuffle] {kind} (epoch {self.epoch}, before round {self.before_round}): "
            f"{self.coded_bytes:,} B coded vs {self.plain_bytes:,} B plain copying "
            f"(ratio {ratio:.3f}, t={self.t}; load {self.load:.4g} units, formula "
            f"{self.formula_load:.4g}), {self.seconds:.2f}s{miss}"
        )


class ShuffleEpochs:
    """The placement and reshuffle epochs of a run: :meth:`shuffle` and :meth:`place`.

    A base of :class:`~strategies.placement.ShuffledTraining`, which sets every attribute below.

    Attributes
    ----------
    strategy
        The coded secure aggregation (its ``num_stragglers`` is s).
    relay
        The shuffle transport.
    K, support
        The number of silos and the gradient code's support B (who must hold which partition).
    parts
        The partition map the epochs place.
    holdings
        The server's view of every silo's store, updated by every epoch's outcome.
    t
        The storage level of the epochs.
    placement_retries
        Epochs to run again while more than s silos lack their partitions.
    epochs, results
        Every epoch's :class:`EpochBytes` and :class:`~coded_fl.shuffling.ShuffleResult`.
    """

    strategy: CodedSecAgg
    relay: ShuffleRelay
    K: int
    support: np.ndarray
    parts: tuple[tuple[UnitId, ...], ...]
    holdings: Holdings
    t: int
    placement_retries: int
    epochs: list[EpochBytes]
    results: list[ShuffleResult]
    _say: Callable[[str], None]

    # ------------------------------------------------------------------ epochs
    def shuffle(
        self,
        run_id: str,
        epoch: int,
        before_round: int,
        *,
        waited: float = 0.0,
        avoid: frozenset[int] = frozenset(),
    ) -> EpochBytes:
        """One epoch from what the silos hold now to the placement of :attr:`parts`.

        The silos report their stores at the hello. If the server's view had fallen behind (a
        delivery reply lost after its commit), the view takes the reported holdings (the relay
        stops such an epoch before any key or data moves when the stale silo had to send), and
        an epoch that did not complete is planned again once, under the next epoch number.
        ``avoid``: silos not to send from (the silent ones of an epoch planned again,
        :meth:`place`): each unit comes from another of its holders if it has one.
        ``waited``: seconds already spent for this epoch (the settle before a reshuffle),
        counted in its :attr:`EpochBytes.seconds`.

        Parameters
        ----------
        run_id
            The run.
        epoch
            The shuffle epoch.
        before_round
            The round the epoch comes before.
        waited
            Seconds already waited for nodes (reported with the epoch).
        avoid
            Senders whose units must come from other holders.
        """
        spent = float(waited)
        for attempt in range(2):
            current = self.holdings.assignment()
            if avoid:  # units come from their other holders where they have any
                current = {u: (h - avoid) or h for u, h in current.items()}
            job = ShuffleJob.make(
                run_id=run_id,
                epoch=epoch + attempt,
                current=current,
                nxt=code_assignment(self.support, self.parts),
                K=self.K,
                t=self.t,
                mode="decentralized",
            )
            res = self.relay.run(job)
            self.results.append(res)
            spent += float(res.seconds.get("total", 0.0))
            corrected = self.holdings.update(res)
            if not (corrected and not res.ok):
                break
            self._say(
                f"[coded-fl shuffle] epoch {job.epoch}: the view of the stores was stale "
                f"({res.aborted}); planning again from what the silos reported"
            )
        unready = self._unready()
        ready = [k for k in range(self.K) if k not in unready]
        out = EpochBytes(
            epoch=job.epoch,
            before_round=before_round,
            coded_bytes=res.uplink_bytes,
            plain_bytes=res.uncoded_uplink_bytes,
            load=res.load,
            formula_load=res.formula_load,
            plain_load=res.uncoded_load,
            t=self.t,
            complete=tuple(ready),
            incomplete=tuple(k for k in range(self.K) if k not in ready),
            seconds=spent,
        )
        self.epochs.append(out)
        self._say(out.line())
        return out

    def place(self, run_id: str, before_round: int, *, waited: float = 0.0) -> EpochBytes:
        """One epoch to :attr:`parts`, then up to :attr:`placement_retries` more while more
        than s silos lack their partitions (no round could complete): each moves only what is
        missing, and sends nothing from the senders that failed others in the epoch before
        (:func:`~coded_fl.shuffling.transport.routing.suspect_senders`: messages waited for in vain,
        or decoded into units that failed their SHA-256 check). Such a sender costs the
        receivers of all its messages their units (with coded reshuffles both units of each
        of its pairs); their other holders send them instead. It is not counted as a holder
        in that epoch, so it is sent again what it holds of its own partitions (a store
        commits a unit it has once).

        Parameters
        ----------
        run_id
            The run.
        before_round
            The round the placement comes before.
        waited
            Seconds already waited for nodes.

        Returns
        -------
        EpochBytes
            The last epoch's figures.
        """
        out = self.shuffle(run_id, len(self.results) + 1, before_round, waited=waited)
        for _ in range(self.placement_retries):
            if len(out.incomplete) <= self.strategy.protocol.num_stragglers:
                break
            silent = set(suspect_senders(self.results[-1]))
            self._say(
                f"[coded-fl shuffle] {len(out.incomplete)} silos lack their partitions, more than "
                f"s = {self.strategy.protocol.num_stragglers}; moving what is missing again, not "
                f"from the silent or failing senders {sorted(silent)}"
            )
            out = self.shuffle(run_id, len(self.results) + 1, before_round, avoid=frozenset(silent))
        return out

    def _unready(self) -> list[int]:
        """Silos that do not hold every unit of their partitions (stragglers of the rounds)."""
        return [
            k
            for k in range(self.K)
            if not self.holdings.ready(k, partition_holders(self.support, k), self.parts)
        ]
