"""The public configuration of a coded secure-aggregation run, validated once.

Everything here is public: the server sends it to every silo (:class:`KeyRequest`), and both ends
check that they agree through an 8-byte digest carried in every message.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coded_fl.codes import GradientCode, code_names, make_code
from coded_fl.codes.repetition import GroupCode
from coded_fl.errors import ConfigurationError, RemoteProtocolError
from coded_fl.field import PrimeField
from coded_fl.quantize import QuantizationConfig, check_clip_range, check_positive_real
from coded_fl.secagg.masking import MaskingScheme, resolve
from coded_fl.secagg.sharing import MaskSharing

if TYPE_CHECKING:  # coded_fl.dp needs the 'dp' extra: imported when a run uses it
    from coded_fl.dp import DistributedDP, DPPlan

__all__ = ["ProtocolConfig"]


@dataclass(frozen=True, kw_only=True)
class ProtocolConfig:
    """n silos, s stragglers tolerated, T colluders tolerated, U silos needed to unmask.

    Parameters
    ----------
    num_silos
        n, the silos taking part (indices 0..n-1).
    num_stragglers
        s: the server decodes from the first n - s uploads and never waits for the rest.
    privacy_threshold
        T: any T silos colluding with the server learn nothing beyond the sum (T >= 0).
    recovery_threshold
        U: mask recovery needs U replies, with T < U <= n - s. Default n - s; a smaller U
        tolerates (n - s) - U silos dropping during recovery at the price of larger shares.
    vector_length
        d, elements of each silo's (flattened) update, weight coordinate included.
    clip_range, scale
        Quantization: finite numbers > 0 (int or float). ``scale=None`` picks the finest power
        of two that cannot wrap around, and refuses a setting that leaves no scale >= 1.
    num_partitions
        K, data partitions (default n).
    code
        Gradient-code construction: ``"auto"`` or an exact registered code
        (:func:`coded_fl.codes.code_names`: ``"plain"``, ``"repetition"``, ``"polynomial"``).
    extra_replies
        Replies beyond n - s the server waits for (within the deadline) to check that replicas
        agree; 0 = use extras only when they are already there.
    headroom_bits
        With ``scale=None``: bits left free above the largest true sum (an int >= 0, small
        enough to leave a scale >= 1). Without extra replies the range check is the only
        guard against replicas that disagree: an error of a silo's replica lands on the
        aggregate multiplied by one public field element fixed by the survivor set, so a
        given (survivor set, silo, partition) lets it through with
        probability about 2^-headroom_bits over the configuration, for every coordinate at
        once (``docs/protocol.md``, "Replicas that disagree"); extra replies check exactly.
        More headroom also makes replicas on different machines disagree less often (a
        coarser step: the count falls linearly with it, 1-2 coordinates per replica of the main
        job after 2 epochs at 8, 0-1 at 12) at the cost of precision. The default code
        (repetition) never mixes replicas, so 8 serves it; raise it with the polynomial code
        on sites whose machines differ.
    run_id
        Public identifier of the run: seeds and stochastic rounding derive from it (so a run
        can be repeated exactly).
    session
        Distinguishes two protocol sessions of the same run (e.g. two ``start`` calls): part
        of the digest and of every key, so a silo starts afresh (new keys, round counter).
    masking
        A registered masking scheme (:mod:`coded_fl.secagg.masking`): ``"shares"``
        (LightSecAgg-style secret-shared masks, two round trips per round), ``"aligned"``
        (group-aligned masks, one round trip once the edge keys are dealt; the repetition code
        only: :mod:`coded_fl.secagg.aligned`), or ``"auto"`` (the default, as
        ``CodedSecAgg``'s): aligned where the code is the repetition code (``code="auto"``
        picks it), shares otherwise (:attr:`masking_used`
        says which, :attr:`scheme` is the scheme).
    dp
        Distributed DP (:class:`coded_fl.dp.DistributedDP`) or None: sets the quantization;
        needs aligned masks, g >= T + 2 groups (:func:`coded_fl.dp.protocol.dp_quantization`).
    """

    num_silos: int
    num_stragglers: int = 0
    privacy_threshold: int = 1
    recovery_threshold: int | None = None
    vector_length: int
    clip_range: float = 1.0
    scale: float | None = None
    num_partitions: int | None = None
    code: str = "auto"
    extra_replies: int = 0
    headroom_bits: int = 8
    p: int = 2**31 - 1
    run_id: str = "run"
    session: str = ""
    nonfinite: str = "raise"
    masking: str = "auto"
    dp: DistributedDP | None = None
    _derived: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n, s, t = self.num_silos, self.num_stragglers, self.privacy_threshold
        for name in (
            "num_silos",
            "num_stragglers",
            "privacy_threshold",
            "vector_length",
            "extra_replies",
            "headroom_bits",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigurationError(f"{name} must be an int, got {v!r}")
        if n < 1:
            raise ConfigurationError(f"num_silos must be >= 1, got {n}")
        if not 0 <= s < n:
            raise ConfigurationError(
                f"num_stragglers={s} must satisfy 0 <= s < n={n}: the server needs at least one "
                f"reply; lower num_stragglers to at most {n - 1}"
            )
        u = n - s if self.recovery_threshold is None else self.recovery_threshold
        if isinstance(u, bool) or not isinstance(u, int):
            raise ConfigurationError(f"recovery_threshold must be an int or None, got {u!r}")
        if not 0 <= t < u <= n - s:
            raise ConfigurationError(
                f"need 0 <= privacy_threshold T < recovery_threshold U <= n - s = {n - s}, got "
                f"T={t}, U={u}: lower privacy_threshold to at most {n - s - 1}, or lower "
                f"num_stragglers, or set recovery_threshold between T+1 and n-s"
            )
        if self.vector_length < 1:
            raise ConfigurationError(f"vector_length must be >= 1, got {self.vector_length}")
        if self.extra_replies < 0 or self.extra_replies > s:
            raise ConfigurationError(
                f"extra_replies={self.extra_replies} must be in 0..num_stragglers={s}"
            )
        if self.headroom_bits < 0:
            raise ConfigurationError(
                f"headroom_bits must be an int >= 0, got {self.headroom_bits}: set "
                "headroom_bits=0 (no headroom) or more (default 8)"
            )
        check_clip_range(self.clip_range)
        if self.scale is not None:
            check_positive_real("scale", self.scale)
        k = n if self.num_partitions is None else self.num_partitions
        fld = PrimeField(self.p)
        code = make_code(n, s, kind=self.code, num_partitions=k, field=fld)  # type: ignore[arg-type]
        if not code.exact:
            exact = ", ".join(repr(c) for c in ("auto", *code_names(exact=True)))
            why = "is approximate; secure aggregation needs an exact code: use code="
            raise ConfigurationError(f"code={self.code!r} {why}{exact}")
        scheme, edges = resolve(self.masking, code, t)
        plan = None
        if self.dp is not None:
            from coded_fl.dp.protocol import dp_quantization  # the 'dp' extra: only with dp

            quant, plan = dp_quantization(self, code, scheme)
        elif self.scale is None:
            quant = QuantizationConfig.for_summands(
                code.K,
                clip_range=self.clip_range,
                p=self.p,
                nonfinite=self.nonfinite,
                headroom_bits=self.headroom_bits,
            )
        else:
            quant = QuantizationConfig(
                clip_range=self.clip_range,
                scale=self.scale,
                num_summands=code.K,
                p=self.p,
                nonfinite=self.nonfinite,  # type: ignore[arg-type]
            )
        sharing = MaskSharing(n=n, privacy=t, threshold=u, length=self.vector_length, field=fld)
        self._derived.update(
            field=fld,
            code=code,
            quantization=quant,
            sharing=sharing,
            U=u,
            edges=edges,
            scheme=scheme,
            dp_plan=plan,
        )

    # ------------------------------------------------------------------ derived objects
    @property
    def field(self) -> PrimeField:
        """GF(p), the field of every vector of the protocol."""
        return self._derived["field"]

    @property
    def gradient_code(self) -> GradientCode:
        """The gradient code B for n silos, K partitions and s stragglers."""
        return self._derived["code"]

    @property
    def quantization(self) -> QuantizationConfig:
        """How update entries become field elements (clip range, scale, K summands)."""
        return self._derived["quantization"]

    @property
    def sharing(self) -> MaskSharing:
        """The mask sharing: U pieces, T of them noise, one share per silo."""
        return self._derived["sharing"]

    @property
    def mask_edges(self) -> tuple[tuple[int, int], ...]:
        """With ``masking="aligned"``: the mask graph over the code's silo groups
        (:func:`~coded_fl.secagg.aligned.mask_graph`); empty otherwise."""
        return self._derived["edges"]

    @property
    def group_code(self) -> GroupCode:
        """The repetition code, whose silo groups the aligned masks follow.

        Raises
        ------
        ConfigurationError
            If the run does not use ``masking="aligned"``.
        """
        code = self.gradient_code
        if not self.aligned or not isinstance(code, GroupCode):
            raise ConfigurationError("silo groups exist with masking='aligned' only")
        return code

    @property
    def scheme(self) -> MaskingScheme:
        """The masking scheme :attr:`masking` selects (:mod:`coded_fl.secagg.masking`)."""
        return self._derived["scheme"]

    @property
    def masking_used(self) -> str:
        """The scheme's name: :attr:`masking` with ``"auto"`` resolved."""
        return self.scheme.name

    @property
    def aligned(self) -> bool:
        """Whether the silos deal and hold mask-graph edge keys (``masking="aligned"``: rounds
        use group-aligned masks once the keys are dealt)."""
        return self.scheme.edge_keys

    @property
    def dp_plan(self) -> DPPlan | None:
        """With :attr:`dp`: the run's integer parameters (:class:`coded_fl.dp.DPPlan`)."""
        return self._derived["dp_plan"]

    @property
    def sum_bound(self) -> int:
        """The largest |coordinate| of an honest round's decoded sum in steps (K max|q|; with
        :attr:`dp` the plan's wrap bound): the server erases a coordinate beyond it."""
        plan = self.dp_plan
        if plan is not None:
            return math.ceil(plan.wrap_bound)
        return self.quantization.num_summands * self.quantization.max_abs

    @property
    def U(self) -> int:
        """U, the recovery replies needed to unmask (default n - s)."""
        return self._derived["U"]

    @property
    def T(self) -> int:
        """T, the colluding silos tolerated (``privacy_threshold``)."""
        return self.privacy_threshold

    @property
    def n(self) -> int:
        """n, the silos (``num_silos``)."""
        return self.num_silos

    @property
    def s(self) -> int:
        """s, the stragglers tolerated (``num_stragglers``)."""
        return self.num_stragglers

    @property
    def min_uploads(self) -> int:
        """Uploads needed to close a round: max(n - s, U)."""
        return max(self.n - self.s, self.U)

    @property
    def seed_id(self) -> str:
        """The public id the session's training seeds and rounding keys derive from: run and
        session, so two sessions of one run (two ``start`` calls) never repeat a seed."""
        return f"{self.run_id}/{self.session}"

    @property
    def run_bytes(self) -> bytes:
        """What keys and sealed shares are bound to: run and session."""
        return self.seed_id.encode()

    # ------------------------------------------------------------------ wire form
    def to_json(self) -> bytes:
        """The configuration as canonical JSON bytes (what a KeyRequest carries and the digest
        covers)."""
        fields = {
            "num_silos": self.num_silos,
            "num_stragglers": self.num_stragglers,
            "privacy_threshold": self.privacy_threshold,
            "recovery_threshold": self.U,
            "vector_length": self.vector_length,
            "clip_range": self.clip_range,
            "scale": self.quantization.scale,
            "num_partitions": self.gradient_code.K,
            "code": self.gradient_code.kind,
            "extra_replies": self.extra_replies,
            "p": self.p,
            "run_id": self.run_id,
            "session": self.session,
            "nonfinite": self.nonfinite,
            "headroom_bits": self.headroom_bits,
            "masking": self.masking,
        }
        if self.dp is not None:  # absent otherwise: the digests of runs without it stay
            fields["dp"] = self.dp.to_dict()
        return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ProtocolConfig:
        """The configuration :meth:`to_json` wrote, checked like a new one.

        Parameters
        ----------
        raw
            JSON bytes from a peer.

        Returns
        -------
        ProtocolConfig

        Raises
        ------
        RemoteProtocolError
            If the bytes are not a valid configuration (the sender is at fault).
        """
        return _config_from_json(bytes(raw))

    @functools.cached_property
    def digest(self) -> bytes:
        """8 bytes identifying this exact configuration (carried in every message)."""
        return hashlib.sha256(b"coded-fl/config/v1" + self.to_json()).digest()[:8]

    def upload_elements(self) -> int:
        """Field elements in one silo's upload with a full roster: its masked vector (d) and a
        sealed share of m for each of the n - U silos outside its derived set (the U others
        rederive theirs): d + (n - U) m = (1 + (n-U)/(U-T)) d when U - T divides d. (Its
        recovery reply adds m per weight row.)"""
        return self.vector_length + (self.n - self.U) * self.sharing.piece_length

    def describe(self) -> str:
        """The configuration in one line (n, s, T, U, K, d, p, code, share size, upload)."""
        m = self.sharing.piece_length
        if self.aligned:
            plan, z = self.dp_plan, self.dp
            dp = "" if plan is None or z is None else f" dp: {z.describe()}, {plan.describe()}"
            return (
                f"n={self.n} s={self.s} T={self.T} K={self.gradient_code.K} "
                f"d={self.vector_length} p={self.p} code={self.gradient_code.kind} "
                f"masking=aligned groups={len(self.group_code.groups)} "
                f"edges={len(self.mask_edges)} upload=1.00x d once the edge keys are dealt "
                f"(until then shares: {self.upload_elements() / self.vector_length:.2f}x d)" + dp
            )
        return (
            f"n={self.n} s={self.s} T={self.T} U={self.U} K={self.gradient_code.K} "
            f"d={self.vector_length} p={self.p} code={self.gradient_code.kind} share={m} "
            f"upload={self.upload_elements() / self.vector_length:.2f}x d "
            f"(bound 1+(n-U)/(U-T)={1 + (self.n - self.U) / (self.U - self.T):.2f})"
            if math.isfinite(m)
            else ""
        )


@functools.lru_cache(maxsize=32)
def _config_from_json(raw: bytes) -> ProtocolConfig:
    """:meth:`ProtocolConfig.from_json`, memoised: a silo's state is rebuilt from bytes for every
    Flower message, and the configuration (frozen) keeps its derived matrices and code in
    cached properties, which the next message then finds built. A refusal is not cached."""
    try:
        fields = json.loads(raw)
        if not isinstance(fields, dict):
            raise TypeError("not an object")
        if fields.get("dp") is not None:
            from coded_fl.dp import DistributedDP

            fields["dp"] = DistributedDP.from_dict(fields["dp"])
        return ProtocolConfig(**fields)
    except (ValueError, TypeError, ArithmeticError, RecursionError, ImportError) as exc:
        # a peer's JSON: nested past the parser's depth, or values that overflow, too
        raise RemoteProtocolError(
            f"unreadable protocol configuration: {type(exc).__name__}: {exc}"
        ) from None
