"""Cryptographically secure expansion of a 32-byte seed into field elements.

The keystream of AES-256-CTR (key = the seed, a zero nonce: every seed is fresh and used once)
is read as little-endian 32-bit words; each word keeps its low ``bits = p.bit_length()`` bits and
is accepted only if it is below p (rejection sampling). Every accepted element is therefore
exactly uniform on GF(p), with no modulo bias, and the output is a deterministic function of the
seed. For :math:`p = 2^{31}-1` a word is rejected with probability :math:`2^{-31}`.

The keystream is made on the CPU (AES-NI, about 2x a memcpy) and copied to the target device.

>>> seed = bytes(range(32))
>>> a = expand_field_elements(seed, 5, 2**31 - 1)
>>> b = expand_field_elements(seed, 5, 2**31 - 1)
>>> bool((a == b).all()), a.dtype
(True, torch.uint32)
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import torch
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from coded_fl.errors import InputError
from coded_fl.kernels import cpu as _cpu
from coded_fl.primes import check_modulus

__all__ = ["SEED_BYTES", "Entropy", "MaskStream", "expand_field_elements", "fresh_seed"]

SEED_BYTES = 32
_NONCE = bytes(16)

#: A source of secret random bytes: ``entropy(n) -> n bytes``. Default ``os.urandom``.
Entropy = Callable[[int], bytes]


def fresh_seed(entropy: Entropy = os.urandom) -> bytes:
    """A new 32-byte secret seed from ``entropy`` (the OS CSPRNG unless a test passes its own).

    Parameters
    ----------
    entropy
        Called with 32, returns 32 random bytes.

    Returns
    -------
    bytes
        The seed (never log it).

    Raises
    ------
    InputError
        If ``entropy`` does not return exactly 32 bytes.
    """
    seed = entropy(SEED_BYTES)
    if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
        raise InputError("the entropy source must return exactly 32 bytes")
    return seed


_CHUNK_BYTES = 1 << 20
_ZERO_VIEW = memoryview(bytes(_CHUNK_BYTES))  # shared, read-only: AES-CTR of zeros = keystream


class MaskStream:
    """Field elements from a seed, handed out in order, chunk by chunk.

    ``MaskStream(seed, p).fill(buf)`` writes the next ``len(buf)`` elements; successive calls
    continue the same sequence, so a mask can be generated one cache-sized chunk at a time
    (never materialised whole) and still equal :func:`expand_field_elements` of the same seed.

    Parameters
    ----------
    seed
        32 secret bytes (the AES-256 key).
    p
        The field modulus.

    Raises
    ------
    InputError
        If ``seed`` is not 32 bytes.
    ConfigurationError
        If ``p`` is not a usable modulus.
    """

    def __init__(self, seed: bytes, p: int) -> None:
        if not isinstance(seed, (bytes, bytearray)) or len(seed) != SEED_BYTES:
            raise InputError(f"seed must be {SEED_BYTES} bytes")
        self.p = check_modulus(p)
        self._bits_mask = (1 << p.bit_length()) - 1
        self._encryptor = Cipher(algorithms.AES(bytes(seed)), modes.CTR(_NONCE)).encryptor()
        self._pending = np.empty(0, dtype=np.uint32)

    def __repr__(self) -> str:  # never show the seed
        return f"MaskStream(p={self.p})"

    def _words(self, buf: np.ndarray) -> int:
        """Keystream words masked to the field's bit length; returns how many are >= p."""
        view = buf.data.cast("B")
        rejected = 0
        for start in range(0, len(view), _CHUNK_BYTES):
            part = view[start : start + _CHUNK_BYTES]
            self._encryptor.update_into(_ZERO_VIEW[: len(part)], part)
            words = buf[start // 4 : (start + len(part)) // 4]
            rejected += _cpu.mask_words(words, self._bits_mask, self.p)
        return rejected

    def fill(self, out: np.ndarray) -> np.ndarray:
        """Write the next ``out.size`` elements into the ``uint32`` array ``out`` and return it.

        The sequence is the accepted keystream words in order; accepted words not needed yet
        are kept for the next call, so chunk boundaries never change the result.

        Parameters
        ----------
        out
            A uint32 array to fill.
        """
        count = out.size
        filled = min(count, self._pending.size)
        out[:filled] = self._pending[:filled]
        self._pending = self._pending[filled:]
        if filled < count:
            # Keystream straight into the output, accepted words compacted in place (writes
            # never overtake reads); rejections are rare for p = 2^31 - 1.
            rest = out[filled:]
            rejected = self._words(rest)
            filled += (
                rest.size
                if rejected == 0
                else _cpu.accept_below(rest, self._bits_mask, self.p, rest, 0)
            )
        while filled < count:
            extra = np.empty(max(2 * (count - filled), 1024), dtype=np.uint32)
            self._words(extra)
            accepted = _cpu.accept_below(extra, self._bits_mask, self.p, extra, 0)
            take = min(accepted, count - filled)
            out[filled : filled + take] = extra[:take]
            filled += take
            self._pending = extra[take:accepted].copy()
        return out


def expand_field_elements(
    seed: bytes,
    count: int,
    p: int,
    *,
    device: torch.device | str = "cpu",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``count`` uniform elements of GF(p) from ``seed`` (AES-256-CTR, rejection sampled).

    Parameters
    ----------
    seed
        32 secret bytes.
    count
        How many elements.
    p
        The field modulus.
    device
        Where the result goes.
    out
        A CPU ``uint32`` tensor of ``count`` elements to fill instead of a new tensor.

    Returns
    -------
    torch.Tensor
        ``uint32``, exactly uniform over GF(p).

    Raises
    ------
    InputError
        A negative ``count``, a bad ``seed`` or an ``out`` of the wrong dtype, size or device.
    """
    if count < 0:
        raise InputError(f"count must be >= 0, got {count}")
    stream = MaskStream(seed, p)
    if out is None:
        out = torch.empty(count, dtype=torch.uint32)
    elif (
        out.dtype != torch.uint32
        or out.numel() != count
        or out.device.type != "cpu"
        or not out.is_contiguous()
    ):
        raise InputError(f"out must be a contiguous CPU uint32 tensor of {count} elements")
    stream.fill(out.reshape(-1).numpy())
    return out if torch.device(device).type == "cpu" else out.to(device)
