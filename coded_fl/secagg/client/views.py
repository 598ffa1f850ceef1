"""A ViewRequest: the silo signs the survivor set of a round it uploaded (the consistency check,
:mod:`coded_fl.secagg.views`); and the check of the signed views a recovery request carries."""

from __future__ import annotations

from collections.abc import Sequence

from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg.client.state import MAX_ROUND, ClientStage, MachineCore
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.identity import verify_signature
from coded_fl.secagg.messages import SERVER, RecoveryRequest, ViewReply, ViewRequest
from coded_fl.secagg.views import view_statement

__all__ = ["check_views"]


class ViewPhase(MachineCore):
    """The view phase of :class:`~coded_fl.secagg.client.machine.ClientMachine`: its method, on
    the state :class:`~coded_fl.secagg.client.state.MachineCore` declares."""

    def on_view_request(self, msg: ViewRequest) -> ViewReply:
        """Sign the survivor set of a round this silo uploaded.

        Signed only if: the silo holds an identity; it uploaded round ``msg.round`` (and keeps
        the record of its inputs); the set is ascending, within 0..n-1, holds this silo and at
        least max(n - s, U) silos; and it is the set this silo signed for the round before or a
        subset of it (a survivor that did not sign, or a silo convicted during the recovery,
        is dropped; a set that is not nested in the one signed is the server telling silos
        different sets). The set is kept (with the state): the silo answers a recovery request
        only for the last set it signed.

        Parameters
        ----------
        msg
            The server's request to sign the round's survivor set.

        Returns
        -------
        ViewReply
            This silo's identity's signature of :func:`~coded_fl.secagg.views.view_statement`.

        Raises
        ------
        RemoteProtocolError
            Blaming the server, for anything that does not check (nothing changes).
        """
        cfg = self._check_header(msg)
        self._require(
            ClientStage.KEYED, ClientStage.TRAINING, ClientStage.UPLOADED, ClientStage.RECOVERED
        )
        _, silo, _ = self._identity()
        me = self.policy.identity
        if me is None:
            raise RemoteProtocolError(
                "a view request, but this silo holds no identity key (codedfl.identity-key): "
                "only silos that sign their keys sign survivor views",
                sender=SERVER,
            )
        survivors = msg.survivors
        if not 0 < msg.round < MAX_ROUND or msg.round not in self.inputs:
            raise RemoteProtocolError(
                f"a view request for round {msg.round}, which this silo holds no upload of",
                sender=SERVER,
            )
        if (
            list(survivors) != sorted(set(survivors))
            or not all(0 <= i < cfg.n for i in survivors)
            or silo not in survivors
            or len(survivors) < cfg.min_uploads
        ):
            raise RemoteProtocolError(
                f"a view request for the survivor set {list(survivors)}: a set must be "
                f"ascending, within 0..{cfg.n - 1}, hold this silo ({silo}) and at least "
                f"max(n - s, U) = {cfg.min_uploads} silos",
                sender=SERVER,
            )
        signed = self.viewed.get(msg.round)
        if signed is not None and not set(survivors) <= set(signed):
            raise RemoteProtocolError(
                f"a second survivor set for round {msg.round} ({list(survivors)}) that is not "
                f"within the one this silo signed ({list(signed)}): the server tells silos "
                "different survivor sets; nothing is signed",
                sender=SERVER,
            )
        self.viewed[msg.round] = tuple(survivors)
        for r in [r for r in self.viewed if r not in self.inputs]:
            del self.viewed[r]  # a round no longer kept cannot be recovered
        statement = view_statement(
            digest=cfg.digest, run_id=cfg.run_bytes, round_=msg.round, survivors=survivors
        )
        return ViewReply(
            digest=cfg.digest,
            round=msg.round,
            sender=silo,
            recipient=SERVER,
            signature=me.sign(statement),
        )


def check_views(
    cfg: ProtocolConfig,
    msg: RecoveryRequest,
    *,
    silo: int,
    signed: tuple[int, ...] | None,
    identities: Sequence[bytes],
) -> None:
    """Refuse a recovery request unless its survivor set is the last one this silo signed
    for the round and every other survivor signed it (a silo with a trust roster calls this
    after the survivors' credentials checked).

    Parameters
    ----------
    cfg
        The run's configuration.
    msg
        The recovery request.
    silo
        This silo.
    signed
        The survivor set this silo signed last for ``msg.round`` (None: none).
    identities
        Per survivor, the identity key its credential named (already trusted).

    Raises
    ------
    RemoteProtocolError
        Blaming the server: no view, another set, or a signature that does not verify.
    """
    if signed != tuple(msg.survivors):
        last = "none" if signed is None else str(list(signed))
        raise RemoteProtocolError(
            f"a recovery request for round {msg.round} over {list(msg.survivors)}, but the "
            f"last survivor set this silo signed for it is {last}: a silo with trusted keys "
            "answers only for the survivor set it signed (survivor views)",
            sender=SERVER,
        )
    if len(msg.views) != len(msg.survivors) or len(identities) != len(msg.survivors):
        raise RemoteProtocolError(
            f"a recovery request for round {msg.round} without every survivor's signed view "
            f"({len(msg.views)} for {len(msg.survivors)} survivors)",
            sender=SERVER,
        )
    statement = view_statement(
        digest=cfg.digest, run_id=cfg.run_bytes, round_=msg.round, survivors=msg.survivors
    )
    for i, view, identity in zip(msg.survivors, msg.views, identities, strict=True):
        if i != silo and not verify_signature(identity, statement, view):
            raise RemoteProtocolError(
                f"silo {i}'s signature of the survivor set of round {msg.round} does not "
                "verify: the server relayed a view that silo did not sign",
                sender=SERVER,
            )
