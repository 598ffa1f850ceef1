"""The one switch of distributed DP and what it implies for a run (issue 33, item 4).

``DistributedDP(noise_multiplier, clip, delta)`` states the central guarantee the sum should
carry: Gaussian-like noise of standard deviation ``noise_multiplier * clip`` on the sum of the
partitions' clipped updates. :meth:`DistributedDP.plan` turns it into the integer parameters of
one run (the step, the Skellam parameters per group, the sensitivities, epsilon per round and
over the run) and refuses a setting whose sum could wrap the field, naming what to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from coded_fl.dp.accounting import calibrate_mu, epsilon_of, rounded_sensitivity
from coded_fl.dp.noise import group_mu
from coded_fl.dp.transform import block_rotation_size
from coded_fl.errors import ConfigurationError

__all__ = ["DPPlan", "DistributedDP"]

#: Standard deviations of noise kept inside the field's range (a wrap probability < 1e-15 per
#: coordinate for the Skellam tail at the variances used).
_TAIL_SIGMAS = 8.0


@dataclass(frozen=True)
class DPPlan:
    """The integer parameters of one run with distributed DP.

    Attributes
    ----------
    step
        The quantization step (model units per integer).
    clip_steps
        The clip in steps.
    l2, l1
        The sensitivities of one partition after conditional rounding.
    mu
        The Skellam parameter that survives T colluders (variance 2 mu per coordinate).
    mu_group
        Each group's share, mu / (g - T).
    noise_std
        The standard deviation of all the noise in the decoded sum, in model units.
    wrap_bound
        A bound on |sum| per coordinate in steps that holds with probability >= 1 - 1e-9.
    epsilon_round, epsilon_run
        The guarantee of one round and of ``rounds`` rounds at ``delta``.
    rounding
        ``"randomized"`` (the default) or ``"conditional"`` (:attr:`DistributedDP.beta` set).
    """

    step: float
    clip_steps: float
    l2: float
    l1: float
    mu: float
    mu_group: float
    noise_std: float
    wrap_bound: float
    epsilon_round: float
    epsilon_run: float
    rounding: str = "randomized"

    def describe(self) -> str:
        """The plan's noise and guarantee in words (for a log line)."""
        return (
            f"noise std {self.noise_std:.3g} on the sum, epsilon {self.epsilon_round:.3g} per round"
        )


@dataclass(frozen=True)
class DistributedDP:
    """Distributed DP in the field: each silo group adds a share of Skellam noise.

    Parameters
    ----------
    noise_multiplier
        z: the noise the adversary cannot remove has standard deviation z * clip on the sum.
    clip
        The L2 norm every partition's update is clipped to (model units).
    delta
        The delta of the (epsilon, delta) guarantee.
    beta
        None (the default): plain randomized rounding, whose sensitivity is
        ``steps_per_clip + sqrt(d)`` steps and which replicas on drifting machines round alike
        but for a few coordinates. A number in (0, 1): conditional rounding with this failure
        probability per draw (a sensitivity lower by at most sqrt(d) steps; a drift of one
        coordinate can make two replicas keep different draws: :mod:`coded_fl.dp.transform`).
    steps_per_clip
        Integers per clip norm (the resolution of the rounding; the rounding's own noise is
        about sqrt(d) / 2 steps against the clip's ``steps_per_clip``). None (the default):
        the smallest power of two >= max(2^16, 100 sqrt(d)), so that rounding adds at most 1 %
        to the sensitivity.

    Raises
    ------
    ConfigurationError
        If a parameter is out of range, naming it.
    """

    noise_multiplier: float
    clip: float
    delta: float = 1e-5
    beta: float | None = None
    steps_per_clip: float | None = None

    def __post_init__(self) -> None:
        for name in ("noise_multiplier", "clip", "steps_per_clip"):
            v = getattr(self, name)
            if name == "steps_per_clip" and v is None:
                continue
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigurationError(f"DistributedDP({name}=...) must be > 0, got {v!r}")
        for name in ("delta", "beta"):
            v = getattr(self, name)
            if name == "beta" and v is None:
                continue
            if not (isinstance(v, float) and 0 < v < 1):
                raise ConfigurationError(f"DistributedDP({name}=...) must be in (0, 1), got {v!r}")

    @classmethod
    def for_epsilon(
        cls, epsilon: float, *, clip: float, d: int, rounds: int, delta: float = 1e-5
    ) -> DistributedDP:
        """The settings whose ``rounds`` noised rounds are (epsilon, delta)-DP for a
        d-coordinate vector (the protocol's vector length): the noise multiplier from
        :func:`coded_fl.dp.accounting.calibrate_mu` at the default resolution.

        Parameters
        ----------
        epsilon
            The guarantee over the run.
        clip
            The L2 clip.
        d
            The protocol's vector length.
        rounds
            The noised rounds of the run (keying rounds release nothing and do not count).
        delta
            The delta.

        Returns
        -------
        DistributedDP

        Raises
        ------
        ConfigurationError
            If a parameter is out of range.
        """
        c = cls(noise_multiplier=1.0, clip=clip, delta=delta).resolution(d)
        l2, l1 = rounded_sensitivity(c, d)
        mu = calibrate_mu(epsilon=epsilon, delta=delta, rounds=rounds, l2=l2, l1=l1)
        return cls(noise_multiplier=math.sqrt(2.0 * mu) / c, clip=clip, delta=delta)

    def describe(self) -> str:
        """The settings in words (for a log line)."""
        return f"noise_multiplier={self.noise_multiplier:g} clip={self.clip:g} delta={self.delta:g}"

    def to_dict(self) -> dict[str, float | None]:
        """The settings as the run's configuration carries them (JSON numbers and nulls)."""
        return {
            "noise_multiplier": float(self.noise_multiplier),
            "clip": float(self.clip),
            "delta": float(self.delta),
            "beta": None if self.beta is None else float(self.beta),
            "steps_per_clip": None if self.steps_per_clip is None else float(self.steps_per_clip),
        }

    @classmethod
    def from_dict(cls, entries: object) -> DistributedDP:
        """Read what :meth:`to_dict` wrote (a peer's JSON).

        Parameters
        ----------
        entries
            A mapping with the keys of :meth:`to_dict` (``beta`` and ``steps_per_clip`` may
            be left out).

        Returns
        -------
        DistributedDP

        Raises
        ------
        ConfigurationError
            If it is not a mapping of those keys, or a value is out of range.
        """
        if not isinstance(entries, dict) or not {"noise_multiplier", "clip"} <= set(entries):
            raise ConfigurationError(
                "the dp settings must be an object with noise_multiplier and clip"
            )
        unknown = set(entries) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigurationError(f"unknown dp settings {sorted(unknown)}")
        return cls(**entries)

    def resolution(self, d: int) -> float:
        """The integers per clip norm for a d-coordinate model: :attr:`steps_per_clip`, or
        (None) the smallest power of two >= max(2^16, 100 sqrt(d)).

        Parameters
        ----------
        d
            The model's coordinates.

        Returns
        -------
        float
        """
        if self.steps_per_clip is not None:
            return float(self.steps_per_clip)
        return float(2 ** max(16, math.ceil(math.log2(100.0 * math.sqrt(d)))))

    def plan(
        self, *, d: int, partitions: int, groups: int, colluders: int, rounds: int, modulus: int
    ) -> DPPlan:
        """The run's integer parameters, or a refusal if its sum could wrap the field.

        Parameters
        ----------
        d
            The model's coordinates.
        partitions
            K, the partitions in the sum.
        groups
            g, the silo groups (each adds its noise once).
        colluders
            T, the colluding silos tolerated.
        rounds
            The rounds of the run (for the run's epsilon).
        modulus
            The field's prime p: the sum must stay within (-p/2, p/2).

        Returns
        -------
        DPPlan
            The parameters and the guarantee.

        Raises
        ------
        ConfigurationError
            If g <= T, or if the sum could wrap the field (naming steps_per_clip, the
            partitions and the modulus).
        """
        c = self.resolution(d)
        step = self.clip / c
        l2, l1 = rounded_sensitivity(c, d, self.beta)
        mu = (self.noise_multiplier * c) ** 2 / 2.0
        mu_group = group_mu(mu, groups=groups, colluders=colluders)
        total_var = 2.0 * mu_group * groups
        b = block_rotation_size(d)
        # after the rotation (coded_fl.dp.transform.rotate: blocks of b > d / 2) every
        # coordinate of a norm-l2 vector is sub-Gaussian with scale l2 / sqrt(b); a union bound
        # over the d coordinates and the partitions at 1e-9
        coord = l2 * math.sqrt(2.0 * math.log(2.0 * d * partitions / 1e-9) / b)
        bound = partitions * coord + _TAIL_SIGMAS * math.sqrt(total_var)
        if bound >= modulus / 2:
            raise ConfigurationError(
                f"distributed DP would wrap the field: the sum of {partitions} partitions plus "
                f"the noise reaches {bound:.3g} steps per coordinate, the field holds "
                f"{modulus // 2} (p = {modulus}); lower DistributedDP(steps_per_clip=...) "
                f"(now {c:g}) or use a larger field"
            )
        return DPPlan(
            step=step,
            clip_steps=c,
            l2=l2,
            l1=l1,
            mu=mu,
            mu_group=mu_group,
            noise_std=math.sqrt(total_var) * step,
            wrap_bound=bound,
            epsilon_round=epsilon_of(mu, delta=self.delta, rounds=1, l2=l2, l1=l1),
            epsilon_run=epsilon_of(mu, delta=self.delta, rounds=rounds, l2=l2, l1=l1),
            rounding="randomized" if self.beta is None else "conditional",
        )
