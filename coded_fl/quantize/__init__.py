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

The parts: :mod:`coded_fl.quantize.keys` (the rounding keys), :mod:`coded_fl.quantize.config`
(the configuration and the checks of its settings) and :mod:`coded_fl.quantize.inputs` (the
inputs' checks and counts); the quantizer itself is here.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from coded_fl.errors import ConfigurationError, DecodingError, InputError
from coded_fl.field import PrimeField
from coded_fl.kernels import cpu as _cpu
from coded_fl.kernels import torch_impl as _tk
from coded_fl.quantize.config import QuantizationConfig, check_clip_range, check_positive_real
from coded_fl.quantize.inputs import QuantizationStats, account, count_values, prepare
from coded_fl.quantize.keys import MAX_ELEMENTS as MAX_ELEMENTS  # importable from here
from coded_fl.quantize.keys import RoundingKey
from coded_fl.quantize.keys import as_numpy_keys as as_numpy_keys  # importable from here

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
