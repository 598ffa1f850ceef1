"""What one epoch of the shuffle transport did, as the relay saw it.

:class:`ShuffleResult` (with one :class:`SiloOutcome` per silo) is what
:meth:`~coded_fl.shuffling.transport.coordinator.RelayCoordinator.finish` returns and
:meth:`strategies.shuffle.ShuffleRelay.run` hands to the server's code: per-silo outcome, the
coded and uncoded loads and bytes, errors and refused messages. Plain data, no protocol logic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from coded_fl.shuffling.plan.theory import worst_case_loads
from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.transport.wire import ShuffleJob

__all__ = ["ShuffleResult", "SiloOutcome", "Status"]

#: A silo's end of an epoch (see :class:`SiloOutcome`).
Status = Literal["complete", "incomplete", "dropped", "absent", "aborted"]


@dataclass(frozen=True)
class SiloOutcome:
    """One silo's end of an epoch, as the relay saw it.

    Attributes
    ----------
    silo
        The silo's index.
    status
        ``complete`` (received and committed everything, store at the new epoch),
        ``incomplete`` (reported ``missing``/``failed`` units; kept its old units and epoch plus
        the complete verified new ones), ``dropped`` (took part, then errored or missed a
        deadline; every unit it was to receive counts as missing; it committed nothing unless
        its reply was lost after the commit), ``absent`` (never answered), ``aborted`` (the
        epoch stopped before delivery; no store changed).
    received, missing, failed
        Unit ids from the silo's delivery report (``missing``: every unit it was to receive
        when it sent no report).
    waiting_on
        Senders whose messages the missing units needed.
    store_epoch
        The epoch the silo's store reported (after the delivery if it sent a report).
    refused
        The messages the silo refused, with the reason.
    error
        Why the silo dropped or is incomplete ("" if nothing went wrong).
    holdings
        The units of the job its store held in full when it answered the hello (None if it
        did not answer, or is an older peer that does not report them).
    """

    silo: int
    status: Status
    received: tuple[UnitId, ...] = ()
    missing: tuple[UnitId, ...] = ()
    failed: tuple[UnitId, ...] = ()
    waiting_on: tuple[int, ...] = ()
    store_epoch: int | None = None
    refused: tuple[str, ...] = ()
    error: str = ""
    holdings: tuple[UnitId, ...] | None = None


@dataclass(frozen=True)
class ShuffleResult:
    """What one epoch of the transport did (figures in bytes of payload unless named wire).

    Attributes
    ----------
    job
        The epoch's public job.
    aborted
        Why the epoch stopped before delivery ("" if it did not).
    plan_id
        The plan id the members agreed on (zeros if none).
    messages, load, formula_load
        Coded messages of the plan, its load in units, the scheme's formula for it.
    uncoded_messages, uncoded_load
        The same for the uncoded plan of the same job.
    message_bytes
        Payload bytes of one coded message (the padded piece size).
    relayed
        Coded messages the relay accepted and forwarded.
    uplink_bytes, uplink_wire_bytes
        Payload (and wire) bytes the relay received: one copy per coded message, the load on
        the shared link of the coded-shuffling model.
    downlink_bytes
        Payload bytes it forwarded: one copy per receiver (Flower's links are point to point).
    uncoded_uplink_bytes, uncoded_downlink_bytes
        The same for the uncoded plan, at the same message size.
    silos
        One :class:`SiloOutcome` per silo, by index.
    errors
        One line per member that errored or missed a deadline, then problems no member can be
        named for.
    refused
        Coded messages the relay refused to route, with the reason.
    seconds
        Time per stage, as the driver measured it.
    keys_reused
        Whether the epoch continued the previous epoch's group key (its two key stages skipped:
        :mod:`~coded_fl.shuffling.transport.keyreuse`) instead of agreeing a fresh one.
    """

    job: ShuffleJob
    aborted: str
    plan_id: bytes
    messages: int
    load: float
    formula_load: float
    uncoded_messages: int
    uncoded_load: float
    message_bytes: int
    relayed: int
    uplink_bytes: int
    uplink_wire_bytes: int
    downlink_bytes: int
    uncoded_uplink_bytes: int
    uncoded_downlink_bytes: int
    silos: tuple[SiloOutcome, ...]
    errors: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    seconds: Mapping[str, float] = field(default_factory=dict)
    keys_reused: bool = False

    @property
    def ok(self) -> bool:
        """True iff the epoch was delivered and every silo is complete."""
        return not self.aborted and all(s.status == "complete" for s in self.silos)

    def outcome(self, silo: int) -> SiloOutcome:
        """Silo ``silo``'s outcome.

        Parameters
        ----------
        silo
            The silo's index, ``0..K-1``.

        Returns
        -------
        SiloOutcome
            Its end of the epoch.
        """
        return self.silos[silo]

    def summary(self) -> dict[str, Any]:
        """Plain figures for printing or JSON.

        Returns
        -------
        dict
            JSON-ready figures (bytes as hex).
        """
        return {
            "epoch": self.job.epoch,
            "K": self.job.K,
            "t": self.job.t,
            "mode": self.job.mode,
            "coded": self.job.coded,
            "units": len(self.job.units),
            "ok": self.ok,
            "aborted": self.aborted,
            "plan_id": self.plan_id.hex(),
            "messages": self.messages,
            "message_bytes": self.message_bytes,
            "load_units": self.load,
            "formula_load_units": self.formula_load,
            "uncoded_messages": self.uncoded_messages,
            "uncoded_load_units": self.uncoded_load,
            "relayed": self.relayed,
            "uplink_bytes": self.uplink_bytes,
            "uplink_wire_bytes": self.uplink_wire_bytes,
            "downlink_bytes": self.downlink_bytes,
            "uncoded_uplink_bytes": self.uncoded_uplink_bytes,
            "uncoded_downlink_bytes": self.uncoded_downlink_bytes,
            "silos": [dataclasses.asdict(s) for s in self.silos],
            "errors": list(self.errors),
            "refused": list(self.refused),
            "seconds": dict(self.seconds),
            "keys_reused": self.keys_reused,
        }

    def lines(self) -> list[str]:
        """Human-readable report.

        Returns
        -------
        list of str
            One line per figure group and per silo.
        """
        j = self.job
        out = [f"[coded-fl shuffle] {j.describe()}"]
        if self.aborted:
            out.append(f"  ABORTED before delivery, no store changed: {self.aborted}")
        else:
            out.append(
                f"  plan {self.plan_id.hex()[:16]}: {self.messages} coded messages of "
                f"{self.message_bytes} B, load {self.load:.4g} units (formula "
                f"{self.formula_load:.4g}; uncoded {self.uncoded_load:.4g}); group key "
                + ("continued from the previous epoch" if self.keys_reused else "agreed fresh")
            )
            out.append(
                f"  relay in (shared link): {self.uplink_bytes:,} B coded vs "
                f"{self.uncoded_uplink_bytes:,} B uncoded ({self.uplink_wire_bytes:,} B on the "
                f"wire); relay out (fan-out): {self.downlink_bytes:,} B vs "
                f"{self.uncoded_downlink_bytes:,} B"
            )
            q = len(j.units) / j.K
            if q.is_integer() and j.t < j.K:
                w = worst_case_loads(j.K, j.t, int(q))
                out.append(
                    f"  theory, worst case (q={q:g}): uncoded {w['uncoded']:.4g}, centralized "
                    f"{w['centralized']:.4g}, decentralized {w['decentralized']:.4g} units"
                )
        for s in self.silos:
            line = f"  silo {s.silo}: {s.status}, received {len(s.received)}"
            if s.missing or s.failed:
                line += f", missing {list(s.missing)}, failed {list(s.failed)}"
            if s.waiting_on:
                line += f" (waited on {list(s.waiting_on)})"
            if s.error:
                line += f": {s.error}"
            out.append(line)
        if self.seconds:
            out.append("  seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in self.seconds.items()))
        return out
