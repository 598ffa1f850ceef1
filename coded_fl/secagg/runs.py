"""What the protocol driver (:class:`~coded_fl.secagg.driver.ProtocolDriver`) returns: a
round as it ran (:class:`RoundRun`), a key exchange (:class:`KeyExchange`), and the error of an
exchange that left too few silos with keys (:class:`KeyExchangeError`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from coded_fl.errors import DecodingError
from coded_fl.secagg.server import RoundAborted, RoundResult

__all__ = ["KeyExchange", "KeyExchangeError", "RoundRun"]


@dataclass
class RoundRun:
    """One round as the driver ran it.

    Attributes
    ----------
    result
        The machine's decode, or why the round aborted.
    round_trips
        Request/reply trips (train, survivor views, recovery, evidence, retries).
    close_seconds
        From the train requests to the close of the collection (transport clock).
    errors
        Silo -> why one of its replies was not taken (the last one).
    accused
        Accused silo -> the accusation, then the verdict on it.
    """

    result: RoundResult | RoundAborted | None = None
    round_trips: int = 0
    close_seconds: float = 0.0
    errors: dict[int, str] = field(default_factory=dict)
    accused: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KeyExchange:
    """One key exchange as the driver ran it.

    Attributes
    ----------
    asked
        The silos asked.
    missing
        Those asked that sent no key (the rounds can do without them).
    errors
        Silo -> why its reply failed (silos missing here sent nothing in time).
    """

    asked: tuple[int, ...]
    missing: tuple[int, ...]
    errors: dict[int, str]


class KeyExchangeError(DecodingError):
    """A key exchange left too few silos with keys for a round (the machine's
    :class:`~coded_fl.errors.DecodingError`, with what each silo answered).

    Attributes
    ----------
    asked
        The silos asked.
    keyed
        Those that sent a key.
    errors
        Silo -> why its reply failed (silos missing here sent nothing in time).
    """

    def __init__(
        self, why: str, asked: tuple[int, ...], keyed: tuple[int, ...], errors: dict[int, str]
    ) -> None:
        super().__init__(why)
        self.asked, self.keyed, self.errors = asked, keyed, errors
