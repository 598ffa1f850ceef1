"""The one place that orders the server machine's calls: key exchanges and rounds, over any
transport (``docs/architecture.md``).

:class:`~coded_fl.secagg.server.ServerMachine` is sans-IO, but must be called in the protocol's
order: keys; train requests; the close at the first max(n - s, U) uploads; recovery, disputes
and retries; the decode. :class:`ProtocolDriver` is that order, written once. It reaches the
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
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from coded_fl.errors import CodedFLError
from coded_fl.secagg.messages import Refusal, ViewRequest
from coded_fl.secagg.replies import SiloNotes, take
from coded_fl.secagg.runs import KeyExchange, KeyExchangeError, RoundRun
from coded_fl.secagg.server import RoundAborted, ServerMachine
from coded_fl.secagg.transport import EXPECT, Reply, Transport, Waits

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
        machine, tr = self.machine, self.transport
        errors: dict[int, str] = {}
        requests = self._step("server_keys", lambda: machine.start_key_exchange(silos))
        asked = tuple(q.recipient for q in requests)
        batch = tr.send(requests, stage="keys", round_=round_)
        end = tr.now() + (waits or Waits()).keys

        def on_reply(reply: Reply) -> bool:
            self.take_reply("keys", reply, errors)
            return len(errors) + machine.keys_received >= len(batch.silos)

        tr.collect(batch, (EXPECT["keys"], Refusal), on_reply, deadline=lambda: end)
        try:
            missing: tuple[int, ...] = self._step("server_keys", machine.close_key_exchange)
        except CodedFLError as exc:
            raise KeyExchangeError(str(exc), asked, machine.keyed_in_exchange, errors) from None
        for silo in asked:
            if silo not in missing:
                self.notes.needs_keys.discard(silo)
        return KeyExchange(asked, missing, errors)

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
        """One protocol round: train requests to the roster, the close at the first
        max(n - s, U) uploads (plus the extras the configuration asks for, while ``waits.extra``
        allows), recovery where the masks do not cancel, the evidence stage where a survivor
        accused another, retries without convicted silos, the decode.

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
        machine, tr, notes = self.machine, self.transport, self.notes
        waits = waits or Waits()
        run = RoundRun()
        notes.weight_refused.clear()
        t0 = tr.now()
        requests = self._step("server_start", lambda: machine.start_round(number, inputs=inputs))
        tag = number if label is None else label
        batch = tr.send(requests, stage="train", round_=tag)
        run.round_trips = 1
        deadline = t0 + waits.round
        extra_until: list[float] = []
        awaited = set(batch.silos) - set(skip) - set(machine.excluded)
        answered: set[int] = set()
        extra_replies = machine.config.extra_replies

        def on_upload(reply: Reply) -> bool:
            self.take_reply("train", reply, run.errors)
            answered.add(reply.silo)
            if machine.uploads_complete or (machine.uploads_ready and awaited <= answered):
                return True
            left = len(batch.silos) - len(notes.misconfigured) - len(notes.weight_refused)
            if left < machine.config.min_uploads:
                # too many silos refused because of a setting: no wait can complete the round
                # (other failures may be transient, e.g. a node restarting: the round waits)
                return True
            if machine.uploads_ready and not extra_until:
                extra_until.append(tr.now() + waits.extra)
            return bool(extra_until) and (extra_replies == 0 or tr.now() >= extra_until[0])

        tr.collect(
            batch,
            (EXPECT["train"], Refusal),
            on_upload,
            deadline=lambda: min([deadline, *extra_until]),
        )
        run.close_seconds = tr.now() - t0
        out = self._step("server_close", machine.close_collection)
        if isinstance(out, RoundAborted):
            run.result = out
            return run
        if out:
            aborted = self._recover(tag, out, run, waits)
            if aborted is not None:
                run.result = aborted
                return run
        run.result = self._step("server_finish", machine.finish)
        return run

    def _views(
        self, number: int, requests: list[Any], run: RoundRun, end: float
    ) -> list[Any] | RoundAborted:
        """The view stage where the silos sign their keys (:mod:`coded_fl.secagg.views`): while
        the machine asks for signatures of a survivor set, send, collect until all are in or
        ``end`` (a recovery's wait, :attr:`Waits.recovery`, of its own), close; then the
        recovery requests (or why the round ends)."""
        while requests and isinstance(requests[0], ViewRequest):
            self._view_stage(number, requests, run, end)
            requests = self._step("server_views", self.machine.close_views)
            if isinstance(requests, RoundAborted):
                return requests
        return requests

    def _view_stage(self, number: int, requests: list[Any], run: RoundRun, end: float) -> None:
        """Send one set's view requests; collect until every member signed, every one asked
        answered (a refusal too), or ``end``."""
        machine, tr = self.machine, self.transport
        batch = tr.send(requests, stage="view", round_=number)
        run.round_trips += 1
        asked, answered = set(batch.silos), set()

        def on_view(reply: Reply) -> bool:
            self.take_reply("view", reply, run.errors)
            answered.add(reply.silo)
            return machine.views_complete or answered >= asked

        tr.collect(batch, (EXPECT["view"], Refusal), on_view, deadline=lambda: end)

    def _recover(
        self, number: int, requests: list[Any], run: RoundRun, waits: Waits
    ) -> RoundAborted | None:
        """The recovery stage (after the survivor views where the silos sign their keys, and
        with its evidence stage and retries) of round ``number`` (as the transport files it);
        the abort if the views could not complete."""
        machine, tr = self.machine, self.transport
        signed = self._views(number, requests, run, tr.now() + waits.recovery)
        if isinstance(signed, RoundAborted):
            return signed
        batch = tr.send(signed, stage="recovery", round_=number)
        run.round_trips += 1
        self._step("server_sum", machine.sum_uploads)  # the bulk of the decode, while it travels
        end = tr.now() + waits.recovery
        check_until: list[float] = []  # replies beyond U are checked: wait a little for them

        def on_recovery(reply: Reply) -> bool:
            self.take_reply("recovery", reply, run.errors, run.accused)
            if machine.recovery_complete or machine.recovery_stuck:
                return True
            if machine.recovery_ready and not check_until:
                check_until.append(tr.now() + waits.extra)
            return bool(check_until) and tr.now() >= check_until[0]

        def close() -> float:
            return min([end, *check_until])

        expect = (EXPECT["recovery"], Refusal)
        tr.collect(batch, expect, on_recovery, deadline=close)
        self._settle_disputes(number, run, end)
        while not machine.recovery_ready:
            # silos accused by max(T + 1, 2) survivors: ask the others again without them
            again = self._step("server_retry", machine.retry_recovery)
            if again is None:
                break
            self.log.warning(
                "[coded-fl] round %d: silos accused by several others dropped from the "
                "survivors (their mask shares failed authentication); asking %s again",
                number,
                list(again[0].survivors) if again else [],
            )
            signed = self._views(number, again, run, end)
            if isinstance(signed, RoundAborted):
                return signed
            batch = tr.send(signed, stage="recovery", round_=number)
            run.round_trips += 1
            self._step("server_sum", machine.sum_uploads)  # over the new survivor set
            check_until.clear()
            tr.collect(batch, expect, on_recovery, deadline=close)
            self._settle_disputes(number, run, end)
        return None

    def _settle_disputes(self, number: int, run: RoundRun, end: float) -> None:
        """The evidence stage, only in a round with accusations: each accused silo is asked to
        reveal the one disputed share's key; the machine judges each reveal as it comes, and
        at the deadline (or once every accused answered) judges the rest against their
        accused. Each verdict is in ``run.accused``, its liar among the round's offenders."""
        machine, tr = self.machine, self.transport
        asks = self._step("server_disputes", machine.reveal_requests)
        if asks:
            batch = tr.send(asks, stage="reveal", round_=number)
            run.round_trips += 1
            waiting = Counter(batch.silos)  # requests per accused silo

            def on_reveal(reply: Reply) -> bool:
                self.take_reply("reveal", reply, run.errors)
                waiting[reply.silo] -= 1
                return machine.disputes_settled or all(v <= 0 for v in waiting.values())

            tr.collect(batch, (EXPECT["reveal"], Refusal), on_reveal, deadline=lambda: end)
        for v in self._step("server_disputes", machine.close_disputes):
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
