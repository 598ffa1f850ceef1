"""A recorded run of the protocol: both machines at every stage, the messages of every stage
(fresh ones, replays of an earlier round, ones for another silo or another session), snapshots
of the machines' state, and the paths a peer's bytes take at each end.

Configuration: n = 5, s = 1, T = 1, U = 3, d = 12 (m = 6). Every silo uploads, so recovery
requests carry two weight rows (the decoding vector and one parity check). Every silo signs its
key (even silos on P-256, odd ones on P-384) and trusts all five identities, so the relayed
identity keys and signatures are real and every silo checks them.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass, field

import numpy as np
import torch
from cryptography.hazmat.primitives.asymmetric import ec
from flwr.app import Message as FlowerMessage

from clients.mod import _limits
from coded_fl.layout import EXTRAS, UpdateLayout
from coded_fl.secagg import ProtocolConfig, RoundResult, ServerMachine
from coded_fl.secagg.client import ClientMachine
from coded_fl.secagg.identity import Identity, TrustRoster
from coded_fl.secagg.messages import (
    SERVER,
    KeyReply,
    KeyRequest,
    Message,
    RecoveryReply,
    Refusal,
    RefusalCode,
    Upload,
    ViewRequest,
    decode,
    encode,
)
from coded_fl.secagg.replies import take
from simulations.runtime.secagg_harness import Harness
from strategies.replies import read_reply
from strategies.run import RunState

CFG = ProtocolConfig(
    num_silos=5,
    num_stragglers=1,
    privacy_threshold=1,
    recovery_threshold=3,
    vector_length=12,
    run_id="fuzz",
)
#: Another session of the same run: its messages are replays from elsewhere.
OTHER = dataclasses.replace(CFG, session="other")
#: The silo whose machine the client end fuzzes (a survivor in every round).
SILO = 1
#: Each silo's identity (fixed scalars: the recording is the same in every process).
IDENTITIES = {
    i: Identity(ec.derive_private_key(7919 + i, ec.SECP256R1() if i % 2 == 0 else ec.SECP384R1()))
    for i in range(CFG.n)
}
TRUST = TrustRoster(x.public_bytes for x in IDENTITIES.values())

SERVER_TYPES = ("KeyReply", "Upload", "RecoveryReply", "Refusal")
CLIENT_TYPES = ("KeyRequest", "TrainRequest", "RecoveryRequest")
#: The stages of the server, and the reply type the driver feeds in each.
SERVER_STAGES = {
    "keys": KeyReply,
    "ready": Upload,
    "collecting": Upload,
    "recovering": RecoveryReply,
}
CLIENT_STAGES = (
    "new",
    "keyed",
    "training-1",
    "uploaded-1",
    "recovered-1",
    "training-2",
    "uploaded-2",
    "recovered-2",
)


@dataclass
class Recording:
    """Templates of the machines at each stage and pools of messages to throw at them."""

    server: dict[str, ServerMachine] = field(default_factory=dict)
    client: dict[str, ClientMachine] = field(default_factory=dict)
    #: type name -> messages a silo may send the server (and "foreign": server-bound others)
    to_server: dict[str, list[Message]] = field(default_factory=dict)
    #: type name -> messages the server may send silo ``SILO`` (and "foreign")
    to_client: dict[str, list[Message]] = field(default_factory=dict)


def _keep(m: ClientMachine) -> ClientMachine:
    return copy.deepcopy(m, memo={id(CFG): CFG, id(m._entropy): m._entropy})


@functools.cache
def recording() -> Recording:
    """Three rounds of ``CFG`` among in-memory machines, recorded at every stage."""
    rec = Recording()
    h = Harness(CFG, seed=11)
    s, c = h.server, h.clients
    for i, m in c.items():
        m.policy = dataclasses.replace(m.policy, identity=IDENTITIES[i], trusted=TRUST)
    rec.client["new"] = _keep(c[SILO])
    key_requests = s.start_key_exchange()
    key_replies = [c[q.recipient].receive(q) for q in key_requests]
    rec.client["keyed"] = _keep(c[SILO])
    s.receive(key_replies[0])
    rec.server["keys"] = copy.deepcopy(s)
    for k in key_replies[1:]:
        s.receive(k)
    s.close_key_exchange()
    rec.server["ready"] = copy.deepcopy(s)

    rounds: dict[int, dict[str, list[Message]]] = {}
    for r in (1, 2, 3):
        trains = s.start_round(r)
        got: dict[str, list[Message]] = {"train": list(trains)}
        rounds[r] = got
        if r == 3:  # only the requests of a round to come
            break
        uploads = []
        for q in trains:
            task = c[q.recipient].receive(q)
            if q.recipient == SILO:
                rec.client[f"training-{r}"] = _keep(c[SILO])
            parts = [h.partials(r, k) for k in task.partitions]  # type: ignore[union-attr]
            uploads.append(c[q.recipient].upload(task, parts))  # type: ignore[arg-type]
            if q.recipient == SILO:
                rec.client[f"uploaded-{r}"] = _keep(c[SILO])
        got["upload"] = uploads
        s.receive(uploads[0])
        s.receive(uploads[2])
        if r == 2:
            rec.server["collecting"] = copy.deepcopy(s)
        for up in uploads[1:2] + uploads[3:]:
            s.receive(up)
        views = s.close_collection()  # the silos sign their keys: survivor views first
        assert isinstance(views, list) and all(isinstance(v, ViewRequest) for v in views)
        got["view"] = list(views)
        got["view_reply"] = [c[q.recipient].receive(q) for q in views]
        for v in got["view_reply"]:
            s.receive(v)
        requests = s.close_views()
        # 5 survivors, groups {0, 1, 2} and {3, 4}: row 0 and every group comparison (3)
        assert isinstance(requests, list) and len(requests[0].weights) == 4
        got["recovery"] = list(requests)
        replies = []
        for q in requests:
            replies.append(c[q.recipient].receive(q))
            if q.recipient == SILO:
                rec.client[f"recovered-{r}"] = _keep(c[SILO])
        got["reply"] = replies
        s.receive(replies[0])
        if r == 2:
            rec.server["recovering"] = copy.deepcopy(s)
        for rep in replies[1:]:
            s.receive(rep)
        assert isinstance(s.finish(), RoundResult)

    def refusal(
        code: RefusalCode, accused: int | None, cfg: ProtocolConfig = CFG, bound: int = 0
    ) -> Refusal:
        return Refusal(
            digest=cfg.digest,
            round=2,
            sender=SILO,
            recipient=SERVER,
            code=code,
            accused=accused,
            detail="fuzz",
            bound=bound,
        )

    other_key = KeyRequest(
        digest=OTHER.digest, round=0, sender=SERVER, recipient=SILO, config=OTHER.to_json()
    )
    other_train = dataclasses.replace(rounds[1]["train"][SILO], digest=OTHER.digest)
    rec.to_server = {
        "KeyReply": list(key_replies),
        "Upload": rounds[2]["upload"] + rounds[1]["upload"][:2],
        "RecoveryReply": rounds[2]["reply"] + rounds[1]["reply"][:2],
        "Refusal": [
            refusal(RefusalCode.NEEDS_KEYS, None),
            refusal(RefusalCode.ACCUSES, 3),
            refusal(RefusalCode.ACCUSES, SILO),
            refusal(RefusalCode.NEEDS_KEYS, None, OTHER),
            refusal(RefusalCode.WEIGHT_BOUND, None, bound=2048),
        ],
        "foreign": [key_requests[SILO], rounds[2]["train"][SILO], rounds[2]["recovery"][SILO]],
    }
    rec.to_client = {
        "KeyRequest": [key_requests[SILO], key_requests[SILO + 1], other_key],
        "TrainRequest": [
            rounds[2]["train"][SILO],
            rounds[3]["train"][SILO],
            rounds[1]["train"][SILO],
            rounds[2]["train"][SILO + 1],
            other_train,
        ],
        "RecoveryRequest": [
            rounds[2]["recovery"][SILO],
            rounds[1]["recovery"][SILO],
            rounds[2]["recovery"][SILO + 1],
        ],
        "foreign": [
            key_replies[SILO],
            rounds[2]["upload"][SILO],
            rounds[2]["reply"][SILO],
            refusal(RefusalCode.ACCUSES, 3),
        ],
    }
    return rec


# ----------------------------------------------------------------------------- machines


def server_machine(stage: str) -> ServerMachine:
    """A fresh copy of the server machine at ``stage``."""
    return copy.deepcopy(recording().server[stage], memo={id(CFG): CFG})


def client_machine(stage: str) -> ClientMachine:
    """A fresh copy of silo ``SILO``'s machine at ``stage``."""
    return _keep(recording().client[stage])


def run_state(machine: ServerMachine) -> RunState:
    """The server adapter's state of a run around ``machine`` (silo i on node 100 + i)."""
    return RunState(
        config=CFG,
        layout=UpdateLayout(model_size=CFG.vector_length - EXTRAS),
        run_id=CFG.seed_id,
        machine=machine,
        node_of={i: 100 + i for i in range(CFG.n)},
        limit=60.0,
    )


def feed(
    state: RunState,
    silo: int,
    reply: FlowerMessage,
    kind: type,
    errors: dict[int, str],
    accused: dict[int, str] | None = None,
) -> None:
    """One in-time Flower reply from ``silo`` at a stage that takes ``kind``, as the strategy's
    protocol driver handles it: read by the Flower transport, taken by the driver (the run's
    metric names kept for a taken upload)."""
    got = read_reply(state, silo, reply, (kind, Refusal))
    if take(state.machine, state.notes, got, kind, errors, accused):
        state.taken(got)


def server_snapshot(state: RunState) -> tuple:
    """Everything the server machine and the run remember about silos' messages."""
    m = state.machine
    rnd = m._round
    return (
        m.stage,
        tuple(sorted(m.roster.items())),
        tuple(sorted(m._pending_keys.items())),
        tuple(sorted(m._asked)),
        m.last_round,
        None
        if rnd is None
        else (
            rnd.number,
            tuple((i, encode(u)) for i, u in sorted(rnd.uploads.items())),
            rnd.survivors,
            None if rnd.weights is None else np.asarray(rnd.weights).tobytes(),
            tuple((i, r.numpy().tobytes()) for i, r in sorted(rnd.replies.items())),
        ),
        tuple(sorted(state.needs_keys)),
    )


def silos_taken(before: tuple, after: tuple) -> set[int]:
    """The silos whose key, upload or recovery reply the server took between two snapshots."""
    keys = {i for i, _ in after[2]} - {i for i, _ in before[2]}
    if after[5] is None or before[5] is None:
        return keys
    uploads = {i for i, _ in after[5][1]} - {i for i, _ in before[5][1]}
    replies = {i for i, _ in after[5][4]} - {i for i, _ in before[5][4]}
    return keys | uploads | replies


def deliver_to_client(machine: ClientMachine, raw: bytes) -> object:
    """What the client mod does with a server message's bytes: decode within the limits of the
    silo's configuration (for a message of that configuration), hand it to the machine."""
    return machine.receive(decode(raw, limits=_limits(machine, raw)))


def differing_fields(a: Message, b: Message) -> tuple[str, ...]:
    """The names of the fields in which two messages differ (how an accepted mutant differs
    from the message it was made from); the type's name if the types differ."""
    if type(a) is not type(b):
        return (f"type->{type(b).__name__}",)
    out = []
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, torch.Tensor):
            same = x.shape == y.shape and bool(torch.equal(x, y))
        else:
            same = x == y
        if not same:
            out.append(f.name)
    return tuple(out) or ("nothing",)
