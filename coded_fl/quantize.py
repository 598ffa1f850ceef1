"""Quantization of real-valued updates into GF(p) and back.

A value :math:`x` is clipped to :math:`[-c, c]` (``clip_range``), scaled to :math:`t = x s`
(``scale``) and stochastically rounded, :math:`q = \\lfloor t \\rfloor + [u < t - \\lfloor t
\\rfloor]` with :math:`u \\sim U[0, 1)`, so :math:`E[q] = t` exactly (unbiased) and
:math:`|q/s - x| < 1/s` for unclipped values. ``q`` is lifted into GF(p) as :math:`q \\bmod p`.
Summing at most ``num_summands`` such vectors cannot wrap around as long as
:math:`\\text{num\\_summands} \\cdot \\max|q| < p/2`; :class:`QuantizationConfig` refuses a
setting that breaks this and says which setting to change.

The uniforms come from a keyed counter-based hash of the element index (:class:`RoundingKey`),
not from a global generator: two silos holding the same partition and the same key produce
bit-identical output on any device, which gradient coding requires (replicas must agree).
Computation is in float64 (the input is first converted to float32 when it is not float64), so
the rounding is exact and identical on CPU and CUDA.

>>> cfg = QuantizationConfig(clip_range=1.0, scale=2.0**20, num_summands=4)
>>> x = torch.tensor([0.25, -0.5, 3.0])
>>> F = PrimeField()
>>> q = quantize(x, cfg, RoundingKey.derive("doc", 0))
>>> dequantize(q, cfg, F).tolist()  # 3.0 is clipped to 1.0
[0.25, -0.5, 1.0]

Length: about 290 lines of code (rounding keys, the configuration and the fused quantizer belong
together); the rest is documentation.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from coded_fl.errors import ConfigurationError, DecodingError, InputError
from coded_fl.field import PrimeField
from coded_fl.kernels import cpu as _cpu
from coded_fl.kernels import torch_impl as _tk
from coded_fl.primes import MERSENNE31, check_modulus

__all__ = [
    "QuantizationConfig",
    "QuantizationStats",
    "RoundingKey",
    "check_clip_range",
    "check_positive_real",
    "dequantize",
    "quantize",
    "stochastic_round",
]

#: Largest index a rounding key covers; vectors are limited to this many elements.
MAX_ELEMENTS = 2**32


@dataclass(frozen=True)
class RoundingKey:
    """The key of the stochastic-rounding hash: two 32-bit words.

    Not secret: it only has to be the same on every replica of a partition and different
    between partitions and rounds. Derive it with :meth:`derive` from public context.
    """

    k0: int
    k1: int

    def __post_init__(self) -> None:
        for name in ("k0", "k1"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 0 <= v < 2**32:
                raise InputError(f"RoundingKey.{name} must be an int in [0, 2**32), got {v!r}")

    @classmethod
    def for_partition(cls, run_id: int | str, server_round: int, partition: int) -> RoundingKey:
        """The key every replica of ``partition`` uses in ``server_round`` of run ``run_id``.

        ``k0`` depends on (run, round) only, so the fused encoder hashes each index once for all
        the partitions a silo holds; ``k1`` adds the partition.

        Parameters
        ----------
        run_id
            The public run id (ProtocolConfig.seed_id).
        server_round
            The protocol round.
        partition
            The partition's index.

        Returns
        -------
        RoundingKey
        """
        k0 = cls._word(("round", run_id, server_round))
        k1 = cls._word(("partition", run_id, server_round, partition))
        return cls(k0, k1)

    @classmethod
    def derive(cls, *context: int | str | bytes) -> RoundingKey:
        """Key from any context tuple (both words depend on all of it).

        Parameters
        ----------
        *context
            Public parts (int, str or bytes).

        Returns
        -------
        RoundingKey
        """
        v = cls._word(context, digest_size=8)
        return cls(v & 0xFFFFFFFF, v >> 32)

    @staticmethod
    def _word(context: tuple[int | str | bytes, ...], digest_size: int = 4) -> int:
        """BLAKE2b over an unambiguous encoding (each part typed and length-prefixed)."""
        h = hashlib.blake2b(digest_size=digest_size, person=b"codedfl-round")
        for part in context:
            if isinstance(part, bool) or not isinstance(part, (int, str, bytes)):
                raise InputError(
                    f"context parts must be int, str or bytes, got {type(part).__name__}"
                )
            if isinstance(part, int):
                raw, tag = part.to_bytes(16, "little", signed=True), b"i"
            elif isinstance(part, str):
                raw, tag = part.encode(), b"s"
            else:
                raw, tag = part, b"b"
            h.update(tag + len(raw).to_bytes(4, "little") + raw)
        return int.from_bytes(h.digest(), "little")


@dataclass
class QuantizationStats:
    """Counts gathered while quantizing (a user should widen ``clip_range`` if many clip)."""

    total: int = 0
    clipped: int = 0
    nonfinite: int = 0

    @property
    def clipped_fraction(self) -> float:
        """The fraction of the quantized entries that were clipped (0 before any)."""
        return self.clipped / self.total if self.total else 0.0


@dataclass(frozen=True, kw_only=True)
class QuantizationConfig:
    """How real values become field elements.

    Parameters
    ----------
    clip_range
        :math:`c > 0`: values are clipped to :math:`[-c, c]` before scaling.
    scale
        :math:`s > 0`: quantization step is :math:`1/s`.
    num_summands
        How many quantized vectors (with coefficient 1) may be added in GF(p) before
        dequantizing; with gradient coding this is the number of partitions K.
    p
        The field modulus (default :math:`2^{31}-1`).
    nonfinite
        ``"raise"`` (default): NaN/Inf in an input is refused with :class:`InputError`.
        ``"clip"``: NaN becomes 0 and :math:`\\pm`Inf becomes :math:`\\pm c`.
    """

    clip_range: float
    scale: float
    num_summands: int
    p: int = MERSENNE31
    nonfinite: Literal["raise", "clip"] = "raise"
    _max_abs: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_modulus(self.p)
        c, s, n = self.clip_range, self.scale, self.num_summands
        check_clip_range(c)
        check_positive_real("scale", s)
        _check_num_summands(n)
        if self.nonfinite not in ("raise", "clip"):
            raise ConfigurationError(f"nonfinite must be 'raise' or 'clip', got {self.nonfinite!r}")
        product = float(c) * float(s)
        limit = (self.p - 1) // 2  # the largest |sum| that lifts back unambiguously
        if not math.isfinite(product) or product > limit:
            raise ConfigurationError(
                f"clip_range={c} x scale={s} = {product:g} exceeds what GF(p) can hold "
                f"((p-1)/2 = {limit}): lower the scale (or leave it unset: the finest safe one "
                "is chosen) or the clip range"
            )
        max_abs = math.ceil(product)
        if n * max_abs > limit:
            best_scale = self.max_scale(clip_range=c, num_summands=n, p=self.p)
            raise ConfigurationError(
                f"quantized values reach |q| = {max_abs} (clip_range={c} x scale={s}); "
                f"a sum of num_summands={n} of them needs {n} x {max_abs} <= (p-1)/2 = {limit} "
                f"to avoid wraparound: set scale <= {best_scale:g}, or clip_range <= "
                f"{math.floor(limit / n) / float(s):g}, or use fewer summands "
                f"(<= {limit // max_abs}), or a larger p"
            )
        object.__setattr__(self, "_max_abs", max_abs)

    @staticmethod
    def max_scale(
        *, clip_range: float, num_summands: int, p: int = MERSENNE31, headroom_bits: int = 0
    ) -> float:
        """The largest power-of-two scale that fits ``num_summands`` clipped values in GF(p),
        leaving ``headroom_bits`` unused above the largest possible sum.

        The scale is at least 1 (a step of at most 1): a setting that would need a coarser
        step is refused, since every value would then quantize to 0 or :math:`\\pm 1`.

        Parameters
        ----------
        clip_range
            c: every value is clipped to [-c, c].
        num_summands
            How many clipped values a sum adds.
        p
            The field's prime.
        headroom_bits
            Bits left unused above the largest possible sum.

        Raises
        ------
        ConfigurationError
            If a setting has the wrong type or range, or the setting leaves no scale >= 1;
            the message names the setting and the value that would work.
        """
        check_modulus(p)
        check_clip_range(clip_range)
        _check_num_summands(num_summands)
        if (
            isinstance(headroom_bits, bool)
            or not isinstance(headroom_bits, int)
            or headroom_bits < 0
        ):
            raise ConfigurationError(
                f"headroom_bits must be an int >= 0, got {headroom_bits!r}: set headroom_bits=0 "
                "(no headroom) or more (the default of a protocol configuration is 8)"
            )
        room = (p - 1) // 2 // num_summands  # the largest |q| each summand may reach
        limit = room >> headroom_bits
        if limit < clip_range:
            least = math.ceil(clip_range)
            most_bits = (room // least).bit_length() - 1  # the most headroom leaving scale >= 1
            fixes = [f"headroom_bits <= {most_bits}"] if most_bits >= 0 else []
            if limit >= 1:
                fixes.append(f"clip_range <= {limit}")
            elif room >= 1:
                fixes.append(f"clip_range <= {room} with headroom_bits=0")
            fixes = fixes or ["a smaller clip_range"]
            raise ConfigurationError(
                f"GF({p}) has no room for {num_summands} summands with clip_range={clip_range} "
                f"and headroom_bits={headroom_bits}: the quantization scale would be below 1 "
                f"(every value rounds to 0 or +-1); set {' or '.join(fixes)}, or use fewer "
                "summands or a larger p"
            )
        return float(2.0 ** math.floor(math.log2(limit / clip_range)))

    @classmethod
    def for_summands(
        cls,
        num_summands: int,
        *,
        clip_range: float,
        p: int = MERSENNE31,
        headroom_bits: int = 0,
        **kw: object,
    ) -> QuantizationConfig:
        """The finest valid configuration (largest power-of-two scale) for a given clip range.

        ``headroom_bits`` = h keeps every true sum within a fraction :math:`2^{-h}` of the field,
        so that :func:`dequantize`'s range check refuses an element that a corruption moved to
        a random-looking place of the field with probability :math:`1 - 2^{-h}`, at the price of
        h bits of quantization precision. (A corruption is not always random-looking: see
        ``docs/protocol.md``, "Replicas that disagree".)

        Parameters
        ----------
        num_summands
            How many clipped values a sum adds.
        clip_range
            c.
        p
            The field's prime.
        headroom_bits
            h.
        **kw
            Other QuantizationConfig fields.
        """
        _check_num_summands(num_summands)
        check_clip_range(clip_range)
        scale = cls.max_scale(
            clip_range=clip_range, num_summands=num_summands, p=p, headroom_bits=headroom_bits
        )
        return cls(clip_range=clip_range, scale=scale, num_summands=num_summands, p=p, **kw)  # type: ignore[arg-type]

    @property
    def max_abs(self) -> int:
        """The largest :math:`|q|` one quantized value can take: :math:`\\lceil c s \\rceil`."""
        return self._max_abs

    @property
    def step(self) -> float:
        """The quantization step :math:`1/s`."""
        return 1.0 / self.scale


def check_positive_real(name: str, value: object) -> None:
    """Refuse ``value`` unless it is a finite real number > 0 (an int or a float).

    A bool, a string or a NumPy scalar other than float64 is refused too: the value ends up
    in the configuration's canonical JSON, where ``True`` or ``"1"`` would mean something else.

    Parameters
    ----------
    name
        The setting's name, for the message.
    value
        The value to check.

    Raises
    ------
    ConfigurationError
        Naming the setting and what it must be.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(
            f"{name} must be a finite number > 0 (an int or a float, not a bool or a string), "
            f"got {value!r}"
        )


def check_clip_range(clip_range: object) -> None:
    """Refuse a ``clip_range`` that is not a finite real number > 0 (see
    :func:`check_positive_real`); e.g. ``clip_range=1.0``.

    Parameters
    ----------
    clip_range
        The value to check.

    Raises
    ------
    ConfigurationError
        Naming ``clip_range``.
    """
    check_positive_real("clip_range", clip_range)


def _check_num_summands(n: object) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigurationError(f"num_summands must be an int >= 1, got {n!r}")


def _as_float(x: torch.Tensor, name: str = "x") -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor of floats, got {type(x).__name__}")
    if not x.is_floating_point():
        raise InputError(f"{name} must be a floating point tensor, got {x.dtype}")
    if x.numel() >= MAX_ELEMENTS:
        raise InputError(f"{name} has {x.numel()} elements; at most {MAX_ELEMENTS - 1} supported")
    if x.dtype not in (torch.float32, torch.float64):
        x = x.to(torch.float32)
    return x.detach().contiguous()


def prepare(x: torch.Tensor, config: QuantizationConfig, name: str = "x") -> torch.Tensor:
    """Check an input and return it as a contiguous float32/float64 tensor.

    With ``nonfinite='clip'`` a copy with NaN -> 0 and +-Inf -> +-clip_range is returned when
    the input holds any; with ``'raise'`` non-finite values are counted by the kernels instead
    (no extra pass) and :func:`account` raises.

    Parameters
    ----------
    x
        The input tensor.
    config
        The quantization configuration.
    name
        How errors name it.

    Returns
    -------
    torch.Tensor
    """
    x = _as_float(x, name)
    if config.nonfinite == "clip":
        if x.device.type == "cpu":
            bad, _ = _cpu.scan_values(x.reshape(-1).numpy(), float(config.clip_range))
            if bad:
                x = x.clone()
                _cpu.sanitize_nonfinite(x.reshape(-1).numpy(), float(config.clip_range))
        else:
            x = torch.nan_to_num(x, nan=0.0, posinf=config.clip_range, neginf=-config.clip_range)
    return x


def count_values(x: torch.Tensor, config: QuantizationConfig) -> tuple[int, int]:
    """(NaN/Inf count, clipped count) of a tensor on a non-CPU device (CPU kernels count inline).

    Parameters
    ----------
    x
        A float tensor.
    config
        The quantization configuration (its clip range).

    Returns
    -------
    tuple[int, int]
    """
    finite = torch.isfinite(x)
    return int((~finite).sum()), int(((x.abs() > config.clip_range) & finite).sum())


def account(
    counts: tuple[int, int],
    total: int,
    config: QuantizationConfig,
    stats: QuantizationStats | None,
    name: str = "x",
) -> None:
    """Record what a kernel counted; refuse NaN/Inf (the kernel's output is then discarded).

    Parameters
    ----------
    counts
        (NaN/Inf count, clipped count) from a kernel.
    total
        Elements the kernel read.
    config
        The quantization configuration.
    stats
        Where to add the counts (None: nowhere).
    name
        How errors name the input.
    """
    bad, clipped = int(counts[0]), int(counts[1])
    if stats is not None:
        stats.total += total
        stats.clipped += clipped
        stats.nonfinite += bad
    if bad:
        raise InputError(
            f"{name} holds {bad} NaN/Inf value(s); fix the update (e.g. lower the learning "
            "rate) or set nonfinite='clip' to map NaN to 0 and +-Inf to +-clip_range"
        )


def _round(
    x: torch.Tensor,
    config: QuantizationConfig,
    key: RoundingKey,
    offset: int,
    stats: QuantizationStats | None,
    *,
    lift: bool,
) -> torch.Tensor:
    x = prepare(x, config)
    c, s = float(config.clip_range), float(config.scale)
    if x.device.type != "cpu":
        account(count_values(x, config), x.numel(), config, stats)
        q = _tk.stochastic_round(x, c, s, key.k0, key.k1, offset)
        return _tk.from_signed(q, config.p) if lift else q
    out = torch.empty(x.shape, dtype=torch.uint32 if lift else torch.int64)
    p = config.p if lift else 0  # the kernel writes signed integers for p = 0
    counts = _cpu.stochastic_round(
        x.reshape(-1).numpy(), out.reshape(-1).numpy(), c, s, key.k0, key.k1, offset, p
    )
    account(counts, x.numel(), config, stats)
    return out


def stochastic_round(
    x: torch.Tensor,
    config: QuantizationConfig,
    key: RoundingKey,
    *,
    offset: int = 0,
    stats: QuantizationStats | None = None,
) -> torch.Tensor:
    """Clip, scale and stochastically round to signed ``int64`` (before the lift into GF(p)).

    Parameters
    ----------
    x
        A float tensor.
    config
        The quantization settings.
    key
        The rounding key: every replica of a partition uses the same one.
    offset
        The index of ``x[0]`` in the whole vector, so that a vector quantized in chunks gets
        the same result as in one piece.
    stats
        Counts clipped entries if given.

    Returns
    -------
    torch.Tensor
        ``int64``, within :math:`\\pm` ``config.max_abs``.

    Raises
    ------
    InputError
        NaN/Inf in ``x`` (unless ``config.nonfinite == "clip"``), or a non-float ``x``.
    """
    return _round(x, config, key, offset, stats, lift=False)


def quantize(
    x: torch.Tensor,
    config: QuantizationConfig,
    key: RoundingKey,
    *,
    offset: int = 0,
    stats: QuantizationStats | None = None,
) -> torch.Tensor:
    """Clip, scale, stochastically round and lift into GF(p), fused: a ``uint32`` tensor.

    Parameters
    ----------
    x, config, key, offset, stats
        As for :func:`stochastic_round`.

    Returns
    -------
    torch.Tensor
        ``uint32`` field elements.

    Raises
    ------
    InputError
        As for :func:`stochastic_round`.
    """
    return _round(x, config, key, offset, stats, lift=True)


def dequantize(
    total: torch.Tensor,
    config: QuantizationConfig,
    field: PrimeField,
    *,
    divide_by: float = 1.0,
    check_range: bool = True,
) -> torch.Tensor:
    """A field vector that is a sum of at most ``num_summands`` quantized vectors, as float64.

    Returns :math:`\\text{lift}(\\text{total}) / (s \\cdot \\text{divide\\_by})`. With
    ``check_range`` (default) an element beyond ``num_summands * max|q|`` raises
    :class:`DecodingError`: a true sum never goes there, while a corrupted aggregate (e.g.
    replicas that disagreed) lands there with overwhelming probability.

    Parameters
    ----------
    total
        ``uint32`` field elements.
    config
        The quantization settings the summands used.
    field
        GF(p), the same p as ``config``.
    divide_by
        An extra divisor (e.g. a number of silos for a plain average).
    check_range
        Refuse an element beyond ``num_summands * max|q|``.

    Returns
    -------
    torch.Tensor
        float64.

    Raises
    ------
    ConfigurationError
        If ``field`` and ``config`` disagree on p.
    DecodingError
        If ``check_range`` and an element is out of range.
    """
    if field.p != config.p:
        raise ConfigurationError(
            f"dequantize: field p={field.p} differs from the quantization config's p={config.p}"
        )
    signed = field.to_signed(total)  # refuses an element >= p (InputError)
    if signed.device.type == "cpu":  # NumPy: one thread (torch's stall on busy cores)
        values = signed.numpy()
        worst = int(np.abs(values).max()) if values.size else 0
    else:
        worst = int(signed.abs().max()) if signed.numel() else 0
    if check_range and signed.numel():
        bound = config.num_summands * config.max_abs
        if worst > bound:
            raise DecodingError(
                f"aggregate element {worst} exceeds the largest possible sum {bound} "
                f"({config.num_summands} summands x max|q| {config.max_abs}): the aggregate is "
                "corrupt (inconsistent replicas or a tampered reply); it was not applied"
            )
    if divide_by <= 0 or not math.isfinite(divide_by):
        raise InputError(f"divide_by must be a finite number > 0, got {divide_by!r}")
    if signed.device.type == "cpu":
        return torch.from_numpy(signed.numpy() / (config.scale * divide_by))  # float64
    return signed.to(torch.float64) / (config.scale * divide_by)


def as_numpy_keys(keys: list[RoundingKey]) -> np.ndarray:
    """Keys as a (k, 2) ``int64`` array for the fused CPU kernel.

    Parameters
    ----------
    keys
        The rounding keys.

    Returns
    -------
    np.ndarray
    """
    return np.array([[k.k0, k.k1] for k in keys], dtype=np.int64).reshape(-1, 2)
