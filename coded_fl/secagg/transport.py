"""How the protocol driver (:mod:`coded_fl.secagg.driver`) reaches the silos: the
:class:`Transport` protocol, the :class:`Batch` of one stage's requests, a silo's :class:`Reply`
as a transport reads it, and the stages' :class:`Waits`.

A transport is three methods (``send``, ``collect``, ``now``); Flower's Grid
(``strategies.replies.FlowerTransport``) and the in-memory switchboard of
``simulations.runtime.secagg_harness`` are two. Nothing here knows a framework.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from coded_fl.secagg.messages import KeyReply, Message, RecoveryReply, Reveal, Upload, ViewReply

__all__ = ["EXPECT", "Batch", "Reply", "Transport", "Waits"]

#: The message type each stage's replies must have (besides a :class:`Refusal`).
EXPECT: dict[str, type[Message]] = {
    "keys": KeyReply,
    "train": Upload,
    "recovery": RecoveryReply,
    "reveal": Reveal,
    "view": ViewReply,
}


@dataclass(frozen=True)
class Reply:
    """One silo's answer to a request, as the transport read it.

    Parameters
    ----------
    silo
        The silo the reply came from (by the node it was sent to, not by what it claims).
    message
        The decoded protocol message (the stage's type or a :class:`Refusal`); None when the
        reply could not be read.
    error
        Why there is no message: the transport's failure (e.g. the silo's app raised) or why
        the bytes were refused.
    unreadable
        True when bytes came but were refused (logged as a refused reply); False for a
        transport failure.
    meta
        Whatever the transport wants back with the reply once the machine took it (e.g. the
        names of an upload's metrics); the driver does not read it.
    """

    silo: int
    message: Message | None = None
    error: str = ""
    unreadable: bool = False
    meta: Any = None


@dataclass(frozen=True)
class Batch:
    """The requests of one stage, as sent: the silos they reached and the transport's handle."""

    stage: str
    round: int
    silos: tuple[int, ...]
    handle: Any = None


class Transport(Protocol):
    """How the driver reaches the silos (see the module docstring)."""

    def send(self, requests: Sequence[Message], *, stage: str, round_: int) -> Batch:
        """Push one stage's requests.

        Parameters
        ----------
        requests
            One stage's protocol requests.
        stage
            keys, train, recovery or reveal.
        round_
            The round the transport files the messages under.

        Returns
        -------
        Batch
            The silos reached and the transport's handle.
        """
        ...

    def collect(
        self,
        batch: Batch,
        expect: tuple[type[Message], ...],
        on_reply: Callable[[Reply], bool],
        *,
        deadline: Callable[[], float],
    ) -> None:
        """Hand replies to ``on_reply`` until it returns True, every reply came, or ``now()``
        passes ``deadline()``. A body whose type is not in ``expect`` need not be decoded.

        Parameters
        ----------
        batch
            What send returned.
        expect
            The message types the stage takes (besides a Refusal).
        on_reply
            Takes each reply as it comes; True: the stage is done.
        deadline
            The time (on now's clock) to stop at; asked again after every reply.
        """
        ...

    def now(self) -> float:
        """The transport's clock, in seconds (deadlines are on it)."""
        ...


@dataclass(frozen=True)
class Waits:
    """How long each stage may wait, in seconds of the transport's clock.

    Parameters
    ----------
    round
        From the train requests to the close of the collection.
    recovery
        From the recovery requests to the decode (the evidence stage included).
    extra
        After max(n - s, U) uploads (or U recovery replies): how long to wait for the extra
        replies the configuration asks for (``extra_replies``).
    keys
        A key exchange.
    """

    round: float = math.inf
    recovery: float = math.inf
    extra: float = math.inf
    keys: float = math.inf
