"""Partitions of a gradient code made of shuffle units: the placement the code needs, mixing.

Silos start with their own data only. Each silo's data is cut into units (:func:`own_units`),
so silo j starts holding units ``"s<j>-0" .. "s<j>-<u-1>"``. A *partition map* lists the units
of each of the code's K partitions; the gradient code's support (B, n x K) then decides who
holds what (:func:`~coded_fl.shuffling.plan.placement.assignment_from_support`): silo i must hold
every unit of every partition j with :math:`B_{ij} \\ne 0`. The first map is "partition j is
silo j's own data"; a reshuffle draws a new map that deals every unit to a random partition
(:func:`mixed_partitions`), so partitions that started non-IID become mixed.

:class:`Holdings` is the server's view of what each silo verifiably holds, updated from each
epoch's :class:`~coded_fl.shuffling.transport.results.ShuffleResult`: a silo that missed part of an
epoch keeps its old units plus the verified new ones (the store's commit rule), so the next job's
current assignment is exactly what its store holds, and that job repairs it.

A unit's bytes are a NumPy ``.npz`` of named arrays with the same first dimension
(:func:`pack_examples`, :func:`unpack_examples`; no pickles).

>>> parts = own_partitions(3, 2)
>>> parts[1]
('s1-0', 's1-1')
>>> sorted(own_assignment(parts)['s2-1'])
[2]
"""

from coded_fl.shuffling.partitions.holdings import Holdings
from coded_fl.shuffling.partitions.maps import Partitions as Partitions  # the map's type
from coded_fl.shuffling.partitions.maps import (
    code_assignment,
    mixed_partitions,
    own_assignment,
    own_partitions,
    own_units,
    partition_holders,
)
from coded_fl.shuffling.partitions.packing import pack_examples, unpack_examples
from coded_fl.shuffling.partitions.swaps import swap_partners, swapped_partitions

__all__ = [
    "Holdings",
    "code_assignment",
    "mixed_partitions",
    "own_assignment",
    "own_partitions",
    "own_units",
    "pack_examples",
    "partition_holders",
    "swap_partners",
    "swapped_partitions",
    "unpack_examples",
]
