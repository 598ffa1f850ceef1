"""The public description of one shuffle epoch: :class:`ShuffleJob`, what the relay knows and
may tell everyone (run and epoch, K, t, the mode, the unit ids and both assignments), its JSON
form and its digest."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coded_fl.errors import CodedFLError, ConfigurationError, InputError, RemoteProtocolError
from coded_fl.shuffling.plan.placement import check_storage
from coded_fl.shuffling.plan.planner import Mode
from coded_fl.shuffling.plan.units import UnitId
from coded_fl.shuffling.transport.fields import _check_unit_id, _int_list, _typed, _unit_list

__all__ = ["ShuffleJob"]

_MODES = ("centralized", "decentralized")


def _unit_key(u: UnitId) -> tuple[str, str | int]:
    return (type(u).__name__, u)


@dataclass(frozen=True)
class ShuffleJob:
    """The public description of one shuffle epoch (units in canonical order).

    Made with :meth:`make`; a storage ``storage`` (units per silo) is checked against both
    assignments plus the level-t cache when given (ConfigurationError naming the silo).

    Attributes
    ----------
    run_id : str
        The run (non-empty).
    epoch : int
        The epoch, in [0, 2**63).
    K, t : int
        Silos and storage level (``0..K``).
    mode : Mode
        ``"centralized"`` or ``"decentralized"``.
    units : tuple
        The N unit ids in canonical order.
    current, target : tuple of frozenset of int
        The current and next holders of each unit, in the order of ``units``.
    coded : bool
        False for the uncoded baseline.
    storage : float or None
        Storage per silo in units (M), checked when given.
    """

    run_id: str
    epoch: int
    K: int
    t: int
    mode: Mode
    units: tuple[UnitId, ...]
    current: tuple[frozenset[int], ...]
    target: tuple[frozenset[int], ...]
    coded: bool = True
    storage: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ConfigurationError("run_id must be a non-empty string")
        if isinstance(self.epoch, bool) or not isinstance(self.epoch, int):
            raise ConfigurationError(f"epoch must be an integer, got {self.epoch!r}")
        if not 0 <= self.epoch < 2**63:
            raise ConfigurationError(f"epoch must be in [0, 2**63), got {self.epoch}")
        if isinstance(self.K, bool) or not isinstance(self.K, int) or self.K < 1:
            raise ConfigurationError(f"K (silos) must be >= 1, got {self.K!r}")
        if isinstance(self.t, bool) or not isinstance(self.t, int) or not 0 <= self.t <= self.K:
            raise ConfigurationError(f"storage level t must be in 0..K = 0..{self.K}, got {self.t}")
        if self.mode not in _MODES:
            raise ConfigurationError(f"mode must be one of {_MODES}, got {self.mode!r}")
        units = [_check_unit_id(u) for u in self.units]
        if not units:
            raise InputError("the job has no units")
        if len(set(units)) != len(units) or units != sorted(units, key=_unit_key):
            raise InputError("job units must be distinct and in canonical order (use make)")
        if len(self.current) != len(units) or len(self.target) != len(units):
            raise InputError("current and target must list the holders of every unit")
        for label, group in (("current", self.current), ("next", self.target)):
            for u, holders in zip(units, group, strict=True):
                bad = sorted(k for k in holders if not 0 <= k < self.K)
                if bad:
                    raise InputError(
                        f"{label} assignment: unit {u!r} is given to silos {bad}, "
                        f"outside 0..{self.K - 1}"
                    )
        if self.storage is not None and not (
            isinstance(self.storage, (int, float))
            and not isinstance(self.storage, bool)
            and math.isfinite(self.storage)
        ):
            raise ConfigurationError(f"storage must be a finite number, got {self.storage!r}")
        if self.storage is not None:
            check_storage(
                self.K,
                self.t,
                float(self.storage),
                [("current", self.current), ("next", self.target)],
            )

    @classmethod
    def make(
        cls,
        *,
        run_id: str,
        epoch: int,
        current: Mapping[UnitId, Any],
        nxt: Mapping[UnitId, Any],
        K: int,
        t: int,
        mode: Mode = "centralized",
        coded: bool = True,
        storage: float | None = None,
    ) -> ShuffleJob:
        """A job from unit -> holders mappings (units absent from one mapping hold nobody).

        Parameters
        ----------
        run_id
            The run (non-empty).
        epoch
            The epoch, in [0, 2**63).
        current
            Unit id -> the silos that hold it in full now.
        nxt
            Unit id -> the silos that must hold it after the epoch.
        K
            The number of silos.
        t
            The storage level, ``0..K``.
        mode
            ``"centralized"`` (a central sender, member K, holds every unit) or
            ``"decentralized"``.
        coded
            False for the uncoded baseline.
        storage
            Storage per silo in units (M); when given, every silo of both assignments must fit
            its level-t cache plus its units.

        Returns
        -------
        ShuffleJob
            The job, units in canonical order.

        Raises
        ------
        ConfigurationError
            If ``run_id``, ``epoch``, ``K``, ``t`` or ``mode`` is invalid, or a silo's storage is
            too small (naming the silo).
        InputError
            If a unit id is not a str or int, there are no units, or a unit is given to a silo
            outside ``0..K-1``.
        """
        units = tuple(sorted({*current, *nxt}, key=_unit_key))
        for u in units:
            _check_unit_id(u)
        return cls(
            run_id=run_id,
            epoch=epoch,
            K=K,
            t=t,
            mode=mode,
            units=units,
            current=tuple(frozenset(int(k) for k in current.get(u, ())) for u in units),
            target=tuple(frozenset(int(k) for k in nxt.get(u, ())) for u in units),
            coded=coded,
            storage=storage,
        )

    # -- who takes part ----------------------------------------------------------------------
    @property
    def sender(self) -> int | None:
        """The central sender's member id (K) in the centralized setting, else None."""
        return self.K if self.mode == "centralized" else None

    @property
    def members(self) -> range:
        """Member ids: silos 0..K-1, and K (the sender) in the centralized setting. A range,
        not a list: K comes from the relay's Hello and must cost nothing to hold."""
        return range(self.K + (1 if self.mode == "centralized" else 0))

    def assignments(self) -> tuple[dict[UnitId, frozenset[int]], dict[UnitId, frozenset[int]]]:
        """(current, next) as unit -> holders mappings."""
        return dict(zip(self.units, self.current, strict=True)), dict(
            zip(self.units, self.target, strict=True)
        )

    def unvouched(self) -> tuple[UnitId, ...]:
        """Units some silo must receive that no member can send: in the decentralized setting
        at t = 0 (no caches), units missing from every silo. (The central sender holds every
        unit; at t >= 1 silos send a unit from their caches and vouch for it with the spec
        their stores know, checked when the members plan.)"""
        if self.mode == "centralized" or self.t >= 1:
            return ()
        return tuple(
            u
            for u, now, nxt in zip(self.units, self.current, self.target, strict=True)
            if not now and nxt - now
        )

    # -- identity ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The job as a JSON-ready dict (what a Hello carries; :meth:`digest` hashes it)."""
        return {
            "run": self.run_id,
            "epoch": self.epoch,
            "K": self.K,
            "t": self.t,
            "mode": self.mode,
            "coded": self.coded,
            "storage": self.storage,
            "units": list(self.units),
            "current": [sorted(h) for h in self.current],
            "next": [sorted(h) for h in self.target],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ShuffleJob:
        """Parse a job (RemoteProtocolError if malformed or invalid).

        Parameters
        ----------
        d
            The job as JSON (a mapping).

        Returns
        -------
        ShuffleJob
        """
        try:
            storage = d["storage"]
            if storage is not None and not isinstance(storage, (int, float)):
                raise InputError("storage must be a number or null")
            return cls(
                run_id=_typed(d, "run", str),
                epoch=_typed(d, "epoch", int),
                K=_typed(d, "K", int),
                t=_typed(d, "t", int),
                mode=_typed(d, "mode", str),
                units=tuple(_unit_list(d, "units")),
                current=tuple(frozenset(_int_list(h)) for h in _typed(d, "current", list)),
                target=tuple(frozenset(_int_list(h)) for h in _typed(d, "next", list)),
                coded=_typed(d, "coded", bool),
                storage=storage,
            )
        except (KeyError, TypeError) as exc:
            raise RemoteProtocolError(f"malformed shuffle job: {exc!r}") from None
        except CodedFLError as exc:
            if isinstance(exc, RemoteProtocolError):
                raise
            raise RemoteProtocolError(f"invalid shuffle job: {exc}") from None

    def digest(self) -> bytes:
        """16 bytes naming this job: every packet of the epoch carries it."""
        raw = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(b"codedfl-shuffle-job-v1" + raw).digest()[:16]

    def describe(self) -> str:
        """One line for logs: epoch, K, the number of units, t and the mode."""
        return (
            f"epoch {self.epoch}: K={self.K} silos, {len(self.units)} units, t={self.t}, "
            f"{self.mode}{'' if self.coded else ' (uncoded)'}"
        )
