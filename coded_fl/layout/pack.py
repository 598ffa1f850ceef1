"""Packing: partition k's update vector, from its weighted delta (:meth:`LayoutPacking.pack`) or
straight from its trained arrays (:meth:`LayoutPacking.pack_arrays`), with the weight, the exact
clip counts, the metrics and the digits of the integer arrays (:mod:`coded_fl.layout`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from coded_fl.errors import ConfigurationError, InputError
from coded_fl.layout.arrays import _floating, flatten
from coded_fl.layout.geometry import METRIC_BOUND, LayoutGeometry
from coded_fl.layout.integers import (
    INTEGER_BASE,
    INTEGER_KINDS,
    MAX_INTEGER_WEIGHT,
    integer_digits,
    integer_values,
)
from coded_fl.vocabulary import CLIP_WIDENING

__all__ = ["LayoutPacking"]


class LayoutPacking(LayoutGeometry):
    """The silo's side of :class:`~coded_fl.layout.UpdateLayout`: packing a partition's vector."""

    def pack(
        self,
        weighted_delta: torch.Tensor,
        *,
        rho: float,
        clip_range: float,
        metrics: Mapping[str, float] | None = None,
        delta_scale: float = 1.0,
        integers: np.ndarray | None = None,
        examples: float | None = None,
    ) -> torch.Tensor:
        """Partition k's vector.

        Parameters
        ----------
        weighted_delta
            :math:`\\rho_k (\\theta_k - \\theta)`, d finite float values.
        rho
            :math:`\\rho_k = w_k / W`, in (0, 1].
        clip_range
            c; packed model coordinates beyond it count as clipped (beyond :math:`c / 4`: as
            wide).
        metrics
            Values of :attr:`metric_keys` (a missing one counts 0); clipped to
            +-:data:`METRIC_BOUND`.
        delta_scale
            g (a power of two): the model coordinates are packed divided by it, so entries
            up to g c fit (:attr:`coded_fl.vocabulary.TrainSpec.delta_scale`).
        integers
            The e integer elements :math:`x_{kj}` (the trained values, not deltas), flat, in
            :attr:`integer_names` order; required where :attr:`integer_size` > 0.
        examples
            :math:`w_k`, the partition's ``num-examples`` (a whole number below
            :data:`MAX_INTEGER_WEIGHT`); required where :attr:`integer_size` > 0.

        Returns
        -------
        torch.Tensor
            float32, :attr:`length` coordinates.

        Raises
        ------
        InputError
            If ``weighted_delta`` has the wrong size or holds NaN/Inf, ``rho`` is not in
            (0, 1], or a metric is NaN/Inf (it would otherwise pass as +-METRIC_BOUND); if the
            integer elements are missing, not integers or of the wrong number, or
            ``examples`` is not a whole number below :data:`MAX_INTEGER_WEIGHT`.
        ConfigurationError
            If the clip counts or the integer digits do not fit (:meth:`count_cap`).
        """
        flat = weighted_delta.detach().reshape(-1).to(torch.float32)
        if delta_scale != 1.0:
            flat = flat / float(delta_scale)  # a power of two: exact, replicas stay identical
        if flat.numel() != self.model_size:
            raise InputError(f"update has {flat.numel()} values, the model {self.model_size}")
        if not (math.isfinite(rho) and 0 < rho <= 1):
            raise InputError(f"rho must be in (0, 1], got {rho!r}")
        if not torch.isfinite(flat).all():
            raise InputError("the update holds NaN/Inf: lower the learning rate")
        size = flat.abs()
        beyond = int((size > float(np.float32(clip_range))).sum())
        wide = int((size > float(_shrunk(clip_range))).sum())
        extras = self._extras(rho, clip_range, beyond, wide, metrics)
        ints = torch.from_numpy(self._integer_part(integers, examples, clip_range))
        tail = torch.cat([torch.tensor(extras, dtype=torch.float32), ints]).to(flat.device)
        return torch.cat([flat, tail])

    def pack_arrays(
        self,
        arrays: Mapping[str, Any],
        theta: torch.Tensor,
        *,
        rho: float,
        clip_range: float,
        metrics: Mapping[str, float] | None = None,
        delta_scale: float = 1.0,
        examples: float | None = None,
    ) -> torch.Tensor:
        """Partition k's vector straight from its trained arrays: :meth:`pack` of
        ``rho * (flatten(arrays) - theta)``, bit for bit, in one pass over the arrays (the
        arrays named in :attr:`integer_names` go to the integer digits).

        The arrays are read in place where their bytes allow it (no ``numpy()`` copy), and
        the difference, the weighting, the scaling and the NaN/Inf and clip counts are one
        kernel per array writing into the result (CPU; on any other device of ``theta`` this
        is :meth:`pack` of the torch expression).

        Parameters
        ----------
        arrays
            The trained model's named arrays (Flower ``ArrayRecord`` or NumPy arrays), with the
            layout of the model ``theta`` was flattened from.
        theta
            :func:`flatten` of the model the silo received (float32, :attr:`model_size`).
        rho, clip_range, metrics, delta_scale, examples
            As for :meth:`pack`.

        Returns
        -------
        torch.Tensor
            float32, :attr:`length` coordinates.

        Raises
        ------
        InputError
            As :meth:`pack` (and :func:`flatten`: an array that is not floating point).
        """
        ints = integer_values(arrays, self.integer_names) if self.integer_size else None
        if theta.device.type != "cpu":
            trained = flatten(arrays, integers=self.integer_names).to(theta.device)
            return self.pack(
                (trained - theta) * rho,
                rho=rho,
                clip_range=clip_range,
                metrics=metrics,
                delta_scale=delta_scale,
                integers=ints,
                examples=examples,
            )
        from coded_fl.kernels import cpu as _cpu

        if not (math.isfinite(rho) and 0 < rho <= 1):
            raise InputError(f"rho must be in (0, 1], got {rho!r}")
        base = theta.detach().reshape(-1).to(torch.float32).numpy()
        if base.size != self.model_size:
            raise InputError(f"the model has {base.size} values, the layout {self.model_size}")
        out = np.empty(self.length, dtype=np.float32)
        rho32, inv32 = np.float32(rho), np.float32(1.0 / float(delta_scale))
        c32 = np.float32(clip_range)
        at = bad = beyond = wide = 0
        for name, arr in arrays.items():
            if name in self.integer_names:
                continue
            flat = _floating(name, arr)
            if flat.dtype not in (np.float32, np.float64) or not flat.flags.c_contiguous:
                flat = np.ascontiguousarray(flat, dtype=np.float32)  # exact: float16, '>f4'
            end = at + flat.size
            if end > self.model_size:
                raise InputError(f"update has more than {self.model_size} values")
            counts = _cpu.weighted_delta(
                flat, base[at:end], out[at:end], rho32, inv32, c32, _shrunk(clip_range)
            )
            bad, at = bad + int(counts[0]), end
            beyond, wide = beyond + int(counts[1]), wide + int(counts[2])
        if at != self.model_size:
            raise InputError(f"update has {at} values, the model {self.model_size}")
        if bad:
            raise InputError("the update holds NaN/Inf: lower the learning rate")
        out[self.model_size : self.integer_index] = self._extras(
            rho, clip_range, beyond, wide, metrics
        )
        out[self.integer_index :] = self._integer_part(ints, examples, clip_range)
        return torch.from_numpy(out)

    def _integer_part(
        self, integers: np.ndarray | None, examples: float | None, clip_range: float
    ) -> np.ndarray:
        """The digits of :math:`w_k x_{kj}` and of :math:`w_k`, times u (float32, exact)."""
        if not self.integer_size:
            return np.zeros(0, dtype=np.float32)
        if integers is None or examples is None:
            raise InputError("the model has integer arrays: pack needs integers and examples")
        values = np.asarray(integers).reshape(-1)
        if values.size != self.integer_size:
            raise InputError(
                f"update has {values.size} integer values, the model {self.integer_size}"
            )
        whole = values.dtype.kind in INTEGER_KINDS or (
            values.dtype == object
            and all(isinstance(v, (int, np.integer)) for v in values.tolist())
        )
        if not whole:
            raise InputError(f"integer values must be integers, got dtype {values.dtype}")
        w = _whole_weight(examples)
        if self.count_cap(clip_range) < INTEGER_BASE // 2:
            raise ConfigurationError(
                f"integer arrays travel as digits up to {INTEGER_BASE // 2}, above the "
                f"largest count clip_range={clip_range} carries at this scale "
                f"({self.count_cap(clip_range)}): raise clip_range or the quantization scale"
            )
        products = np.append(values.astype(object) * w, w)
        return (integer_digits(products).reshape(-1) * self.unit(clip_range)).astype(np.float32)

    def _extras(
        self,
        rho: float,
        clip_range: float,
        beyond: int,
        wide: int,
        metrics: Mapping[str, float] | None,
    ) -> list[float]:
        c, u = float(clip_range), self.unit(clip_range)
        count = min(beyond, self.count_cap(clip_range))
        # integers times a power of two u (u s whole): exact in float32 and after scaling
        extras = [rho * c, count * u, float(beyond > 0) * u, float(wide > 0) * u]
        given = metrics or {}
        for name in self.metric_keys:
            value = float(given.get(name, 0.0))
            if not math.isfinite(value):
                raise InputError(f"metric '{name}' is {value}: a metric must be a finite number")
            value = max(-METRIC_BOUND, min(METRIC_BOUND, value))
            extras.append(rho * value * c / METRIC_BOUND)
        return extras


def _shrunk(clip_range: float) -> np.float32:
    """The float32 bound of the shrink test: :math:`c / 4` (a power of two: exact)."""
    return np.float32(np.float32(clip_range) / np.float32(CLIP_WIDENING))


def _whole_weight(examples: float) -> int:
    """:math:`w_k` as a Python int: a whole number in [1, :data:`MAX_INTEGER_WEIGHT`)."""
    w = float(examples)
    if not (math.isfinite(w) and w.is_integer() and 1 <= w < MAX_INTEGER_WEIGHT):
        raise InputError(
            f"the model has integer arrays, which are averaged exactly: num-examples must be "
            f"a whole number in [1, 2^38), got {examples!r}"
        )
    return int(w)
