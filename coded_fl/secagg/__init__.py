"""Coded secure aggregation: gradient coding + LightSecAgg-style masking, as sans-IO machines.

The server learns only the sum of all partitions' quantized updates, from the first
max(n - s, U) uploads, in two round trips per round (keys are agreed once per run), or with
``masking="aligned"`` (the repetition code) in one round trip once the silos' edge keys are
dealt (:mod:`coded_fl.secagg.aligned`). See ``docs/protocol.md`` for the threat model, the
guarantees, the message flow and the costs.
"""

from coded_fl.secagg.client import ClientMachine, ClientStage, TrainTask
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.messages import (
    KeyReply,
    KeyRequest,
    Message,
    RecoveryReply,
    RecoveryRequest,
    TrainRequest,
    Upload,
    decode,
    encode,
)
from coded_fl.secagg.server import (
    AbortCode,
    RoundAborted,
    RoundResult,
    ServerMachine,
    ServerStage,
    Verdict,
)
from coded_fl.secagg.sharing import MaskSharing

__all__ = [
    "AbortCode",
    "ClientMachine",
    "ClientStage",
    "KeyReply",
    "KeyRequest",
    "MaskSharing",
    "Message",
    "ProtocolConfig",
    "RecoveryReply",
    "RecoveryRequest",
    "RoundAborted",
    "RoundResult",
    "ServerMachine",
    "ServerStage",
    "TrainRequest",
    "TrainTask",
    "Upload",
    "Verdict",
    "decode",
    "encode",
]
