"""What a silo accepts from a server: its own minimums on the public configuration.

The server chooses the configuration; a silo that took any configuration could be stripped of
its privacy by a server setting (with T = 0 and U = 1 every mask share equals the mask itself,
so one colluding silo learns every mask; with a quantization scale below 1 every entry of an
update quantizes to 0 or :math:`\\pm 1`, a sign pattern that aligned masks cancel in a group's
sum). A :class:`ClientPolicy` pins the silo's minimums and, optionally, its silo index; the
client machine refuses a key request below them before it changes any state, with an error
that names the setting on both sides.

By default a silo refuses T < 1 (``min_privacy_threshold=1``) and a quantization scale below
:data:`MIN_SCALE` = 2^8 (``min_scale``; the default scale of a run is far above it: 2^18 at
n = 10 with the default clip range and headroom). U - T < 1 cannot be configured at all.

A policy comes from the mod's arguments (:func:`clients.make_coded_secagg_mod`) and from the
node config (``--node-config``); the node config can only raise a minimum:

``codedfl.min-privacy-threshold``  T at least this (default 1)
``codedfl.min-mask-pieces``        U - T at least this (the mask is U - T pieces)
``codedfl.min-silos``              n at least this
``codedfl.min-modulus-bits``       p at least 2^(bits - 1)
``codedfl.min-scale``              the quantization scale at least this (default 2^8)
``codedfl.expected-silo``          this node's silo index (refuse any other)

except through one explicit opt-out, for a silo that accepts to take part without privacy
(a test bed, a trusted federation):

``codedfl.allow-no-privacy``       ``true``: the privacy minimums (T and the scale) drop to 0,
                                   whatever the mod's policy says; the node config's own
                                   ``codedfl.min-*`` keys then still apply. Default ``false``.

and its maxima, resource limits checked on the raw configuration *before* anything
proportional to n, K or d is built (the gradient code alone costs seconds and hundreds of MiB
at n = 1000); the node config sets them (raise one to take part in a larger run):

``codedfl.max-silos``              n at most this (default 256)
``codedfl.max-partitions``         K at most this (default 1024)
``codedfl.max-vector-length``      d at most this (default 2^28 elements, 1 GiB per vector)

and its identity and trust roster (authenticated keys, :mod:`coded_fl.secagg.identity`; both
off by default, set in the deployment scripts):

``codedfl.identity-key``           path of this silo's ECDSA private key (P-256 or P-384, PEM
                                   or OpenSSH, e.g. its SuperNode authentication key): it signs
                                   its key-agreement key with it
``codedfl.trusted-keys``           a public-key file or a directory of ``*.pub``/``*.pem``
                                   files: every peer key this silo uses must be signed by one
                                   of them for that peer's silo index (unsigned keys refused)

>>> p = ClientPolicy(min_privacy_threshold=2).tightened({"codedfl.min-privacy-threshold": 3})
>>> p.min_privacy_threshold, p.min_silos, p.max_silos, p.silo
(3, 1, 256, None)
>>> ClientPolicy().tightened({"codedfl.min-privacy-threshold": 0}).min_privacy_threshold
1
>>> q = ClientPolicy().tightened({"codedfl.allow-no-privacy": True})
>>> q.min_privacy_threshold, q.min_scale
(0, 0.0)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from coded_fl.errors import ConfigurationError, ExceedsLimitsError, RemoteProtocolError
from coded_fl.secagg.config import ProtocolConfig
from coded_fl.secagg.identity import (
    IDENTITY_KEY_SETTING,
    TRUSTED_KEYS_SETTING,
    Identity,
    TrustRoster,
    load_identity,
    load_trusted,
)
from coded_fl.secagg.messages import SERVER
from coded_fl.secagg.node_config import cached as _cached
from coded_fl.secagg.node_config import flag as _flag
from coded_fl.secagg.node_config import integer as _int
from coded_fl.secagg.node_config import number as _number
from coded_fl.vocabulary import PREFIX

__all__ = ["ALLOW_NO_PRIVACY_KEY", "EXPECTED_SILO_KEY", "MIN_SCALE", "ClientPolicy"]

#: Node-config key that pins this node's secure-aggregation silo index.
EXPECTED_SILO_KEY = PREFIX + "expected-silo"

#: Node-config key of the explicit opt-out: ``true`` lowers the privacy minimums to 0.
ALLOW_NO_PRIVACY_KEY = PREFIX + "allow-no-privacy"

#: The default smallest quantization scale a silo accepts (a step of at most 2^-8 of a unit).
MIN_SCALE = 2.0**8

#: Node-config key of the smallest quantization scale accepted.
_MIN_SCALE_KEY = PREFIX + "min-scale"
_MIN_NOISE_KEY = PREFIX + "min-noise-multiplier"
_MAX_EPSILON_KEY = PREFIX + "max-epsilon"

#: The minimums that :data:`ALLOW_NO_PRIVACY_KEY` lowers (to 0).
_PRIVACY_MINIMUMS = ("min_privacy_threshold", "min_scale")

_KEYS = {
    "min_privacy_threshold": PREFIX + "min-privacy-threshold",
    "min_mask_pieces": PREFIX + "min-mask-pieces",
    "min_silos": PREFIX + "min-silos",
    "min_modulus_bits": PREFIX + "min-modulus-bits",
}
_MAX_KEYS = {
    "max_silos": PREFIX + "max-silos",
    "max_partitions": PREFIX + "max-partitions",
    "max_vector_length": PREFIX + "max-vector-length",
}
#: configuration field -> (the policy's maximum, what it is)
_BOUNDED = {
    "num_silos": ("max_silos", "the number of silos n"),
    "num_partitions": ("max_partitions", "the number of partitions K"),
    "vector_length": ("max_vector_length", "the vector length d"),
}


@dataclass(frozen=True, kw_only=True)
class ClientPolicy:
    """A silo's minimums on the configuration it accepts.

    Parameters
    ----------
    min_privacy_threshold
        Refuse T below this (colluding silos tolerated).
    min_mask_pieces
        Refuse U - T below this.
    min_silos
        Refuse n below this.
    min_modulus_bits
        Refuse a modulus p below 2^(bits - 1).
    min_scale
        Refuse a quantization scale below this (a finite number >= 0; default
        :data:`MIN_SCALE` = 2^8; 0 accepts any).
    min_noise_multiplier
        Refuse a run without distributed DP, or with a lower ``noise_multiplier`` z (a finite
        number >= 0; default 0: any, DP or not). The silo derives its noise share from the
        configuration itself (:meth:`coded_fl.dp.DistributedDP.plan`), so a server that asks
        for less noise than this is refused before any key is made.
    max_epsilon
        This node's privacy budget: refuse a noised round that would take the composed
        epsilon of its data's releases, across every run and session on the node, beyond it
        (:class:`coded_fl.dp.ledger.PrivacyLedger`, at :attr:`budget_delta`, never the
        server's delta). None (default): no limit (the releases are still recorded).
    budget_delta
        The delta the budget is stated at (default 1e-5).
    silo
        This node's silo index, if pinned: refuse a key request that assigns another.
    max_silos, max_partitions, max_vector_length
        Refuse n, K or d above these (checked on the raw configuration, before the gradient
        code or anything else proportional to them is built).
    identity
        This silo's identity signing key, if any: it endorses its key-agreement key with it.
    trusted
        The identities this silo trusts, if any: every peer key it uses must carry a valid
        endorsement by one of them (unsigned keys are refused). None: no key is checked.

    Raises
    ------
    ConfigurationError
        If a minimum is not a non-negative int (``min_scale``: a finite number >= 0).

    Notes
    -----
    The defaults refuse T = 0 and a scale below 2^8. A silo that must accept them (a test, a
    federation that wants no privacy) says so explicitly: ``ClientPolicy(min_privacy_threshold=0,
    min_scale=0)`` in code, or node config ``codedfl.allow-no-privacy = true``.
    """

    min_privacy_threshold: int = 1
    min_mask_pieces: int = 1
    min_silos: int = 1
    min_modulus_bits: int = 2
    min_scale: float = MIN_SCALE
    min_noise_multiplier: float = 0.0
    max_epsilon: float | None = None
    budget_delta: float = 1e-5
    silo: int | None = None
    max_silos: int = 256
    max_partitions: int = 1024
    max_vector_length: int = 1 << 28
    identity: Identity | None = None
    trusted: TrustRoster | None = None

    def __post_init__(self) -> None:
        if self.identity is not None and not isinstance(self.identity, Identity):
            raise ConfigurationError("identity must be a coded_fl.secagg.identity.Identity")
        if self.trusted is not None and not isinstance(self.trusted, TrustRoster):
            raise ConfigurationError("trusted must be a coded_fl.secagg.identity.TrustRoster")
        for name in (*_KEYS, *_MAX_KEYS):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"{name} must be an int >= 0, got {value!r}")
        for name, zero in (
            ("min_scale", "0 accepts any scale"),
            ("min_noise_multiplier", "0: no floor"),
        ):
            m = getattr(self, name)
            if (
                isinstance(m, bool)
                or not isinstance(m, (int, float))
                or not math.isfinite(m)
                or m < 0
            ):
                raise ConfigurationError(f"{name} must be a finite number >= 0 ({zero}), got {m!r}")
            object.__setattr__(self, name, float(m))
        e = self.max_epsilon
        if e is not None and (
            isinstance(e, bool) or not isinstance(e, (int, float)) or not math.isfinite(e) or e <= 0
        ):
            raise ConfigurationError(f"max_epsilon must be a finite number > 0 or None, got {e!r}")
        if not (isinstance(self.budget_delta, float) and 0 < self.budget_delta < 1):
            raise ConfigurationError(f"budget_delta must be in (0, 1), got {self.budget_delta!r}")
        if self.silo is not None and (
            isinstance(self.silo, bool) or not isinstance(self.silo, int) or self.silo < 0
        ):
            raise ConfigurationError(f"silo must be an int >= 0 or None, got {self.silo!r}")

    def tightened(self, node_config: Mapping[str, object]) -> ClientPolicy:
        """This policy with the minimums of ``node_config`` where they are stricter.

        Parameters
        ----------
        node_config
            The node's config (``codedfl.min-*`` keys, which can only raise a minimum;
            ``codedfl.max-*`` keys, which replace a maximum; ``codedfl.expected-silo``;
            ``codedfl.allow-no-privacy = true``, the one way to lower a minimum: T's and the
            scale's drop to 0 before the ``codedfl.min-*`` keys apply).

        Returns
        -------
        ClientPolicy

        Raises
        ------
        ConfigurationError
            If a key holds something else than a non-negative int (``codedfl.min-scale``: a
            finite number >= 0; ``codedfl.allow-no-privacy``: true or false), or the node's
            silo contradicts the policy's.
        """
        changes: dict[str, Any] = {}
        current = self
        if ALLOW_NO_PRIVACY_KEY in node_config and _flag(
            node_config[ALLOW_NO_PRIVACY_KEY], ALLOW_NO_PRIVACY_KEY
        ):
            current = replace(self, min_privacy_threshold=0, min_scale=0.0)
            changes.update(min_privacy_threshold=0, min_scale=0.0)
        for name, key in _KEYS.items():
            if key in node_config:
                value = _int(node_config[key], key)
                changes[name] = max(value, getattr(current, name))
        if _MIN_SCALE_KEY in node_config:
            least = _number(node_config[_MIN_SCALE_KEY], _MIN_SCALE_KEY)
            changes["min_scale"] = max(least, current.min_scale)
        if _MIN_NOISE_KEY in node_config:  # a floor: raised, never lowered (not even by the
            # no-privacy opt-out, which concerns T and the scale)
            least = _number(node_config[_MIN_NOISE_KEY], _MIN_NOISE_KEY)
            changes["min_noise_multiplier"] = max(least, self.min_noise_multiplier)
        if _MAX_EPSILON_KEY in node_config:  # a budget: tightened, never loosened
            most = _number(node_config[_MAX_EPSILON_KEY], _MAX_EPSILON_KEY)
            if not most > 0:
                raise ConfigurationError(f"node config {_MAX_EPSILON_KEY} must be > 0")
            changes["max_epsilon"] = (
                most if self.max_epsilon is None else min(most, self.max_epsilon)
            )
        for name, key in _MAX_KEYS.items():  # resource limits: the node config sets them
            if key in node_config:
                changes[name] = _int(node_config[key], key)
        raw = node_config.get(EXPECTED_SILO_KEY)
        if raw is not None:
            silo = _int(raw, EXPECTED_SILO_KEY)
            if self.silo is not None and silo != self.silo:
                raise ConfigurationError(
                    f"node config {EXPECTED_SILO_KEY}={silo} contradicts the mod's silo={self.silo}"
                )
            changes["silo"] = silo
        if node_config.get(IDENTITY_KEY_SETTING) is not None:
            changes["identity"] = _cached(load_identity, node_config[IDENTITY_KEY_SETTING])
        if node_config.get(TRUSTED_KEYS_SETTING) is not None:  # replaces, never turns trust off
            changes["trusted"] = _cached(load_trusted, node_config[TRUSTED_KEYS_SETTING])
        return replace(self, **changes)

    def check_size(self, raw_config: bytes) -> None:
        """Refuse a configuration larger than the maxima, from its raw JSON, before it is built.

        Only the sizes are read here (n, K, d); everything else is checked when the
        configuration is built. Bytes that are not a JSON object pass (building refuses them).

        Parameters
        ----------
        raw_config
            The configuration a key request carries (at most 64 KiB, bounded by the decoder).

        Raises
        ------
        ExceedsLimitsError
            Blaming the server, naming the node-config setting that would admit the size (the
            silo answers with a typed ``MISCONFIGURED`` refusal).
        """
        try:
            fields = json.loads(raw_config)
        except (ValueError, RecursionError):
            return
        if not isinstance(fields, dict):
            return
        for name, (limit, what) in _BOUNDED.items():
            got, most = fields.get(name), getattr(self, limit)
            if isinstance(got, int) and not isinstance(got, bool) and got > most:
                raise ExceedsLimitsError(
                    f"the server's configuration has {what} = {got}, above this silo's limit "
                    f"{limit}={most}: raise node config {_MAX_KEYS[limit]} to at least {got} "
                    "(or the mod's ClientPolicy) to take part, or make the run smaller",
                    sender=SERVER,
                )

    def check(self, cfg: ProtocolConfig, silo: int) -> None:
        """Refuse a configuration below the minimums, or an index other than the pinned one.

        Parameters
        ----------
        cfg
            The configuration a key request carries.
        silo
            The silo index the key request assigns.

        Raises
        ------
        RemoteProtocolError
            Blaming the server, naming the setting to change on either side.
        """
        below = [
            (cfg.T, self.min_privacy_threshold, "privacy_threshold T", "min_privacy_threshold"),
            (cfg.U - cfg.T, self.min_mask_pieces, "U - T", "min_mask_pieces"),
            (cfg.n, self.min_silos, "the number of silos n", "min_silos"),
        ]
        for got, least, what, name in below:
            if got < least:
                lower = (
                    f"set node config {ALLOW_NO_PRIVACY_KEY} = true on this silo to accept it"
                    if name in _PRIVACY_MINIMUMS
                    else "lower the silo's minimum"
                )
                raise RemoteProtocolError(
                    f"the server's configuration has {what} = {got}, below this silo's minimum "
                    f"{name}={least} (node config {_KEYS[name]}): raise it in "
                    f"coded_fl_flower.CodedSecAgg, or {lower}",
                    sender=SERVER,
                )
        scale = cfg.quantization.scale
        if scale < self.min_scale:
            how = "lower clip_range or headroom_bits" if cfg.scale is None else "raise scale"
            raise RemoteProtocolError(
                f"the server's configuration has quantization scale = {scale:g} (clip_range="
                f"{cfg.clip_range}, scale={cfg.scale}, headroom_bits={cfg.headroom_bits}), below "
                f"this silo's minimum min_scale={self.min_scale:g} (node config "
                f"{_MIN_SCALE_KEY}): so coarse a step leaks an update's sign pattern; {how} "
                f"in coded_fl_flower.CodedSecAgg, or set node config {ALLOW_NO_PRIVACY_KEY} = "
                "true on this silo to accept it",
                sender=SERVER,
            )
        z = 0.0 if cfg.dp is None else cfg.dp.noise_multiplier
        if z < self.min_noise_multiplier:
            have = "no distributed DP" if cfg.dp is None else f"dp noise_multiplier = {z:g}"
            raise RemoteProtocolError(
                f"the server's configuration has {have}, below this silo's minimum "
                f"min_noise_multiplier={self.min_noise_multiplier:g} (node config "
                f"{_MIN_NOISE_KEY}): set CodedSecAgg(dp=DistributedDP(noise_multiplier=...)) "
                "at least that high, or lower the silo's minimum",
                sender=SERVER,
            )
        if cfg.p.bit_length() < self.min_modulus_bits:
            raise RemoteProtocolError(
                f"the server's modulus p={cfg.p} has {cfg.p.bit_length()} bits, below this "
                f"silo's minimum {_KEYS['min_modulus_bits']}={self.min_modulus_bits}",
                sender=SERVER,
            )
        if self.silo is not None and silo != self.silo:
            raise RemoteProtocolError(
                f"the key request assigns silo index {silo}, but this node is silo {self.silo} "
                f"({EXPECTED_SILO_KEY})",
                sender=SERVER,
            )
