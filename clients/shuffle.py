"""Client side of coded data shuffling: a ClientApp handler and the silo's local unit store.

Add the handler to any ClientApp; it answers the server's ``query.codedfl_shuffle`` messages
(:class:`strategies.shuffle.ShuffleRelay`) and nothing else::

    app = ClientApp()
    register_shuffle(app)               # or: app = shuffle_client_app()

    @app.train()
    def train(msg, context):
        store = silo_store(context)     # this silo's units, as of the last committed epoch
        data = [store.read_unit(u) for u in store.units()]   # SHA-256 checked on read
        ...

Node config (``--node-config`` of a SuperNode; nothing is needed in a simulation):

``codedfl.silo``
    This node's member id: its silo index 0..K-1, or ``"sender"`` for the central sender (the
    node that holds every unit in the centralized setting; member K). Default: the simulation's
    ``partition-id`` (partition K is then the central sender).
``codedfl.store``
    Directory of the node's unit store (:class:`~coded_fl.shuffling.storage.store.UnitStore`).
    Default:
    ``<store_root>/member-<id>`` when the app was built with a ``store_root``, else a directory
    under the system's temporary directory named by run and member (simulation).
``codedfl.org-key-file``
    Optional: a file with the organisation's key (hex or raw, >= 16 bytes), shared by the
    organisation's members out of band. With it every member checks that each public key of
    the epoch is vouched for by the organisation, so even a relay that deviates cannot obtain
    the group key (``docs/shuffling.md``).

State: the member's protocol state (:class:`~coded_fl.shuffling.transport.member.ShuffleMember`,
keys included) is kept sealed (AES-256-GCM) in the file ``member.state`` of its store's directory;
the key that opens it (32 random bytes, made at the node's first shuffle message) and the
store's path live in ``context.state["codedfl.shuffle.state"]``, never on disk and never sent.
Keeping the machine out of the context matters in Flower's simulation engine, where two messages
of one node may run at once and the one that ends last writes the whole context back: a
straggler's late train call would otherwise overwrite the shuffle's progress with its stale
copy (the key and the path in that copy are the same, so nothing is lost). A refused request
leaves the state as it was and is answered with a Flower ``Error`` whose reason names the
member and the problem (never a key).
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from flwr.app import ConfigRecord, Context, Error, Message
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable, Mod

from coded_fl.errors import CodedFLError, ConfigurationError, RemoteProtocolError
from coded_fl.shuffling.storage.store import UnitStore
from coded_fl.shuffling.transport.member import ShuffleMember
from coded_fl.shuffling.transport.wire import Hello
from coded_fl.vocabulary import (
    ORG_KEY_FILE_NODE_KEY,
    SHUFFLE_ACTION,
    SHUFFLE_STATE_KEY,
    SILO_NODE_KEY,
    STORE_NODE_KEY,
)
from coded_fl_flower.records import packet_content, packet_from

__all__ = [
    "make_shuffle_handler",
    "member_id",
    "register_shuffle",
    "shuffle_client_app",
    "silo_store",
    "store_path",
]

_ERROR_CODE = 2  # flwr's ErrorCode.CLIENT_APP_RAISED_EXCEPTION


def member_id(context: Context, *, K: int) -> int:
    """This node's member id for a job with K silos (see ``codedfl.silo`` above).

    Parameters
    ----------
    context
        The node's context (its node config).
    K
        Silos of the job (the central sender is member K).

    Returns
    -------
    int

    Raises
    ------
    ConfigurationError
        If the node config names no silo, or not a silo index or ``sender``.
    """
    cfg = context.node_config
    raw = cfg.get(SILO_NODE_KEY, cfg.get("partition-id"))
    if raw is None:
        raise ConfigurationError(
            f"this node has no '{SILO_NODE_KEY}' in its node config (and no simulation "
            "partition-id): "
            f"start the SuperNode with --node-config \"{SILO_NODE_KEY}=<silo index or 'sender'>\""
        )
    if raw == "sender":
        return K
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"node config {SILO_NODE_KEY}={raw!r}: expected a silo index or 'sender'"
        ) from None


def store_path(context: Context, member: int, *, store_root: str | Path | None = None) -> Path:
    """Where this node's unit store lives (see ``codedfl.store`` above).

    Parameters
    ----------
    context
        The node's context.
    member
        Its member id.
    store_root
        Parent of the default stores, if the app was built with one.

    Returns
    -------
    pathlib.Path
    """
    configured = context.node_config.get(STORE_NODE_KEY)
    if configured:
        return Path(str(configured))
    if store_root is not None:
        return Path(store_root) / f"member-{member}"
    return (
        Path(tempfile.gettempdir())
        / "codedfl-shuffle"
        / f"run-{context.run_id}"
        / f"member-{member}"
    )


def silo_store(context: Context, *, store_root: str | Path | None = None) -> UnitStore:
    """This silo's unit store, for the training code: the one the shuffle handler commits to
    (its path is remembered in ``context.state``), else the configured or default one.

    Parameters
    ----------
    context
        The node's context.
    store_root
        Parent of the default stores, if the app was built with one.

    Returns
    -------
    UnitStore

    Raises
    ------
    ConfigurationError
        For the central sender before it answered a shuffle, unless its store is configured.
    """
    rec = context.state.get(SHUFFLE_STATE_KEY)
    if isinstance(rec, ConfigRecord) and "store" in rec:
        return UnitStore(str(rec["store"]))
    if context.node_config.get(SILO_NODE_KEY) == "sender":
        raise ConfigurationError(
            "the central sender's store is known once it answered a shuffle; set "
            f"'{STORE_NODE_KEY}' in its node config to open it before that"
        )
    member = member_id(context, K=0)  # a silo index (K is only used for "sender")
    return UnitStore(store_path(context, member, store_root=store_root))


def _org_key(context: Context) -> bytes | None:
    path = context.node_config.get(ORG_KEY_FILE_NODE_KEY)
    if not path:
        return None
    try:
        raw = Path(str(path)).read_bytes()
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read {ORG_KEY_FILE_NODE_KEY}={path!r}: {exc.strerror}"
        ) from None
    try:
        key = bytes.fromhex(raw.decode().strip())
    except (UnicodeDecodeError, ValueError):
        key = raw
    if len(key) < 16:
        raise ConfigurationError(f"the organisation key in {path!r} is shorter than 16 bytes")
    return key


_STATE_FILE = "member.state"
_STATE_NONCE = 12


def _state_aad(context: Context) -> bytes:
    return f"codedfl-shuffle-state|run {context.run_id}|node {context.node_id}".encode()


def _state_key(context: Context) -> bytes:
    """The key that seals this node's member state (made once, kept in the context only)."""
    rec = context.state.get(SHUFFLE_STATE_KEY)
    key = rec.get("state-key") if isinstance(rec, ConfigRecord) else None
    if isinstance(key, bytes) and len(key) == 32:
        return key
    return secrets.token_bytes(32)


def _load(context: Context, path: Path, org_key: bytes | None) -> ShuffleMember | None:
    """The member's machine as the last accepted request left it (None: no state yet, or a
    state this node cannot open any more, e.g. after its context was lost: a fresh start)."""
    rec = context.state.get(SHUFFLE_STATE_KEY)
    key = rec.get("state-key") if isinstance(rec, ConfigRecord) else None
    try:
        sealed = (path / _STATE_FILE).read_bytes()
    except OSError:
        return None
    if not isinstance(key, bytes) or len(sealed) <= _STATE_NONCE:
        return None
    try:
        raw = AESGCM(key).decrypt(sealed[:_STATE_NONCE], sealed[_STATE_NONCE:], _state_aad(context))
    except (InvalidTag, ValueError):
        return None
    return ShuffleMember.from_bytes(raw, org_key=org_key)


def _save(context: Context, path: Path, key: bytes, machine: ShuffleMember) -> None:
    nonce = secrets.token_bytes(_STATE_NONCE)
    sealed = nonce + AESGCM(key).encrypt(nonce, machine.to_bytes(), _state_aad(context))
    path.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path, prefix=".tmp-state-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(sealed)
        os.replace(tmp, path / _STATE_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    context.state[SHUFFLE_STATE_KEY] = ConfigRecord({"store": str(path), "state-key": key})


def make_shuffle_handler(*, store_root: str | Path | None = None) -> ClientAppCallable:
    """The ``query.codedfl_shuffle`` handler.

    Parameters
    ----------
    store_root
        Parent of the default stores.

    Returns
    -------
    ClientAppCallable
        ``handler(msg, context) -> Message``; a refused request is answered with a Flower
        ``Error`` naming the member and the problem (never a key), and the state stays as it
        was.
    """

    def shuffle_handler(msg: Message, context: Context) -> Message:
        member = "?"
        try:
            packet = packet_from(msg.content)
            if packet is None:
                raise RemoteProtocolError(
                    "a shuffle query without codedfl.shuffle content: the server must use "
                    "coded_fl_flower.ShuffleRelay"
                )
            org_key = _org_key(context)
            rec = context.state.get(SHUFFLE_STATE_KEY)
            if isinstance(packet, Hello) and packet.job is not None:
                m = member_id(context, K=packet.job.K)
                path = store_path(context, m, store_root=store_root)
                machine = _load(context, path, org_key)
                if machine is None or machine.member != m:
                    machine = ShuffleMember(m, org_key=org_key)
            else:  # a later stage: the member of this node's latest hello
                if not isinstance(rec, ConfigRecord) or "store" not in rec:
                    raise RemoteProtocolError("a shuffle request before any Hello")
                path = Path(str(rec["store"]))
                loaded = _load(context, path, org_key)
                if loaded is None:
                    raise RemoteProtocolError(
                        "a shuffle request, but this node's shuffle state is gone (its store "
                        "directory lost member.state): the next epoch starts it afresh"
                    )
                machine = loaded
            member = str(machine.member)
            reply = machine.receive(packet, UnitStore(path))
            _save(context, path, _state_key(context), machine)
        except CodedFLError as exc:  # refused: the state stays as it was
            return Message(Error(code=_ERROR_CODE, reason=f"member {member}: {exc}"), reply_to=msg)
        return Message(packet_content(reply), reply_to=msg)

    return shuffle_handler


def register_shuffle(app: ClientApp, *, store_root: str | Path | None = None) -> ClientApp:
    """Register the shuffle handler on ``app`` (as ``@app.query("codedfl_shuffle")``).

    Parameters
    ----------
    app
        Any ClientApp.
    store_root
        Parent of the default stores.

    Returns
    -------
    ClientApp
        ``app`` itself.
    """
    app.query(SHUFFLE_ACTION)(make_shuffle_handler(store_root=store_root))
    return app


def shuffle_client_app(
    *, store_root: str | Path | None = None, mods: Sequence[Mod] = ()
) -> ClientApp:
    """A ClientApp that only answers shuffle queries (simulations, tests, a data-only node).

    Parameters
    ----------
    store_root
        Parent of the default stores.
    mods
        Mods of the ClientApp.

    Returns
    -------
    ClientApp
    """
    return register_shuffle(ClientApp(mods=list(mods)), store_root=store_root)
