"""Slow, obviously right reference implementations (pure Python) used as test oracles."""

from __future__ import annotations

import math

_M32 = 0xFFFFFFFF
_C1, _C2, _C3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D


def mum(x: int, c: int) -> int:
    prod = x * c
    return (prod & _M32) ^ (prod >> 32)


def uniform(index: int, k0: int, k1: int) -> float:
    """The documented rounding hash: mum(mum(mum(i ^ k0, C1) ^ k1, C2) ^ k0, C3) / 2^32."""
    h = mum(mum(mum((index & _M32) ^ k0, _C1) ^ k1, _C2) ^ k0, _C3)
    return h / 2**32


def stochastic_round(x: float, index: int, clip: float, scale: float, k0: int, k1: int) -> int:
    v = min(max(float(x), -clip), clip)
    t = v * scale
    f = math.floor(t)
    return f + (1 if uniform(index, k0, k1) < t - f else 0)
