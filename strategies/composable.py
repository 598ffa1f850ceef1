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
:math:`\\sigma = z C / K`, is calibrated to the average of K clipped partition updates: the
noise plain FedAvg adds with the same wrapper settings and ``fraction_train=1.0`` over K
clients. :func:`check_dp_sampling` refuses client sampling (``fraction_train`` /
``fraction_fit`` below 1) under such a wrapper: coded rounds cannot sample, so the
amplification by sampling a user's accounting assumes would not hold. :func:`one_sum_reply`
keeps Flower's per-round "number of clients returning parameters (1) differs from the number
of sampled clients (K)" warning out of the log, since that one result is the sum over all K
(:func:`calibrate_noise` says so once, when the run starts).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flwr.server import strategy as legacy
from flwr.serverapp import strategy as msgapi
from flwr.supercore.differential_privacy import CLIENTS_DISCREPANCY_WARNING

from coded_fl.errors import ConfigurationError

__all__ = [
    "NotComposableError",
    "calibrate_noise",
    "chain_attr",
    "check_composable",
    "check_dp_sampling",
    "legacy_advice",
    "one_sum_reply",
    "sampled_fraction",
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


def _fixed_clipping(strategy: object) -> list[Any]:
    """The client-side fixed clipping wrappers in ``strategy``'s chain, outermost first."""
    return [s for s in _chain(strategy) if isinstance(s, FIXED_CLIPPING)]


def check_dp_sampling(strategy: object) -> None:
    """Refuse client sampling under a client-side fixed clipping DP wrapper.

    Every coded round sums the clipped updates of all K partitions (the gradient code needs
    every one), so ``fraction_train`` (Message API) or ``fraction_fit`` (legacy) below 1
    cannot be honoured; without DP it is only ignored (:class:`CodedSecAgg` logs it), but
    under DP the user's privacy accounting would assume an amplification by sampling that no
    round has.

    Parameters
    ----------
    strategy
        The strategy (chain).

    Raises
    ------
    ConfigurationError
        Naming the setting, why, and the value to use.
    """
    wrappers = _fixed_clipping(strategy)
    sampled = sampled_fraction(strategy)
    if wrappers and sampled is not None:
        attr, frac = sampled
        raise ConfigurationError(
            f"{attr}={frac} under {type(wrappers[0]).__name__}: coded secure aggregation "
            "sums the clipped updates of all K partitions in every round (gradient coding "
            "needs every one), so no client is sampled and the privacy amplification by "
            f"sampling that {attr} < 1 implies does not hold. Set {attr}=1.0: the noise "
            "std is then noise_multiplier * clipping_norm / K, what plain FedAvg adds with "
            f"{attr}=1.0 over K clients"
        )


def sampled_fraction(strategy: object) -> tuple[str, float] | None:
    """The client sampling the strategy (chain) asks for, which coded rounds cannot honour:
    ``("fraction_train", f)`` (Message API) or ``("fraction_fit", f)`` (legacy) with f < 1,
    or None.

    Parameters
    ----------
    strategy
        The strategy (chain).

    Returns
    -------
    tuple[str, float] | None
    """
    for attr in ("fraction_train", "fraction_fit"):
        frac = chain_attr(strategy, attr, 1.0)
        if isinstance(frac, (int, float)) and not isinstance(frac, bool) and frac < 1.0:
            return attr, float(frac)
    return None


def calibrate_noise(strategy: object, num_partitions: int) -> None:
    """Set every client-side fixed clipping wrapper's ``num_sampled_clients`` to K.

    Each round sums the clipped updates of all K partitions (gradient coding recovers the sum
    over every partition from the first n - s replies), so the average's sensitivity is
    :math:`C / K` and Flower's noise :math:`z C / \\text{num\\_sampled\\_clients}` must use K.
    A changed value changes the noise: it is logged as a warning, with both standard
    deviations; an unchanged one once, at info level, with the standard deviation.

    Parameters
    ----------
    strategy
        The strategy (chain) of the run.
    num_partitions
        K, the partitions summed per round.
    """
    for s in _fixed_clipping(strategy):
        K, before = num_partitions, s.num_sampled_clients
        std = s.noise_multiplier * s.clipping_norm / K
        if before != K:
            LOG.warning(
                "[coded-fl] %s: num_sampled_clients %s -> %d, the partitions summed per round: "
                "noise std %.4g instead of %.4g (noise_multiplier * clipping_norm / %d, the "
                "average of %d clipped partition updates)",
                type(s).__name__,
                before,
                K,
                std,
                s.noise_multiplier * s.clipping_norm / before,
                K,
                K,
            )
            s.num_sampled_clients = K
        LOG.info(
            "[coded-fl] %s adds noise of std %.4g to each round's average of all %d partitions; "
            "it receives that average as one result, so Flower's warning that 1 result came "
            "back for %d sampled clients does not apply and is not shown",
            type(s).__name__,
            std,
            K,
            K,
        )


class _OneSumFilter(logging.Filter):
    """Drops Flower's "clients returning parameters differs from sampled clients" record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != CLIENTS_DISCREPANCY_WARNING


@contextmanager
def one_sum_reply(strategy: object) -> Iterator[None]:
    """While the wrapped strategy aggregates the decoded average (one result standing for all
    K partitions): keep Flower's DP wrappers from warning of a reply-count discrepancy (only
    where the chain has such a wrapper; :func:`calibrate_noise` explained it once).

    Parameters
    ----------
    strategy
        The strategy (chain) about to aggregate.
    """
    if not _fixed_clipping(strategy):
        yield
        return
    logger, quiet = logging.getLogger("flwr"), _OneSumFilter()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


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
