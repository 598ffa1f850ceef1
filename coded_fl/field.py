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

Length: about 300 lines of code; the rest documents every public entry point and which inputs it
refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from numba import typed

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.kernels import cpu as _cpu
from coded_fl.kernels import torch_impl as _tk
from coded_fl.primes import MERSENNE31, check_modulus

__all__ = ["Backend", "Coefficients", "PrimeField"]

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


class PrimeField:
    """The field GF(p) acting on ``uint32`` torch tensors.

    Parameters
    ----------
    p
        A prime with :math:`2 < p < 2^{31}`; default :math:`2^{31} - 1`.
    backend
        ``"auto"`` (numba on CPU tensors, torch elsewhere), ``"numba"`` (CPU only) or ``"torch"``
        (torch ops on every device; slower on CPU, used as a cross-check).
    """

    dtype = torch.uint32

    def __init__(self, p: int = MERSENNE31, *, backend: Backend = "auto") -> None:
        self.p = check_modulus(p)
        if backend not in ("auto", "numba", "torch"):
            raise ConfigurationError(
                f"backend={backend!r} is unknown; use 'auto', 'numba' or 'torch'"
            )
        self.backend: Backend = backend

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
