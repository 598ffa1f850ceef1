"""Which Flower strategies compose with coded secure aggregation, and the DP noise calibration.

Secure aggregation gives the server one thing per round: the (weighted) sum of the silos'
updates. A strategy whose aggregation reads the updates one by one cannot run on it:

- robust aggregation (Krum, MultiKrum, Bulyan, FedMedian, FedTrimmedAvg) selects, ranks or
  trims individual updates;
- QFedAvg weights each update by that client's own loss;
- the XGBoost strategies (FedXgbBagging, FedXgbCyclic, FedXgbNnAvg) combine individual trees;
- server-side clipping DP (``DifferentialPrivacyServerSide*Clipping``) clips each update on the
  server; client-side *adaptive* clipping (``DifferentialPrivacyClientSideAdaptiveClipping``,
  the legacy ``DPFedAvgAdaptive``) adapts the norm from each client's clipped-or-not bit; an
  accountant on ``DifferentialPrivacyClientSideFixedClipping`` demands one reply per sampled
  client.

:func:`check_composable` refuses them (also nested inside wrappers) when ``CodedSecAgg`` or the
legacy adapter is built, with what composes instead: averaging strategies (FedAvg, FedProx,
FedAdam, FedYogi, FedAdagrad, FedAvgM, ...) and central DP with client-side fixed clipping.

:func:`calibrate_noise` sets a client-side fixed clipping wrapper's ``num_sampled_clients`` to
the number of partitions K summed per round (every round sums all K partitions, whichever
silos replied), so its Gaussian noise, of standard deviation
:math:`\\sigma = z C / K`, is calibrated to the average of K clipped partition updates.
"""

from __future__ import annotations

import logging
from typing import Any

from flwr.server import strategy as legacy
from flwr.serverapp import strategy as msgapi

from coded_fl.errors import ConfigurationError

__all__ = [
    "NotComposableError",
    "calibrate_noise",
    "chain_attr",
    "check_composable",
    "legacy_advice",
]

LOG = logging.getLogger("flwr")

_INSTEAD = (
    "Strategies that average (FedAvg, FedProx, FedAdam, FedYogi, FedAdagrad, FedAvgM) compose, "
    "and so does central DP with client-side fixed clipping "
    "(DifferentialPrivacyClientSideFixedClipping around the strategy, fixedclipping_mod after "
    "coded_secagg_mod on the clients)"
)
_ROBUST = "selects, ranks or trims individual updates (robust aggregation)"
_CLIP = (
    "clips every client's update on the server, so it needs the individual updates; clip on "
    "the clients instead with DifferentialPrivacyClientSideFixedClipping + fixedclipping_mod"
)
_ADAPTIVE = (
    "adapts the clipping norm from each client's own clipped-or-not bit, a per-reply metric; "
    "use DifferentialPrivacyClientSideFixedClipping + fixedclipping_mod (a fixed norm)"
)

#: (class, why it needs individual results), Message API then legacy API.
REFUSED: tuple[tuple[type, str], ...] = (
    (msgapi.Krum, _ROBUST),
    (msgapi.MultiKrum, _ROBUST),
    (msgapi.Bulyan, _ROBUST),
    (msgapi.FedMedian, _ROBUST),
    (msgapi.FedTrimmedAvg, _ROBUST),
    (msgapi.QFedAvg, "weights each update by that client's own loss"),
    (msgapi.FedXgbBagging, "combines individual trees"),
    (msgapi.FedXgbCyclic, "takes individual models in turn"),
    (msgapi.DifferentialPrivacyServerSideFixedClipping, _CLIP),
    (msgapi.DifferentialPrivacyServerSideAdaptiveClipping, _CLIP),
    (msgapi.DifferentialPrivacyClientSideAdaptiveClipping, _ADAPTIVE),
    (legacy.Krum, _ROBUST),
    (legacy.Bulyan, _ROBUST),
    (legacy.FedMedian, _ROBUST),
    (legacy.FedTrimmedAvg, _ROBUST),
    (legacy.QFedAvg, "weights each update by that client's own loss"),
    (legacy.FedXgbBagging, "combines individual trees"),
    (legacy.FedXgbCyclic, "takes individual models in turn"),
    (legacy.FedXgbNnAvg, "combines individual trees"),
    (legacy.DifferentialPrivacyServerSideFixedClipping, _CLIP),
    (legacy.DifferentialPrivacyServerSideAdaptiveClipping, _CLIP),
    (legacy.DifferentialPrivacyClientSideAdaptiveClipping, _ADAPTIVE),
    (legacy.DPFedAvgAdaptive, _ADAPTIVE),
)

#: Client-side fixed clipping wrappers: their noise is calibrated to K partitions.
FIXED_CLIPPING = (
    msgapi.DifferentialPrivacyClientSideFixedClipping,
    legacy.DifferentialPrivacyClientSideFixedClipping,
)


class NotComposableError(ConfigurationError):
    """A strategy whose aggregation needs individual results was given to coded-fl."""


def _chain(strategy: object) -> list[object]:
    """``strategy`` and every strategy it wraps (``.strategy`` attributes), outermost first."""
    out: list[object] = []
    while strategy is not None and all(strategy is not s for s in out) and len(out) < 16:
        out.append(strategy)
        strategy = getattr(strategy, "strategy", None)
    return out


def chain_attr(strategy: object, name: str, default: Any) -> Any:
    """The attribute ``name`` of the outermost strategy in the chain that has it: a wrapper
    (Flower's DP wrappers) does not repeat its inner strategy's ``min_available_nodes``,
    ``arrayrecord_key``, ... but they are what the run must use.

    Parameters
    ----------
    strategy
        The strategy (chain).
    name
        The attribute.
    default
        Returned when no strategy in the chain has it.

    Returns
    -------
    Any
    """
    for s in _chain(strategy):
        if hasattr(s, name):
            return getattr(s, name)
    return default


def check_composable(strategy: object) -> None:
    """Refuse ``strategy`` if it, or a strategy it wraps, needs individual results.

    Parameters
    ----------
    strategy
        A Message-API or legacy Flower strategy (possibly a wrapper).

    Raises
    ------
    NotComposableError
        Naming the strategy, why it cannot run on a sum, and what composes instead.
    """
    for s in _chain(strategy):
        for cls, why in REFUSED:
            if isinstance(s, cls):
                raise NotComposableError(
                    f"{type(s).__name__} cannot run under coded secure aggregation: it {why}, "
                    f"and the server only ever learns the sum of the updates. {_INSTEAD}"
                )
        if isinstance(s, msgapi.DifferentialPrivacyClientSideFixedClipping) and (
            getattr(s, "accountant", None) is not None
        ):
            raise NotComposableError(
                "DifferentialPrivacyClientSideFixedClipping with an accountant cannot run under "
                "coded secure aggregation: the accountant requires one reply per sampled "
                "client and the decoded sum arrives as one; drop accountant= (the noise is "
                "calibrated to the K partitions summed per round: sigma = z C / K) and account "
                "for the rounds yourself"
            )


def calibrate_noise(strategy: object, num_partitions: int) -> None:
    """Set every client-side fixed clipping wrapper's ``num_sampled_clients`` to K.

    Each round sums the clipped updates of all K partitions (gradient coding recovers the sum
    over every partition from the first n - s replies), so the average's sensitivity is
    :math:`C / K` and Flower's noise :math:`z C / \\text{num\\_sampled\\_clients}` must use K.

    Parameters
    ----------
    strategy
        The strategy (chain) of the run.
    num_partitions
        K, the partitions summed per round.
    """
    for s in _chain(strategy):
        if isinstance(s, FIXED_CLIPPING) and s.num_sampled_clients != num_partitions:
            LOG.info(
                "[coded-fl] %s: num_sampled_clients %s -> %d, the partitions summed per round "
                "(noise std = noise_multiplier * clipping_norm / %d)",
                type(s).__name__,
                s.num_sampled_clients,
                num_partitions,
                num_partitions,
            )
            s.num_sampled_clients = num_partitions


def legacy_advice(strategy: object) -> str:
    """Advice for a legacy (``flwr.server.strategy``) strategy given where a Message-API one
    is expected ("" for anything else).

    Parameters
    ----------
    strategy
        What the user passed.

    Returns
    -------
    str
    """
    if not isinstance(strategy, legacy.Strategy):
        return ""
    return (
        ": a legacy flwr.server.strategy strategy runs through the legacy adapter, "
        "DefaultWorkflow(fit_workflow=CodedSecAggWorkflow(num_stragglers=..., "
        "privacy_threshold=...)) or coded_server_app(server_fn, num_stragglers=..., "
        "privacy_threshold=...) (see the README, 'Legacy Flower projects')"
    )
