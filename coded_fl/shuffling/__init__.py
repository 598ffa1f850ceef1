"""Coded data shuffling: move units between silos with coded multicasts (no Flower here).

Modules, bottom up: :mod:`~coded_fl.shuffling.theory` (load formulas, lower bound, sources),
:mod:`~coded_fl.shuffling.units` (unit ids, hashes, padded layout),
:mod:`~coded_fl.shuffling.placement` (assignments, gradient-code placement, cache, storage),
:mod:`~coded_fl.shuffling.planner` (centralized / decentralized / uncoded plans),
:mod:`~coded_fl.shuffling.codec` (vectorised XOR encode/decode),
:mod:`~coded_fl.shuffling.session` (sans-IO sender, silo and relay state machines, AES-GCM),
:mod:`~coded_fl.shuffling.store` (a silo's atomic on-disk unit store),
:mod:`~coded_fl.shuffling.harness` (K silos in memory).
"""

from coded_fl.shuffling.codec import SegmentBuffer, cached_subfiles, decode, encode
from coded_fl.shuffling.harness import (
    ShuffleOutcome,
    install_silo,
    load_silo,
    silo_buffer,
    simulate,
)
from coded_fl.shuffling.placement import (
    Assignment,
    assignment_from_support,
    batch_assignment,
    check_storage,
    cyclic_assignment,
    largest_level,
    shifted_assignment,
)
from coded_fl.shuffling.planner import CENTRAL, Mode, ShufflePlan, plan_shuffle
from coded_fl.shuffling.session import (
    DeliveryReport,
    RelaySession,
    SenderSession,
    ShuffleMessage,
    SiloSession,
)
from coded_fl.shuffling.store import UnitStore
from coded_fl.shuffling.theory import (
    centralized_load,
    centralized_lower_bound,
    decentralized_load,
    storage_for_level,
    uncoded_load,
    worst_case_loads,
)
from coded_fl.shuffling.units import Layout, UnitId, UnitManifest, UnitSpec, digest

__all__ = [
    "CENTRAL",
    "Assignment",
    "DeliveryReport",
    "Layout",
    "Mode",
    "RelaySession",
    "SegmentBuffer",
    "SenderSession",
    "ShuffleMessage",
    "ShuffleOutcome",
    "ShufflePlan",
    "SiloSession",
    "UnitId",
    "UnitManifest",
    "UnitSpec",
    "UnitStore",
    "assignment_from_support",
    "batch_assignment",
    "cached_subfiles",
    "centralized_load",
    "centralized_lower_bound",
    "check_storage",
    "cyclic_assignment",
    "decentralized_load",
    "decode",
    "digest",
    "encode",
    "install_silo",
    "largest_level",
    "load_silo",
    "plan_shuffle",
    "shifted_assignment",
    "silo_buffer",
    "simulate",
    "storage_for_level",
    "uncoded_load",
    "worst_case_loads",
]
