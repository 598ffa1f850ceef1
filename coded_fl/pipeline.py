"""The client's upload step, fused: quantize k partial updates, encode, add the mask.

.. math::

    y = z + \\sum_{k} b_k\\, q(g_k) \\pmod p

where :math:`q` is :func:`coded_fl.quantize.quantize` with partition k's rounding key, :math:`b_k`
the silo's row of the gradient-code matrix and :math:`z` its mask. On the CPU this is one numba
kernel that reads every input once and writes the ``uint32`` upload once; elsewhere (CUDA) it is a
sequence of torch operations with the same result bit for bit.

>>> F = PrimeField()
>>> cfg = QuantizationConfig(clip_range=1.0, scale=1024.0, num_summands=2)
>>> g = [torch.tensor([0.5, -0.25]), torch.tensor([0.125, 1.0])]
>>> keys = [RoundingKey(1, 2), RoundingKey(3, 4)]
>>> y = encode_upload(g, [1, 1], keys, cfg, F)
>>> F.to_signed(y).tolist()  # exact multiples of 1/1024 round to themselves
[640, 768]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.field import Coefficients, PrimeField, as_numpy_u32, typed_list
from coded_fl.kernels import cpu as _cpu
from coded_fl.kernels import torch_impl as _tk
from coded_fl.prg import SEED_BYTES, MaskStream, expand_field_elements
from coded_fl.quantize import (
    QuantizationConfig,
    QuantizationStats,
    RoundingKey,
    account,
    as_numpy_keys,
    count_values,
    prepare,
)

__all__ = ["encode_upload"]

_EMPTY_MASK = np.empty(0, dtype=np.uint32)
#: Mask elements generated per step when streaming from a seed: 1 MiB, stays in L2.
_MASK_CHUNK = 1 << 18


def encode_upload(
    partials: Sequence[torch.Tensor],
    coeffs: Coefficients,
    keys: Sequence[RoundingKey],
    config: QuantizationConfig,
    field: PrimeField,
    *,
    mask: torch.Tensor | None = None,
    mask_seed: bytes | None = None,
    mask_streams: Sequence[tuple[bytes, int]] | None = None,
    out: torch.Tensor | None = None,
    stats: QuantizationStats | None = None,
) -> torch.Tensor:
    """One silo's coded, masked upload from its k partial updates (float tensors of one shape).

    Parameters
    ----------
    partials
        The partial updates :math:`g_k`, one per partition the silo holds.
    coeffs
        The silo's encoding coefficients :math:`b_k` (field elements).
    keys
        The rounding key of each partition (replicas of a partition must use the same key).
    config, field
        Quantization settings and the field (same p).
    mask
        The silo's mask :math:`z` (``uint32``, same number of elements), or None.
    mask_seed
        Instead of ``mask``: the mask's 32-byte seed. The mask is then generated chunk by chunk
        inside the upload step (:class:`coded_fl.prg.MaskStream`) and never held whole; the
        result equals passing ``mask=expand_field_elements(mask_seed, d, p)``.
    mask_streams
        Instead of ``mask``: a mask that is a combination :math:`\\sum_e c_e\\, PRG(s_e)` of
        seeded streams, as ``(seed, coefficient)`` pairs (e.g. a group mask's signed edge
        streams). The streams are generated and combined one cache-sized chunk at a time inside
        the upload step, and the result equals passing
        ``mask=field.lincomb(cs, [expand_field_elements(s, d, p) for s in seeds])``.
        ``mask_seed=s`` is ``mask_streams=[(s, 1)]``; an empty sequence is no mask.
    out
        A ``uint32`` tensor of the update's shape to write into (reused across rounds it saves
        the page faults of a fresh buffer); a new one by default.
    stats
        Accumulates clipping counts; NaN/Inf raise :class:`InputError` unless
        ``config.nonfinite == 'clip'``.
    """
    if field.p != config.p:
        raise ConfigurationError(f"field p={field.p} differs from the quantization p={config.p}")
    k = len(partials)
    if k == 0:
        raise InputError("need at least one partial update")
    c = field.coefficients(coeffs).reshape(-1)
    if c.size != k or len(keys) != k:
        raise InputError(
            f"{k} partial updates need {k} coefficients and {k} rounding keys, "
            f"got {c.size} and {len(keys)}"
        )
    if k * (field.p - 1) * config.max_abs + field.p >= 2**62:
        raise ConfigurationError(
            f"{k} partitions per silo with max|q|={config.max_abs} could overflow the 64-bit "
            "accumulator; lower scale or clip_range (QuantizationConfig.for_summands picks one)"
        )
    xs = [prepare(g, config, f"partial update {i}") for i, g in enumerate(partials)]
    shape, device = xs[0].shape, xs[0].device
    for i, x in enumerate(xs):
        if x.shape != shape or x.device != device:
            raise InputError(
                f"partial update {i} has shape {tuple(x.shape)} on {x.device}, "
                f"expected {tuple(shape)} on {device}"
            )
    if sum(m is not None for m in (mask, mask_seed, mask_streams)) > 1:
        raise InputError("pass one of mask, mask_seed and mask_streams")
    if mask_seed is not None:
        mask_streams = [(mask_seed, 1)]
    streams = _streams(mask_streams, field)
    if mask is not None:
        field._check(mask, "mask")
        if mask.numel() != xs[0].numel():
            raise InputError(f"mask has {mask.numel()} elements, the update {xs[0].numel()}")
    if out is None:
        out = torch.empty(shape, dtype=torch.uint32, device=device)
    elif (
        out.dtype != torch.uint32
        or out.shape != shape
        or out.device != device
        or not out.is_contiguous()
    ):
        raise InputError(
            f"out must be a contiguous uint32 tensor of shape {tuple(shape)} on {device}"
        )

    if device.type != "cpu":
        totals = [count_values(x, config) for x in xs]
        account(
            (sum(t[0] for t in totals), sum(t[1] for t in totals)), k * xs[0].numel(), config, stats
        )
        if streams:
            made = [expand_field_elements(s_e, xs[0].numel(), field.p) for s_e, _ in streams]
            mask = field.lincomb([c_e for _, c_e in streams], made, validate=False)
        m = None if mask is None else mask.to(device).reshape(shape)
        out.copy_(
            _tk.quantize_encode(
                xs,
                [int(v) for v in c],
                [(kk.k0, kk.k1) for kk in keys],
                m,
                float(config.clip_range),
                float(config.scale),
                field.p,
            )
        )
        return out

    if len({x.dtype for x in xs}) != 1:
        xs = [x.to(torch.float64) for x in xs]  # exact for float32: same rounding
    arrays = typed_list([x.reshape(-1).numpy() for x in xs])
    key_array = as_numpy_keys(list(keys))
    flat = as_numpy_u32(out)
    clip, scale, d = float(config.clip_range), float(config.scale), flat.size
    if not streams:
        mask_array = _EMPTY_MASK if mask is None else as_numpy_u32(mask)
        counts = _cpu.quantize_encode(
            arrays, c, key_array, mask_array, flat, clip, scale, field.p, 0, d
        )
    else:
        # each chunk of every stream is made, combined and consumed while it is in cache: no
        # d-long stream or mask is ever written to memory
        gens = [MaskStream(s_e, field.p) for s_e, _ in streams]
        scratch = [np.empty(min(d, _MASK_CHUNK), dtype=np.uint32) for _ in gens]
        combined = np.empty(min(d, _MASK_CHUNK), dtype=np.uint32)
        weights = np.array([c_e for _, c_e in streams], dtype=np.int64)
        plain = len(gens) == 1 and streams[0][1] == 1
        counts = (0, 0)
        for lo in range(0, d, _MASK_CHUNK):
            hi = min(lo + _MASK_CHUNK, d)
            parts = [g.fill(buf[: hi - lo]) for g, buf in zip(gens, scratch, strict=True)]
            if plain:
                chunk = parts[0]
            else:
                chunk = combined[: hi - lo]
                _cpu.lincomb(weights, typed_list(parts), chunk, field.p)
            got = _cpu.quantize_encode(
                arrays, c, key_array, chunk, flat, clip, scale, field.p, lo, hi
            )
            counts = (counts[0] + got[0], counts[1] + got[1])
    account(counts, k * d, config, stats, "partial updates")
    return out


def _streams(
    mask_streams: Sequence[tuple[bytes, int]] | None, field: PrimeField
) -> list[tuple[bytes, int]]:
    """The (seed, canonical coefficient) pairs of a streamed mask, checked; zero terms dropped."""
    out = []
    for item in mask_streams or ():
        if not (isinstance(item, tuple) and len(item) == 2):
            raise InputError("mask_streams holds (seed, coefficient) pairs")
        seed, coeff = item
        if not isinstance(seed, (bytes, bytearray)) or len(seed) != SEED_BYTES:
            raise InputError(f"a mask stream's seed must be {SEED_BYTES} bytes")
        if not isinstance(coeff, (int, np.integer)) or isinstance(coeff, bool):
            raise InputError(f"a mask stream's coefficient must be an integer, got {coeff!r}")
        c_e = int(coeff) % field.p
        if c_e:
            out.append((bytes(seed), c_e))
    return out
