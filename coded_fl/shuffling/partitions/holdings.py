"""The server's view of what each silo's store verifiably holds, updated from every epoch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from coded_fl.shuffling.partitions.maps import Partitions
from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.transport.results import ShuffleResult

__all__ = ["Holdings"]


@dataclass
class Holdings:
    """The server's view of the units each silo verifiably holds (its store's units).

    Attributes
    ----------
    held
        Silo -> the unit ids its store holds.
    """

    held: dict[int, set[UnitId]] = field(default_factory=dict)

    @classmethod
    def from_assignment(cls, assignment: Mapping[UnitId, frozenset[int]], K: int) -> Holdings:
        """The view in which every silo holds exactly what ``assignment`` gives it.

        Parameters
        ----------
        assignment
            Unit -> the silos that hold it.
        K
            Silos.

        Returns
        -------
        Holdings
        """
        held: dict[int, set[UnitId]] = {k: set() for k in range(K)}
        for u, silos in assignment.items():
            for k in silos:
                held[k].add(u)
        return cls(held)

    def assignment(self) -> dict[UnitId, frozenset[int]]:
        """Unit -> the silos that hold it (the next job's current assignment)."""
        out: dict[UnitId, set[int]] = {}
        for k, units in self.held.items():
            for u in units:
                out.setdefault(u, set()).add(k)
        return {u: frozenset(s) for u, s in out.items()}

    def update(self, result: ShuffleResult) -> bool:
        """Apply an epoch's outcome: a complete silo holds its target units; any other keeps
        its old units plus the units it reported received (verified and committed). "Its old
        units" are what its store reported at the epoch's hello when it did (that corrects a
        view left behind by a reply lost after a commit), else what this view had.

        Parameters
        ----------
        result
            The epoch's result.

        Returns
        -------
        bool
            True iff a store's reported holdings differed from this view (it was corrected).
        """
        _, target = result.job.assignments()
        job_units = set(result.job.units)
        corrected = False
        for outcome in result.silos:
            k = outcome.silo
            old = self.held.setdefault(k, set())
            if outcome.holdings is not None:
                reported = set(outcome.holdings)
                if reported != old & job_units:
                    corrected = True
                old = self.held[k] = (old - job_units) | reported
            if not result.aborted and outcome.status == "complete":
                self.held[k] = {u for u, silos in target.items() if k in silos}
            else:
                old.update(outcome.received)
        return corrected

    def ready(self, silo: int, partitions: Sequence[int], parts: Partitions) -> bool:
        """True iff ``silo`` holds every unit of every partition in ``partitions``.

        Parameters
        ----------
        silo
            The silo.
        partitions
            The partitions it must hold.
        parts
            Partition -> its units.

        Returns
        -------
        bool
        """
        have = self.held.get(silo, set())
        return all(u in have for j in partitions for u in parts[j])
