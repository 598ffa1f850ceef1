"""Push messages, then act on the replies as they arrive; every wait has a deadline.

``Grid.send_and_receive`` waits for every reply (or the timeout). The coded protocol must act on
the first replies instead, so the strategy pushes with :meth:`Exchange.push` and pulls with
:meth:`Exchange.collect`, which hands each reply to a callback that says when enough is enough.
Replies that come after their stage was closed (stragglers) are still pulled opportunistically,
only to time-stamp them: "how long would waiting for everyone have taken".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from flwr.app import Message
from flwr.serverapp import Grid

__all__ = ["Exchange", "LateReply"]


@dataclass
class LateReply:
    """A reply pulled after its stage closed: when it arrived, relative to the stage start."""

    node_id: int
    stage: str
    round: int
    seconds: float
    error: bool
    reason: str = ""


@dataclass
class _Pending:
    node_id: int
    stage: str
    round: int
    started: float


#: The first wait of a collection, and after every pull that brought replies: a stage's
#: replies come in bunches (a simulation answers within milliseconds), so the wait starts
#: short and doubles up to ``poll_interval`` while nothing arrives.
FIRST_WAIT = 0.005


@dataclass
class Exchange:
    """Message bookkeeping for one run.

    Parameters
    ----------
    grid
        The Flower grid messages are pushed to and pulled from.
    poll_interval
        The longest wait between pulls that brought nothing (the wait starts at
        :data:`FIRST_WAIT` and doubles).
    on_late
        Called with every late reply as it is time-stamped.
    """

    grid: Grid
    poll_interval: float = 0.05
    #: called with every late reply as it is time-stamped (e.g. to act on a typed refusal)
    on_late: Callable[[LateReply, Message], None] | None = None
    late: list[LateReply] = field(default_factory=list)
    #: node -> monotonic time of the last reply pulled from it (in time, late or an error):
    #: when the server last heard from the node at all
    heard: dict[int, float] = field(default_factory=dict)
    _pending: dict[str, _Pending] = field(default_factory=dict)
    _lingering: dict[str, _Pending] = field(default_factory=dict)

    def push(self, messages: Iterable[Message], *, stage: str, round_: int) -> dict[str, int]:
        """Push messages; returns message id -> destination node for the ones accepted.

        Parameters
        ----------
        messages
            The Flower messages.
        stage
            The stage they belong to (for late replies).
        round_
            The round they belong to.

        Returns
        -------
        dict[str, int]
            Message id -> destination node, for the messages the grid accepted.
        """
        msgs = list(messages)
        ids = list(self.grid.push_messages(msgs))
        now = time.monotonic()
        out = {}
        for msg, mid in zip(msgs, ids, strict=True):
            if mid:  # the grid returns None for a message it could not push
                node = msg.metadata.dst_node_id
                self._pending[mid] = _Pending(node, stage, round_, now)
                out[mid] = node
        return out

    def collect(
        self,
        ids: Iterable[str],
        on_reply: Callable[[int, Message], bool],
        *,
        deadline: float | Callable[[], float],
    ) -> bool:
        """Pull replies for ``ids`` until ``on_reply`` returns True (done) or the deadline
        (a monotonic time, or a function giving it: a stage that may close early once enough
        replies came moves its deadline then).

        Returns True if ``on_reply`` said done, False if the deadline passed or every reply came
        without that. Replies still missing afterwards become "lingering": later pulls
        time-stamp them as late replies.

        Parameters
        ----------
        ids
            The message ids to wait for.
        on_reply
            Takes (node, reply); True: done.
        deadline
            A monotonic time, or a function giving it.

        Returns
        -------
        bool
            True if on_reply said done.
        """
        wanted = {i for i in ids if i in self._pending}
        done = False
        wait = min(FIRST_WAIT, self.poll_interval)
        while wanted and not done:
            pulled = list(self.grid.pull_messages(list(wanted | set(self._lingering))))
            for reply in pulled:
                mid = reply.metadata.reply_to_message_id
                if mid in self._lingering:
                    self._record_late(mid, reply)
                elif mid in wanted and not done:
                    wanted.discard(mid)
                    pending = self._pending.pop(mid)
                    self.heard[pending.node_id] = time.monotonic()
                    done = bool(on_reply(pending.node_id, reply))
                elif mid in wanted:  # pulled in the same batch after the stage was done:
                    wanted.discard(mid)  # the SuperLink gave it up, so time-stamp it as late
                    self._lingering[mid] = self._pending.pop(mid)
                    self._record_late(mid, reply)
            if done or not wanted:
                break
            if time.monotonic() >= (deadline() if callable(deadline) else deadline):
                break
            if pulled:  # replies come in bunches: look again soon
                wait = min(FIRST_WAIT, self.poll_interval)
            else:  # back off to poll_interval while nothing comes
                time.sleep(wait)
                wait = min(2 * wait, self.poll_interval)
        for mid in wanted:  # not needed any more: keep time-stamping them
            self._lingering[mid] = self._pending.pop(mid)
        return done

    def drain(self, seconds: float) -> None:
        """Keep pulling lingering replies for up to ``seconds`` (bounded) to time-stamp them.

        Parameters
        ----------
        seconds
            The longest wait.
        """
        end = time.monotonic() + seconds
        wait = min(FIRST_WAIT, self.poll_interval)
        while self._lingering and time.monotonic() < end:
            pulled = list(self.grid.pull_messages(list(self._lingering)))
            for reply in pulled:
                mid = reply.metadata.reply_to_message_id
                if mid in self._lingering:
                    self._record_late(mid, reply)
            if pulled:  # as in collect: look again soon, back off while nothing comes
                wait = min(FIRST_WAIT, self.poll_interval)
            elif self._lingering:
                time.sleep(min(wait, max(0.0, end - time.monotonic())))
                wait = min(2 * wait, self.poll_interval)

    def outstanding(self) -> list[int]:
        """Nodes with a message whose reply has not come yet (sorted, each once)."""
        return sorted({p.node_id for p in self._lingering.values()})

    def poll(self) -> None:
        """One pull of the lingering replies (no waiting), to time-stamp those already in."""
        if self._lingering:
            for reply in self.grid.pull_messages(list(self._lingering)):
                mid = reply.metadata.reply_to_message_id
                if mid in self._lingering:
                    self._record_late(mid, reply)

    def lingering(self, stage: str, round_: int) -> list[int]:
        """Nodes that have not answered ``stage`` of ``round_`` yet.

        Parameters
        ----------
        stage
            The stage.
        round_
            The round.

        Returns
        -------
        list[int]
        """
        return [
            p.node_id for p in self._lingering.values() if p.stage == stage and p.round == round_
        ]

    def heard_since(self, since: float) -> set[int]:
        """Nodes the run pulled any reply from (in time, late or an error) at or after the
        monotonic time ``since``.

        Parameters
        ----------
        since
            A monotonic time.

        Returns
        -------
        set[int]
        """
        return {node for node, at in self.heard.items() if at >= since}

    def _record_late(self, mid: str, reply: Message) -> None:
        p = self._lingering.pop(mid)
        self.heard[p.node_id] = time.monotonic()
        reason = str(reply.error.reason or "") if reply.has_error() else ""
        late = LateReply(
            p.node_id, p.stage, p.round, time.monotonic() - p.started, reply.has_error(), reason
        )
        self.late.append(late)
        if self.on_late is not None:
            self.on_late(late, reply)
