"""``masking="aligned"``: group-aligned masks over the repetition code, one round trip per
round once the edge keys are dealt (the math: :mod:`coded_fl.secagg.aligned`).

Until every mask-graph edge has a key that its silos confirmed, rounds are secret-shared
(:class:`~coded_fl.secagg.masking.shares.SharedMasks`) and their messages deal the keys; from
then on every member of a group adds the group's mask, and the masks cancel in the decode.
The edge keys travel in the scheme's message extensions
(:mod:`~coded_fl.secagg.masking.aligned_wire`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from coded_fl.codes import GradientCode, GroupCode
from coded_fl.errors import ConfigurationError
from coded_fl.secagg.aligned import mask_graph
from coded_fl.secagg.masking.aligned_wire import EDGE_KEY_REQUEST, EDGE_KEY_UPLOAD
from coded_fl.secagg.masking.shares import SharedMasks
from coded_fl.secagg.messages.extensions import ExtensionCodec

if TYPE_CHECKING:
    from coded_fl.secagg.client.state import TrainTask
    from coded_fl.secagg.client.upload import UploadPhase
    from coded_fl.secagg.config import ProtocolConfig
    from coded_fl.secagg.server.collect import CollectPhase

__all__ = ["AlignedMasks"]


class AlignedMasks(SharedMasks):
    """Group masks that cancel, once the edge keys are dealt; shared masks until then.

    Attributes
    ----------
    name, edge_keys, always_cancels
        As for :class:`~coded_fl.secagg.masking.base.MaskingScheme`.
    request_extension, upload_extension
        :class:`~coded_fl.secagg.masking.aligned_wire.EdgeKeyRequest` (relayed keys, deals)
        and :class:`~coded_fl.secagg.masking.aligned_wire.EdgeKeyUpload` (dealt keys,
        confirmations).
    """

    name: ClassVar[str] = "aligned"
    edge_keys: ClassVar[bool] = True
    request_extension: ClassVar[ExtensionCodec | None] = EDGE_KEY_REQUEST
    upload_extension: ClassVar[ExtensionCodec | None] = EDGE_KEY_UPLOAD

    def setup(self, code: GradientCode, privacy: int) -> tuple[tuple[int, int], ...]:
        """The mask graph over the code's silo groups (the repetition code only).

        Parameters
        ----------
        code, privacy
            As for :meth:`MaskingScheme.setup`.

        Returns
        -------
        tuple[tuple[int, int], ...]
        """
        if not isinstance(code, GroupCode):
            raise ConfigurationError(
                f"masking='aligned' needs the repetition code (code='auto' picks it when "
                f"it exists, or code='repetition'); code={code.kind!r} mixes replicas: use "
                "masking='shares'"
            )
        return mask_graph(len(code.groups), privacy)

    def round_cancels(self, machine: CollectPhase) -> bool:
        """Whether every edge has one confirmed key (:attr:`CollectPhase.edges_ready`).

        Parameters
        ----------
        machine
            As for :meth:`MaskingScheme.round_cancels`.

        Returns
        -------
        bool
        """
        return machine.edges_ready

    def upload(
        self,
        machine: UploadPhase,
        cfg: ProtocolConfig,
        task: TrainTask,
        partials: Sequence[torch.Tensor],
        model_digest: bytes,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The group-masked vector in a round whose masks cancel; a shared one before.

        Parameters
        ----------
        machine, cfg, task, partials, model_digest
            As for :meth:`MaskingScheme.upload`.

        Returns
        -------
        (torch.Tensor, dict)
        """
        if not task.aligned:
            return super().upload(machine, cfg, task, partials, model_digest)
        return machine.group_upload(cfg, task, partials, model_digest), {}
