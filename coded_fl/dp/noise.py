"""Distributed Skellam noise: who adds how much, and the keyed sampler (issue 33, item 1).

**Who adds it.** With the repetition code the server decodes the sum from one reply per silo
group, and every member of group q sends the same combination G_q of the group's partitions.
Each member adds the same noise N_q ~ Sk(mu_q, mu_q) per coordinate to G_q, drawn from a key
the group's members share and nobody else holds (:func:`skellam`). So replicas stay identical
(the vote of ``coded_fl.codes.vote`` is unchanged), and the decoded sum carries
sum_q N_q ~ Sk(g mu_q, g mu_q) whichever member of each group answered: stragglers remove no
noise.

**How much.** Up to T colluding silos sit in at most T groups and know those groups' noise
(they hold the key), so they can subtract it. :func:`group_mu` gives each group
mu_q = mu / (g - T), so that the groups without a colluder still carry mu, the parameter the
accounting needs (:mod:`coded_fl.dp.accounting`). The sum then carries g / (g - T) times the
central noise's variance: the price of tolerating T colluders (1.5 x at g = 3, T = 1; 1.11 x at
g = 10, T = 1). With g <= T no noise survives a coalition, and the setting is refused.

**The sampler.** Sk(mu, mu) is Poisson(mu) - Poisson(mu). The uniform bits come from AES-128 in
counter mode (randomgen's ``AESCounter``, a CSPRNG: AES-NI where the CPU has it, the same
stream in software elsewhere) keyed by HKDF-SHA256 of the group's key and the context (run,
round, group); numpy's Poisson sampler turns them into variates. Each block of
:data:`BLOCK` coordinates has its own AES key, so a block can be drawn on its own.

>>> a = skellam(bytes(32), b"run-1/round-3/group-0", mu=50.0, size=5)
>>> b = skellam(bytes(32), b"run-1/round-3/group-0", mu=50.0, size=5)
>>> bool((a == b).all()), a.dtype.name
(True, 'int64')
>>> round(group_mu(1000.0, groups=10, colluders=1), 3)
111.111
"""

from __future__ import annotations

import math
import struct

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from randomgen import AESCounter

from coded_fl.errors import ConfigurationError, InputError

__all__ = ["BLOCK", "group_mu", "skellam"]

#: Coordinates drawn under one AES key.
BLOCK = 1 << 16
_INFO = b"codedfl-dp-skellam-v1"


def group_mu(mu: float, *, groups: int, colluders: int) -> float:
    """Each group's Skellam parameter, so that the groups without a colluder carry ``mu``.

    Parameters
    ----------
    mu
        The parameter the accounting needs to survive a coalition.
    groups
        The number of silo groups g (each adds its own noise once to the sum).
    colluders
        T, the colluding silos tolerated (they may sit in T different groups).

    Returns
    -------
    float
        mu / (g - T).

    Raises
    ------
    ConfigurationError
        If g <= T (a coalition could remove every group's noise), naming the settings.
    """
    if not (math.isfinite(mu) and mu > 0):
        raise ConfigurationError(f"mu must be a positive finite number, got {mu!r}")
    if groups <= colluders:
        raise ConfigurationError(
            f"distributed DP needs more silo groups than colluding silos: {groups} group(s) "
            f"and privacy_threshold={colluders} (T colluders know their groups' noise); lower "
            "privacy_threshold or use more silos per num_stragglers"
        )
    return mu / (groups - colluders)


def _block_key(key: bytes, context: bytes, block: int) -> int:
    hkdf = HKDF(
        algorithm=hashes.SHA256(),
        length=16,
        salt=struct.pack("<Q", block) + context,
        info=_INFO,
    )
    return int.from_bytes(hkdf.derive(key), "little")


def skellam(key: bytes, context: bytes, *, mu: float, size: int, start: int = 0) -> np.ndarray:
    """Coordinates ``start .. start + size - 1`` of the Sk(mu, mu) noise of (key, context).

    Parameters
    ----------
    key
        The group's 32-byte secret.
    context
        What the noise is for (run, round, group): another context, independent noise.
    mu
        The Skellam parameter (variance 2 mu per coordinate).
    size
        How many coordinates.
    start
        The first coordinate (a multiple of :data:`BLOCK` draws a block on its own).

    Returns
    -------
    numpy.ndarray
        int64 noise, identical for the same arguments on every machine.

    Raises
    ------
    InputError
        If the key is not 32 bytes or a size is negative.
    ConfigurationError
        If ``mu`` is not positive and finite.
    """
    if not isinstance(key, bytes) or len(key) != 32:
        raise InputError("the noise key is 32 bytes")
    if size < 0 or start < 0:
        raise InputError("size and start must be >= 0")
    if not (math.isfinite(mu) and mu > 0):
        raise ConfigurationError(f"mu must be a positive finite number, got {mu!r}")
    out = np.empty(size, dtype=np.int64)
    pos = 0
    while pos < size:
        block, offset = divmod(start + pos, BLOCK)
        take = min(BLOCK - offset, size - pos)
        gen = np.random.Generator(AESCounter(key=_block_key(key, context, block)))
        # pairs in stream order: a shorter draw is a prefix of a longer one
        pairs = gen.poisson(mu, size=2 * (offset + take))[2 * offset :]
        out[pos : pos + take] = pairs[0::2] - pairs[1::2]
        pos += take
    return out
