"""Primality and modulus validation.

>>> is_prime(2**31 - 1), is_prime(2**31 + 1), is_prime(1)
(True, False, False)
>>> check_modulus(2**31 - 1)
2147483647
"""

from __future__ import annotations

import functools

from coded_fl.errors import ConfigurationError

__all__ = ["MAX_MODULUS", "MERSENNE31", "check_modulus", "is_prime"]

#: The default modulus, the Mersenne prime :math:`2^{31} - 1`.
MERSENNE31 = 2**31 - 1

#: Moduli must be below this bound: elements fit in ``uint32`` and the product of two elements
#: (< 2^62) fits a signed 64-bit integer with room to add, which every kernel relies on.
MAX_MODULUS = 2**31

# Deterministic Miller-Rabin bases, exact for every n < 3.3e24 (Sorenson & Webster 2015).
_MR_BASES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)


@functools.lru_cache(maxsize=64)  # a run checks one modulus per mask stream: once is enough
def is_prime(n: int) -> bool:
    """Deterministic primality test for integers below :math:`3.3 \\cdot 10^{24}`.

    Parameters
    ----------
    n
        The integer to test.

    Returns
    -------
    bool
        True if ``n`` is prime (Miller-Rabin with bases that are exact in this range).
    """
    if n < 2:
        return False
    for q in _MR_BASES:
        if n % q == 0:
            return n == q
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in _MR_BASES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def check_modulus(p: object) -> int:
    """Return ``p`` as an ``int`` if it is a usable modulus, else raise :class:`ConfigurationError`.

    A usable modulus is a prime with :math:`2 < p < 2^{31}`.

    Parameters
    ----------
    p
        The candidate modulus.

    Returns
    -------
    int

    Raises
    ------
    ConfigurationError
        If ``p`` is not an int, too large, or not an odd prime; the message suggests one.
    """
    if isinstance(p, bool) or not isinstance(p, int):
        raise ConfigurationError(f"modulus p must be an int, got {type(p).__name__}")
    if p >= MAX_MODULUS:
        raise ConfigurationError(
            f"modulus p={p} is too large: elements must fit 31 bits so that products fit int64; "
            f"use a prime below 2**31, e.g. the default p=2**31-1={MERSENNE31}"
        )
    if p <= 2 or not is_prime(p):
        raise ConfigurationError(
            f"modulus p={p} is not an odd prime; GF(p) needs a prime modulus, "
            f"e.g. the default p=2**31-1={MERSENNE31} or 2**31-19"
        )
    return p
