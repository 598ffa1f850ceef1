"""Where each part sits in the update vector: the fields of :class:`~coded_fl.layout.UpdateLayout`,
their checks, the coordinates of the weight, the clip counts, the metrics and the integer digits,
and the unit the clip counts travel in (:func:`count_unit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coded_fl.errors import ConfigurationError
from coded_fl.layout.integers import INTEGER_DIGITS

__all__ = ["EXTRAS", "MAX_COUNT", "METRIC_BOUND", "LayoutGeometry", "count_unit"]

#: Metrics travel scaled by c / METRIC_BOUND (and clipped to +-METRIC_BOUND).
METRIC_BOUND = 1000.0

#: Coordinates between the model's and the metrics': the weight, the clipped-entry count, the
#: flag "an entry beyond c" and the flag "an entry beyond c / CLIP_WIDENING".
EXTRAS = 4

#: The largest integer a clip coordinate carries: below 2^24, so ``m u`` is exact in float32.
MAX_COUNT = 2**24 - 1


def count_unit(scale: float) -> float:
    """The power of two u with :math:`u s` a whole number, as large as that allows: the
    inverse of the lowest set bit of the quantization scale s (1/s for a power of two, 1
    for an odd integer such as 255).

    >>> count_unit(2.0**20), count_unit(255.0), count_unit(0.5)
    (9.5367431640625e-07, 1.0, 2.0)

    Parameters
    ----------
    scale
        The quantization scale s (finite, > 0).

    Returns
    -------
    float

    Raises
    ------
    ConfigurationError
        If ``scale`` is not a finite number > 0.
    """
    if isinstance(scale, bool) or not (isinstance(scale, (int, float)) and 0 < scale < math.inf):
        raise ConfigurationError(f"scale must be a finite number > 0, got {scale!r}")
    mantissa, exponent = math.frexp(float(scale))
    whole = int(mantissa * 2**53)  # scale = whole * 2^(exponent - 53), exactly
    low = (whole & -whole).bit_length() - 1  # trailing zero bits of the mantissa
    return math.ldexp(1.0, 53 - exponent - low)


@dataclass(frozen=True)
class LayoutGeometry:
    """The fields of :class:`~coded_fl.layout.UpdateLayout` (documented there), their checks and
    the coordinates they give: the base the packing and the unpacking work on.
    """

    model_size: int
    metric_keys: tuple[str, ...] = ()
    scale: float | None = None
    integer_names: tuple[str, ...] = ()
    integer_size: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.model_size, int) or self.model_size < 1:
            raise ConfigurationError(f"model_size must be an int >= 1, got {self.model_size!r}")
        if not isinstance(self.integer_size, int) or self.integer_size < 0:
            raise ConfigurationError(f"integer_size must be an int >= 0, got {self.integer_size!r}")
        if self.integer_size and not self.integer_names:
            raise ConfigurationError("integer_size > 0 needs the integer arrays' names")
        if self.scale is not None:
            count_unit(self.scale)  # refuses a bad scale

    @property
    def weight_index(self) -> int:
        """The coordinate of the weight :math:`\\rho_k` (after the model's): the same integer
        in every honest replica of a partition."""
        return self.model_size

    @property
    def count_index(self) -> int:
        """The coordinate of the clipped-entry count (after the weight)."""
        return self.model_size + 1

    @property
    def flag_indices(self) -> tuple[int, int]:
        """The coordinates of the flags "an entry beyond c" and "an entry beyond c / 4": 0 or 1
        (one unit :meth:`unit` apart, well within the drift tolerance: replicas that drift
        across a bound differ by one unit there and are settled by their group's median, never
        named for it)."""
        return (self.model_size + 2, self.model_size + 3)

    @property
    def integer_index(self) -> int:
        """The first coordinate of the integer digits (after the metrics)."""
        return self.model_size + EXTRAS + len(self.metric_keys)

    @property
    def length(self) -> int:
        """Coordinates of the whole vector (the protocol's ``vector_length``)."""
        ints = (self.integer_size + 1) * INTEGER_DIGITS if self.integer_size else 0
        return self.integer_index + ints

    def unit(self, clip_range: float) -> float:
        """u: the clip coordinates carry the integer m as :math:`m u`: :func:`count_unit` of
        :attr:`scale`, or (``scale=None``) the power of two :math:`2^{-24}` times the largest
        power of two not above c.

        Parameters
        ----------
        clip_range
            c, the round's clip range.

        Returns
        -------
        float
        """
        if self.scale is not None:
            return count_unit(self.scale)
        _, exponent = math.frexp(float(clip_range))
        return math.ldexp(1.0, exponent - 25)

    def count_cap(self, clip_range: float) -> int:
        """The largest count one partition's clip coordinate carries: :math:`\\lfloor c / u
        \\rfloor` (it must not be clipped itself), at most :data:`MAX_COUNT`.

        Parameters
        ----------
        clip_range
            c, the round's clip range.

        Raises
        ------
        ConfigurationError
            If not even 1 fits (:math:`c < u`): a finer quantization scale or a wider clip range.
        """
        u = self.unit(clip_range)
        cap = min(MAX_COUNT, math.floor(float(clip_range) / u))
        if cap < 1:
            raise ConfigurationError(
                f"clip_range={clip_range} is below the clip counts' unit {u:g} (from "
                f"scale={self.scale:g}): raise clip_range or the quantization scale"
            )
        return cap

    def describe(self) -> str:
        """The layout in words (for errors that compare lengths)."""
        ints = (
            f", +{self.integer_size} integer values and 1 exact weight in {INTEGER_DIGITS} "
            "digits each"
            if self.integer_size
            else ""
        )
        return (
            f"{self.model_size} model values +1 weight, +3 clip counts, "
            f"+{len(self.metric_keys)} metrics{ints} = {self.length}"
        )
