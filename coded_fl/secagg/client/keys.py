"""The key exchange: a KeyRequest checked, the silo's key pair made, its KeyReply signed."""

from __future__ import annotations

from coded_fl.crypto import KeyPair
from coded_fl.errors import RemoteProtocolError
from coded_fl.prg import fresh_seed
from coded_fl.secagg.client.state import ClientStage, MachineCore
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.messages import SERVER, KeyReply, KeyRequest


class KeysPhase(MachineCore):
    """The key exchange phase of :class:`~coded_fl.secagg.client.machine.ClientMachine`: its
    methods, on the state :class:`~coded_fl.secagg.client.state.MachineCore` declares."""

    def on_key_request(self, msg: KeyRequest) -> KeyReply:
        """Learn the configuration and answer with this run's public key.

        Everything is checked before any state changes: the sender is the server, the round
        is 0, the digest matches the configuration, the configuration meets the silo's
        :class:`~coded_fl.secagg.policy.ClientPolicy` (its maxima on n, K and d on the raw
        JSON, before the configuration is built) and the index is in range (and the pinned
        one, if the policy pins one).

        Parameters
        ----------
        msg
            The server's key request: the public configuration and this silo's index.
        """
        if msg.sender != SERVER:
            raise RemoteProtocolError(
                f"KeyRequest from silo {msg.sender}: only the server sends one", sender=SERVER
            )
        if msg.round != 0:
            raise RemoteProtocolError(
                f"KeyRequest for round {msg.round}: key requests carry round 0", sender=SERVER
            )
        self.policy.check_size(msg.config)  # before building anything proportional to n, K, d
        cfg = ProtocolConfig.from_json(msg.config)
        if cfg.digest != msg.digest:
            raise RemoteProtocolError(
                "KeyRequest digest does not match its configuration", sender=SERVER
            )
        if not 0 <= msg.recipient < cfg.n:
            raise RemoteProtocolError(
                f"silo index {msg.recipient} is not in 0..{cfg.n - 1}", sender=SERVER
            )
        self.policy.check(cfg, msg.recipient)
        same_run = self.config is not None and self.config.digest == cfg.digest
        if same_run and msg.recipient != self.silo:
            raise RemoteProtocolError(
                f"KeyRequest re-assigns this silo from {self.silo} to {msg.recipient}",
                sender=SERVER,
            )
        if not same_run:  # a new run (or the first): fresh keys, fresh counters
            self._keys = KeyPair.from_private_bytes(fresh_seed(self._entropy))
            self.config, self.silo = cfg, msg.recipient
            self.roster, self._pairwise, self.edge_keys = {}, {}, {}
            self.round = self.recovered_round = self.floor = 0
            self.trained = self.uploaded = ()
            self.fixed_weight = 0.0
            self.stage = ClientStage.KEYED
        _, silo, keys = self._identity()
        me = self.policy.identity
        return KeyReply(
            digest=cfg.digest,
            round=0,
            sender=silo,
            recipient=SERVER,
            public_key=keys.public_bytes,
            identity=b"" if me is None else me.public_bytes,
            signature=b""
            if me is None
            else me.endorse(
                digest=cfg.digest, run=cfg.run_bytes, silo=silo, public_key=keys.public_bytes
            ),
        )
