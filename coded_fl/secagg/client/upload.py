"""The upload: quantize, encode with the silo's row, mask (shared or group-aligned), seal the
shares and the dealt edge keys; a round is uploaded once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from coded_fl.crypto import KEY_BYTES, seal
from coded_fl.errors import InputError, LocalProtocolError, MaskReuseError
from coded_fl.pipeline import encode_upload
from coded_fl.prg import SEED_BYTES, MaskStream
from coded_fl.secagg.aligned import (
    EDGE_KEY_BYTES,
    edge_tag,
    group_mask,
    group_mask_streams,
    mask_context,
    seal_edge_key,
)
from coded_fl.secagg.client.sealing import SealingCore
from coded_fl.secagg.client.state import MAX_UNVERIFIED_ROUNDS, ClientStage, TrainTask
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.derive import NONCE_BYTES, share_context
from coded_fl.secagg.evidence import DERIVED, SEALED, share_purpose
from coded_fl.secagg.masking.aligned_wire import EdgeKeyUpload
from coded_fl.secagg.messages import SERVER, Upload


class UploadPhase(SealingCore):
    """The upload phase of :class:`~coded_fl.secagg.client.machine.ClientMachine`: its
    methods, on the state :class:`~coded_fl.secagg.client.state.MachineCore` declares."""

    def upload(
        self, task: TrainTask, partials: Sequence[torch.Tensor], *, model_digest: bytes = b""
    ) -> Upload:
        """Quantize, encode, mask and share: the Upload for ``task`` (partials align with
        ``task.partitions``, each a float tensor of ``vector_length`` elements).

        The mask and its shares derive from key agreement (one ephemeral key per share,
        :mod:`coded_fl.secagg.evidence`) and a context that binds the
        request, ``model_digest`` (a digest of the model the silo was sent, if the caller has
        one) and a fresh nonce, so no two uploads share a mask; a second upload for a round is
        refused with :class:`~coded_fl.errors.MaskReuseError` all the same. ``model_digest``
        (the digest of everything the silo trained on, the same at every silo of an honest
        round) also keys every share (derived or sealed: it is in the HKDF info of each
        share's ephemeral key agreement) and is in the sealed shares' associated data; the
        silo keeps it and checks every survivor's shares against it at recovery, so a round
        whose silos were sent different inputs cannot be unmasked. (A reveal needs no digest:
        the ephemeral scalar does not depend on it; the server judges a disputed share under
        the digest of the inputs it sent this silo.)

        Parameters
        ----------
        task
            What on_train_request returned for the round.
        partials
            One float tensor of vector_length elements per partition of the task, in
            task.partitions order.
        model_digest
            The digest of everything the silo trained on (the inputs digest of the train
            message); empty when the caller has none.
        """
        if isinstance(task, TrainTask) and task.round in self.uploaded:
            raise MaskReuseError(
                f"silo {self.silo} already uploaded round {task.round}: a second upload for a "
                "round is refused (two masked uploads of one round would let the server "
                "subtract them); wait for the next TrainRequest"
            )
        self._require(ClientStage.TRAINING)
        if task is not getattr(self, "_task", None) or task.round != self.round:
            raise LocalProtocolError("upload() must be given the task of the current round")
        cfg, silo, _ = self._identity()
        if len(partials) != len(task.partitions):
            raise LocalProtocolError(
                f"{len(partials)} partial updates for {len(task.partitions)} partitions"
            )
        if cfg.dp_plan is not None:
            partials = _dp_partials(cfg, task, partials)
        edge_keys, dealt = self._deal(cfg, silo, task)
        confirms = tuple(
            (q, h, edge_tag(key, run_id=cfg.run_bytes, edge=(q, h)))
            for (q, h), key in sorted(edge_keys.items())
        )
        masked, shared = cfg.scheme.upload(self, cfg, task, partials, bytes(model_digest))
        if dealt or confirms:  # the edge keys travel in the aligned scheme's extension
            shared = {**shared, "extension": EdgeKeyUpload(dealt=dealt, confirms=confirms)}
        # The recovery needs no per-round state but the inputs digest (a node that processes
        # two messages at once, as Flower's simulation engine does, could overwrite it with a
        # stale copy: the adapter keeps a copy of the uploads outside the state and gives it
        # back, recall_uploads): derived shares, this silo's own included, are recomputed from
        # keys, the relayed context and its own digest.
        self.edge_keys = edge_keys
        self.stage = ClientStage.UPLOADED
        self._keep_uploads((task.round,), {**self.inputs, task.round: bytes(model_digest)})
        return Upload(
            digest=cfg.digest,
            round=task.round,
            sender=silo,
            recipient=SERVER,
            masked=masked,
            **shared,
        )

    def _deal(
        self, cfg: ProtocolConfig, silo: int, task: TrainTask
    ) -> tuple[dict[tuple[int, int], bytes], tuple[tuple[int, int, int, bytes], ...]]:
        """The edge keys after dealing ``task.deal`` (a key this silo lacks is made now) and
        the sealed boxes."""
        keys = dict(self.edge_keys)
        boxes = []
        for q, h, recipient in task.deal:
            key = keys.get((q, h))
            if key is None:
                key = keys[(q, h)] = bytes(self._entropy(EDGE_KEY_BYTES))
                if len(key) != EDGE_KEY_BYTES:
                    raise InputError(f"the entropy source must return {EDGE_KEY_BYTES} bytes")
            box = seal_edge_key(
                self._key_for(recipient),
                key,
                run_id=cfg.run_bytes,
                dealer=silo,
                recipient=recipient,
                edge=(q, h),
            )
            boxes.append((recipient, q, h, box))
        return keys, tuple(boxes)

    def shared_upload(
        self,
        cfg: ProtocolConfig,
        task: TrainTask,
        partials: Sequence[torch.Tensor],
        model_digest: bytes,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The coded update under a secret-shared mask, and the Upload's share fields: the
        context, the derived shares' tags and the sealed shares (``masking="shares"``, and
        ``"aligned"`` until the edge keys are dealt).

        Parameters
        ----------
        cfg
            The run's configuration.
        task
            The round's task.
        partials
            One float tensor per partition of the task.
        model_digest
            The digest of the training inputs (in every share's key agreement).

        Returns
        -------
        (torch.Tensor, dict)
            The masked vector and the Upload's ``shares``, ``context`` and ``tags``.
        """
        silo = task.silo
        sharing = cfg.sharing
        nonce = self._entropy(NONCE_BYTES)
        if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
            raise InputError(f"the entropy source must return exactly {NONCE_BYTES} bytes")
        context = share_context(task.request, model_digest, nonce=nonce)
        members = sorted(self.roster)
        derived = sharing.derived_set(silo, members)
        # derived straight into the rows (numpy: no torch copy, whose intra-op threads stall
        # when other processes hold the cores)
        rows = np.empty((sharing.U, sharing.piece_length), dtype=np.uint32)
        tags = []
        for row, j in enumerate(derived):  # every share has its own ephemeral key (evidence)
            ephemeral, secret = self._sender_secret(
                cfg, j, task.round, context, DERIVED, self.roster, model_digest
            )
            MaskStream(secret[:SEED_BYTES], cfg.p).fill(rows[row])
            tag = secret[SEED_BYTES:]
            tags.append((j, self._entry(cfg, j, task.round, DERIVED, context, ephemeral, tag)))
        values = torch.from_numpy(rows)
        others = tuple(j for j in members if j not in derived)
        mask, shares = sharing.complete(derived, values, others)
        masked = self.encode(cfg, task, partials, mask)
        sealed = []
        for row, j in enumerate(others):
            ephemeral, secret = self._sender_secret(
                cfg, j, task.round, context, SEALED, self.roster, model_digest
            )
            box = seal(
                secret[:KEY_BYTES],
                shares[row].numpy().tobytes(),
                run_id=cfg.run_bytes,
                round_=task.round,
                sender=silo,
                recipient=j,
                purpose=share_purpose(model_digest),
            )
            sealed.append((j, self._entry(cfg, j, task.round, SEALED, context, ephemeral, box)))
        return masked, {"shares": tuple(sealed), "context": context, "tags": tuple(tags)}

    def group_upload(
        self,
        cfg: ProtocolConfig,
        task: TrainTask,
        partials: Sequence[torch.Tensor],
        model_digest: bytes,
    ) -> torch.Tensor:
        """The coded update under the group mask r_i zeta_q (no shares: they cancel in the
        decode for every survivor set), bound to the request and the model
        (``masking="aligned"`` once the edge keys are dealt).

        Parameters
        ----------
        cfg
            The run's configuration.
        task
            The round's task (a group-masked round's).
        partials
            One float tensor per partition of the task.
        model_digest
            The digest of the training inputs (in the masks' context).

        Returns
        -------
        torch.Tensor
            The masked vector.
        """
        group = cfg.group_code.group_of(task.silo)
        context = mask_context(task.request, model_digest)
        r = task.coefficients[0]
        plan = cfg.dp_plan
        if plan is None:  # the mask made chunk by chunk inside the fused upload
            streams = group_mask_streams(
                self.edge_keys,
                cfg.mask_edges,
                group,
                field=cfg.field,
                run_id=cfg.run_bytes,
                round_=task.round,
                context=context,
                scale=r,
            )
            return self.encode(cfg, task, partials, None, mask_streams=streams)
        # distributed DP: the group's noise share rides on the mask, times the member's code
        # coefficient r_i as the partitions' sum is (every member draws the same noise)
        from coded_fl.dp.pipeline import group_noise

        F, d = cfg.field, cfg.vector_length
        mask = group_mask(
            self.edge_keys,
            cfg.mask_edges,
            group,
            length=d,
            field=F,
            run_id=cfg.run_bytes,
            round_=task.round,
            context=context,
            scale=r,
        )
        noise = group_noise(
            self.edge_keys,
            group,
            plan,
            run_id=cfg.run_bytes,
            round_=task.round,
            context=context,
            size=d,
        )
        noisy = F.add(torch.from_numpy(mask), F.mul(F.from_signed(torch.from_numpy(noise)), r))
        return self.encode(cfg, task, partials, noisy)

    def encode(
        self,
        cfg: ProtocolConfig,
        task: TrainTask,
        partials: Sequence[torch.Tensor],
        mask: torch.Tensor | None,
        *,
        mask_streams: Sequence[tuple[bytes, int]] | None = None,
    ) -> torch.Tensor:
        """Quantize, encode with the silo's code row and add ``mask`` (or the mask made of
        ``mask_streams``): one fused pass (what a masking scheme's upload calls).

        Parameters
        ----------
        cfg
            The run's configuration.
        task
            The round's task (code row, rounding keys).
        partials
            One float tensor per partition of the task.
        mask
            The mask to add (uint32 field elements of the vector's length), or None.
        mask_streams
            Instead of ``mask``: ``(seed, coefficient)`` pairs whose streams make the mask
            (:func:`coded_fl.pipeline.encode_upload`).

        Returns
        -------
        torch.Tensor
            The masked, coded vector.
        """
        return encode_upload(
            [g.reshape(-1) for g in partials],
            list(task.coefficients),
            list(task.rounding_keys),
            cfg.quantization,
            cfg.field,
            mask=mask,
            mask_streams=mask_streams,
            stats=self.stats,
        )

    def recall_uploads(self, uploads: Mapping[int, bytes]) -> None:
        """Merge a record of this silo's own uploads of the current session (round -> the
        digest of the inputs it trained on) kept outside its state: a state written back
        from before an upload (a node that ran two messages at once and saved the older last)
        then still refuses that round a second time and can answer its recovery. Only the
        adapter's own record of what this silo sent may come here, never a server's word.

        Parameters
        ----------
        uploads
            Round -> inputs digest, as :attr:`inputs` holds them.
        """
        if not uploads:
            return
        merged = {**{int(r): bytes(d) for r, d in uploads.items()}, **self.inputs}
        self._keep_uploads(merged, merged)

    def _keep_uploads(self, rounds: Iterable[int], inputs: dict[int, bytes]) -> None:
        """Add ``rounds`` to the rounds uploaded (the last MAX_UNVERIFIED_ROUNDS kept) and
        keep the inputs digests of those rounds from ``inputs``."""
        self.uploaded = tuple(sorted({*self.uploaded, *rounds}))[-MAX_UNVERIFIED_ROUNDS:]
        self.inputs = {r: inputs[r] for r in self.uploaded if r in inputs}


def _dp_partials(
    cfg: ProtocolConfig, task: TrainTask, partials: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """What a silo of a run with distributed DP encodes: zeros in a round whose masks do not
    cancel (a keying round that deals the edge keys: its sum is never applied, and no
    noise key exists yet), else each partial held to the L2 clip (the adapter clipped and
    rotated it, :func:`coded_fl.dp.pipeline.prepare`; the rotation keeps the norm, so the
    machine enforces the sensitivity whatever the adapter did)."""
    if not task.aligned:
        return [torch.zeros(cfg.vector_length, dtype=torch.float32) for _ in partials]
    if len(set(task.coefficients)) != 1:  # pragma: no cover - the group code's rows
        raise LocalProtocolError("distributed DP needs one code coefficient per silo")
    clip = float(cfg.quantization.clip_range)
    out = []
    for g in partials:
        norm = float(torch.linalg.vector_norm(g.double()))
        out.append(g if norm <= clip else g.double() * (clip / norm))
    return out
