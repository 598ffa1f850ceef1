"""The server's side of the protocol as a sans-IO state machine.

A driver does not call the steps below itself: it opens a key exchange or a round
(``open_key_exchange``, ``open_round``) and follows :meth:`ServerMachine.next_action`, which
returns typed actions (:mod:`~coded_fl.secagg.server.actions`: send requests, compute, await
replies, or the outcome); ``stop_waiting`` ends a wait and the machine's flow calls the next
step (:data:`~coded_fl.secagg.server.actions.AFTER_WAIT`). The one driver is
:class:`coded_fl.secagg.driver.ProtocolDriver`. The steps, in the order the flow calls them
(``docs/protocol.md`` has the whole protocol and its proofs):

- ``start_key_exchange`` -> KeyRequests; ``receive(KeyReply)``; ``close_key_exchange`` fixes the
  roster (once per run, again when membership changes).
- ``start_round(r)`` -> TrainRequests to the roster; ``receive(Upload)`` as they arrive;
  ``uploads_ready`` turns true at max(n-s, U) uploads; the driver then calls
  ``close_collection`` (it never waits for the rest), which fixes the survivor set S and returns
  one RecoveryRequest per survivor: the weights (the code's decoding vector for S, plus parity
  checks when extra uploads came in) and, per survivor, the sealed share it addressed to that
  silo or, for a share it derived (the silo is in its derived set), its context and tag.
  Where the silos sign their keys (:mod:`coded_fl.secagg.views`), it returns one
  ViewRequest per survivor first; ``receive(ViewReply)`` keeps each signature that verifies,
  ``views_complete`` turns true when every member of S signed, and ``close_views`` returns
  the recovery requests (carrying the signatures), or asks the signers to sign the smaller
  set they form, or aborts when too few signed (``retry_recovery`` signs S' the same way).
- ``receive(RecoveryReply)``; ``recovery_ready`` at U replies; ``finish`` decodes
  :math:`\\sum_k q(g_k) = \\sum_{i\\in S} a_i y_i - \\sum_{i \\in S} a_i z_i` and dequantizes it.
- ``masking="aligned"`` (:mod:`coded_fl.secagg.aligned`): each TrainRequest may relay sealed
  edge keys and ask the silo to deal some; each upload confirms the edge keys its silo holds
  (a late upload too). Once every edge of the mask graph has one confirmed key, with a holder
  in both of its groups, rounds are group-masked: ``close_collection`` returns no recovery
  request (the masks cancel in every weight row) and ``finish`` decodes at once.
- A round that cannot complete (too few uploads or recovery replies by the driver's deadline,
  replicas that disagree, an aggregate out of range) ends in :class:`RoundAborted` with the
  reason; nothing partial is returned and the machine is ready for the next round.
- Accusations: a survivor that cannot open the share silo i sealed for it answers with a
  ``Refusal`` (code ``ACCUSES``) instead of a reply. Each accusation is judged
  (:mod:`coded_fl.secagg.evidence`): ``reveal_requests`` asks the accused silo for the
  ephemeral scalar of that one share, ``receive(Reveal)`` opens the share the server relayed
  under it, and ``close_disputes`` judges the rest against their accused (no reveal). The
  liar, accuser or accused, is named (:attr:`RoundResult.offenders`, :class:`Verdict`) and
  left out of the session's later rounds; an accused proven lying is dropped from S like a
  convicted one. Besides, a silo accused by at least
  :meth:`ServerMachine.accusers_needed` = max(T + 1, 2) distinct survivors is *convicted*: at
  most T silos collude, so one of its accusers is honest and the share really failed (one
  silo, or T colluding ones, cannot exclude an honest silo). Once replies cannot reach U
  (``recovery_stuck``), ``retry_recovery`` drops the convicted silos from S and asks the
  survivors that have not answered yet again with the decoding vector of the smaller S (when
  it still has max(n-s, U) silos and U of them can answer); otherwise ``finish`` aborts naming
  them. Either way a convicted silo's upload is refused in the next round (it is left out of
  that round's S), then it takes part again.

Transition table (stage, input) -> handler; any other pair raises :class:`RemoteProtocolError`
(for a peer's message) or :class:`LocalProtocolError` (for a driver call) and changes nothing.
The server only ever holds masked uploads and aggregates: no individual update in the clear.

Modules, by phase: :mod:`~coded_fl.secagg.server.state` (stages, the round's record, results,
the core every phase shares), :mod:`~coded_fl.secagg.server.keys`,
:mod:`~coded_fl.secagg.server.collect` (train requests, edge keys, uploads),
:mod:`~coded_fl.secagg.server.recovery` (with the survivor views),
:mod:`~coded_fl.secagg.server.disputes`,
:mod:`~coded_fl.secagg.server.decode`, :mod:`~coded_fl.secagg.server.actions` (the flow's typed
actions and transitions), and :mod:`~coded_fl.secagg.server.machine`, which puts them together
with the constructor, ``receive`` and the flow.
"""

from coded_fl.secagg.server.actions import (
    Action,
    Await,
    Compute,
    Deadline,
    KeysDone,
    RoundDone,
    SendRequests,
    Stage,
)
from coded_fl.secagg.server.machine import ServerMachine
from coded_fl.secagg.server.state import (
    DRIFT_TOLERANCE,
    AbortCode,
    RoundAborted,
    RoundResult,
    ServerStage,
    Verdict,
)

__all__ = [
    "DRIFT_TOLERANCE",
    "AbortCode",
    "Action",
    "Await",
    "Compute",
    "Deadline",
    "KeysDone",
    "RoundAborted",
    "RoundDone",
    "RoundResult",
    "SendRequests",
    "ServerMachine",
    "ServerStage",
    "Stage",
    "Verdict",
]
