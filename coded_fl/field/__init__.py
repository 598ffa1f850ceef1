"""Arithmetic in the prime field GF(p) on torch tensors, on any device.

Elements are stored as ``torch.uint32`` tensors with values in :math:`[0, p)`, :math:`p < 2^{31}`
(default :math:`p = 2^{31} - 1`). On the CPU the work runs in fused numba kernels over the tensors'
memory (zero copy); on other devices (CUDA) it runs as torch ``int64`` operations. Both give the
same bits; the tests check them against galois and Python integers.

Inputs: the public methods (``element``, ``coefficients``, ``validate``, ``add``, ``sub``,
``mul``, ``neg``, ``pow``, ``inv``, ``to_signed``, and ``lincomb``/``matmul`` unless called with
``validate=False``) refuse with :class:`~coded_fl.errors.InputError` anything that is not a
canonical element or an integer coefficient (a value >= p, a float, NaN, None). The kernels of
:mod:`coded_fl.kernels` and ``validate=False`` trust their inputs: they are the internal hot
paths, fed only with vectors validated where they entered.

Overflow safety by construction: the product of two elements is below :math:`2^{62}`; kernels
reduce or fold every product before adding it to a 64-bit accumulator, and a modulus that would
break this bound is refused when the field is made.

>>> F = PrimeField()
>>> a = F.element([1, 2, F.p - 1])
>>> F.add(a, a).tolist()
[2, 4, 2147483645]
>>> F.mul(a, F.inv(a)).tolist()
[1, 1, 1]
>>> F.lincomb([3, F.p - 1], [a, a]).tolist()  # 3a - a
[2, 4, 2147483645]
>>> F.to_signed(F.from_signed(torch.tensor([-5, 7]))).tolist()
[-5, 7]

The field is put together from parts: :mod:`coded_fl.field.core` (the modulus, the backend and
the input checks), :mod:`coded_fl.field.elementwise` (elementwise arithmetic) and
:mod:`coded_fl.field.linear` (linear combinations); :class:`PrimeField` adds the identity and
the making of elements.
"""

from __future__ import annotations

import numpy as np
import torch

from coded_fl.errors import InputError
from coded_fl.field.core import Backend, Coefficients, as_numpy_u32
from coded_fl.field.core import typed_list as typed_list  # importable from here, as before
from coded_fl.field.elementwise import ElementwiseOps
from coded_fl.field.linear import LinearCombinations
from coded_fl.kernels import cpu as _cpu
from coded_fl.kernels import torch_impl as _tk

__all__ = ["Backend", "Coefficients", "PrimeField"]


class PrimeField(ElementwiseOps, LinearCombinations):
    """The field GF(p) acting on ``uint32`` torch tensors.

    Parameters
    ----------
    p
        A prime with :math:`2 < p < 2^{31}`; default :math:`2^{31} - 1`.
    backend
        ``"auto"`` (numba on CPU tensors, torch elsewhere), ``"numba"`` (CPU only) or ``"torch"``
        (torch ops on every device; slower on CPU, used as a cross-check).
    """

    # ------------------------------------------------------------------ identity
    def __repr__(self) -> str:
        return f"PrimeField(p={self.p})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PrimeField) and other.p == self.p

    def __hash__(self) -> int:
        return hash(("PrimeField", self.p))

    @property
    def bits(self) -> int:
        """Bits per element (``p.bit_length()``)."""
        return self.p.bit_length()

    # ------------------------------------------------------------------ making elements
    def element(self, values: object, *, device: torch.device | str | None = None) -> torch.Tensor:
        """Field elements from integers of any sign (Python ints, numpy, torch), reduced mod p.

        Parameters
        ----------
        values
            Integers; a ``uint32`` tensor is reduced mod p too.
        device
            Where the result goes (default: the input's, or the CPU).

        Returns
        -------
        torch.Tensor
            ``uint32``, canonical.

        Raises
        ------
        InputError
            If a value is not an integer (see :meth:`coefficients`).
        """
        if isinstance(values, torch.Tensor):
            if values.dtype == torch.uint32:
                return self.from_signed(values.to(torch.int64)).to(device or values.device)
            if values.is_floating_point() or values.is_complex():
                raise InputError("field elements must be integers, got a floating point tensor")
            return self.from_signed(values.to(device or values.device))
        coeffs = self.coefficients(values)  # type: ignore[arg-type]
        return torch.from_numpy(coeffs.astype(np.uint32)).to(device or "cpu")

    def zeros(
        self, shape: int | tuple[int, ...], *, device: torch.device | str = "cpu"
    ) -> torch.Tensor:
        """The zero vector (or array) of GF(p) of ``shape`` on ``device``.

        Parameters
        ----------
        shape
            The shape.
        device
            The torch device.

        Returns
        -------
        torch.Tensor
        """
        return torch.zeros(shape, dtype=torch.uint32, device=device)

    def from_signed(self, x: torch.Tensor) -> torch.Tensor:
        """Signed integers (|x| < 2^62) to field elements: x mod p.

        Parameters
        ----------
        x
            An integer tensor.

        Returns
        -------
        torch.Tensor
            uint32 field elements.
        """
        if x.is_floating_point():
            raise InputError("from_signed takes an integer tensor, got a floating point one")
        x = x.to(torch.int64)
        if not self._numba(x):
            return _tk.from_signed(x, self.p)
        out = self._empty_like(x)
        _cpu.from_signed(x.contiguous().reshape(-1).numpy(), as_numpy_u32(out), self.p)
        return out

    def to_signed(self, a: torch.Tensor) -> torch.Tensor:
        """Field elements to their centred representatives in :math:`(-p/2, p/2]`, as int64.

        Parameters
        ----------
        a
            Field elements (uint32).

        Returns
        -------
        torch.Tensor
            int64.
        """
        self._canonical(a, "a")
        if not self._numba(a):
            return _tk.to_signed(a, self.p)
        out = torch.empty(a.shape, dtype=torch.int64)
        _cpu.to_signed(as_numpy_u32(a), out.reshape(-1).numpy(), self.p)
        return out
