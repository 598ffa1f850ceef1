"""Elementwise arithmetic of GF(p): add, subtract, multiply, negate, powers and inverses.

:class:`ElementwiseOps` is one part of :class:`~coded_fl.field.PrimeField`, over
:class:`~coded_fl.field.core.FieldCore`: each operation checks its inputs and runs as a numba
kernel on CPU tensors or as torch ``int64`` operations elsewhere.
"""

from __future__ import annotations

import numpy as np
import torch

from coded_fl.errors import InputError
from coded_fl.field.core import FieldCore, as_numpy_u32
from coded_fl.kernels import cpu as _cpu
from coded_fl.kernels import torch_impl as _tk

__all__ = ["ElementwiseOps"]


class ElementwiseOps(FieldCore):
    """The elementwise operations of GF(p) (a part of :class:`~coded_fl.field.PrimeField`).

    Parameters
    ----------
    p, backend
        As for :class:`~coded_fl.field.core.FieldCore`.
    """

    # ------------------------------------------------------------------ elementwise
    def _binary(self, name: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self._canonical(a, "a")
        self._canonical(b, "b")
        self._same(a, b)
        if not self._numba(a):
            result: torch.Tensor = getattr(_tk, name)(a, b, self.p)
            return result
        out = self._empty_like(a)
        getattr(_cpu, name)(as_numpy_u32(a), as_numpy_u32(b), as_numpy_u32(out), self.p)
        return out

    def add(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """:math:`a + b`.

        Parameters
        ----------
        a, b
            Field elements of one shape.

        Returns
        -------
        torch.Tensor
        """
        return self._binary("add", a, b)

    def sub(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """:math:`a - b`.

        Parameters
        ----------
        a, b
            Field elements of one shape.

        Returns
        -------
        torch.Tensor
        """
        return self._binary("sub", a, b)

    def mul(self, a: torch.Tensor, b: torch.Tensor | int) -> torch.Tensor:
        """:math:`a \\cdot b`, with ``b`` a tensor of the same shape or a scalar.

        Parameters
        ----------
        a
            Field elements.
        b
            Field elements of a's shape, or one element.

        Returns
        -------
        torch.Tensor
        """
        if isinstance(b, torch.Tensor):
            return self._binary("mul", a, b)
        self._canonical(a, "a")
        c = int(self.coefficients([b])[0])
        if not self._numba(a):
            return _tk.mul(a, c, self.p)
        out = self._empty_like(a)
        _cpu.mul_scalar(as_numpy_u32(a), c, as_numpy_u32(out), self.p)
        return out

    def neg(self, a: torch.Tensor) -> torch.Tensor:
        """:math:`-a`.

        Parameters
        ----------
        a
            Field elements.

        Returns
        -------
        torch.Tensor
        """
        self._canonical(a, "a")
        if not self._numba(a):
            return _tk.neg(a, self.p)
        out = self._empty_like(a)
        _cpu.neg(as_numpy_u32(a), as_numpy_u32(out), self.p)
        return out

    def pow(self, a: torch.Tensor, e: int) -> torch.Tensor:
        """:math:`a^e` elementwise; a negative ``e`` inverts first (zero has no inverse).

        Parameters
        ----------
        a
            Field elements.
        e
            The exponent (any int).

        Returns
        -------
        torch.Tensor
        """
        self._canonical(a, "a")
        if isinstance(e, bool) or not isinstance(e, (int, np.integer)):
            raise InputError(f"the exponent must be an integer, got {e!r}")
        if e < 0:
            return self.pow(self.inv(a), -e)
        if not self._numba(a):
            return _tk.power(a, e, self.p)
        out = self._empty_like(a)
        _cpu.power(as_numpy_u32(a), int(e), as_numpy_u32(out), self.p)
        return out

    def inv(self, a: torch.Tensor) -> torch.Tensor:
        """:math:`a^{-1}` elementwise (Fermat: :math:`a^{p-2}`); raises InputError on a zero.

        Parameters
        ----------
        a
            Nonzero field elements.

        Returns
        -------
        torch.Tensor
        """
        self._canonical(a, "a")
        if a.numel() and bool((a == 0).any()):
            raise InputError("0 has no inverse in GF(p)")
        return self.pow(a, self.p - 2)

    def inv_scalar(self, a: int) -> int:
        """Inverse of one element as a Python int.

        Parameters
        ----------
        a
            A nonzero element (any int; reduced mod p).

        Returns
        -------
        int
        """
        a = int(self.coefficients([a])[0])
        if a == 0:
            raise InputError("0 has no inverse in GF(p)")
        return pow(a, -1, self.p)
