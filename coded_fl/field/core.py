"""The core of :class:`~coded_fl.field.PrimeField`: the modulus, the backend and the input checks.

:class:`FieldCore` holds what every part of the field works on: the prime, the backend, the
dispatch between the numba kernels (CPU) and torch (elsewhere), and the checks that refuse
anything that is not a canonical element or an integer coefficient. The arithmetic is built on
it (:mod:`coded_fl.field.elementwise`, :mod:`coded_fl.field.linear`). Beside it, the views the
CPU kernels take: :func:`as_numpy_u32` and :func:`typed_list`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from numba import typed

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.kernels import cpu as _cpu
from coded_fl.primes import MERSENNE31, check_modulus

__all__ = ["Backend", "Coefficients", "FieldCore", "as_numpy_u32", "typed_list"]

Backend = Literal["auto", "numba", "torch"]
#: Field coefficients: Python ints (any sign, reduced mod p), a numpy integer array or a tensor.
Coefficients = Sequence[int] | np.ndarray | torch.Tensor


def as_numpy_u32(x: torch.Tensor) -> np.ndarray:
    """A flat ``uint32`` numpy view of a contiguous CPU tensor (copying only if not contiguous).

    Parameters
    ----------
    x
        A uint32 CPU tensor.

    Returns
    -------
    np.ndarray
    """
    return x.detach().contiguous().reshape(-1).numpy()


def typed_list(arrays: Sequence[np.ndarray]) -> typed.List:
    """A numba typed list of 1-D contiguous arrays (what the multi-input kernels take), built by
    cached kernels so that a fresh process compiles nothing (:func:`.kernels.cpu.list_of`).

    Parameters
    ----------
    arrays
        1-D contiguous arrays of one dtype.

    Returns
    -------
    numba.typed.List
    """
    flat = [np.ascontiguousarray(a).reshape(-1) for a in arrays]
    if not flat:
        return typed.List()
    out = _cpu.list_of(flat[0])
    for a in flat[1:]:
        _cpu.list_append(out, a)
    return out


class FieldCore:
    """The state and input checks every part of GF(p) works on (the base of
    :class:`~coded_fl.field.PrimeField`).

    Parameters
    ----------
    p
        A prime with :math:`2 < p < 2^{31}`; default :math:`2^{31} - 1`.
    backend
        ``"auto"``, ``"numba"`` or ``"torch"`` (as for :class:`~coded_fl.field.PrimeField`).
    """

    dtype = torch.uint32

    def __init__(self, p: int = MERSENNE31, *, backend: Backend = "auto") -> None:
        self.p = check_modulus(p)
        if backend not in ("auto", "numba", "torch"):
            raise ConfigurationError(
                f"backend={backend!r} is unknown; use 'auto', 'numba' or 'torch'"
            )
        self.backend: Backend = backend

    # ------------------------------------------------------------------ dispatch
    def _numba(self, x: torch.Tensor) -> bool:
        if self.backend == "torch":
            return False
        if x.device.type == "cpu":
            return True
        if self.backend == "numba":
            raise ConfigurationError(
                f"backend='numba' runs on the CPU only, got a tensor on {x.device}; "
                "use backend='auto' or 'torch'"
            )
        return False

    def _check(self, x: torch.Tensor, name: str) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise InputError(
                f"{name} must be a torch.Tensor of dtype uint32, got {type(x).__name__}"
            )
        if x.dtype != torch.uint32:
            raise InputError(
                f"{name} must hold field elements as torch.uint32, got {x.dtype}; "
                "use PrimeField.element() or from_signed() to make field vectors"
            )
        return x

    def _canonical(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """``_check`` and the values: an element >= p is refused (the kernels assume < p)."""
        return self.validate(x, name=name)

    def _same(self, a: torch.Tensor, b: torch.Tensor) -> None:
        if a.shape != b.shape:
            raise InputError(f"shape mismatch: {tuple(a.shape)} vs {tuple(b.shape)}")
        if a.device != b.device:
            raise InputError(f"device mismatch: {a.device} vs {b.device}")

    def _empty_like(self, x: torch.Tensor) -> torch.Tensor:
        return torch.empty(x.shape, dtype=torch.uint32, device=x.device)

    def coefficients(self, c: Coefficients) -> np.ndarray:
        """Canonical ``int64`` numpy array of field coefficients (any integers, reduced mod p).

        Parameters
        ----------
        c
            Integers of any sign: Python ints, an integer numpy array or tensor.

        Returns
        -------
        numpy.ndarray
            ``int64`` in ``[0, p)``, the shape of ``c``.

        Raises
        ------
        InputError
            If a value is not an integer: a float (even 2.0: a truncated 2.5 would silently
            become another element), NaN, inf, None, a bool or anything else.
        """
        if isinstance(c, torch.Tensor):
            c = c.detach().cpu().numpy()
        try:  # Python values stay Python objects: numpy would turn big or mixed ints into floats
            arr = c if isinstance(c, np.ndarray) else np.asarray(c, dtype=object)
        except (TypeError, ValueError) as exc:
            raise InputError(f"field coefficients must be integers: {exc}") from None
        if arr.dtype.kind in "fcbmMSUV":
            raise InputError(f"field coefficients must be integers, got dtype {arr.dtype}")
        if arr.dtype == object:
            values = list(np.ravel(arr))
            for v in values:
                if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                    raise InputError(f"field coefficients must be integers, got {v!r}")
            return np.array([int(v) % self.p for v in values], dtype=np.int64).reshape(arr.shape)
        if arr.dtype.kind == "u" and arr.dtype.itemsize == 8:
            arr = (arr % np.uint64(self.p)).astype(np.int64)
        return np.remainder(arr.astype(np.int64), self.p)

    def validate(self, x: torch.Tensor, *, name: str = "vector") -> torch.Tensor:
        """Return ``x`` if it is a ``uint32`` tensor of canonical elements, else raise InputError.

        Use on every vector that came from outside (a peer, a file).

        Parameters
        ----------
        x
            The tensor to check.
        name
            How errors name it.

        Returns
        -------
        torch.Tensor
            x itself.
        """
        self._check(x, name)
        if x.numel() == 0:
            return x
        top = (
            int(_cpu.max_element(as_numpy_u32(x)))
            if x.device.type == "cpu"
            else int(x.to(torch.int64).max())
        )
        if top >= self.p:
            raise InputError(f"{name} holds {top}, not an element of GF({self.p}) (must be < p)")
        return x
