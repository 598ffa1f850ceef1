"""Unpacking: the decoded sum of the packed vectors read back through the layout
(:meth:`LayoutUnpacking.unpack`), as a :class:`DecodedUpdate` (:mod:`coded_fl.layout`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from coded_fl.errors import DecodingError, InputError
from coded_fl.layout.geometry import EXTRAS, METRIC_BOUND, LayoutGeometry
from coded_fl.layout.integers import INTEGER_DIGITS, integers_from_digits

__all__ = ["DecodedUpdate", "LayoutUnpacking"]


@dataclass(frozen=True)
class DecodedUpdate:
    """The decoded round read through the layout.

    Attributes
    ----------
    mean_delta
        The weighted average of :math:`\\theta_k - \\theta` (in the dtype of the sum).
    total_rho
        :math:`\\sum_k w_k / W`.
    clipped_entries
        Model coordinates beyond the clip range, summed over the partitions (each partition's
        count saturated at :attr:`UpdateLayout.count_cap`); None where erased.
    clipped_partitions
        Partitions with at least one model coordinate beyond the clip range c (exact); None
        where erased (replicas disagreed: unknown).
    wide_partitions
        Partitions with at least one model coordinate beyond :math:`c / 4` (exact); None where
        erased.
    clipped_fraction
        ``clipped_entries`` over the model coordinates of every partition (0 where erased).
    metrics
        The weighted averages of the requested metrics.
    integer_mean
        :math:`\\sum_k w_k x_{kj} / \\sum_k w_k` for the e integer elements, each the exact
        rational correctly rounded to float64 (NaN where erased).
    integer_erased
        Per integer element: True where a digit could not be decoded (replicas disagreed).
    total_examples
        :math:`\\sum_k w_k`, exact (None without integer arrays).
    """

    mean_delta: torch.Tensor
    total_rho: float
    clipped_entries: int | None = 0
    clipped_partitions: int | None = 0
    wide_partitions: int | None = 0
    clipped_fraction: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    integer_mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    integer_erased: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    total_examples: int | None = None


class LayoutUnpacking(LayoutGeometry):
    """The server's side of :class:`~coded_fl.layout.UpdateLayout`: reading the decoded sum."""

    def unpack(
        self,
        total: torch.Tensor,
        *,
        clip_range: float,
        erased: Sequence[int] = (),
        delta_scale: float = 1.0,
        num_partitions: int = 1,
    ) -> DecodedUpdate:
        """Read a decoded, dequantized sum of packed vectors.

        Parameters
        ----------
        total
            The sum over every partition of :meth:`pack`'s vectors (float).
        clip_range
            The c the vectors were packed with.
        erased
            Coordinates that could not be decoded (replicas that disagreed): a model coordinate
            gets no update (0 in ``total``), an erased metric is left out, an erased clip count
            reads as None (unknown); the weight cannot be erased (it is exact in every replica,
            so an erased weight means a broken silo).
        delta_scale
            The g the vectors were packed with (the model coordinates are multiplied by it).
        num_partitions
            K, the partitions summed (for :attr:`DecodedUpdate.clipped_fraction`).

        Returns
        -------
        DecodedUpdate

        Raises
        ------
        InputError
            If ``total`` does not have :attr:`length` coordinates.
        DecodingError
            If the decoded total weight is not positive (no partition reported examples).
        """
        if total.numel() != self.length:
            raise InputError(f"decoded vector has {total.numel()} values, expected {self.length}")
        d, c = self.model_size, float(clip_range)
        gone = {int(i) for i in erased if int(i) >= d}
        if d in gone:
            raise DecodingError(
                "the total weight could not be decoded (replicas disagree on a partition's "
                "num-examples, which every replica computes exactly: a broken silo)"
            )
        total_rho = float(total[d]) / c
        if not total_rho > 0:
            raise DecodingError(
                f"decoded total weight is {total_rho:g} (no partition reported examples)"
            )
        first = d + EXTRAS
        metrics = {
            name: float(total[first + j]) * METRIC_BOUND / c / total_rho
            for j, name in enumerate(self.metric_keys)
            if first + j not in gone
        }
        u = self.unit(c)
        entries, clipped, wide = (
            None if i in gone else round(float(total[i]) / u)  # exact: u a power of two
            for i in (self.count_index, *self.flag_indices)
        )
        integer_mean, integer_erased, examples = self._unpack_integers(total, u, gone)
        return DecodedUpdate(
            mean_delta=(total[:d] / total_rho) * float(delta_scale),  # g: a power of two
            total_rho=total_rho,
            clipped_entries=entries,
            clipped_partitions=clipped,
            wide_partitions=wide,
            clipped_fraction=(entries or 0) / (d * max(1, num_partitions)),
            metrics=metrics,
            integer_mean=integer_mean,
            integer_erased=integer_erased,
            total_examples=examples,
        )

    def _unpack_integers(
        self, total: torch.Tensor, u: float, gone: set[int]
    ) -> tuple[np.ndarray, np.ndarray, int | None]:
        """The integer means (NaN where erased), the erased mask and the exact total weight."""
        e, R, first = self.integer_size, INTEGER_DIGITS, self.integer_index
        if not e:
            return np.zeros(0), np.zeros(0, dtype=bool), None
        sums = total[first:].double().cpu().numpy().reshape(e + 1, R) / u
        digits = np.rint(sums).astype(np.int64)  # sums of K digits of at most B/2: exact
        erased = np.zeros(e + 1, dtype=bool)
        for i in gone:
            if i >= first:
                erased[(i - first) // R] = True
        if erased[e]:
            raise DecodingError(
                "the exact total weight could not be decoded (replicas disagree on a "
                "partition's num-examples, which every replica computes exactly: a broken silo)"
            )
        values = integers_from_digits(digits)
        weight = int(values[e])
        if weight < 1:
            raise DecodingError(f"decoded total num-examples is {weight} (no partition counted)")
        mean = np.array([v / weight for v in values[:e]], dtype=np.float64)  # correctly rounded
        mean[erased[:e]] = np.nan
        return mean, erased[:e], weight
