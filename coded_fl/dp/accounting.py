"""Privacy accounting of the Skellam mechanism, composed over rounds (issue 33, item 3).

A round releases the field sum of the partitions' clipped, scaled and rounded updates plus
symmetric Skellam noise Sk(mu, mu) on every coordinate (variance 2 mu), of which at least
``mu`` comes from parties the adversary does not control (:func:`coded_fl.dp.noise.group_mu`).
Changing one privacy unit (one partition's data) moves the integer sum by at most ``l2`` in L2
norm and ``l1`` in L1 norm (:func:`rounded_sensitivity`).

RDP of one round (Agarwal, Kairouz and Liu, "The Skellam Mechanism for Differentially Private
Federated Learning", NeurIPS 2021, Theorem 3.5), for every order alpha > 1:

.. math:: \\varepsilon(\\alpha) = \\frac{\\alpha \\Delta_2^2}{4\\mu}
          + \\min\\Big(\\frac{(2\\alpha - 1)\\Delta_2^2 + 6\\Delta_1}{16\\mu^2},
                       \\frac{3\\Delta_1}{4\\mu}\\Big)

The first term is the Gaussian mechanism's RDP at the same variance (2 mu); the second is the
price of integers, small once mu >> Delta. Rounds compose by adding RDP; the conversion to
(epsilon, delta) is that of Google's ``dp-accounting``
(:func:`dp_accounting.rdp.rdp_privacy_accountant.compute_epsilon`, the improved bound of
Canonne, Kamath and Steinke 2020). Every silo takes part in every round (cross-silo: no
sampling of silos, so no amplification is claimed): with the code every partition is in the sum
even when up to s silos straggle.

>>> mu = calibrate_mu(epsilon=3.0, delta=1e-5, rounds=20, l2=100.0, l1=1000.0)
>>> round(epsilon_of(mu, delta=1e-5, rounds=20, l2=100.0, l1=1000.0), 3) <= 3.0
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

from coded_fl.errors import ConfigurationError

__all__ = [
    "ORDERS",
    "calibrate_mu",
    "epsilon_of",
    "gaussian_multiplier",
    "rounded_sensitivity",
    "skellam_rdp",
]

#: RDP orders the accountant optimises over (dp-accounting's usual grid, integers to 256).
ORDERS: tuple[float, ...] = (
    tuple(1.0 + x / 10.0 for x in range(1, 10))
    + tuple(float(a) for a in range(2, 65))
    + (128.0, 256.0)
)


def skellam_rdp(orders: Sequence[float], *, l2: float, l1: float, mu: float) -> np.ndarray:
    """RDP of one release with Sk(mu, mu) noise per coordinate (module docstring).

    Parameters
    ----------
    orders
        RDP orders, each > 1.
    l2, l1
        The L2 and L1 sensitivity of the integer sum (:func:`rounded_sensitivity`).
    mu
        The Skellam parameter the adversary cannot remove (variance 2 mu).

    Returns
    -------
    numpy.ndarray
        epsilon(alpha) per order.

    Raises
    ------
    ConfigurationError
        If ``mu`` or a sensitivity is not positive and finite, or an order is <= 1.
    """
    for name, v in (("mu", mu), ("l2", l2), ("l1", l1)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ConfigurationError(f"{name} must be a positive finite number, got {v!r}")
    a = np.asarray(orders, dtype=np.float64)
    if np.any(a <= 1):
        raise ConfigurationError("RDP orders must be > 1")
    gauss = a * l2 * l2 / (4.0 * mu)
    extra = np.minimum(
        ((2.0 * a - 1.0) * l2 * l2 + 6.0 * l1) / (16.0 * mu * mu), 3.0 * l1 / (4.0 * mu)
    )
    return gauss + extra


def rounded_sensitivity(
    clip_steps: float, d: int, beta: float | None = None
) -> tuple[float, float]:
    """L2 and L1 sensitivity of one partition's update after randomized rounding.

    A partition's update, clipped to L2 norm ``clip_steps`` (in quantization steps), is rounded
    coordinate-wise at random (each coordinate to one of its two neighbouring integers,
    unbiased) and the rounding is drawn again until the rounded vector's squared norm is at most

    .. math:: c^2 + d/4 + \\sqrt{2 \\ln(1/\\beta)}\\,(c + \\sqrt{d}/2)

    (which a first draw meets with probability >= 1 - beta: Kairouz, Liu and Steinke, "The
    Distributed Discrete Gaussian Mechanism for Federated Learning with Secure Aggregation",
    ICML 2021). The triangle inequality gives c + sqrt(d) whatever the draw (every coordinate
    moves by less than 1): that is the sensitivity of plain randomized rounding (``beta=None``,
    the default the plan uses), and with conditional rounding the smaller of the two bounds
    is. For an integer vector, L1 <= min(L2^2, sqrt(d) L2).

    Parameters
    ----------
    clip_steps
        The clip norm in quantization steps (the clip divided by the step).
    d
        The number of coordinates.
    beta
        The conditional rounding's failure probability per draw, in (0, 1); None: plain
        randomized rounding (no condition).

    Returns
    -------
    (float, float)
        The L2 and L1 sensitivity.

    Raises
    ------
    ConfigurationError
        If a parameter is out of range.
    """
    if not (math.isfinite(clip_steps) and clip_steps > 0):
        raise ConfigurationError(f"clip_steps must be positive, got {clip_steps!r}")
    if not (isinstance(d, int) and d >= 1):
        raise ConfigurationError(f"d must be a positive integer, got {d!r}")
    if beta is not None and not 0 < beta < 1:
        raise ConfigurationError(f"beta must be in (0, 1), got {beta!r}")
    c = float(clip_steps)
    l2 = c + math.sqrt(d)
    if beta is not None:
        squared = c * c + d / 4.0 + math.sqrt(2.0 * math.log(1.0 / beta)) * (c + math.sqrt(d) / 2)
        l2 = min(math.sqrt(squared), l2)
    l1 = min(l2 * l2, math.sqrt(d) * l2)
    return l2, l1


def epsilon_of(mu: float, *, delta: float, rounds: int, l2: float, l1: float) -> float:
    """The (epsilon, delta) guarantee of ``rounds`` releases.

    Parameters
    ----------
    mu
        The Skellam parameter the adversary cannot remove, per round.
    delta
        The target delta, in (0, 1).
    rounds
        The number of rounds composed.
    l2, l1
        The sensitivities (:func:`rounded_sensitivity`).

    Returns
    -------
    float
        epsilon (``inf`` if no order gives a finite one).

    Raises
    ------
    ConfigurationError
        If a parameter is out of range.
    """
    if not 0 < delta < 1:
        raise ConfigurationError(f"delta must be in (0, 1), got {delta!r}")
    if not (isinstance(rounds, int) and rounds >= 1):
        raise ConfigurationError(f"rounds must be a positive integer, got {rounds!r}")
    rdp = rounds * skellam_rdp(ORDERS, l2=l2, l1=l1, mu=mu)
    eps, _ = compute_epsilon(ORDERS, rdp, delta)
    return float(eps)


def calibrate_mu(
    *, epsilon: float, delta: float, rounds: int, l2: float, l1: float, rtol: float = 1e-4
) -> float:
    """The smallest Skellam parameter (to ``rtol``) whose ``rounds`` releases are
    (epsilon, delta)-DP.

    Parameters
    ----------
    epsilon, delta
        The target guarantee over the whole run.
    rounds
        The rounds of the run.
    l2, l1
        The sensitivities (:func:`rounded_sensitivity`).
    rtol
        Relative precision of the answer (it errs on the private side).

    Returns
    -------
    float
        mu, with ``epsilon_of(mu, ...) <= epsilon``.

    Raises
    ------
    ConfigurationError
        If ``epsilon`` is not positive, or a parameter is out of range.
    """
    return _least_noise(
        lambda mu: epsilon_of(mu, delta=delta, rounds=rounds, l2=l2, l1=l1),
        epsilon=epsilon,
        delta=delta,
        start=1e-6,
        rtol=rtol,
    )


def _least_noise(
    eps: Callable[[float], float], *, epsilon: float, delta: float, start: float, rtol: float
) -> float:
    """The smallest noise level x (to ``rtol``, erring high) with ``eps(x) <= epsilon``:
    doubling from 1, then bisection in the log domain (eps falls as x grows)."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ConfigurationError(f"epsilon must be a positive finite number, got {epsilon!r}")
    lo, hi = start, 1.0
    while eps(hi) > epsilon:
        lo, hi = hi, hi * 4.0
        if hi > 1e30:  # pragma: no cover - every epsilon > 0 has a finite level
            raise ConfigurationError(f"no noise reaches epsilon={epsilon} (delta={delta})")
    while hi - lo > rtol * hi:
        mid = math.sqrt(lo * hi)
        if eps(mid) > epsilon:
            lo = mid
        else:
            hi = mid
    return hi


def gaussian_multiplier(*, epsilon: float, delta: float, rounds: int, rtol: float = 1e-4) -> float:
    """The smallest noise multiplier z (to ``rtol``) of the Gaussian mechanism (standard
    deviation z times the sensitivity) whose ``rounds`` compositions are (epsilon, delta)-DP,
    by Google's ``dp-accounting`` (its ``GaussianDpEvent`` and RDP accountant): what central
    and local DP baselines at the same epsilon add (the ``dp`` benchmark).

    Parameters
    ----------
    epsilon, delta
        The target guarantee over the whole run.
    rounds
        The rounds composed (every participant in every round: no sampling).
    rtol
        Relative precision of the answer (it errs on the private side).

    Returns
    -------
    float
        z.

    Raises
    ------
    ConfigurationError
        If a parameter is out of range.
    """
    from dp_accounting import GaussianDpEvent, SelfComposedDpEvent
    from dp_accounting.rdp import RdpAccountant

    if not 0 < delta < 1 or not (isinstance(rounds, int) and rounds >= 1):
        raise ConfigurationError(f"need 0 < delta < 1 and rounds >= 1, got {delta!r}, {rounds!r}")

    def eps(z: float) -> float:
        acc = RdpAccountant(list(ORDERS))
        acc.compose(SelfComposedDpEvent(GaussianDpEvent(z), rounds))
        return float(acc.get_epsilon(delta))

    return _least_noise(eps, epsilon=epsilon, delta=delta, start=1e-3, rtol=rtol)
