"""The same kernels written with torch tensor operations, for CUDA (and any other torch device).

Elements are stored as ``uint32`` and computed on as ``int64``: products of two elements are
below 2^62, so ``(a * b) % p`` is exact. The stochastic-rounding hash works on values kept in
``[0, 2^32)``; a product of two may wrap past 2^63, but its two 32-bit halves, which are all we
keep, are those of the exact product, so the result is bit-identical to the CPU kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

_LOW32 = 0xFFFFFFFF
_C1 = 0x9E3779B1
_C2 = 0x85EBCA77
_C3 = 0xC2B2AE3D


def _i64(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.int64)


def _u32(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.uint32)


def add(a: torch.Tensor, b: torch.Tensor, p: int) -> torch.Tensor:
    """a + b mod p, elementwise, on the tensors' device.

    Parameters
    ----------
    a
        Field elements (uint32 tensor).
    b
        Field elements of a's shape.
    p
        The prime (< 2^31).
    """
    return _u32(torch.remainder(_i64(a) + _i64(b), p))


def sub(a: torch.Tensor, b: torch.Tensor, p: int) -> torch.Tensor:
    """a - b mod p, elementwise.

    Parameters
    ----------
    a
        Field elements (uint32 tensor).
    b
        Field elements of a's shape.
    p
        The prime (< 2^31).
    """
    return _u32(torch.remainder(_i64(a) - _i64(b), p))


def neg(a: torch.Tensor, p: int) -> torch.Tensor:
    """-a mod p, elementwise.

    Parameters
    ----------
    a
        Field elements (uint32 tensor).
    p
        The prime (< 2^31).
    """
    return _u32(torch.remainder(-_i64(a), p))


def mul(a: torch.Tensor, b: torch.Tensor | int, p: int) -> torch.Tensor:
    """a * b mod p, elementwise (b a tensor or one int).

    Parameters
    ----------
    a
        Field elements (uint32 tensor).
    b
        Field elements of a's shape, or one int.
    p
        The prime (< 2^31).
    """
    other = b if isinstance(b, int) else _i64(b)
    return _u32(torch.remainder(_i64(a) * other, p))


def power(a: torch.Tensor, e: int, p: int) -> torch.Tensor:
    """a ** e mod p, elementwise (square and multiply).

    Parameters
    ----------
    a
        Field elements (uint32 tensor).
    e
        The exponent (>= 0).
    p
        The prime (< 2^31).
    """
    base = _i64(a)
    result = torch.ones_like(base) % p
    while e > 0:
        if e & 1:
            result = torch.remainder(result * base, p)
        base = torch.remainder(base * base, p)
        e >>= 1
    return _u32(result)


def from_signed(x: torch.Tensor, p: int) -> torch.Tensor:
    """Signed integers to field elements (x mod p).

    Parameters
    ----------
    x
        Signed integers (int64 tensor).
    p
        The prime (< 2^31).
    """
    return _u32(torch.remainder(x.to(torch.int64), p))


def to_signed(a: torch.Tensor, p: int) -> torch.Tensor:
    """Field elements to signed integers in (-p/2, p/2].

    Parameters
    ----------
    a
        Field elements (uint32 tensor).
    p
        The prime (< 2^31).
    """
    v = _i64(a)
    return torch.where(v > p // 2, v - p, v)


def lincomb(coeffs: Sequence[int], xs: Sequence[torch.Tensor], p: int) -> torch.Tensor:
    """sum_j coeffs[j] * xs[j] mod p (the CPU kernel's result, bit for bit).

    Parameters
    ----------
    coeffs
        Canonical coefficients.
    xs
        uint32 tensors of one shape.
    p
        The prime (< 2^31).
    """
    acc = torch.zeros(xs[0].shape, dtype=torch.int64, device=xs[0].device)
    for c, x in zip(coeffs, xs, strict=True):
        acc = torch.remainder(acc + c * _i64(x), p)
    return _u32(acc)


def matmul(m: Sequence[Sequence[int]], xs: Sequence[torch.Tensor], p: int) -> torch.Tensor:
    """One :func:`lincomb` per row of m, stacked.

    Parameters
    ----------
    m
        (R, L) canonical coefficients.
    xs
        L uint32 tensors of one shape.
    p
        The prime (< 2^31).
    """
    return torch.stack([lincomb(row, xs, p) for row in m])


def _mum(x: torch.Tensor, c: int) -> torch.Tensor:
    prod = x * c  # may wrap past 2^63; both 32-bit halves below are still the exact ones
    return (prod & _LOW32) ^ ((prod >> 32) & _LOW32)


def uniform(n: int, k0: int, k1: int, offset: int, device: torch.device) -> torch.Tensor:
    """The CPU kernel's keyed uniforms for indices offset .. offset+n-1, as float64.

    Parameters
    ----------
    n
        How many.
    k0, k1
        The rounding key's words.
    offset
        The global index of the first.
    device
        The torch device.
    """
    index = torch.arange(offset, offset + n, dtype=torch.int64, device=device) & _LOW32
    h = _mum(_mum(_mum(index ^ k0, _C1) ^ k1, _C2) ^ k0, _C3)
    return h.to(torch.float64) * 2.0**-32


def stochastic_round(
    x: torch.Tensor, clip: float, scale: float, k0: int, k1: int, offset: int
) -> torch.Tensor:
    """Clip to [-clip, clip], scale and round stochastically with the counter-based
    keys (k0, k1) from element ``offset`` on: the CPU kernel's integers, bit for bit.

    Parameters
    ----------
    x
        The values.
    clip
        The clip range.
    scale
        The quantization scale.
    k0, k1
        The rounding key's words.
    offset
        The global index of x[0].
    """
    t = torch.clamp(x.to(torch.float64), -clip, clip) * scale
    f = torch.floor(t)
    u = uniform(x.numel(), k0, k1, offset, x.device).reshape(x.shape)
    return f.to(torch.int64) + (u < t - f).to(torch.int64)


def quantize_encode(
    xs: Sequence[torch.Tensor],
    coeffs: Sequence[int],
    keys: Sequence[tuple[int, int]],
    mask: torch.Tensor | None,
    clip: float,
    scale: float,
    p: int,
) -> torch.Tensor:
    """The fused client pipeline: quantize every partition and return the coded
    combination sum_j coeffs[j] q_j mod p (bit-identical to the CPU kernel).

    Parameters
    ----------
    xs
        The k partitions' float tensors.
    coeffs
        k canonical coefficients.
    keys
        (k, 2) rounding keys.
    mask
        The mask (uint32), or None.
    clip
        The clip range.
    scale
        The quantization scale.
    p
        The prime (< 2^31).
    """
    acc = (
        _i64(mask)
        if mask is not None
        else torch.zeros(xs[0].shape, dtype=torch.int64, device=xs[0].device)
    )
    for x, c, (k0, k1) in zip(xs, coeffs, keys, strict=True):
        acc = torch.remainder(acc + c * stochastic_round(x, clip, scale, k0, k1, 0), p)
    return _u32(acc)
