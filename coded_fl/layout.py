"""The update vector: what one partition contributes to a round, and how the sum is read back.

Partition k's vector, of :attr:`UpdateLayout.length` = d + 4 + len(metric_keys) + R (e + 1)
coordinates (R = :data:`INTEGER_DIGITS`, e integer elements; no integer part where e = 0)::

    rho_k (theta_k - theta) | rho_k c | n_k u   | b_k u    | h_k u  | rho_k c m_kj / METRIC_BOUND
    (d model coordinates)     weight    clipped   beyond c   beyond   one per metric
                                        entries              c / 4
    | digits of w_k x_kj (R per element) u | digits of w_k u
      (e integer model elements)             (the exact weight)

with :math:`\\rho_k = w_k / W` (the sample weight over its public bound), c the clip range,
:math:`m_{kj}` the metrics. The model, weight and metric coordinates are multiples of
:math:`\\rho_k` and the code is linear, so the decoded sum gives the FedAvg numerator,
:math:`c \\sum_k \\rho_k` and the weighted metric sums: :meth:`UpdateLayout.unpack` divides them
out. The weight coordinate carries a factor c so it uses the quantization range the model
coordinates use.

**The clip signal is exact.** The three clip coordinates carry integers, not rates: :math:`n_k`
the number of model coordinates beyond c (saturated at :attr:`UpdateLayout.count_cap`),
:math:`b_k \\in \\{0, 1\\}` whether there is at least one, :math:`h_k \\in \\{0, 1\\}` whether
one lies beyond :math:`c / 4` (:data:`coded_fl.vocabulary.CLIP_WIDENING`: the test for a
narrower range). Each is placed as the integer times :meth:`UpdateLayout.unit` u, a power
of two with :math:`u s` a whole number for the quantization scale s, so stochastic rounding
meets an integer (no fraction: nothing is random) and returns exactly :math:`m u s`; they
are not weighted by :math:`\\rho_k`. The decoded sums are therefore exact counts: how many
entries and how many partitions clipped, whatever d (a rate of 1 entry in 25 million would
lie below one quantization step and decode as 0).

**Integer arrays are summed exactly.** Integer model arrays (BatchNorm's
``num_batches_tracked``, other integer buffers: dtype kind ``i``, ``u`` or ``b``) are not
deltas and are not clipped: partition k contributes the whole numbers :math:`w_k x_{kj}`
(:math:`w_k` its ``num-examples``, a whole number) and :math:`w_k`, each written with R
balanced base-:data:`INTEGER_BASE` digits placed like the clip counts (digit times u: exact,
nothing random). Every digit lies within :math:`\\pm` ``INTEGER_BASE / 2``, so the field
range that holds the model coordinates holds any sum of them, whatever the values: nothing
can wrap. The server rebuilds :math:`\\sum_k w_k x_{kj}` and :math:`\\sum_k w_k` as Python
integers and divides: :attr:`DecodedUpdate.integer_mean` is the weighted mean correctly rounded
to float64, the dtype Flower's ``FedAvg`` gives an integer array.

Both adapters use this one definition (the silo packs, the server unpacks), built with the
protocol's quantization scale. The model side is handled by :func:`flatten` and
:func:`array_layout`, which read any mapping of named arrays (Flower's ``ArrayRecord`` or a dict
of NumPy arrays) without importing Flower.

>>> lay = UpdateLayout(model_size=2, metric_keys=("acc",))
>>> v0 = lay.pack(0.25 * torch.tensor([0.1, 0.2]), rho=0.25, clip_range=1.0, metrics={"acc": 0.5})
>>> v1 = lay.pack(0.75 * torch.tensor([0.3, 0.6]), rho=0.75, clip_range=1.0, metrics={"acc": 0.9})
>>> out = lay.unpack((v0 + v1).double(), clip_range=1.0)
>>> [round(x, 4) for x in out.mean_delta.tolist()], out.total_rho, round(out.metrics["acc"], 4)
([0.25, 0.5], 1.0, 0.8)
>>> out.clipped_partitions, out.wide_partitions  # 0.75 * 0.6 = 0.45 lies beyond 1 / 4
(0, 1)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from coded_fl.errors import ConfigurationError, DecodingError, InputError
from coded_fl.vocabulary import CLIP_WIDENING, read_npy_header

__all__ = [
    "EXTRAS",
    "INTEGER_BASE",
    "INTEGER_DIGITS",
    "MAX_COUNT",
    "METRIC_BOUND",
    "DecodedUpdate",
    "UpdateLayout",
    "array_layout",
    "check_same_layout",
    "count_unit",
    "element_count",
    "flatten",
    "integer_digits",
    "integer_names",
    "integer_values",
    "integers_from_digits",
    "npy_header",
]

#: Metrics travel scaled by c / METRIC_BOUND (and clipped to +-METRIC_BOUND).
METRIC_BOUND = 1000.0

#: Coordinates between the model's and the metrics': the weight, the clipped-entry count, the
#: flag "an entry beyond c" and the flag "an entry beyond c / CLIP_WIDENING".
EXTRAS = 4

#: The largest integer a clip coordinate carries: below 2^24, so ``m u`` is exact in float32.
MAX_COUNT = 2**24 - 1

#: B: integer model elements travel as balanced base-B digits, each in [-B/2, B/2).
INTEGER_BASE = 256

#: R: digits per integer element: R balanced base-256 digits (each in [-128, 127]) hold every
#: integer in [-128 (B^R - 1) / 255, 127 (B^R - 1) / 255], which contains
#: :math:`\pm 2^{38} \cdot 2^{64}` (a ``num-examples`` below :data:`MAX_INTEGER_WEIGHT` times
#: any int64 or uint64 value).
INTEGER_DIGITS = 13

#: The ``num-examples`` a partition may report when the model has integer arrays: whole numbers
#: below 2^38 (the digits then hold every product).
MAX_INTEGER_WEIGHT = 2**38

#: Dtype kinds summed exactly as integers (signed, unsigned, bool).
INTEGER_KINDS = "iub"


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
class DecodedUpdate:
    """The decoded round read through the layout.

    Attributes
    ----------
    mean_delta
        The weighted average of :math:`\\theta_k - \\theta` (in the dtype of the sum).
    total_rho
        :math:`\\sum_k w_k / W`.
    clipped_entries
        Model coordinates beyond the clip range, summed over the partitions (each partition's
        count saturated at :attr:`UpdateLayout.count_cap`); None where erased.
    clipped_partitions
        Partitions with at least one model coordinate beyond the clip range c (exact); None
        where erased (replicas disagreed: unknown).
    wide_partitions
        Partitions with at least one model coordinate beyond :math:`c / 4` (exact); None where
        erased.
    clipped_fraction
        ``clipped_entries`` over the model coordinates of every partition (0 where erased).
    metrics
        The weighted averages of the requested metrics.
    integer_mean
        :math:`\\sum_k w_k x_{kj} / \\sum_k w_k` for the e integer elements, each the exact
        rational correctly rounded to float64 (NaN where erased).
    integer_erased
        Per integer element: True where a digit could not be decoded (replicas disagreed).
    total_examples
        :math:`\\sum_k w_k`, exact (None without integer arrays).
    """

    mean_delta: torch.Tensor
    total_rho: float
    clipped_entries: int | None = 0
    clipped_partitions: int | None = 0
    wide_partitions: int | None = 0
    clipped_fraction: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    integer_mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    integer_erased: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    total_examples: int | None = None


@dataclass(frozen=True)
class UpdateLayout:
    """Where the model, the weight, the clip counts and the metrics sit in the update vector.

    Parameters
    ----------
    model_size
        d, the number of model coordinates.
    metric_keys
        Names of the metrics carried, in order.
    scale
        The quantization scale s the vectors will be quantized with (the protocol's
        ``quantization.scale``; both adapters pass it): the clip counts travel as multiples of
        :func:`count_unit` of it, so they quantize exactly. None (default): for vectors that
        are not quantized (analysis, tests): the unit then derives from the clip range.
    integer_names
        The model's integer arrays (:func:`integer_names` of the run's initial model), in key
        order: summed exactly (module docstring), not flattened into the d model coordinates.
    integer_size
        e, their number of elements.
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

    def pack(
        self,
        weighted_delta: torch.Tensor,
        *,
        rho: float,
        clip_range: float,
        metrics: Mapping[str, float] | None = None,
        delta_scale: float = 1.0,
        integers: np.ndarray | None = None,
        examples: float | None = None,
    ) -> torch.Tensor:
        """Partition k's vector.

        Parameters
        ----------
        weighted_delta
            :math:`\\rho_k (\\theta_k - \\theta)`, d finite float values.
        rho
            :math:`\\rho_k = w_k / W`, in (0, 1].
        clip_range
            c; packed model coordinates beyond it count as clipped (beyond :math:`c / 4`: as
            wide).
        metrics
            Values of :attr:`metric_keys` (a missing one counts 0); clipped to
            +-:data:`METRIC_BOUND`.
        delta_scale
            g (a power of two): the model coordinates are packed divided by it, so entries
            up to g c fit (:attr:`coded_fl.vocabulary.TrainSpec.delta_scale`).
        integers
            The e integer elements :math:`x_{kj}` (the trained values, not deltas), flat, in
            :attr:`integer_names` order; required where :attr:`integer_size` > 0.
        examples
            :math:`w_k`, the partition's ``num-examples`` (a whole number below
            :data:`MAX_INTEGER_WEIGHT`); required where :attr:`integer_size` > 0.

        Returns
        -------
        torch.Tensor
            float32, :attr:`length` coordinates.

        Raises
        ------
        InputError
            If ``weighted_delta`` has the wrong size or holds NaN/Inf, ``rho`` is not in
            (0, 1], or a metric is NaN/Inf (it would otherwise pass as +-METRIC_BOUND); if the
            integer elements are missing, not integers or of the wrong number, or
            ``examples`` is not a whole number below :data:`MAX_INTEGER_WEIGHT`.
        ConfigurationError
            If the clip counts or the integer digits do not fit (:meth:`count_cap`).
        """
        flat = weighted_delta.detach().reshape(-1).to(torch.float32)
        if delta_scale != 1.0:
            flat = flat / float(delta_scale)  # a power of two: exact, replicas stay identical
        if flat.numel() != self.model_size:
            raise InputError(f"update has {flat.numel()} values, the model {self.model_size}")
        if not (math.isfinite(rho) and 0 < rho <= 1):
            raise InputError(f"rho must be in (0, 1], got {rho!r}")
        if not torch.isfinite(flat).all():
            raise InputError("the update holds NaN/Inf: lower the learning rate")
        size = flat.abs()
        beyond = int((size > float(np.float32(clip_range))).sum())
        wide = int((size > float(_shrunk(clip_range))).sum())
        extras = self._extras(rho, clip_range, beyond, wide, metrics)
        ints = torch.from_numpy(self._integer_part(integers, examples, clip_range))
        tail = torch.cat([torch.tensor(extras, dtype=torch.float32), ints]).to(flat.device)
        return torch.cat([flat, tail])

    def pack_arrays(
        self,
        arrays: Mapping[str, Any],
        theta: torch.Tensor,
        *,
        rho: float,
        clip_range: float,
        metrics: Mapping[str, float] | None = None,
        delta_scale: float = 1.0,
        examples: float | None = None,
    ) -> torch.Tensor:
        """Partition k's vector straight from its trained arrays: :meth:`pack` of
        ``rho * (flatten(arrays) - theta)``, bit for bit, in one pass over the arrays (the
        arrays named in :attr:`integer_names` go to the integer digits).

        The arrays are read in place where their bytes allow it (no ``numpy()`` copy), and
        the difference, the weighting, the scaling and the NaN/Inf and clip counts are one
        kernel per array writing into the result (CPU; on any other device of ``theta`` this
        is :meth:`pack` of the torch expression).

        Parameters
        ----------
        arrays
            The trained model's named arrays (Flower ``ArrayRecord`` or NumPy arrays), with the
            layout of the model ``theta`` was flattened from.
        theta
            :func:`flatten` of the model the silo received (float32, :attr:`model_size`).
        rho, clip_range, metrics, delta_scale, examples
            As for :meth:`pack`.

        Returns
        -------
        torch.Tensor
            float32, :attr:`length` coordinates.

        Raises
        ------
        InputError
            As :meth:`pack` (and :func:`flatten`: an array that is not floating point).
        """
        ints = integer_values(arrays, self.integer_names) if self.integer_size else None
        if theta.device.type != "cpu":
            trained = flatten(arrays, integers=self.integer_names).to(theta.device)
            return self.pack(
                (trained - theta) * rho,
                rho=rho,
                clip_range=clip_range,
                metrics=metrics,
                delta_scale=delta_scale,
                integers=ints,
                examples=examples,
            )
        from coded_fl.kernels import cpu as _cpu

        if not (math.isfinite(rho) and 0 < rho <= 1):
            raise InputError(f"rho must be in (0, 1], got {rho!r}")
        base = theta.detach().reshape(-1).to(torch.float32).numpy()
        if base.size != self.model_size:
            raise InputError(f"the model has {base.size} values, the layout {self.model_size}")
        out = np.empty(self.length, dtype=np.float32)
        rho32, inv32 = np.float32(rho), np.float32(1.0 / float(delta_scale))
        c32 = np.float32(clip_range)
        at = bad = beyond = wide = 0
        for name, arr in arrays.items():
            if name in self.integer_names:
                continue
            flat = _floating(name, arr)
            if flat.dtype not in (np.float32, np.float64) or not flat.flags.c_contiguous:
                flat = np.ascontiguousarray(flat, dtype=np.float32)  # exact: float16, '>f4'
            end = at + flat.size
            if end > self.model_size:
                raise InputError(f"update has more than {self.model_size} values")
            counts = _cpu.weighted_delta(
                flat, base[at:end], out[at:end], rho32, inv32, c32, _shrunk(clip_range)
            )
            bad, at = bad + int(counts[0]), end
            beyond, wide = beyond + int(counts[1]), wide + int(counts[2])
        if at != self.model_size:
            raise InputError(f"update has {at} values, the model {self.model_size}")
        if bad:
            raise InputError("the update holds NaN/Inf: lower the learning rate")
        out[self.model_size : self.integer_index] = self._extras(
            rho, clip_range, beyond, wide, metrics
        )
        out[self.integer_index :] = self._integer_part(ints, examples, clip_range)
        return torch.from_numpy(out)

    def _integer_part(
        self, integers: np.ndarray | None, examples: float | None, clip_range: float
    ) -> np.ndarray:
        """The digits of :math:`w_k x_{kj}` and of :math:`w_k`, times u (float32, exact)."""
        if not self.integer_size:
            return np.zeros(0, dtype=np.float32)
        if integers is None or examples is None:
            raise InputError("the model has integer arrays: pack needs integers and examples")
        values = np.asarray(integers).reshape(-1)
        if values.size != self.integer_size:
            raise InputError(
                f"update has {values.size} integer values, the model {self.integer_size}"
            )
        whole = values.dtype.kind in INTEGER_KINDS or (
            values.dtype == object
            and all(isinstance(v, (int, np.integer)) for v in values.tolist())
        )
        if not whole:
            raise InputError(f"integer values must be integers, got dtype {values.dtype}")
        w = _whole_weight(examples)
        if self.count_cap(clip_range) < INTEGER_BASE // 2:
            raise ConfigurationError(
                f"integer arrays travel as digits up to {INTEGER_BASE // 2}, above the "
                f"largest count clip_range={clip_range} carries at this scale "
                f"({self.count_cap(clip_range)}): raise clip_range or the quantization scale"
            )
        products = np.append(values.astype(object) * w, w)
        return (integer_digits(products).reshape(-1) * self.unit(clip_range)).astype(np.float32)

    def _extras(
        self,
        rho: float,
        clip_range: float,
        beyond: int,
        wide: int,
        metrics: Mapping[str, float] | None,
    ) -> list[float]:
        c, u = float(clip_range), self.unit(clip_range)
        count = min(beyond, self.count_cap(clip_range))
        # integers times a power of two u (u s whole): exact in float32 and after scaling
        extras = [rho * c, count * u, float(beyond > 0) * u, float(wide > 0) * u]
        given = metrics or {}
        for name in self.metric_keys:
            value = float(given.get(name, 0.0))
            if not math.isfinite(value):
                raise InputError(f"metric '{name}' is {value}: a metric must be a finite number")
            value = max(-METRIC_BOUND, min(METRIC_BOUND, value))
            extras.append(rho * value * c / METRIC_BOUND)
        return extras

    def unpack(
        self,
        total: torch.Tensor,
        *,
        clip_range: float,
        erased: Sequence[int] = (),
        delta_scale: float = 1.0,
        num_partitions: int = 1,
    ) -> DecodedUpdate:
        """Read a decoded, dequantized sum of packed vectors.

        Parameters
        ----------
        total
            The sum over every partition of :meth:`pack`'s vectors (float).
        clip_range
            The c the vectors were packed with.
        erased
            Coordinates that could not be decoded (replicas that disagreed): a model coordinate
            gets no update (0 in ``total``), an erased metric is left out, an erased clip count
            reads as None (unknown); the weight cannot be erased (it is exact in every replica,
            so an erased weight means a broken silo).
        delta_scale
            The g the vectors were packed with (the model coordinates are multiplied by it).
        num_partitions
            K, the partitions summed (for :attr:`DecodedUpdate.clipped_fraction`).

        Returns
        -------
        DecodedUpdate

        Raises
        ------
        InputError
            If ``total`` does not have :attr:`length` coordinates.
        DecodingError
            If the decoded total weight is not positive (no partition reported examples).
        """
        if total.numel() != self.length:
            raise InputError(f"decoded vector has {total.numel()} values, expected {self.length}")
        d, c = self.model_size, float(clip_range)
        gone = {int(i) for i in erased if int(i) >= d}
        if d in gone:
            raise DecodingError(
                "the total weight could not be decoded (replicas disagree on a partition's "
                "num-examples, which every replica computes exactly: a broken silo)"
            )
        total_rho = float(total[d]) / c
        if not total_rho > 0:
            raise DecodingError(
                f"decoded total weight is {total_rho:g} (no partition reported examples)"
            )
        first = d + EXTRAS
        metrics = {
            name: float(total[first + j]) * METRIC_BOUND / c / total_rho
            for j, name in enumerate(self.metric_keys)
            if first + j not in gone
        }
        u = self.unit(c)
        entries, clipped, wide = (
            None if i in gone else round(float(total[i]) / u)  # exact: u a power of two
            for i in (self.count_index, *self.flag_indices)
        )
        integer_mean, integer_erased, examples = self._unpack_integers(total, u, gone)
        return DecodedUpdate(
            mean_delta=(total[:d] / total_rho) * float(delta_scale),  # g: a power of two
            total_rho=total_rho,
            clipped_entries=entries,
            clipped_partitions=clipped,
            wide_partitions=wide,
            clipped_fraction=(entries or 0) / (d * max(1, num_partitions)),
            metrics=metrics,
            integer_mean=integer_mean,
            integer_erased=integer_erased,
            total_examples=examples,
        )

    def _unpack_integers(
        self, total: torch.Tensor, u: float, gone: set[int]
    ) -> tuple[np.ndarray, np.ndarray, int | None]:
        """The integer means (NaN where erased), the erased mask and the exact total weight."""
        e, R, first = self.integer_size, INTEGER_DIGITS, self.integer_index
        if not e:
            return np.zeros(0), np.zeros(0, dtype=bool), None
        sums = total[first:].double().cpu().numpy().reshape(e + 1, R) / u
        digits = np.rint(sums).astype(np.int64)  # sums of K digits of at most B/2: exact
        erased = np.zeros(e + 1, dtype=bool)
        for i in gone:
            if i >= first:
                erased[(i - first) // R] = True
        if erased[e]:
            raise DecodingError(
                "the exact total weight could not be decoded (replicas disagree on a "
                "partition's num-examples, which every replica computes exactly: a broken silo)"
            )
        values = integers_from_digits(digits)
        weight = int(values[e])
        if weight < 1:
            raise DecodingError(f"decoded total num-examples is {weight} (no partition counted)")
        mean = np.array([v / weight for v in values[:e]], dtype=np.float64)  # correctly rounded
        mean[erased[:e]] = np.nan
        return mean, erased[:e], weight


def _shrunk(clip_range: float) -> np.float32:
    """The float32 bound of the shrink test: :math:`c / 4` (a power of two: exact)."""
    return np.float32(np.float32(clip_range) / np.float32(CLIP_WIDENING))


# ----------------------------------------------------------------------------- named arrays
ArrayLayout = tuple[tuple[str, tuple[int, ...], str], ...]


def _numpy(array: Any) -> np.ndarray:
    """The array's values without a copy where that is possible.

    A Flower ``Array`` holds ``np.save`` bytes; its ``numpy()`` copies them out through a file
    object. For a C-ordered numeric array the values are read in place instead
    (``np.frombuffer`` past the header: read-only, no copy); anything else takes ``numpy()``.
    """
    if isinstance(array, np.ndarray):
        return array
    data = getattr(array, "data", None)
    if getattr(array, "stype", None) == "numpy.ndarray" and isinstance(data, bytes):
        view = _npy_view(data)
        if view is not None:
            return view
    return array.numpy()


def _floating(name: str, array: Any) -> np.ndarray:
    """The array's values, flat (a view where possible); refused unless floating point."""
    a = _numpy(array)
    if not np.issubdtype(a.dtype, np.floating):
        raise InputError(
            f"array '{name}' has dtype {a.dtype} where the run's model has a floating point "
            "array: a train function must return each array with the kind of dtype (integer "
            "or floating point) it has in the model the run started with"
        )
    return a.reshape(-1)


def integer_names(arrays: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the integer arrays (dtype kind ``i``, ``u`` or ``b``), in key order.

    Read from the arrays' metadata. Integer arrays are averaged exactly (module docstring);
    arrays of any other kind than these and floating point are refused.

    >>> integer_names({"w": np.zeros(2, np.float32), "bn.num_batches_tracked": np.int64(3)})
    ('bn.num_batches_tracked',)

    Parameters
    ----------
    arrays
        Named arrays (Flower ``ArrayRecord`` or NumPy arrays).

    Returns
    -------
    tuple[str, ...]

    Raises
    ------
    InputError
        If an array is neither integer nor floating point (complex, string, object).
    """
    out = []
    for name, arr in arrays.items():
        kind = np.dtype(arr.dtype).kind
        if kind in INTEGER_KINDS:
            out.append(name)
        elif kind != "f":
            raise InputError(
                f"array '{name}' has dtype {arr.dtype}: coded-fl averages floating point and "
                "integer arrays only"
            )
    return tuple(out)


def element_count(arrays: Mapping[str, Any], names: Sequence[str]) -> int:
    """The number of elements of the arrays ``names`` (read from their shapes): the e of
    :attr:`UpdateLayout.integer_size`.

    >>> element_count({"a": np.zeros((2, 3)), "b": np.int64(1)}, ["a", "b"])
    7

    Parameters
    ----------
    arrays
        Named arrays (Flower ``ArrayRecord`` or NumPy arrays).
    names
        The arrays to count.

    Returns
    -------
    int
    """
    return sum(math.prod(tuple(arrays[name].shape)) for name in names)


def integer_values(arrays: Mapping[str, Any], names: Sequence[str]) -> np.ndarray:
    """The elements of the integer arrays ``names``, flat, in that order.

    Parameters
    ----------
    arrays
        Named arrays holding every name of ``names``.
    names
        The integer arrays (:attr:`UpdateLayout.integer_names`).

    Returns
    -------
    numpy.ndarray
        int64, or object (Python ints) where a uint64 value exceeds int64.

    Raises
    ------
    InputError
        If an array is missing or its dtype is not an integer (or bool) dtype.
    """
    parts = []
    for name in names:
        if name not in arrays:
            raise InputError(f"integer array '{name}' is missing from the update")
        a = _numpy(arrays[name])
        if a.dtype.kind not in INTEGER_KINDS:
            raise InputError(
                f"array '{name}' has dtype {a.dtype} where the run's model has an integer "
                "array: a train function must return it with an integer dtype (as "
                "torch's state_dict() does for BatchNorm's num_batches_tracked)"
            )
        parts.append(a.reshape(-1))
    if any(p.dtype == np.uint64 for p in parts):
        return np.concatenate([p.astype(object) for p in parts])
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def _whole_weight(examples: float) -> int:
    """:math:`w_k` as a Python int: a whole number in [1, :data:`MAX_INTEGER_WEIGHT`)."""
    w = float(examples)
    if not (math.isfinite(w) and w.is_integer() and 1 <= w < MAX_INTEGER_WEIGHT):
        raise InputError(
            f"the model has integer arrays, which are averaged exactly: num-examples must be "
            f"a whole number in [1, 2^38), got {examples!r}"
        )
    return int(w)


def integer_digits(values: np.ndarray) -> np.ndarray:
    """Balanced base-:data:`INTEGER_BASE` digits, least significant first.

    >>> integer_digits(np.array([300, -1, 2**64], dtype=object))[:, :3].tolist()
    [[44, 1, 0], [-1, 0, 0], [0, 0, 0]]

    Parameters
    ----------
    values
        Integers (any integer dtype, or object holding Python ints) with
        :math:`|v| \\le (B^R - 1) / 2`.

    Returns
    -------
    numpy.ndarray
        int64, shape ``(values.size, INTEGER_DIGITS)``, each digit in [-B/2, B/2), with
        :math:`v = \\sum_r d_r B^r`.

    Raises
    ------
    InputError
        If a value needs more than :data:`INTEGER_DIGITS` digits.
    """
    v = np.asarray(values).reshape(-1).astype(object)
    half, base = INTEGER_BASE // 2, INTEGER_BASE
    out = np.empty((v.size, INTEGER_DIGITS), dtype=np.int64)
    for r in range(INTEGER_DIGITS):
        d = (v + half) % base - half  # Python ints: % is floored, d in [-B/2, B/2)
        out[:, r] = d.astype(np.int64)
        v = (v - d) // base
    if v.size and np.any(v != 0):
        raise InputError(
            f"an integer value times num-examples needs more than {INTEGER_DIGITS} base-"
            f"{INTEGER_BASE} digits"
        )
    return out


def integers_from_digits(digits: np.ndarray) -> np.ndarray:
    """Python ints :math:`\\sum_r d_r B^r` of rows of digits (any integers, e.g. sums of
    digits over partitions): the inverse of :func:`integer_digits`.

    >>> integers_from_digits(integer_digits(np.array([300, -1], dtype=object))).tolist()
    [300, -1]

    Parameters
    ----------
    digits
        Shape ``(rows, R)``, least significant first.

    Returns
    -------
    numpy.ndarray
        object, one Python int per row.
    """
    rows = np.asarray(digits).astype(object)
    out = np.zeros(rows.shape[0], dtype=object)
    for r in reversed(range(rows.shape[1])):
        out = out * INTEGER_BASE + rows[:, r]
    return out


def _npy_view(data: bytes) -> np.ndarray | None:
    """A read-only view of ``np.save`` bytes (None unless C-ordered, numeric and complete)."""
    try:
        shape, fortran, dtype, offset = read_npy_header(data)
    except ValueError:
        return None
    if fortran or dtype.hasobject or dtype.kind not in "fiu":
        return None
    count = math.prod(shape)
    if len(data) != offset + count * dtype.itemsize:
        return None
    return np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)


def flatten(arrays: Mapping[str, Any], *, integers: Sequence[str] = ()) -> torch.Tensor:
    """All floating point arrays of a record, in key order, as one float32 vector.

    Parameters
    ----------
    arrays
        Named arrays: NumPy arrays, or objects with a ``numpy()`` method (Flower ``Array``).
    integers
        The names of the model's integer arrays (:func:`integer_names` of the run's initial
        model): left out, whatever their dtype here (Flower's FedAvg turns them into float64).

    Returns
    -------
    torch.Tensor
        float32, the arrays' elements one after the other.

    Raises
    ------
    InputError
        If an array not named in ``integers`` is not floating point, or there is none.
    """
    parts = [_floating(name, arr) for name, arr in arrays.items() if name not in integers]
    if not parts:
        raise InputError("the ArrayRecord is empty: nothing to aggregate")
    return torch.from_numpy(np.concatenate(parts, dtype=np.float32))  # one copy, writable


def npy_header(data: bytes) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """(shape, dtype) of an array serialised with ``np.save``, read from its header only.

    Flower's legacy ``Parameters`` carry such bytes without metadata; reading the header lets
    an adapter label them (name, shape, dtype) without deserialising and serialising the data.

    >>> import io
    >>> buf = io.BytesIO(); np.save(buf, np.zeros((2, 3), np.float32))
    >>> npy_header(buf.getvalue())
    ((2, 3), dtype('float32'))

    Parameters
    ----------
    data
        The ``.npy`` bytes.

    Returns
    -------
    tuple[tuple[int, ...], numpy.dtype]

    Raises
    ------
    InputError
        If the bytes are not a ``.npy`` array (or hold a Fortran-ordered or object array).
    """
    try:
        shape, fortran, dtype, _ = read_npy_header(data)
    except ValueError as exc:
        raise InputError(f"not a NumPy .npy array: {exc}") from None
    if fortran or dtype.hasobject:
        raise InputError("a Fortran-ordered or object .npy array: send C-ordered numbers")
    return shape, dtype


def array_layout(arrays: Mapping[str, Any]) -> ArrayLayout:
    """(name, shape, dtype) of every array, in order: what must match between two records.

    Read from the arrays' metadata (``shape``, ``dtype``); nothing is deserialised.

    Parameters
    ----------
    arrays
        Named arrays (Flower ``ArrayRecord`` or a dict of NumPy arrays).

    Returns
    -------
    tuple[tuple[str, tuple[int, ...], str], ...]
    """
    return tuple((name, tuple(arr.shape), str(arr.dtype)) for name, arr in arrays.items())


def check_same_layout(
    got: Mapping[str, Any],
    expected: Mapping[str, Any],
    *,
    who: str,
    integers: Sequence[str] = (),
) -> None:
    """Refuse a record whose arrays differ from ``expected`` in name, shape or dtype.

    Parameters
    ----------
    got, expected
        Named arrays.
    who
        Who produced ``got`` (for the message).
    integers
        The model's integer arrays: their dtype in ``expected`` may be float64 (Flower's
        FedAvg averages an integer array to float64) while ``got`` has an integer dtype
        (checked by :func:`integer_values`); only their names and shapes must match.

    Raises
    ------
    InputError
        Naming ``who`` and both layouts.
    """

    def lay(arrays: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...], str]]:
        return [(n, s, "int" if n in integers else t) for n, s, t in array_layout(arrays)]

    if lay(got) != lay(expected):
        raise InputError(
            f"{who} returned arrays whose names/shapes/dtypes differ from the model it received: "
            f"{_describe(array_layout(got))} vs {_describe(array_layout(expected))}"
        )


def _describe(lay: Sequence[tuple[str, tuple[int, ...], str]]) -> str:
    shown = ", ".join(f"{n}{list(s)}" for n, s, _ in lay[:4])
    return f"[{shown}{', ...' if len(lay) > 4 else ''}]"
