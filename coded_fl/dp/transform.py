"""What a partition's update goes through before its noise: clipping, a random rotation, and
conditional randomized rounding to integers (issue 33, item 2).

- **Clipping** to L2 norm ``clip`` (model units): the sensitivity the accounting uses.
- **Rotation** (:func:`rotate`), keeping the length d: a randomized Hadamard transform
  H D1 / sqrt(b) on the first b coordinates, then H D2 / sqrt(b) on the last b, b the largest
  power of two <= d (the blocks overlap unless d is a power of two; D1, D2 random signs from a
  public seed per round). Both are orthogonal, so the composition is: norms and the
  sensitivity are unchanged; and it is linear, so the server rotates the decoded sum back
  (:func:`unrotate`). A vector of norm c leaves every coordinate sub-Gaussian with scale
  c / sqrt(b), b > d / 2, so the field's range is not spent on one large coordinate and a
  modular wrap is rare (:meth:`coded_fl.dp.settings.DistributedDP.plan` bounds it). Padding to
  2^k >= d instead would change d, and with it the protocol's whole layout.
- **Randomized rounding** (:func:`round_randomized`, what a run uses): each coordinate to one
  of its two neighbouring integers, unbiased, from the partition's rounding key. Replicas of a
  partition computed on machines whose floats drift apart then round apart only at the few
  coordinates that drift across a draw's threshold, as the quantizer's own rounding does.
  **Conditional** rounding (:func:`round_conditionally`) draws again until the squared norm is
  within the tighter bound of :func:`coded_fl.dp.accounting.rounded_sensitivity`: its
  sensitivity is lower by at most sqrt(d) steps, but whether a draw is kept depends on the
  whole vector, so a drift of one coordinate can make two replicas keep different draws and
  disagree everywhere (``tests/unit/test_dp_core.py`` shows both).

>>> x = np.array([3.0, -4.0, 0.0, 12.0, 0.0])
>>> y = rotate(x, seed=7)
>>> y.shape, bool(np.isclose(np.linalg.norm(y), 13.0)), bool(np.allclose(unrotate(y, seed=7), x))
((5,), True, True)
"""

from __future__ import annotations

import math

import numpy as np

from coded_fl.errors import ConfigurationError, InputError

__all__ = [
    "block_rotation_size",
    "clip_l2",
    "rotate",
    "round_conditionally",
    "round_randomized",
    "unrotate",
]


def block_rotation_size(d: int) -> int:
    """b, the Hadamard block of :func:`rotate`: the largest power of two <= d.

    Parameters
    ----------
    d
        The vector length (>= 1).

    Returns
    -------
    int
    """
    if d < 1:
        raise InputError(f"d must be >= 1, got {d}")
    return 1 << (d.bit_length() - 1)


def _fwht(a: np.ndarray) -> np.ndarray:
    n = a.shape[0]
    h = 1
    while h < n:
        a = a.reshape(-1, 2, h)
        a = np.stack((a[:, 0, :] + a[:, 1, :], a[:, 0, :] - a[:, 1, :]), axis=1)
        h *= 2
    return a.reshape(n)


def _signs(m: int, seed: int) -> np.ndarray:
    bits = np.random.Generator(np.random.PCG64(seed)).integers(0, 2, size=m, dtype=np.int8)
    return (1 - 2 * bits).astype(np.float64)


def _blocks(d: int, seed: int) -> list[tuple[slice, np.ndarray]]:
    """The rotation's steps in order: (coordinates, signs) of H D1 on the first b coordinates,
    then of H D2 on the last b (when b < d); every step is divided by sqrt(b)."""
    b = block_rotation_size(d)
    steps = [(slice(0, b), _signs(b, (2 * seed) % 2**63))]
    if b < d:
        steps.append((slice(d - b, d), _signs(b, (2 * seed + 1) % 2**63)))
    return steps


def rotate(x: np.ndarray, *, seed: int) -> np.ndarray:
    """The orthogonal rotation of a length-d vector that keeps d: H D1 on the first b
    coordinates, then H D2 on the last b (each divided by sqrt(b)).

    Parameters
    ----------
    x
        A float vector of length d.
    seed
        The round's public seed of the signs D1, D2.

    Returns
    -------
    numpy.ndarray
        Length d, float64.
    """
    y = np.array(x, dtype=np.float64).ravel()
    for where, signs in _blocks(y.size, seed):
        y[where] = _fwht(y[where] * signs) / math.sqrt(signs.size)
    return y


def unrotate(y: np.ndarray, *, seed: int) -> np.ndarray:
    """The inverse of :func:`rotate`: its transpose, D H / sqrt(b) per step, last step first.

    Parameters
    ----------
    y
        A rotated vector of length d.
    seed
        The seed :func:`rotate` used.

    Returns
    -------
    numpy.ndarray
        Length d, float64.
    """
    x = np.array(y, dtype=np.float64).ravel()
    for where, signs in reversed(_blocks(x.size, seed)):
        x[where] = _fwht(x[where]) / math.sqrt(signs.size) * signs
    return x


def clip_l2(x: np.ndarray, clip: float) -> tuple[np.ndarray, float]:
    """x scaled down to L2 norm ``clip`` if it is longer.

    Parameters
    ----------
    x
        A float vector (no NaN or infinity).
    clip
        The L2 bound, > 0.

    Returns
    -------
    (numpy.ndarray, float)
        The clipped vector and the factor applied (1.0 when x was within the bound).
    """
    x = np.asarray(x, dtype=np.float64)
    if not np.isfinite(x).all():
        raise InputError("the update has NaN or infinite values")
    if not (math.isfinite(clip) and clip > 0):
        raise ConfigurationError(f"clip must be a positive finite number, got {clip!r}")
    norm = float(np.linalg.norm(x))
    factor = 1.0 if norm <= clip else clip / norm
    return x * factor, factor


def round_randomized(x: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
    """Unbiased randomized rounding to integers: floor(x) + 1 with probability frac(x).

    Its L2 sensitivity is c + sqrt(d) for an input of norm c
    (:func:`coded_fl.dp.accounting.rounded_sensitivity` with ``beta=None``). Two inputs that
    differ by a small drift, rounded with the same ``rng`` state, differ only where a
    coordinate's drift crosses its draw's threshold.

    Parameters
    ----------
    x
        A float vector (in quantization steps).
    rng
        The randomness of the rounding (the partition's, the same at each of its replicas).

    Returns
    -------
    numpy.ndarray
        int64.
    """
    x = np.asarray(x, dtype=np.float64)
    low = np.floor(x)
    return (low + (rng.random(x.shape) < x - low)).astype(np.int64)


def round_conditionally(
    x: np.ndarray, *, bound_sq: float, rng: np.random.Generator, tries: int = 1000
) -> np.ndarray:
    """Unbiased randomized rounding to integers, drawn again until ||result||^2 <= bound_sq.

    Parameters
    ----------
    x
        A float vector (in quantization steps).
    bound_sq
        The squared-norm bound (:func:`coded_fl.dp.accounting.rounded_sensitivity` squared).
    rng
        The randomness of the rounding.
    tries
        Draws before giving up.

    Returns
    -------
    numpy.ndarray
        int64.

    Raises
    ------
    InputError
        If no draw met the bound in ``tries`` (x itself is far beyond the clip).
    """
    for _ in range(tries):
        out = round_randomized(x, rng=rng)
        if float(np.dot(out, out)) <= bound_sq:
            return out
    raise InputError(
        f"no rounding of the update met the norm bound in {tries} draws: the update is not "
        "clipped to the configured clip"
    )
