"""The silo's protocol steps around its training, without any framework: what a client adapter
(``clients.mod`` for Flower) calls between reading a train request and uploading.

- :func:`partition_seed`: the seed every replica of a partition trains with in a round, and
  :func:`seed_everything` (torch, NumPy, ``random``) with it;
- :func:`silo_layout`: the update-vector layout of the model the server sent, checked against
  the session's vector length;
- :func:`weight_ratio`: a partition's sample weight as the fraction w / W of the round's weight
  bound, or the typed error that refuses the round (automatic bound too small, or a fixed one);
- :func:`same_metric_names`: the metric names every partition returned (one list);
- with distributed DP, :mod:`coded_fl.secagg.private` (keying rounds, the clipped and rotated
  update, the silo's own privacy budget);
- :class:`UploadLog`: the rounds this silo uploaded under its current keys, kept in a file
  beside the framework's own state (a stale state written back must not make the silo forget
  an upload it still has to recover).

The adapter only translates records: it reads the model, the train spec and the user's train
replies from its framework's messages and hands numbers and arrays to these functions.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import logging
import math
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coded_fl.errors import ConfigurationError, InputError, WeightBoundError
from coded_fl.layout import UpdateLayout, element_count
from coded_fl.secagg.client import MAX_UNVERIFIED_ROUNDS, ClientMachine
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.vocabulary import TrainSpec

__all__ = [
    "UploadLog",
    "partition_seed",
    "same_metric_names",
    "seed_everything",
    "silo_layout",
    "weight_ratio",
]

LOG = logging.getLogger("coded_fl")


def partition_seed(run_id: str, server_round: int, partition: int) -> int:
    """The seed every replica of ``partition`` uses in ``server_round`` (63 bits).

    Parameters
    ----------
    run_id
        The public run id of the protocol configuration (``ProtocolConfig.seed_id``).
    server_round, partition
        The protocol round and the partition index.

    Returns
    -------
    int
        A 63-bit seed, the same on every silo that holds ``partition``.
    """
    h = hashlib.blake2b(
        f"{run_id}/{server_round}/{partition}".encode(), digest_size=8, person=b"codedfl-train"
    )
    return int.from_bytes(h.digest(), "little") >> 1


def seed_everything(seed: int) -> None:
    """Seed torch, NumPy and ``random`` as ``torch.manual_seed`` would, without its cost where
    there is no accelerator: ``torch.manual_seed`` queues a lazy CUDA/XPU/MTIA seeding, with a
    captured stack trace, on every call, about 1 ms each on a CPU-only silo.

    Parameters
    ----------
    seed
        The seed (:func:`partition_seed`).
    """
    if torch.cuda.is_available() or _other_accelerator():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


@functools.cache
def _other_accelerator() -> bool:
    """Whether torch sees an XPU, MTIA or MPS device (asked once per process: it does not
    change while the process lives)."""
    for name in ("xpu", "mtia", "mps"):
        backend = getattr(torch, name, None)
        available = getattr(backend, "is_available", None)
        if available is not None and available():
            return True
    return False


def silo_layout(
    model: Mapping[str, Any], theta: torch.Tensor, spec: TrainSpec, config: ProtocolConfig
) -> UpdateLayout:
    """The layout of the update vector for ``model`` (flattened to ``theta``) under ``spec``.

    Parameters
    ----------
    model
        The model's arrays as the server sent them (name -> array).
    theta
        The model flattened (:func:`coded_fl.layout.flatten` with ``spec.integer_arrays``).
    spec
        The round's train spec.
    config
        The session's protocol configuration.

    Returns
    -------
    UpdateLayout

    Raises
    ------
    ConfigurationError
        If the session's vector length does not fit the model (another model than the one the
        session was configured for).
    """
    ints = spec.integer_arrays
    lay = UpdateLayout(
        model_size=theta.numel(),
        metric_keys=spec.packed_metrics,
        scale=config.quantization.scale,
        integer_names=ints,
        integer_size=element_count(model, ints),
    )
    if config.vector_length != lay.length:
        raise ConfigurationError(
            f"protocol vector_length={config.vector_length} but the model has {lay.describe()}"
        )
    return lay


def weight_ratio(examples: float, spec: TrainSpec, *, who: str, log: logging.Logger = LOG) -> float:
    """A partition's weight w as the fraction rho = w / W of the round's weight bound W.

    A weight above the bound refuses the round: with the automatic bound by asking for the
    power of two that holds w (:class:`~coded_fl.errors.WeightBoundError`, which the silo sends
    as a ``WEIGHT_BOUND`` refusal: the server learns that power of two, never w); with a fixed
    bound as a setting to change. The silo's own log names w, for its operator.

    Parameters
    ----------
    examples
        The partition's sample weight (number of examples) as the train function reported it.
    spec
        The round's train spec (``max_weight``, ``auto_weight``, ``weight_key``).
    who
        Names the partition in errors ("the train function (partition 3)").
    log
        Where a weight above the bound is logged.

    Returns
    -------
    float
        rho in (0, 1].

    Raises
    ------
    InputError
        A weight that is not positive.
    WeightBoundError
        Above the automatic bound.
    ConfigurationError
        Above a fixed bound.
    """
    w = float(examples)
    if not w > 0:
        raise InputError(f"{who} reported {spec.weight_key}={w}; it must be > 0")
    rho = w / spec.max_weight
    if rho <= 1.0:
        return rho
    log.warning(
        "[coded-fl] %s reported %s=%g, more than the weight bound %g",
        who,
        spec.weight_key,
        w,
        spec.max_weight,
    )
    if spec.auto_weight:
        bound = 1 << max(0, math.ceil(math.log2(w)))
        raise WeightBoundError(
            f"a partition holds more examples than the automatic weight bound "
            f"{spec.max_weight:g}: asking for {bound}",
            bound,
        )
    raise ConfigurationError(
        f"a partition holds more examples than max_weight={spec.max_weight:g}: raise "
        "max_weight in coded_fl_flower.CodedSecAgg (the silo's log says how far), or leave "
        "it unset (automatic)"
    )


def same_metric_names(named: Mapping[int, tuple[str, ...]]) -> tuple[str, ...]:
    """The metric names every partition returned, which must be one list (each name goes to
    the same slot of every partition's update).

    Parameters
    ----------
    named
        Partition -> the metric names its train reply gave.

    Returns
    -------
    tuple[str, ...]

    Raises
    ------
    InputError
        If two partitions named different metrics.
    """
    lists = set(named.values())
    if len(lists) > 1:
        raise InputError(
            "the train function returned different metrics for different partitions "
            f"({dict(sorted(named.items()))}): return the same metric names every time, or "
            "name the metrics to aggregate in CodedSecAgg(metric_keys=...)"
        )
    return next(iter(lists), ())


class UploadLog:
    """The rounds a silo uploaded under its current keys and the digests of their inputs,
    kept in a file per node and session (public: hashes of what the server sent, no key or
    mask).

    A framework may run a node's messages concurrently and write back each one's state when it
    ends (Flower's simulation engine does), so a straggler's late train can write back a state
    from before the node's next upload; the recovery of that upload would then be refused. The
    log is written under a lock and merged back before every message
    (:meth:`ClientMachine.recall_uploads`).

    Parameters
    ----------
    root
        The folder of the logs (one file per node, session and key).
    node
        The node's id.
    """

    def __init__(self, root: Path, node: int) -> None:
        self.root = root
        self.node = node

    def path(self, machine: ClientMachine) -> Path | None:
        """The file of this node's uploads under ``machine``'s current keys (None before keys).

        Parameters
        ----------
        machine
            The silo's machine.

        Returns
        -------
        Path | None
        """
        cfg, key = machine.config, machine.key_id
        if cfg is None or key is None:
            return None
        # the session's digest and this node's key of it: a new key exchange starts a new log
        return self.root / f"uploads-{self.node}-{cfg.digest.hex()[:32]}-{key}.json"

    @staticmethod
    def _read(path: Path) -> dict[int, bytes]:
        try:
            raw = json.loads(path.read_text())
            return {int(r): bytes.fromhex(d) for r, d in raw.items()}
        except (OSError, ValueError, TypeError, AttributeError):
            return {}  # none yet, or unreadable: the state alone decides

    def recall(self, machine: ClientMachine) -> None:
        """Merge the logged uploads into ``machine`` (what a stale state may lack).

        Parameters
        ----------
        machine
            The silo's machine, as loaded from the framework's state.
        """
        path = self.path(machine)
        if path is not None:
            machine.recall_uploads(self._read(path))

    def remember(self, machine: ClientMachine) -> None:
        """Log ``machine``'s uploads (the last :data:`MAX_UNVERIFIED_ROUNDS`), merged with what
        the file holds; a failure to write is logged (the state still holds them).

        Parameters
        ----------
        machine
            The silo's machine after an upload.
        """
        path = self.path(machine)
        if path is None or not machine.inputs:
            return
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(path.with_suffix(".lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                merged = {**self._read(path), **machine.inputs}
                keep = sorted(merged)[-MAX_UNVERIFIED_ROUNDS:]
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps({str(r): merged[r].hex() for r in keep}))
                os.replace(tmp, path)
        except OSError as exc:
            LOG.warning("[coded-fl] could not keep the record of this node's uploads: %s", exc)
