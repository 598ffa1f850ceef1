"""``masking="shares"``: secret-shared masks (LightSecAgg-style), two round trips per round.

Each silo masks its coded vector with a fresh mask and leaves a share of it with every other
silo (derived from key agreement for U of them, sealed for the rest); the survivors send the
server their shares' sum for the round's weight rows, which unmasks the decoded sum only
(``docs/protocol.md``). Works with every exact gradient code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from coded_fl.secagg.masking.base import MaskingScheme

if TYPE_CHECKING:
    from coded_fl.secagg.client.state import TrainTask
    from coded_fl.secagg.client.upload import UploadPhase
    from coded_fl.secagg.config import ProtocolConfig

__all__ = ["SharedMasks"]


class SharedMasks(MaskingScheme):
    """Masks recovered from the silos' shares: every round has a recovery stage.

    Attributes
    ----------
    name, edge_keys, always_cancels
        As for :class:`~coded_fl.secagg.masking.base.MaskingScheme`.
    """

    name: ClassVar[str] = "shares"

    def upload(
        self,
        machine: UploadPhase,
        cfg: ProtocolConfig,
        task: TrainTask,
        partials: Sequence[torch.Tensor],
        model_digest: bytes,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The vector under a fresh secret-shared mask, with its sealed shares and tags.

        Parameters
        ----------
        machine, cfg, task, partials, model_digest
            As for :meth:`MaskingScheme.upload`.

        Returns
        -------
        (torch.Tensor, dict)
        """
        return machine.shared_upload(cfg, task, partials, model_digest)
