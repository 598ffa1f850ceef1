"""The silo's side of the protocol as a sans-IO state machine.

Theory of operation (see ``docs/protocol.md`` for the whole protocol):

1. ``KeyRequest`` -> :meth:`ClientMachine.on_key_request` -> ``KeyReply``: learn the public
   configuration, make an X25519 key pair for the run.
2. ``TrainRequest`` (round r, roster of public keys) -> :meth:`on_train_request` returns a
   :class:`TrainTask` (which partitions to train, with which rounding keys); the caller trains
   them and hands the partial updates to :meth:`upload`, which quantizes, encodes with the
   silo's gradient-code row, masks, and shares the mask (privacy T, threshold U): the U shares
   of its derived set are derived from key agreement (:mod:`coded_fl.secagg.derive`), the mask
   and the other n - U shares follow from them, and only those are sealed -> ``Upload``
   (a round is uploaded at most once: :class:`~coded_fl.errors.MaskReuseError`).
3. ``RecoveryRequest`` (round r, survivors S, weight rows, the sealed shares the survivors sent
   this silo, and the context and tag of each share derived for it) ->
   :meth:`on_recovery_request` checks that row 0 is exactly the public code's decoding vector
   for S and every other row a parity check of the code on S, opens or rederives (and
   key-confirms) each share, answers at most once per round, and returns the weighted sums of
   the shares -> ``RecoveryReply``. A share it cannot use makes it refuse with an accusation of
   its sender (signed with its identity key, if it has one).
4. ``RevealRequest`` (an accusation of this silo's share for one recipient) ->
   :meth:`on_reveal_request` -> ``Reveal``: the ephemeral scalar of that one share, recomputed
   from the silo's private key and the upload's context, after checking that the relayed
   entry holds the ephemeral key it made for that recipient and, with a trust roster, that
   the accuser signed the accusation (:mod:`coded_fl.secagg.evidence`). Nothing changes.
5. ``ViewRequest`` (round r, a survivor set S; only where the silos sign their keys) ->
   :meth:`on_view_request` -> ``ViewReply``: its identity's signature of S, if it uploaded r,
   S holds it and enough silos, and S is nested in the set it signed for r before
   (:mod:`coded_fl.secagg.views`); it keeps the set, and with a trust roster answers a
   ``RecoveryRequest`` only over the last set it signed, with every survivor's signature.

Every share (derived or sealed) has its own ephemeral X25519 key, whose public half travels in
the share's entry of the upload; with an identity key the silo signs every entry. Every share's
key is bound to the digest of the round's training inputs as the silo computing it holds it
(the sender its own at upload, the recipient its own, kept per uploaded round, at recovery),
so a silo sent other inputs than the others cannot take part in one recovery with them.

With ``masking="aligned"`` (:mod:`coded_fl.secagg.aligned`) a TrainRequest may also relay edge
keys sealed for this silo and ask it to deal edge keys to other members of its edges' groups
(both checked against the public groups before anything changes); the upload carries the dealt
keys and a confirmation tag per edge key held. In a group-masked round (``aligned`` in the
request) the upload is the coded update under the group mask alone: no shares, and no
recovery request follows.

One entry point, :meth:`ClientMachine.receive`, dispatches through a transition table
``(stage, message type) -> handler``; a pair not in the table is refused with
:class:`RemoteProtocolError`. In stage NEW a train or recovery request raises
:class:`NeedsKeysError`, which :func:`refusal_for` turns into the typed :class:`Refusal` the
server rekeys on (an accusation of another silo's share travels the same way). Stages and
transitions (anything else raises and changes nothing)::

    NEW     --KeyRequest-->        KEYED
    KEYED   --TrainRequest(r)-->   TRAINING(r)        (r above the floor, not trained before)
    TRAINING(r) --upload()-->      UPLOADED(r)
    any keyed stage --RecoveryRequest(r >= current round, not yet answered)--> RECOVERED(r)
    any keyed stage --TrainRequest(r' > r)--> TRAINING(r')
    any keyed stage --KeyRequest(same config)--> same stage (the same public key again)
    any keyed stage --RevealRequest(its own share's entry)--> same stage (a Reveal)
    any keyed stage --ViewRequest(r uploaded, S nested in its last)--> same stage (a ViewReply)

The state (keys included) round-trips through :meth:`to_bytes` / :meth:`from_bytes` so a Flower
ClientApp can keep it in ``context.state`` between messages. It never leaves the silo.

Modules, by phase: :mod:`~coded_fl.secagg.client.state` (stages, the train task, the core every
phase shares), :mod:`~coded_fl.secagg.client.refusals`, :mod:`~coded_fl.secagg.client.sealing`
(a share's keys and entry), :mod:`~coded_fl.secagg.client.keys`,
:mod:`~coded_fl.secagg.client.train`, :mod:`~coded_fl.secagg.client.upload`,
:mod:`~coded_fl.secagg.client.recovery`, :mod:`~coded_fl.secagg.client.reveal`,
:mod:`~coded_fl.secagg.client.views`, and
:mod:`~coded_fl.secagg.client.machine`, which puts them together with the constructor,
``receive`` and the persistence. The key derivation of seed-derived shares lives in
:mod:`coded_fl.secagg.derive`, the interpolation in :mod:`coded_fl.secagg.sharing`.
"""

from coded_fl.secagg.client.machine import ClientMachine
from coded_fl.secagg.client.refusals import misconfigured, refusal_for, weight_bound
from coded_fl.secagg.client.state import (
    MAX_ROUND,
    MAX_UNVERIFIED_ROUNDS,
    NEEDS_KEYS,
    ClientStage,
    Reaction,
    TrainTask,
)

__all__ = [
    "MAX_ROUND",
    "MAX_UNVERIFIED_ROUNDS",
    "NEEDS_KEYS",
    "ClientMachine",
    "ClientStage",
    "Reaction",
    "TrainTask",
    "misconfigured",
    "refusal_for",
    "weight_bound",
]
