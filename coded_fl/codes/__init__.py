"""Gradient codes over GF(p): any n - s replies give the exact sum of all partitions.

Glossary: n silos, K partitions, s stragglers tolerated, p the prime, B the n x K code matrix,
S the survivors, a the decoding vector with :math:`a^T B_S = 1^T`.

- :class:`GradientCode`: the interface (placement, ``encode``, ``decoding_vector``,
  ``decode``, ``check_consistency``).
- :class:`PolynomialCode`: exact for every n and s (Reed-Solomon style, O(|S|^2) decoding
  coefficients).
- :class:`FractionalRepetitionCode`: any n > s, one public scale per silo, one reply per group
  to decode, never mixes replicas; as little storage as the polynomial code when (s+1) | n,
  more otherwise (:func:`spread_partitions`); :class:`PlainAggregation` is s = 0.
- :class:`ApproximateCode`: fewer copies, best estimate with an error bound.
- :class:`RealGradientCode`: the real-valued baseline (ill-conditioned; for comparison only).
- :func:`make_code`: picks one from (n, s) by name, from one registry (:func:`register_code`,
  :func:`code_names`; ``"auto"`` resolved by :func:`resolve_kind`, which asks
  :func:`prefer_repetition`).
"""

from coded_fl.codes.approximate import ApproximateCode, ApproximateEstimate
from coded_fl.codes.base import GradientCode
from coded_fl.codes.factory import (
    CodeKind,
    code_names,
    make_code,
    prefer_repetition,
    register_code,
    resolve_kind,
)
from coded_fl.codes.polynomial import PolynomialCode, cyclic_placement, lagrange_weights
from coded_fl.codes.real_baseline import RealGradientCode, decoding_error
from coded_fl.codes.repetition import (
    FractionalRepetitionCode,
    GroupCode,
    PlainAggregation,
    balanced_groups,
    spread_partitions,
)

__all__ = [
    "ApproximateCode",
    "ApproximateEstimate",
    "CodeKind",
    "FractionalRepetitionCode",
    "GradientCode",
    "GroupCode",
    "PlainAggregation",
    "PolynomialCode",
    "RealGradientCode",
    "balanced_groups",
    "code_names",
    "cyclic_placement",
    "decoding_error",
    "lagrange_weights",
    "make_code",
    "prefer_repetition",
    "register_code",
    "resolve_kind",
    "spread_partitions",
]
