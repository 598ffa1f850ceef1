"""Linear combinations in GF(p): :meth:`~LinearCombinations.lincomb` and
:meth:`~LinearCombinations.matmul`, fused passes over k vectors.

:class:`LinearCombinations` is one part of :class:`~coded_fl.field.PrimeField`, over
:class:`~coded_fl.field.core.FieldCore`: the gradient-code encoding step and the decoder's
combination step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from coded_fl.errors import InputError
from coded_fl.field.core import Coefficients, FieldCore, as_numpy_u32, typed_list
from coded_fl.kernels import cpu as _cpu
from coded_fl.kernels import torch_impl as _tk

__all__ = ["LinearCombinations"]


class LinearCombinations(FieldCore):
    """Fused linear combinations of field vectors (a part of :class:`~coded_fl.field.PrimeField`).

    Parameters
    ----------
    p, backend
        As for :class:`~coded_fl.field.core.FieldCore`.
    """

    # ------------------------------------------------------------------ combinations
    def _vectors(self, vectors: Sequence[torch.Tensor] | torch.Tensor) -> list[torch.Tensor]:
        vs = list(vectors.unbind(0)) if isinstance(vectors, torch.Tensor) else list(vectors)
        if not vs:
            raise InputError("need at least one vector")
        for i, v in enumerate(vs):
            self._check(v, f"vectors[{i}]")
            self._same(vs[0], v)
        return vs

    def _check_top(self, top: int, vectors: Sequence[torch.Tensor]) -> None:
        """Raise InputError naming the first vector holding an element >= p (top is the max)."""
        if top < self.p:
            return
        for i, v in enumerate(vectors):
            self.validate(v, name=f"vectors[{i}]")

    def lincomb(
        self,
        coeffs: Coefficients,
        vectors: Sequence[torch.Tensor] | torch.Tensor,
        *,
        validate: bool = True,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Fused linear combination :math:`\\sum_k c_k v_k` of k vectors (one pass over memory).

        This is the gradient-code encoding step and the decoder's combination step. With
        ``validate`` (the default) an input element :math:`\\ge p` raises :class:`InputError`; on
        the CPU the check rides on the same pass (the kernel returns the largest element it
        read), elsewhere it is one more read of the inputs; ``validate=False`` is for internal
        callers whose inputs are canonical by construction. ``out``
        (a contiguous ``uint32`` tensor of the vectors' shape and device, not one of them) is
        written and returned instead of a new tensor: reused across rounds it saves the page
        faults of a fresh buffer.

        Parameters
        ----------
        coeffs
            k coefficients (reduced mod p).
        vectors
            k field vectors of one shape (a sequence or a stacked tensor).
        validate
            Check that every input element is below p.
        out
            Where to write the result (contiguous, the inputs' shape).

        Returns
        -------
        torch.Tensor
        """
        vs = self._vectors(vectors)
        c = self.coefficients(coeffs).reshape(-1)
        if c.size != len(vs):
            raise InputError(f"{c.size} coefficients for {len(vs)} vectors")
        if out is not None:
            self._check(out, "out")
            self._same(vs[0], out)
            if not out.is_contiguous():
                raise InputError("out must be contiguous")
        if not self._numba(vs[0]):
            if validate:
                for i, v in enumerate(vs):
                    self.validate(v, name=f"vectors[{i}]")
            result = _tk.lincomb([int(v) for v in c], vs, self.p)
            return result if out is None else out.copy_(result)
        if out is None:
            out = self._empty_like(vs[0])
        top = _cpu.lincomb(c, typed_list([as_numpy_u32(v) for v in vs]), as_numpy_u32(out), self.p)
        if validate:
            self._check_top(int(top), vs)
        return out

    def matmul(
        self,
        matrix: Coefficients,
        vectors: Sequence[torch.Tensor] | torch.Tensor,
        *,
        validate: bool = True,
    ) -> torch.Tensor:
        """Small matrix :math:`M` (R x L) times L stacked vectors: returns an (R, ...) tensor.

        With a single row it is :meth:`lincomb`; with one-element vectors it is a matrix-vector
        product. Every block of the inputs is read once for all R outputs. ``validate`` as in
        :meth:`lincomb`.

        Parameters
        ----------
        matrix
            R x L coefficients (reduced mod p).
        vectors
            L field vectors of one shape (a sequence or a stacked tensor).
        validate
            Check that every input element is below p.
        """
        vs = self._vectors(vectors)
        m = self.coefficients(matrix)
        if m.ndim != 2 or m.shape[1] != len(vs):
            raise InputError(f"matrix of shape {m.shape} cannot multiply {len(vs)} vectors")
        if not self._numba(vs[0]):
            if validate:
                for i, v in enumerate(vs):
                    self.validate(v, name=f"vectors[{i}]")
            return _tk.matmul(m.tolist(), vs, self.p)
        shape = (m.shape[0], *vs[0].shape)
        out = torch.empty(shape, dtype=torch.uint32)
        flat_out = out.reshape(m.shape[0], -1).numpy()
        if isinstance(vectors, torch.Tensor):  # already stacked: no copy
            stacked = vectors.detach().contiguous().reshape(len(vs), -1).numpy()
        else:  # separate tensors: read them in place
            stacked = typed_list([as_numpy_u32(v) for v in vs])
        top = _cpu.matmul(np.ascontiguousarray(m), stacked, flat_out, self.p)
        if validate:
            self._check_top(int(top), vs)
        return out
