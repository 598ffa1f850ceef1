"""The one driver of the server machine: key exchanges and rounds, over any transport
(``docs/architecture.md``).

:class:`~coded_fl.secagg.server.ServerMachine` is sans-IO and holds the protocol's order itself:
once a key exchange or a round is opened, :meth:`~coded_fl.secagg.server.ServerMachine.
next_action` says what to do next as a typed action (:mod:`coded_fl.secagg.server.actions`:
send requests, compute, await replies, or the outcome). :class:`ProtocolDriver` follows the
actions and adds only what the machine cannot know: the transport, the clock (each stage's
deadline, the extra wait for check replies, silos not worth waiting for) and the notes on
refusals. It reaches the
silos through a :class:`~coded_fl.secagg.transport.Transport` (``send``, ``collect``, ``now``:
Flower's Grid in ``strategies``, the in-memory switchboard of
``simulations.runtime.secagg_harness``, which the cost model of
``simulations.stragglers.costs`` runs too) and hands each reply to
:func:`~coded_fl.secagg.replies.take`, which acts on typed refusals and notes them in
:class:`~coded_fl.secagg.replies.SiloNotes` for the caller. What a deployment wraps around a
round (the model to send, reruns for the weight bound or the clip range, evaluation) stays with
the caller.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from coded_fl.errors import CodedFLError, LocalProtocolError
from coded_fl.secagg.messages import Refusal
from coded_fl.secagg.replies import SiloNotes, take
from coded_fl.secagg.runs import KeyExchange, KeyExchangeError, RoundRun
from coded_fl.secagg.server import RoundAborted, ServerMachine
from coded_fl.secagg.server.actions import (
    AFTER_WAIT,
    Await,
    Compute,
    Deadline,
    KeysDone,
    RoundDone,
    SendRequests,
    Stage,
)
from coded_fl.secagg.transport import EXPECT, Batch, Reply, Transport, Waits

__all__ = ["KeyExchange", "KeyExchangeError", "ProtocolDriver", "RoundRun"]

LOG = logging.getLogger("coded_fl")

#: The step a received message is timed under (:attr:`ProtocolDriver.on_step`).
_RECEIVE_STEP = {
    "keys": "server_keys",
    "train": "server_upload",
    "recovery": "server_recovery",
    "reveal": "server_reveal",
    "view": "server_view",
}


class ProtocolDriver:
    """Runs key exchanges and rounds of one session over a transport.

    Parameters
    ----------
    machine
        The session's server machine.
    transport
        How requests reach the silos and replies come back.
    notes
        Where refusals are noted (default: a fresh :class:`SiloNotes`).
    log
        Where the driver says what happened (refused replies, accusations, verdicts).
    on_step
        Called with (step, CPU seconds) after every machine call (``server_upload``,
        ``server_close``, ``server_sum``, ``server_finish``, ...), for cost models; None: not
        timed.
    on_taken
        Called with every reply the machine took (e.g. to keep an upload's metric names).
    """

    def __init__(
        self,
        machine: ServerMachine,
        transport: Transport,
        *,
        notes: SiloNotes | None = None,
        log: logging.Logger = LOG,
        on_step: Callable[[str, float], None] | None = None,
        on_taken: Callable[[Reply], None] | None = None,
    ) -> None:
        self.machine = machine
        self.transport = transport
        self.notes = notes if notes is not None else SiloNotes()
        self.log = log
        self.on_step = on_step
        self.on_taken = on_taken

    # ------------------------------------------------------------------ helpers
    def _step(self, name: str, fn: Callable[[], Any]) -> Any:
        if self.on_step is None:
            return fn()
        t0 = time.thread_time()
        try:
            return fn()
        finally:
            self.on_step(name, time.thread_time() - t0)

    def take_reply(
        self,
        stage: str,
        reply: Reply,
        errors: dict[int, str],
        accused: dict[int, str] | None = None,
    ) -> bool:
        """An in-time reply of ``stage`` (see :func:`~coded_fl.secagg.replies.take`), timed.

        Parameters
        ----------
        stage
            ``keys``, ``train``, ``recovery`` or ``reveal``.
        reply
            The reply, as the transport read it.
        errors
            Silo -> why, filled on failure.
        accused
            Accused silo -> accusation (recovery stage).

        Returns
        -------
        bool
            True when the machine took the message.
        """
        taken: bool = self._step(
            _RECEIVE_STEP[stage],
            lambda: take(
                self.machine, self.notes, reply, EXPECT[stage], errors, accused, log=self.log
            ),
        )
        if taken and self.on_taken is not None:
            self.on_taken(reply)
        return taken

    # ------------------------------------------------------------------ keys
    def key_exchange(
        self, silos: Sequence[int] | None = None, *, round_: int = 0, waits: Waits | None = None
    ) -> KeyExchange:
        """Ask ``silos`` (default: all) for their public keys and fix the roster.

        Parameters
        ----------
        silos
            The silos to ask (default: all).
        round_
            The round the exchange comes after (for the transport's bookkeeping).
        waits
            ``waits.keys`` bounds the exchange (default: no bound).

        Returns
        -------
        KeyExchange

        Raises
        ------
        KeyExchangeError
            If too few silos would have keys for a round.
        """
        self._step("server_keys", lambda: self.machine.open_key_exchange(silos))
        follow = _Follow(self, round_, waits or Waits(), RoundRun())
        outcome = follow.run()
        if not isinstance(outcome, KeysDone):
            raise LocalProtocolError(f"a key exchange ended in {outcome!r}")
        for silo in follow.asked:
            if silo not in outcome.missing:
                self.notes.needs_keys.discard(silo)
        return KeyExchange(follow.asked, outcome.missing, follow.run_.errors)

    # ------------------------------------------------------------------ a round
    def run_round(
        self,
        number: int,
        *,
        inputs: bytes = b"",
        waits: Waits | None = None,
        skip: frozenset[int] | set[int] = frozenset(),
        label: int | None = None,
    ) -> RoundRun:
        """One protocol round, as the machine's actions lead it: train requests to the roster,
        the close at the first max(n - s, U) uploads (plus the extras the configuration asks
        for, while ``waits.extra`` allows), recovery where the masks do not cancel, the
        evidence stage where a survivor accused another, retries without convicted silos, the
        decode.

        Parameters
        ----------
        number
            The protocol round (never reused in a session).
        inputs
            The digest of what every silo trains on (bound into the masks).
        waits
            The stages' deadlines (default: none).
        skip
            Silos not worth waiting for (e.g. silent through the last two rounds): still asked,
            but the round closes without waiting for them once it may.
        label
            The round the transport files the round's messages under (default: ``number``;
            e.g. the Flower round, which a rerun shares with the attempt before it).

        Returns
        -------
        RoundRun
        """
        self.notes.weight_refused.clear()
        run = RoundRun()
        follow = _Follow(self, number if label is None else label, waits or Waits(), run, skip)
        self._step("server_start", lambda: self.machine.open_round(number, inputs=inputs))
        outcome = follow.run()
        run.result = outcome.result if isinstance(outcome, RoundDone) else outcome  # type: ignore[assignment]
        verdicts = run.result.verdicts if run.result is not None else ()
        for v in verdicts:
            run.accused[v.accused] = (
                f"silo {v.accuser} accused it in round {v.round}; judged on the evidence: silo "
                f"{v.liar} lied ({v.reason})"
            )
            self.log.warning(
                "[coded-fl] round %d: silo %d accused silo %d; the evidence shows silo %d lied "
                "(%s): named and left out of the session's later rounds",
                number,
                v.accuser,
                v.accused,
                v.liar,
                v.reason,
            )
        return run


class _Follow:
    """One key exchange or round: follows the machine's actions over the driver's transport,
    on its clock. The waiting rules per stage are the driver's; the order is the machine's."""

    def __init__(
        self,
        driver: ProtocolDriver,
        tag: int,
        waits: Waits,
        run: RoundRun,
        skip: frozenset[int] | set[int] = frozenset(),
    ) -> None:
        self.driver, self.machine, self.tr = driver, driver.machine, driver.transport
        self.tag, self.waits, self.run_, self.skip = tag, waits, run, skip
        self.t0 = self.tr.now()
        self.end = math.inf
        self.batch: Batch | None = None
        self.asked: tuple[int, ...] = ()
        self.retried: tuple[int, ...] | None = None

    def run(self) -> KeysDone | RoundDone | RoundAborted:
        """Follow the actions to the outcome."""
        machine, driver = self.machine, self.driver
        while True:
            action = machine.next_action()
            if isinstance(action, SendRequests):
                self._send(action)
            elif isinstance(action, Compute):
                driver._step(action.step, machine.compute)
            elif isinstance(action, Await):
                if self.batch is None:
                    raise LocalProtocolError("the machine awaits replies to nothing sent")
                getattr(self, "_collect_" + action.stage.value)(self.batch)
                if action.stage is Stage.TRAIN:
                    self.run_.close_seconds = self.tr.now() - self.t0
                try:
                    driver._step(AFTER_WAIT[action.stage][0], machine.stop_waiting)
                except CodedFLError as exc:
                    if action.stage is not Stage.KEYS:
                        raise
                    # the close refused the exchange: too few silos would have keys
                    raise KeyExchangeError(
                        str(exc), self.asked, machine.keyed_in_exchange, self.run_.errors
                    ) from None
            else:
                return action

    def _send(self, action: SendRequests) -> None:
        tr, waits = self.tr, self.waits
        if action.retry and action.requests:
            survivors = tuple(action.requests[0].survivors)  # type: ignore[attr-defined]
            if survivors != self.retried:
                self.retried = survivors
                self.driver.log.warning(
                    "[coded-fl] round %d: silos accused by several others dropped from the "
                    "survivors (their mask shares failed authentication); asking %s again",
                    self.tag,
                    list(survivors),
                )
        self.batch = tr.send(list(action.requests), stage=action.stage.value, round_=self.tag)
        if action.stage is Stage.KEYS:
            self.asked = tuple(q.recipient for q in action.requests)
        else:
            self.run_.round_trips += 1
        if action.deadline is Deadline.KEYS:
            self.end = tr.now() + waits.keys
        elif action.deadline is Deadline.ROUND:
            self.end = self.t0 + waits.round
        elif action.deadline is Deadline.RECOVERY:
            self.end = tr.now() + waits.recovery

    def _await(self) -> Await:
        action = self.machine.next_action()
        if not isinstance(action, Await):  # receive() never moves the flow on
            raise LocalProtocolError(f"expected to be awaiting replies, not {action!r}")
        return action

    def _take(self, stage: str, reply: Reply, accused: dict[int, str] | None = None) -> None:
        self.driver.take_reply(stage, reply, self.run_.errors, accused)

    # ------------------------------------------------------------ the waits, per stage
    def _collect_keys(self, batch: Batch) -> None:
        errors = self.run_.errors

        def on_reply(reply: Reply) -> bool:
            self._take("keys", reply)
            return len(errors) + self.machine.keys_received >= len(batch.silos)

        self.tr.collect(batch, (EXPECT["keys"], Refusal), on_reply, deadline=lambda: self.end)

    def _collect_train(self, batch: Batch) -> None:
        machine, tr, notes = self.machine, self.tr, self.driver.notes
        extra_until: list[float] = []
        awaited = set(batch.silos) - set(self.skip) - set(machine.excluded)
        answered: set[int] = set()
        extra_replies = machine.config.extra_replies

        def on_upload(reply: Reply) -> bool:
            self._take("train", reply)
            answered.add(reply.silo)
            wait = self._await()
            if wait.complete or (wait.ready and awaited <= answered):
                return True
            left = len(batch.silos) - len(notes.misconfigured) - len(notes.weight_refused)
            if left < machine.config.min_uploads:
                # too many silos refused because of a setting: no wait can complete the round
                # (other failures may be transient, e.g. a node restarting: the round waits)
                return True
            if wait.ready and not extra_until:
                extra_until.append(tr.now() + self.waits.extra)
            return bool(extra_until) and (extra_replies == 0 or tr.now() >= extra_until[0])

        tr.collect(
            batch,
            (EXPECT["train"], Refusal),
            on_upload,
            deadline=lambda: min([self.end, *extra_until]),
        )

    def _collect_view(self, batch: Batch) -> None:
        asked, answered = set(batch.silos), set()

        def on_view(reply: Reply) -> bool:
            self._take("view", reply)
            answered.add(reply.silo)
            return self._await().complete or answered >= asked

        self.tr.collect(batch, (EXPECT["view"], Refusal), on_view, deadline=lambda: self.end)

    def _collect_recovery(self, batch: Batch) -> None:
        tr = self.tr
        check_until: list[float] = []  # replies beyond U are checked: wait a little for them

        def on_recovery(reply: Reply) -> bool:
            self._take("recovery", reply, self.run_.accused)
            wait = self._await()
            if wait.complete:
                return True
            if wait.ready and not check_until:
                check_until.append(tr.now() + self.waits.extra)
            return bool(check_until) and tr.now() >= check_until[0]

        tr.collect(
            batch,
            (EXPECT["recovery"], Refusal),
            on_recovery,
            deadline=lambda: min([self.end, *check_until]),
        )

    def _collect_reveal(self, batch: Batch) -> None:
        waiting = Counter(batch.silos)  # requests per accused silo

        def on_reveal(reply: Reply) -> bool:
            self._take("reveal", reply)
            waiting[reply.silo] -= 1
            return self._await().complete or all(v <= 0 for v in waiting.values())

        self.tr.collect(batch, (EXPECT["reveal"], Refusal), on_reveal, deadline=lambda: self.end)
