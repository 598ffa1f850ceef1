"""The update vector: what one partition contributes to a round, and how the sum is read back.

Partition k's vector, of :attr:`UpdateLayout.length` = d + 4 + len(metric_keys) coordinates::

    rho_k (theta_k - theta) | rho_k c | n_k u   | b_k u    | h_k u  | rho_k c m_kj / METRIC_BOUND
    (d model coordinates)     weight    clipped   beyond c   beyond   one per metric
                                        entries              c / 4

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
    "MAX_COUNT",
    "METRIC_BOUND",
    "DecodedUpdate",
    "UpdateLayout",
    "array_layout",
    "check_same_layout",
    "count_unit",
    "flatten",
    "npy_header",
]

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
    """

    mean_delta: torch.Tensor
    total_rho: float
    clipped_entries: int | None = 0
    clipped_partitions: int | None = 0
    wide_partitions: int | None = 0
    clipped_fraction: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)


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
    """

    model_size: int
    metric_keys: tuple[str, ...] = ()
    scale: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model_size, int) or self.model_size < 1:
            raise ConfigurationError(f"model_size must be an int >= 1, got {self.model_size!r}")
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
    def length(self) -> int:
        """Coordinates of the whole vector (the protocol's ``vector_length``)."""
        return self.model_size + EXTRAS + len(self.metric_keys)

    def unit(self, clip_range: float) -> float:
        """u: the clip coordinates carry the integer m as :math:`m u`: :func:`count_unit` of
        :attr:`scale`, or (``scale=None``) the power of two :math:`2^{-24}` times the largest
        power of two not above c."""
        if self.scale is not None:
            return count_unit(self.scale)
        _, exponent = math.frexp(float(clip_range))
        return math.ldexp(1.0, exponent - 25)

    def count_cap(self, clip_range: float) -> int:
        """The largest count one partition's clip coordinate carries: :math:`\\lfloor c / u
        \\rfloor` (it must not be clipped itself), at most :data:`MAX_COUNT`.

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
        return (
            f"{self.model_size} model values +1 weight, +3 clip counts, "
            f"+{len(self.metric_keys)} metrics = {self.length}"
        )

    def pack(
        self,
        weighted_delta: torch.Tensor,
        *,
        rho: float,
        clip_range: float,
        metrics: Mapping[str, float] | None = None,
        delta_scale: float = 1.0,
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

        Returns
        -------
        torch.Tensor
            float32, :attr:`length` coordinates.

        Raises
        ------
        InputError
            If ``weighted_delta`` has the wrong size or holds NaN/Inf, ``rho`` is not in
            (0, 1], or a metric is NaN/Inf (it would otherwise pass as +-METRIC_BOUND).
        ConfigurationError
            If the clip counts do not fit (:meth:`count_cap`).
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
        return torch.cat([flat, torch.tensor(extras, dtype=torch.float32)])

    def pack_arrays(
        self,
        arrays: Mapping[str, Any],
        theta: torch.Tensor,
        *,
        rho: float,
        clip_range: float,
        metrics: Mapping[str, float] | None = None,
        delta_scale: float = 1.0,
    ) -> torch.Tensor:
        """Partition k's vector straight from its trained arrays: :meth:`pack` of
        ``rho * (flatten(arrays) - theta)``, bit for bit, in one pass over the arrays.

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
        rho, clip_range, metrics, delta_scale
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
        if theta.device.type != "cpu":
            delta = (flatten(arrays).to(theta.device) - theta) * rho
            return self.pack(
                delta, rho=rho, clip_range=clip_range, metrics=metrics, delta_scale=delta_scale
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
        out[self.model_size :] = self._extras(rho, clip_range, beyond, wide, metrics)
        return torch.from_numpy(out)

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
        return DecodedUpdate(
            mean_delta=(total[:d] / total_rho) * float(delta_scale),  # g: a power of two
            total_rho=total_rho,
            clipped_entries=entries,
            clipped_partitions=clipped,
            wide_partitions=wide,
            clipped_fraction=(entries or 0) / (d * max(1, num_partitions)),
            metrics=metrics,
        )


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
            f"array '{name}' has dtype {a.dtype}: coded-fl aggregates floating point "
            "arrays only (keep integer buffers such as BatchNorm counters out of the record)"
        )
    return a.reshape(-1)


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


def flatten(arrays: Mapping[str, Any]) -> torch.Tensor:
    """All arrays of a record, in key order, as one float32 vector.

    Parameters
    ----------
    arrays
        Named arrays: NumPy arrays, or objects with a ``numpy()`` method (Flower ``Array``).

    Returns
    -------
    torch.Tensor
        float32, the arrays' elements one after the other.

    Raises
    ------
    InputError
        If an array is not floating point or there is none.
    """
    parts = [_floating(name, arr) for name, arr in arrays.items()]
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


def check_same_layout(got: Mapping[str, Any], expected: Mapping[str, Any], *, who: str) -> None:
    """Refuse a record whose arrays differ from ``expected`` in name, shape or dtype.

    Parameters
    ----------
    got, expected
        Named arrays.
    who
        Who produced ``got`` (for the message).

    Raises
    ------
    InputError
        Naming ``who`` and both layouts.
    """
    if array_layout(got) != array_layout(expected):
        raise InputError(
            f"{who} returned arrays whose names/shapes/dtypes differ from the model it received: "
            f"{_describe(array_layout(got))} vs {_describe(array_layout(expected))}"
        )


def _describe(lay: Sequence[tuple[str, tuple[int, ...], str]]) -> str:
    shown = ", ".join(f"{n}{list(s)}" for n, s, _ in lay[:4])
    return f"[{shown}{', ...' if len(lay) > 4 else ''}]"
