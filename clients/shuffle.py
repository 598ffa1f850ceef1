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
    Directory of the node's unit store (:class:`~coded_fl.shuffling.store.UnitStore`). Default:
    ``<store_root>/member-<id>`` when the app was built with a ``store_root``, else a directory
    under the system's temporary directory named by run and member (simulation).
``codedfl.org-key-file``
    Optional: a file with the organisation's key (hex or raw, >= 16 bytes), shared by the
    organisation's members out of band. With it every member checks that each public key of
    the epoch is vouched for by the organisation, so even a relay that deviates cannot obtain
    the group key (``docs/shuffling.md``).

State: the member's protocol state (:class:`~coded_fl.shuffling.member.ShuffleMember`, keys
included) and the store's path live in ``context.state["codedfl.shuffle.state"]``; they never
leave the node. A refused request leaves the state as it was and is answered with a Flower
``Error`` whose reason names the member and the problem (never a key).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable, Mod

from coded_fl.errors import CodedFLError, ConfigurationError, RemoteProtocolError
from coded_fl.shuffling.member import ShuffleMember
from coded_fl.shuffling.store import UnitStore
from coded_fl.shuffling.wire import Hello, Packet, decode, encode
from coded_fl.vocabulary import (
    FRAME_ARRAY,
    ORG_KEY_FILE_NODE_KEY,
    SHUFFLE_ACTION,
    SHUFFLE_KEY,
    SHUFFLE_STATE_KEY,
    SILO_NODE_KEY,
    STORE_NODE_KEY,
    frame,
    read_frame,
)

__all__ = [
    "make_shuffle_handler",
    "member_id",
    "register_shuffle",
    "shuffle_client_app",
    "silo_store",
    "store_path",
]

_ERROR_CODE = 2  # flwr's ErrorCode.CLIENT_APP_RAISED_EXCEPTION


def _content(packet: Packet) -> RecordDict:
    return RecordDict({SHUFFLE_KEY: ArrayRecord({FRAME_ARRAY: Array(frame(encode(packet)))})})


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


def _load(context: Context, org_key: bytes | None) -> ShuffleMember | None:
    rec = context.state.get(SHUFFLE_STATE_KEY)
    if not isinstance(rec, ConfigRecord) or "member" not in rec:
        return None
    return ShuffleMember.from_bytes(rec["member"], org_key=org_key)  # type: ignore[arg-type]


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
            raw = read_frame(msg.content, SHUFFLE_KEY)
            packet = None if raw is None else decode(raw)
            if packet is None:
                raise RemoteProtocolError(
                    "a shuffle query without codedfl.shuffle content: the server must use "
                    "coded_fl_flower.ShuffleRelay"
                )
            org_key = _org_key(context)
            machine = _load(context, org_key)
            if isinstance(packet, Hello) and packet.job is not None:
                m = member_id(context, K=packet.job.K)
                if machine is None or machine.member != m:
                    machine = ShuffleMember(m, org_key=org_key)
            elif machine is None:
                raise RemoteProtocolError("a shuffle request before any Hello")
            member = str(machine.member)
            path = store_path(context, machine.member, store_root=store_root)
            reply = machine.receive(packet, UnitStore(path))
        except CodedFLError as exc:  # refused: the state stays as it was
            return Message(Error(code=_ERROR_CODE, reason=f"member {member}: {exc}"), reply_to=msg)
        context.state[SHUFFLE_STATE_KEY] = ConfigRecord(
            {"member": machine.to_bytes(), "store": str(path)}
        )
        return Message(_content(reply), reply_to=msg)

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
