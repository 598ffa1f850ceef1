"""Numba kernels for GF(p) arithmetic and fused quantization on the CPU.

Storage is ``uint32`` (elements in ``[0, p)``); every intermediate is ``uint64``/``int64`` and the
bounds that make it overflow-free are stated next to each kernel. ``p < 2^31`` is checked by
:func:`coded_fl.primes.check_modulus` before any kernel runs.

For the Mersenne prime :math:`p = 2^{31}-1` a product :math:`x < 2^{62}` is folded with
``(x & p) + (x >> 31)`` (no division); other primes use ``%``. Each kernel has both loops and picks
one once, outside the loop, so the hot loop stays branch-free and vectorises.

Loops over several input vectors are blocked (``_BLOCK`` elements) so that the accumulator stays
in L1 and each input is streamed once.

All kernels are single-threaded: one silo is one process, and determinism does not depend on a
thread count.

Modules
    :mod:`~coded_fl.kernels.reduction` (the Mersenne folds, the block size),
    :mod:`~coded_fl.kernels.elementwise`, :mod:`~coded_fl.kernels.combinations` (linear
    combinations, matrix products, group comparisons), :mod:`~coded_fl.kernels.rounding`
    (stochastic rounding and the fused quantize-encode), :mod:`~coded_fl.kernels.masks`
    (rejection sampling) and :mod:`~coded_fl.kernels.typed_lists`; this module re-exports them.
"""

from __future__ import annotations

from coded_fl.kernels.combinations import disagreements, lincomb, matmul
from coded_fl.kernels.elementwise import (
    add,
    from_signed,
    max_element,
    mul,
    mul_scalar,
    neg,
    power,
    sub,
    to_signed,
    weighted_delta,
)
from coded_fl.kernels.masks import accept_below, mask_words
from coded_fl.kernels.rounding import (
    quantize_encode,
    sanitize_nonfinite,
    scan_values,
    stochastic_round,
)
from coded_fl.kernels.typed_lists import list_append, list_of

__all__ = [
    "accept_below",
    "add",
    "disagreements",
    "from_signed",
    "lincomb",
    "list_append",
    "list_of",
    "mask_words",
    "matmul",
    "max_element",
    "mul",
    "mul_scalar",
    "neg",
    "power",
    "quantize_encode",
    "sanitize_nonfinite",
    "scan_values",
    "stochastic_round",
    "sub",
    "to_signed",
    "weighted_delta",
]
