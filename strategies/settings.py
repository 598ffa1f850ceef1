"""``CodedSecAgg``'s settings as two objects: :class:`ProtocolSettings` and :class:`Timeouts`.

::

    protocol = ProtocolSettings(num_stragglers=2, privacy_threshold=2, masking="shares")
    strategy = CodedSecAgg(FedAvg(), protocol, Timeouts(round=120.0))
    strategy = CodedSecAgg(FedAvg(), num_stragglers=2, privacy_threshold=2, round_timeout=120)

Both are frozen dataclasses that check every field when they are made (a
:class:`~coded_fl.errors.ConfigurationError` naming the setting, before any node is
contacted); each field has one default, here. ``CodedSecAgg`` also takes every field as a flat
keyword (the second form: ``round_timeout`` sets ``Timeouts.round``, :data:`KEYWORDS`), which
overrides that field of the object given. ``from_run_config`` reads a Flower run config through
the one table :data:`RUN_CONFIG` (:mod:`strategies.run_config`).

>>> ProtocolSettings(num_stragglers=1, privacy_threshold=1).masking
'auto'
>>> Timeouts(round=30).evaluate_seconds
30.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coded_fl.errors import ConfigurationError
from coded_fl.secagg.server import DRIFT_TOLERANCE

from .run_config import (
    DP_RUN_CONFIG,
    KEYWORDS,
    PROTOCOL,
    RUN_CONFIG,
    TIMEOUTS,
    FlatSettings,
    coded_secagg_settings,
    fields_from_run_config,
    split_keywords,
)
from .secagg_checks import check_protocol, check_timeouts, max_delta_scale

if TYPE_CHECKING:
    from coded_fl.dp import DistributedDP

__all__ = [
    "DP_RUN_CONFIG",
    "KEYWORDS",
    "RUN_CONFIG",
    "FlatSettings",
    "ProtocolSettings",
    "Timeouts",
    "coded_secagg_settings",
    "resolve",
    "split_keywords",
]


@dataclass(frozen=True)
class ProtocolSettings:
    """The protocol and aggregation settings of :class:`strategies.CodedSecAgg`.

    Parameters
    ----------
    num_stragglers
        s: every round completes from the first n - s uploads.
    privacy_threshold
        T: up to T silos colluding with the server learn nothing beyond the sum. Silos refuse
        T = 0 unless their node config sets ``codedfl.allow-no-privacy = true``
        (:class:`coded_fl.secagg.policy.ClientPolicy`).
    recovery_threshold
        U (T < U <= n - s): recovery replies needed to unmask; default (None) n - s.
    num_silos
        n; default (None): all nodes connected once the wrapped strategy's
        ``min_available_nodes`` are there.
    clip_range
        c: each entry of :math:`(w_k/W)(\\theta_k - \\theta)` is clipped to this range (times
        the round's delta scale g with ``adaptive_clip``).
    adaptive_clip
        Default True: after a round whose decoded sum says that at least ``clip_quorum``
        partitions had an entry beyond the clip range, the round is discarded and rerun at
        once with the range g c four times wider (g a power of two sent with the train
        request, up to ``max_clip_range``), at the cost of one more local training in such a
        round and a quantization step g times coarser. Fewer partitions: the round is applied
        clipped, with a warning that names the count. After a completed round in which fewer
        than ``clip_quorum`` partitions had an entry beyond a quarter of the range, the next
        round uses a range four times narrower (never below ``clip_range``). The silos report
        exact counts (``docs/protocol.md``, "Adaptive clip range"): the server learns how
        many partitions clipped, how many exceeded a quarter of the range, and how many
        entries clipped. False: clip, and warn when more than 0.1 % of entries clip. With
        ``dp`` the range never adapts (DP clips in L2).
    clip_quorum
        Partitions that must report an entry beyond the clip range before it widens (an int
        >= 1, at most K). Default (None): one more than the most partitions one silo holds
        (s + 2 with the default codes), at most K. A silo holds s + 1 partitions and reports
        for each of them; where its group's vote does not compare it (a group of two, or a
        round that closes on exactly n - s uploads) nothing overrules those reports, so with
        a smaller quorum one silo whose training returns huge values could widen the range
        for every silo (each widening makes every later round's step four times coarser).
        Honest clipping after a large learning rate reaches most partitions and still widens.
        With T colluding silos to resist, set it above T (s + 1).
    max_clip_range
        The widest range the adaptation may reach (default None: ``clip_range`` x 2^16, the
        widest a silo accepts); the range used is ``clip_range`` times the largest power of
        two g with ``clip_range`` x g <= ``max_clip_range`` (:attr:`max_delta_scale`). A
        finite number >= ``clip_range``.
    scale
        Quantization scale; default (None) the finest that cannot wrap around (with headroom).
    max_weight
        W, the largest sample weight (``num-examples``) a partition may report. Default
        (None): automatic. W starts at 1,024 and a silo whose partition holds more asks for
        the power of two it needs (a typed refusal that reveals that bound, not the weight):
        the round is rerun at once with W raised, and W stays there (the server learns
        nothing else; the rerun costs one more local training in that round only).
    code
        ``"auto"`` (default), ``"plain"``, ``"polynomial"`` or ``"repetition"``.
    masking
        ``"auto"`` (default): ``"aligned"`` where the code is the repetition code (what
        ``code="auto"`` picks for s > 0), else ``"shares"``.
        ``"aligned"``: group-aligned masks (the repetition code only): once the silos' edge
        keys are dealt (through the first two rounds' uploads) a round takes one round trip,
        like plain FedAvg, and the server needs no recovery stage whoever straggles
        (``docs/protocol.md``, "One round trip with group-aligned masks").
        ``"shares"``: secret-shared masks, two round trips per round (any exact code).
    extra_replies, extra_wait
        Wait up to ``extra_wait`` seconds (default 2.0) for ``extra_replies`` uploads (default
        0, at most s) beyond n - s, to check that replicas agree (1 detects, 2 names the silo).
    headroom_bits
        Bits left free above the largest true sum when ``scale`` is unset (default 8). Without
        extra replies the range check is what catches a coordinate where replicas of a
        partition disagree (different CPUs, thread counts, GPU vs CPU) when the code mixes
        replicas (``code="polynomial"``); it misses one with probability about
        2^-headroom_bits, and more headroom also makes replicas disagree less often (a
        coarser quantization step, less precision). The default code never mixes replicas.
    max_erased_fraction
        Coordinates where replicas disagree beyond what the group vote (or the parity checks)
        settles are erased (no update there this round); a round that would erase more than
        this fraction (default 0.01, in [0, 1)) is aborted, naming the silos located as off.
    drift_tolerance
        How far (a fraction of the clip range, per partition of a silo group) a replica may lie
        from its group's per-coordinate median and still count as agreeing: replicas drift
        apart across machines with training, and that never stops a round. A silo beyond it
        where its group's majority agrees is overruled, named and left out of the later
        rounds (``docs/protocol.md``, "Replicas that disagree"). Default 1/16; 0 asks for
        bit-identical replicas.
    max_aborted_rounds
        Stop the run with :class:`coded_fl.errors.RunAbortedError` after this many rounds in a
        row aborted (default 3; the Flower run then ends as failed); 0: never stop.
    dp
        Distributed differential privacy (``coded_fl.dp.DistributedDP(noise_multiplier=z,
        clip=C, delta=...)``; the ``dp`` extra), or None (default). Every partition's update
        theta_k - theta is clipped to L2 norm C (unweighted: a partition's weight would reveal
        its size), rotated and rounded at random; every silo group adds a share of Skellam
        noise inside the field, so the decoded sum carries noise of standard deviation at
        least z C that the server and any ``privacy_threshold`` colluding silos cannot
        remove, and the model moves by the noisy mean over the K partitions. Rounds that deal
        the edge keys first upload zeros (keying rounds, in the round line); the round line
        and the summary give epsilon at delta (``docs/privacy.md``). Needs the repetition
        code with aligned masks, at least T + 2 silo groups, no ``metric_keys`` and no
        ``scale`` (DP sets it); the clip range does not adapt.

    Raises
    ------
    ConfigurationError
        When made, naming the setting: a count that is not an int in range (s, T,
        ``extra_replies``, ``headroom_bits``, ``max_aborted_rounds`` >= 0; n, U,
        ``clip_quorum`` >= 1 or None; T < U; ``extra_replies`` <= s), a ``clip_range``,
        ``scale`` or ``max_weight`` that is not a finite number > 0, a ``max_clip_range``
        outside [c, c 2^16], a fraction out of range, an unknown ``code`` or ``masking``, a
        ``dp`` that is not a ``DistributedDP`` or comes with a ``scale``. What depends on
        the number of silos is checked by ``CodedSecAgg``.
    """

    num_stragglers: int
    privacy_threshold: int
    recovery_threshold: int | None = None
    num_silos: int | None = None
    clip_range: float = 1.0
    adaptive_clip: bool = True
    clip_quorum: int | None = None
    max_clip_range: float | None = None
    scale: float | None = None
    max_weight: float | None = None
    code: str = "auto"
    masking: str = "auto"
    extra_replies: int = 0
    extra_wait: float = 2.0
    headroom_bits: int = 8
    max_erased_fraction: float = 0.01
    drift_tolerance: float = DRIFT_TOLERANCE
    max_aborted_rounds: int = 3
    dp: DistributedDP | None = None

    def __post_init__(self) -> None:
        check_protocol(self)
        object.__setattr__(self, "adaptive_clip", bool(self.adaptive_clip))
        for name in ("extra_wait", "max_erased_fraction", "drift_tolerance"):
            object.__setattr__(self, name, float(getattr(self, name)))

    @property
    def max_delta_scale(self) -> float:
        """The largest delta scale g the clip range may reach (a power of two, at most 2^16,
        with ``clip_range`` x g <= ``max_clip_range``)."""
        return max_delta_scale(self.clip_range, self.max_clip_range)

    @property
    def adapts_clip(self) -> bool:
        """Whether the clip range adapts in a run: ``adaptive_clip`` and no ``dp`` (DP clips
        in L2)."""
        return self.adaptive_clip and self.dp is None

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any], **fields: Any) -> ProtocolSettings:
        """The settings a Flower run config holds (its keys in :data:`RUN_CONFIG` whose object
        is the protocol, and the ``dp-*`` keys of :data:`DP_RUN_CONFIG`); a key it lacks
        keeps the default.

        Parameters
        ----------
        run_config
            ``context.run_config`` (or any mapping of its keys); other keys are ignored.
        **fields
            Fields that take precedence over the run config.

        Returns
        -------
        ProtocolSettings

        Raises
        ------
        ConfigurationError
            A value of the wrong type (naming its key), ``num-stragglers`` or
            ``privacy-threshold`` missing, or a setting refused.
        """
        given = {**fields_from_run_config(run_config, PROTOCOL), **fields}
        missing = [k for k in ("num_stragglers", "privacy_threshold") if k not in given]
        if missing:
            keys = " and ".join(k.replace("_", "-") for k in missing)
            raise ConfigurationError(f"run config: {keys} must be set (no default)")
        return cls(**given)

    def to_dict(self) -> dict[str, Any]:
        """The fields by name (``dp`` as the object given).

        Returns
        -------
        dict[str, Any]
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class Timeouts:
    """The deadlines of :class:`strategies.CodedSecAgg`'s stages, in seconds (each a finite
    number > 0; nothing waits longer). ``CodedSecAgg``'s flat keywords for them end in
    ``_timeout`` (``round_timeout`` sets :attr:`round`) and ``poll_interval``.

    Parameters
    ----------
    round
        A round's train stage: the uploads (default 600).
    recovery
        A round's recovery stage (default 60).
    key
        A key exchange (default 120).
    node_wait
        Waiting for the nodes when a run starts (default 300).
    evaluate
        The evaluation of a round; None (default): :attr:`round` (see
        :attr:`evaluate_seconds`).
    poll_interval
        Seconds between two looks for replies (default 0.05).

    Raises
    ------
    ConfigurationError
        When made, naming the setting by its ``CodedSecAgg`` keyword (``round_timeout``, ...):
        a value that is not a finite number > 0 (``evaluate`` may be None).
    """

    round: float = 600.0
    recovery: float = 60.0
    key: float = 120.0
    node_wait: float = 300.0
    evaluate: float | None = None
    poll_interval: float = 0.05

    def __post_init__(self) -> None:
        check_timeouts(self)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                object.__setattr__(self, f.name, float(value))

    @property
    def evaluate_seconds(self) -> float:
        """The evaluation deadline: :attr:`evaluate`, or :attr:`round` when it is None."""
        return self.round if self.evaluate is None else self.evaluate

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any], **fields: Any) -> Timeouts:
        """The deadlines a Flower run config holds (``round-timeout``, ``recovery-timeout``,
        ``key-timeout``, ``node-wait-timeout``, ``evaluate-timeout``, ``poll-interval``; see
        :data:`RUN_CONFIG`); a key it lacks keeps the default.

        Parameters
        ----------
        run_config
            ``context.run_config`` (or any mapping of its keys); other keys are ignored.
        **fields
            Fields that take precedence over the run config.

        Returns
        -------
        Timeouts

        Raises
        ------
        ConfigurationError
            A value of the wrong type (naming its key) or a deadline refused.
        """
        return cls(**{**fields_from_run_config(run_config, TIMEOUTS), **fields})

    def to_dict(self) -> dict[str, Any]:
        """The fields by name.

        Returns
        -------
        dict[str, Any]
        """
        return dataclasses.asdict(self)


def resolve(
    protocol: ProtocolSettings | None, timeouts: Timeouts | None, flat: Mapping[str, Any]
) -> tuple[ProtocolSettings, Timeouts]:
    """``CodedSecAgg``'s two settings objects: those given (or the defaults), with the fields
    that the flat keywords ``flat`` set replaced.

    Parameters
    ----------
    protocol, timeouts
        The objects given, or None.
    flat
        Flat keyword -> value (:data:`KEYWORDS`).

    Returns
    -------
    tuple[ProtocolSettings, Timeouts]

    Raises
    ------
    ConfigurationError
        An object of the wrong type, ``num_stragglers`` or ``privacy_threshold`` missing
        without ``protocol``, a field refused; :class:`~coded_fl.errors.UnknownSettingError`
        for a keyword that is no setting.
    """
    fields, deadlines = split_keywords(flat, allowed=("metric_keys", "progress"))
    if protocol is None:
        missing = [k for k in ("num_stragglers", "privacy_threshold") if k not in fields]
        if missing:
            raise ConfigurationError(
                f"CodedSecAgg needs {' and '.join(missing)} (no default): pass them, or "
                "protocol=ProtocolSettings(num_stragglers=..., privacy_threshold=...)"
            )
        protocol = ProtocolSettings(**fields)
    elif not isinstance(protocol, ProtocolSettings):
        raise ConfigurationError(
            f"protocol must be a ProtocolSettings, got {type(protocol).__name__}"
        )
    elif fields:
        protocol = dataclasses.replace(protocol, **fields)
    if timeouts is None:
        timeouts = Timeouts(**deadlines)
    elif not isinstance(timeouts, Timeouts):
        raise ConfigurationError(f"timeouts must be a Timeouts, got {type(timeouts).__name__}")
    elif deadlines:
        timeouts = dataclasses.replace(timeouts, **deadlines)
    return protocol, timeouts
