"""Key exchange: KeyRequests out, KeyReplies checked (signatures, endorsements), the
roster fixed."""

from __future__ import annotations

from collections.abc import Sequence

from coded_fl.crypto import check_public_key
from coded_fl.errors import DecodingError, LocalProtocolError, RemoteProtocolError
from coded_fl.secagg.identity import check_credential_sizes, verify_endorsement
from coded_fl.secagg.messages import SERVER, KeyReply, KeyRequest
from coded_fl.secagg.server.state import MachineCore, ServerStage


class KeysPhase(MachineCore):
    """The key exchange phase of :class:`~coded_fl.secagg.server.machine.ServerMachine`: its
    methods, on the state :class:`~coded_fl.secagg.server.state.MachineCore` declares."""

    def start_key_exchange(self, silos: Sequence[int] | None = None) -> list[KeyRequest]:
        """Ask ``silos`` (default all n) for their public keys; call again to rekey.

        Parameters
        ----------
        silos
            The silos to ask (default: all n).

        Returns
        -------
        list[KeyRequest]
            One request per silo asked.
        """
        self._require(ServerStage.INIT, ServerStage.READY)
        cfg = self.config
        targets = sorted(set(range(cfg.n) if silos is None else silos))
        if any(not 0 <= s < cfg.n for s in targets) or not targets:
            raise LocalProtocolError(f"silos must be a non-empty subset of 0..{cfg.n - 1}")
        self._pending_keys, self._asked = {}, set(targets)
        self._pending_credentials = {}
        self.stage = ServerStage.KEYS
        body = cfg.to_json()
        return [
            KeyRequest(digest=cfg.digest, round=0, sender=SERVER, recipient=s, config=body)
            for s in targets
        ]

    def _on_key_reply(self, msg: KeyReply) -> None:
        if msg.sender not in self._asked:
            raise RemoteProtocolError("key reply from a silo that was not asked", sender=msg.sender)
        if msg.sender in self._pending_keys:
            raise RemoteProtocolError("duplicate key reply", sender=msg.sender)
        check_public_key(msg.public_key, sender=msg.sender)
        check_credential_sizes(msg.identity, msg.signature, sender=msg.sender)
        if msg.identity and not verify_endorsement(
            digest=self.config.digest,
            run=self.config.run_bytes,
            silo=msg.sender,
            public_key=msg.public_key,
            identity=msg.identity,
            signature=msg.signature,
        ):  # the server cannot judge trust, but a signature that does not verify is garbage
            raise RemoteProtocolError(
                "the endorsement of its key does not verify under its identity key",
                sender=msg.sender,
            )
        key = bytes(msg.public_key)
        taken = {**self.roster, **self._pending_keys}
        if any(k == key for silo, k in taken.items() if silo != msg.sender):
            # a silo that copies another's public key could not open what is sealed to it (it
            # lacks the private key) and would only ever be rekeyed: refused at once. Which of
            # two claimants is honest only authenticated keys can tell; the first one keeps it.
            raise RemoteProtocolError(
                "public key is already another silo's: every silo must send its own",
                sender=msg.sender,
            )
        self._pending_keys[msg.sender] = key
        self._pending_credentials[msg.sender] = (bytes(msg.identity), bytes(msg.signature))

    @property
    def keys_received(self) -> int:
        """Key replies accepted in the key exchange under way."""
        return len(self._pending_keys)

    @property
    def keyed_in_exchange(self) -> tuple[int, ...]:
        """The silos whose key reply the key exchange under way accepted."""
        return tuple(sorted(self._pending_keys))

    def close_key_exchange(self) -> tuple[int, ...]:
        """Fix the roster (new keys replace old ones); returns the silos that did not answer.

        Raises :class:`DecodingError` if fewer than max(n-s, U) silos would have keys.
        """
        self._require(ServerStage.KEYS)
        roster = {**self.roster, **self._pending_keys}
        need = self.config.min_uploads
        if len(roster) < need:
            raise DecodingError(
                f"only {len(roster)} silos have keys; a round needs max(n-s, U) = {need}: "
                "start more SuperNodes or lower num_stragglers / recovery_threshold"
            )
        missing = tuple(sorted(self._asked - set(self._pending_keys)))
        for silo in self._pending_keys:  # new keys: edge keys dealt to the old ones are gone
            self._edge_tags.pop(silo, None)
            self._relay.pop(silo, None)
        self.roster, self._pending_keys = roster, {}
        self.credentials.update(self._pending_credentials)
        self._pending_credentials = {}
        self.stage = ServerStage.READY
        return missing
