"""The quantization configuration: how real values become elements of GF(p), checked so that a
sum of ``num_summands`` quantized vectors cannot wrap around, and the checks of its settings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from coded_fl.errors import ConfigurationError
from coded_fl.primes import MERSENNE31, check_modulus

__all__ = ["QuantizationConfig", "check_clip_range", "check_positive_real"]


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
