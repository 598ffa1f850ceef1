"""The update vector: what one partition contributes to a round, and how the sum is read back.

Partition k's vector, of :attr:`UpdateLayout.length` = d + 4 + len(metric_keys) + R (e + 1)
coordinates (R = :data:`INTEGER_DIGITS`, e integer elements; no integer part where e = 0)::

    rho_k (theta_k - theta) | rho_k c | n_k u   | b_k u    | h_k u  | rho_k c m_kj / METRIC_BOUND
    (d model coordinates)     weight    clipped   beyond c   beyond   one per metric
                                        entries              c / 4
    | digits of w_k x_kj (R per element) u | digits of w_k u
      (e integer model elements)             (the exact weight)

with :math:`\\rho_k = w_k / W` (the sample weight over its public bound), c the clip range,
:math:`m_{kj}` the metrics. The model, weight and metric coordinates are multiples of
:math:`\\rho_k` and the code is linear, so the decoded sum gives the FedAvg numerator,
:math:`c \\sum_k \\rho_k` and the weighted metric sums: :meth:`UpdateLayout.unpack` divides them
out. The weight coordinate carries a factor c so it uses the quantization range the model
coordinates use.

**The clip signal is exact.** The three clip coordinates carry integers, not rates: :math:`n_k`
the number of model coordinates beyond c (saturated at :attr:`UpdateLayout.count_cap`),
:math:`b_k \\in \\{0, 1\\}` whether there is at least one, :math:`h_k \\in \\{0, 1\\}` whether
one lies beyond :math:`c / 4` (:data:`coded_fl.vocabulary.CLIP_WIDENING`: the test for a
narrower range). Each is placed as the integer times :meth:`UpdateLayout.unit` u, a power
of two with :math:`u s` a whole number for the quantization scale s, so stochastic rounding
meets an integer (no fraction: nothing is random) and returns exactly :math:`m u s`; they
are not weighted by :math:`\\rho_k`. The decoded sums are therefore exact counts: how many
entries and how many partitions clipped, whatever d (a rate of 1 entry in 25 million would
lie below one quantization step and decode as 0).

**Integer arrays are summed exactly.** Integer model arrays (BatchNorm's
``num_batches_tracked``, other integer buffers: dtype kind ``i``, ``u`` or ``b``) are not
deltas and are not clipped: partition k contributes the whole numbers :math:`w_k x_{kj}`
(:math:`w_k` its ``num-examples``, a whole number) and :math:`w_k`, each written with R
balanced base-:data:`INTEGER_BASE` digits placed like the clip counts (digit times u: exact,
nothing random). Every digit lies within :math:`\\pm` ``INTEGER_BASE / 2``, so the field
range that holds the model coordinates holds any sum of them, whatever the values: nothing
can wrap. The server rebuilds :math:`\\sum_k w_k x_{kj}` and :math:`\\sum_k w_k` as Python
integers and divides: :attr:`DecodedUpdate.integer_mean` is the weighted mean correctly rounded
to float64, the dtype Flower's ``FedAvg`` gives an integer array.

Both adapters use this one definition (the silo packs, the server unpacks), built with the
protocol's quantization scale. The model side is handled by :func:`flatten` and
:func:`array_layout`, which read any mapping of named arrays (Flower's ``ArrayRecord`` or a dict
of NumPy arrays) without importing Flower.

>>> import torch
>>> lay = UpdateLayout(model_size=2, metric_keys=("acc",))
>>> v0 = lay.pack(0.25 * torch.tensor([0.1, 0.2]), rho=0.25, clip_range=1.0, metrics={"acc": 0.5})
>>> v1 = lay.pack(0.75 * torch.tensor([0.3, 0.6]), rho=0.75, clip_range=1.0, metrics={"acc": 0.9})
>>> out = lay.unpack((v0 + v1).double(), clip_range=1.0)
>>> [round(x, 4) for x in out.mean_delta.tolist()], out.total_rho, round(out.metrics["acc"], 4)
([0.25, 0.5], 1.0, 0.8)
>>> out.clipped_partitions, out.wide_partitions  # 0.75 * 0.6 = 0.45 lies beyond 1 / 4
(0, 1)
"""

from __future__ import annotations

from dataclasses import dataclass

from coded_fl.layout.arrays import ArrayLayout as ArrayLayout  # importable from here
from coded_fl.layout.arrays import array_layout, check_same_layout, flatten, npy_header
from coded_fl.layout.geometry import EXTRAS, MAX_COUNT, METRIC_BOUND, count_unit
from coded_fl.layout.integers import (
    INTEGER_BASE,
    INTEGER_DIGITS,
    element_count,
    integer_digits,
    integer_names,
    integer_values,
    integers_from_digits,
)
from coded_fl.layout.integers import INTEGER_KINDS as INTEGER_KINDS  # importable from here
from coded_fl.layout.integers import MAX_INTEGER_WEIGHT as MAX_INTEGER_WEIGHT  # importable here
from coded_fl.layout.pack import LayoutPacking
from coded_fl.layout.unpack import DecodedUpdate, LayoutUnpacking

__all__ = [
    "EXTRAS",
    "INTEGER_BASE",
    "INTEGER_DIGITS",
    "MAX_COUNT",
    "METRIC_BOUND",
    "DecodedUpdate",
    "UpdateLayout",
    "array_layout",
    "check_same_layout",
    "count_unit",
    "element_count",
    "flatten",
    "integer_digits",
    "integer_names",
    "integer_values",
    "integers_from_digits",
    "npy_header",
]


@dataclass(frozen=True)
class UpdateLayout(LayoutPacking, LayoutUnpacking):
    """Where the model, the weight, the clip counts and the metrics sit in the update vector.

    Parameters
    ----------
    model_size
        d, the number of model coordinates.
    metric_keys
        Names of the metrics carried, in order.
    scale
        The quantization scale s the vectors will be quantized with (the protocol's
        ``quantization.scale``; both adapters pass it): the clip counts travel as multiples of
        :func:`count_unit` of it, so they quantize exactly. None (default): for vectors that
        are not quantized (analysis, tests): the unit then derives from the clip range.
    integer_names
        The model's integer arrays (:func:`integer_names` of the run's initial model), in key
        order: summed exactly (module docstring), not flattened into the d model coordinates.
    integer_size
        e, their number of elements.
    """
