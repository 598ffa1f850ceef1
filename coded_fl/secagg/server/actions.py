"""What the server machine asks its driver to do next (:meth:`ServerMachine.next_action`), as
typed values, and the transitions between them as data.

A driver opens a key exchange or a round and then only follows the actions, in the h11 style
(``next_event``): :class:`SendRequests` (push them; they say which deadline bounds the wait
for their replies), :class:`Compute` (the machine has work to do while the requests travel;
call ``compute()``), :class:`Await` (hand every reply to ``receive``; the flags say whether
the machine could close now and whether waiting longer can add anything; when the driver
stops waiting, all in or its deadline passed, it calls ``stop_waiting()``), and an outcome:
:class:`KeysDone`, :class:`RoundDone` or :class:`~coded_fl.secagg.server.state.RoundAborted`
(with its typed :class:`~coded_fl.secagg.server.state.AbortCode`). Which stage follows the end
of which wait is the table :data:`AFTER_WAIT`; the driver holds no protocol order of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from coded_fl.secagg.messages import Message
from coded_fl.secagg.server.state import RoundAborted, RoundResult

__all__ = [
    "AFTER_WAIT",
    "COMPUTE",
    "Action",
    "Await",
    "Compute",
    "Deadline",
    "KeysDone",
    "RoundDone",
    "SendRequests",
    "Stage",
]


class Stage(str, Enum):
    """A request/reply stage (the value is the transport's stage name)."""

    KEYS = "keys"
    TRAIN = "train"
    VIEW = "view"
    RECOVERY = "recovery"
    REVEAL = "reveal"


class Deadline(str, Enum):
    """The deadline a stage's wait runs under: the driver's :class:`~coded_fl.secagg.transport.
    Waits` field it starts when it sends the requests, or ``CONTINUE``: the one already running
    (a smaller survivor set to sign, an evidence stage, a retry without convicted silos)."""

    KEYS = "keys"
    ROUND = "round"
    RECOVERY = "recovery"
    CONTINUE = "continue"


@dataclass(frozen=True)
class SendRequests:
    """Push ``requests`` (one per silo) for ``stage``.

    Attributes
    ----------
    stage
        The stage they open.
    requests
        The messages, one per recipient.
    deadline
        The deadline their replies are awaited under.
    retry
        True when the recovery is asked again without silos convicted by accusations.
    """

    stage: Stage
    requests: tuple[Message, ...]
    deadline: Deadline
    retry: bool = False


@dataclass(frozen=True)
class Compute:
    """Work the machine does now (``compute()``), timed by the driver under ``step``:
    ``server_sum`` (the weighted sum of the uploads, while the recovery requests travel) or
    ``server_finish`` (the decode)."""

    step: str


@dataclass(frozen=True)
class Await:
    """Hand ``stage``'s replies to ``receive`` until the driver stops waiting.

    Attributes
    ----------
    stage
        The stage whose replies are due.
    ready
        The machine could close the stage now (enough uploads or recovery replies); more
        replies are checks.
    complete
        Every reply the machine could take is in, or waiting longer cannot help (a recovery
        too many survivors refused): stop now.
    """

    stage: Stage
    ready: bool
    complete: bool


@dataclass(frozen=True)
class KeysDone:
    """The key exchange closed; ``missing``: the silos asked that sent no key."""

    missing: tuple[int, ...]


@dataclass(frozen=True)
class RoundDone:
    """The round decoded."""

    result: RoundResult


#: Every value :meth:`ServerMachine.next_action` returns.
Action = SendRequests | Compute | Await | KeysDone | RoundDone | RoundAborted

#: The transitions: the wait that ends -> (the step the driver times the close under, the
#: machine's handler, which says what follows: requests, work or an outcome).
AFTER_WAIT: dict[Stage, tuple[str, str]] = {
    Stage.KEYS: ("server_keys", "_after_keys"),
    Stage.TRAIN: ("server_close", "_after_collection"),
    Stage.VIEW: ("server_views", "_after_views"),
    Stage.RECOVERY: ("server_disputes", "_after_recovery"),
    Stage.REVEAL: ("server_disputes", "_settle"),
}

#: The work a :class:`Compute` names -> the machine's method that does it.
COMPUTE: dict[str, str] = {
    "server_sum": "sum_uploads",
    "server_finish": "_finish_round",
}
