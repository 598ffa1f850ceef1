"""The silo's steps of a run with distributed DP, without any framework (``docs/privacy.md``):
what a client adapter calls between reading a train request and uploading.

- :func:`keying_round`: whether the round only deals the edge keys (the silo uploads zeros and
  does not train);
- :func:`dp_partial`: a partition's update as a noised round uploads it (clipped, rotated);
- :func:`charge_release`: the node's own privacy budget, charged before a noised round.

``coded_fl.dp`` needs the ``dp`` extra: it is imported only when a run has ``dp``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from coded_fl.errors import ConfigurationError
from coded_fl.secagg.client import TrainTask
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.policy import ClientPolicy

__all__ = ["charge_release", "dp_partial", "keying_round"]


def keying_round(config: ProtocolConfig, task: TrainTask) -> bool:
    """Whether ``task`` is a keying round of a run with distributed DP: its masks do not
    cancel (the edge keys are still being dealt), so no noise key exists and its sum must not
    be released: the silo uploads zeros (the machine enforces it) and needs not train.

    Parameters
    ----------
    config
        The session's configuration.
    task
        The round's task.

    Returns
    -------
    bool
    """
    return config.dp_plan is not None and not task.aligned


def dp_partial(delta: torch.Tensor, config: ProtocolConfig, round_: int) -> torch.Tensor:
    """A partition's update as a run with distributed DP uploads it: padded to the vector
    length, clipped to the L2 clip, rotated with the round's public seed
    (:func:`coded_fl.dp.pipeline.prepare`); the upload's quantizer rounds it at the plan's
    step with the partition's rounding key, so its replicas agree.

    Parameters
    ----------
    delta
        theta_k - theta over the model's float coordinates.
    config
        The session's configuration (with ``dp``).
    round_
        The protocol round.

    Returns
    -------
    torch.Tensor
        float64, ``config.vector_length`` long.

    Raises
    ------
    ConfigurationError
        If the run has no ``dp``.
    InputError
        If the update has NaN or infinite values, or more coordinates than the vector.
    """
    plan = config.dp_plan
    if plan is None:
        raise ConfigurationError("dp_partial needs a configuration with dp")
    from coded_fl.dp.pipeline import prepare, rotation_seed

    ready = prepare(
        delta.detach().to("cpu", torch.float64).numpy(),
        plan,
        length=config.vector_length,
        seed=rotation_seed(config.seed_id, round_),
    )
    return torch.from_numpy(ready)


def charge_release(
    config: ProtocolConfig, task: TrainTask, policy: ClientPolicy, ledger: Path
) -> float | None:
    """Charge a noised round of a run with distributed DP to the node's privacy ledger before
    anything is trained or sent (:class:`coded_fl.dp.ledger.PrivacyLedger`); None for any
    other round.

    Parameters
    ----------
    config
        The session's configuration.
    task
        The round's task.
    policy
        The silo's policy (``max_epsilon``, ``budget_delta``).
    ledger
        The ledger's file.

    Returns
    -------
    float | None
        The node's composed epsilon after this round (None: not a noised round).

    Raises
    ------
    PrivacyBudgetError
        The round would exceed the silo's budget (a setting: the adapter refuses the round).
    """
    plan = config.dp_plan
    if plan is None or keying_round(config, task):
        return None
    from coded_fl.dp.ledger import PrivacyLedger

    return PrivacyLedger(ledger).charge(plan, delta=policy.budget_delta, budget=policy.max_epsilon)
