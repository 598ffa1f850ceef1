"""What a masking scheme is to the machines: one object per scheme, found by name in the
registry (:mod:`coded_fl.secagg.masking`).

A scheme decides three things, and nothing else in the machines depends on which scheme runs:

- **configuration** (:meth:`MaskingScheme.setup`): whether it works with the run's gradient code,
  and the mask graph's edges whose keys the silos deal (none for most schemes);
- **the server's round** (:meth:`MaskingScheme.round_cancels`): whether the masks of the round
  it opens cancel in the decode (no recovery stage, one round trip), or must be recovered
  from the silos' shares;
- **the silo's upload** (:meth:`MaskingScheme.upload`): the masked, coded vector and the share
  fields the Upload carries.

A scheme's own message fields travel as its extensions of the TrainRequest and the Upload
(:attr:`MaskingScheme.request_extension`, :attr:`MaskingScheme.upload_extension`: a
:class:`~coded_fl.secagg.messages.extensions.MessageExtension` and its codec, registered with
the scheme); a message carrying an extension its run's scheme did not define is refused
(:meth:`MaskingScheme.check_extension`). The silo checks the round's claim against the scheme
(:meth:`MaskingScheme.check_request`): a scheme whose masks never cancel refuses a request
that says they do. The edge keys' dealing (:mod:`coded_fl.secagg.edge_keys`) runs for a scheme
with :attr:`MaskingScheme.edge_keys` set.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from coded_fl.codes import GradientCode
from coded_fl.errors import RemoteProtocolError
from coded_fl.secagg.messages import SERVER, TrainRequest, Upload
from coded_fl.secagg.messages.extensions import ExtensionCodec

if TYPE_CHECKING:  # the machines import the registry: no import cycle at run time
    from coded_fl.secagg.client.state import TrainTask
    from coded_fl.secagg.client.upload import UploadPhase
    from coded_fl.secagg.config import ProtocolConfig
    from coded_fl.secagg.server.collect import CollectPhase

__all__ = ["MaskingScheme"]


class MaskingScheme(ABC):
    """One way of masking a round's uploads.

    Attributes
    ----------
    name
        The name ``ProtocolConfig(masking=...)`` selects it by (part of the run's digest).
    edge_keys
        Whether its silos deal and hold mask-graph edge keys (carried by its extensions).
    always_cancels
        Whether every round's masks cancel in the decode (the silo then refuses a request
        that says otherwise); False where it depends on the round.
    request_extension, upload_extension
        The codec of its own fields on a TrainRequest and on an Upload (None: it adds none);
        :func:`coded_fl.secagg.masking.register` registers them with the scheme.
    """

    name: ClassVar[str] = ""
    edge_keys: ClassVar[bool] = False
    always_cancels: ClassVar[bool] = False
    request_extension: ClassVar[ExtensionCodec | None] = None
    upload_extension: ClassVar[ExtensionCodec | None] = None

    def setup(self, code: GradientCode, privacy: int) -> tuple[tuple[int, int], ...]:
        """Check that the scheme works with ``code``; the mask graph's edges, if it has one.

        Parameters
        ----------
        code
            The run's gradient code.
        privacy
            T, the colluding silos tolerated.

        Returns
        -------
        tuple[tuple[int, int], ...]
            The edges whose keys the silos deal (empty: none).

        Raises
        ------
        ConfigurationError
            If the scheme cannot mask a run with this code, saying what to change.
        """
        return ()

    def round_cancels(self, machine: CollectPhase) -> bool:
        """Whether the round the server opens now is masked so that the masks cancel.

        Parameters
        ----------
        machine
            The server machine about to open the round.

        Returns
        -------
        bool
        """
        return self.always_cancels

    def check_extension(self, msg: TrainRequest | Upload, *, sender: int) -> None:
        """Refuse a message that carries an extension this scheme did not define for its type.

        Parameters
        ----------
        msg
            A TrainRequest or an Upload.
        sender
            Whom to blame: the server for a request, the silo for an upload.

        Raises
        ------
        RemoteProtocolError
            Blamed on ``sender``.
        """
        ext = msg.extension
        if ext is None:
            return
        codec = self.request_extension if isinstance(msg, TrainRequest) else self.upload_extension
        if codec is None or type(ext) is not codec.cls:
            raise RemoteProtocolError(
                f"a {type(msg).__name__} with a {type(ext).__name__} extension in a run with "
                f"masking={self.name!r} (its {type(msg).__name__} carries "
                f"{'none' if codec is None else codec.cls.__name__})",
                sender=sender,
            )

    def check_request(self, msg: TrainRequest) -> None:
        """Refuse a TrainRequest whose masking fields this scheme cannot have sent: an
        extension it did not define, or a claim about the masks it cannot make.

        Parameters
        ----------
        msg
            The request (its other fields are checked by the machine).

        Raises
        ------
        RemoteProtocolError
            Blamed on the server.
        """
        self.check_extension(msg, sender=SERVER)
        if self.edge_keys:  # the machine checks the edge keys against the mask graph
            return
        if msg.aligned != self.always_cancels:
            raise RemoteProtocolError(
                f"the request says the round's masks {'do' if msg.aligned else 'do not'} "
                f"cancel; with masking={self.name!r} they "
                f"{'always' if self.always_cancels else 'never'} do",
                sender=SERVER,
            )

    @abstractmethod
    def upload(
        self,
        machine: UploadPhase,
        cfg: ProtocolConfig,
        task: TrainTask,
        partials: Sequence[torch.Tensor],
        model_digest: bytes,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The silo's masked, coded vector for ``task`` and the Upload's share fields.

        Parameters
        ----------
        machine
            The silo's machine (its keys, its encoder).
        cfg
            The run's configuration.
        task
            The round's task (``task.aligned``: the server said the masks cancel).
        partials
            One float tensor per partition of the task.
        model_digest
            The digest of the training inputs the masks are bound to.

        Returns
        -------
        (torch.Tensor, dict)
            The masked vector, and the Upload's ``shares``, ``context`` and ``tags`` (empty
            where the masks cancel), and its ``extension`` where the scheme adds one
            (:attr:`upload_extension`).
        """
