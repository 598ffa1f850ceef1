"""The relay's result: each silo's outcome and the epoch's figures, at any point of the epoch."""

from __future__ import annotations

from collections.abc import Mapping

from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.transport.relay_core import RelayCore
from coded_fl.shuffling.transport.results import ShuffleResult, SiloOutcome, Status

__all__ = ["RelayResultPhase"]


class RelayResultPhase(RelayCore):
    """The result of :class:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator`
    (:meth:`finish`), on the state :class:`~coded_fl.shuffling.transport.relay_core.RelayCore`
    declares.

    Attributes
    ----------
    job, aborted
        As :class:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator` documents them; the
        result copies them.
    """

    # ------------------------------------------------------------------ result
    def _needs(self, k: int) -> tuple[UnitId, ...]:
        ids = self.routing.manifest.ids
        return tuple(ids[n] for n in self.routing.needs[k])

    def _outcome(self, k: int) -> SiloOutcome:
        err = self._errors.get(k, "")
        epoch = self._store_epoch.get(k)
        rep = self._reports.get(k)
        if rep is not None and rep.report is not None:
            r = rep.report
            return SiloOutcome(
                k,
                "complete" if r.complete else "incomplete",
                r.received,
                r.missing,
                r.failed,
                r.waiting_on,
                rep.store_epoch,
                rep.refused,
                "" if r.complete else err,
                self._holdings.get(k),
            )
        if self.aborted:
            status: Status = "aborted"
        elif k in self._keys:
            status = "dropped"
        else:
            status = "absent"
        return SiloOutcome(
            k,
            status,
            missing=self._needs(k),
            store_epoch=epoch,
            error=err,
            holdings=self._holdings.get(k),
        )

    def finish(self, *, seconds: Mapping[str, float] | None = None) -> ShuffleResult:
        """The result so far (call it after the last stage, or after an abort).

        Parameters
        ----------
        seconds
            Time per stage, as the driver measured it (copied into the result).

        Returns
        -------
        ShuffleResult
            Per-silo outcome, loads, bytes, errors.
        """
        plan, unc, traffic = self.routing, self.uncoded, self._traffic
        piece = traffic.piece
        return ShuffleResult(
            job=self.job,
            aborted=self.aborted,
            plan_id=self._plan_id,
            messages=plan.n_messages,
            load=plan.load,
            formula_load=plan.formula_load(),
            uncoded_messages=unc.n_messages,
            uncoded_load=unc.load,
            message_bytes=piece,
            relayed=traffic.relayed,
            uplink_bytes=traffic.up,
            uplink_wire_bytes=traffic.up_wire,
            downlink_bytes=traffic.down,
            uncoded_uplink_bytes=unc.n_messages * piece,
            uncoded_downlink_bytes=int(unc.term_row.size) * piece,
            silos=tuple(self._outcome(k) for k in range(self.job.K)),
            errors=tuple(
                f"{'central sender' if m == self.job.sender else f'silo {m}'}: {e}"
                for m, e in sorted(self._errors.items())
            )
            + tuple(self._notes),
            refused=traffic.refused,
            seconds=dict(seconds or {}),
            keys_reused=self.keys_reused,
        )
