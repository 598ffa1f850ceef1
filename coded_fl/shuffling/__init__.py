"""Coded data shuffling: move units between silos with coded multicasts (no Flower here).

Modules, bottom up: :mod:`~coded_fl.shuffling.theory` (load formulas, lower bound, sources),
:mod:`~coded_fl.shuffling.units` (unit ids, hashes, padded layout),
:mod:`~coded_fl.shuffling.placement` (assignments, gradient-code placement, cache, storage),
:mod:`~coded_fl.shuffling.planner` (centralized / decentralized / uncoded plans),
:mod:`~coded_fl.shuffling.codec` (vectorised XOR encode/decode),
:mod:`~coded_fl.shuffling.session` (sans-IO sender, silo and relay state machines, AES-GCM),
:mod:`~coded_fl.shuffling.store` (a silo's atomic on-disk unit store),
:mod:`~coded_fl.shuffling.silo` (a store meets a plan: placement, side information, commit).
The transport through an untrusted relay: :mod:`~coded_fl.shuffling.groupkey` (the epoch's
group key from the project's key agreement), :mod:`~coded_fl.shuffling.wire` (public job,
packets), :mod:`~coded_fl.shuffling.shares` (sealed manifest shares),
:mod:`~coded_fl.shuffling.member` (a silo's or the sender's machine),
:mod:`~coded_fl.shuffling.coordinator` (the relay's machine), :mod:`~coded_fl.shuffling.routing`
(its plan and forwarding), :mod:`~coded_fl.shuffling.results` (what an epoch did),
:mod:`~coded_fl.shuffling.loopback` (both in one process).

The in-memory harness (K silos in one process: ``simulate``, ``silo_buffer``) is a test and
simulation helper, not part of the library: ``simulations/runtime/shuffle_harness.py``.
"""

from coded_fl.shuffling.codec import SegmentBuffer, cached_subfiles, decode, encode
from coded_fl.shuffling.coordinator import RelayCoordinator, RelayStage
from coded_fl.shuffling.groupkey import Roster, derive_key, make_group_key, open_group_key
from coded_fl.shuffling.loopback import run_loopback
from coded_fl.shuffling.member import MemberStage, ShuffleMember
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
from coded_fl.shuffling.results import ShuffleResult, SiloOutcome
from coded_fl.shuffling.routing import relay_plan, suspect_senders
from coded_fl.shuffling.session import (
    DeliveryReport,
    RelaySession,
    SenderSession,
    ShuffleMessage,
    SiloSession,
)
from coded_fl.shuffling.silo import check_holdings, commit_delivery, install_silo, load_silo
from coded_fl.shuffling.store import UnitStore
from coded_fl.shuffling.theory import (
    acyclic_bound,
    centralized_load,
    centralized_lower_bound,
    decentralized_load,
    fanout_load,
    holder_cut_bound,
    reshuffle_bounds,
    storage_for_level,
    swap_fanout_load,
    uncoded_load,
    worst_case_loads,
)
from coded_fl.shuffling.units import Layout, UnitId, UnitManifest, UnitSpec, digest
from coded_fl.shuffling.wire import ShuffleJob

__all__ = [
    "CENTRAL",
    "Assignment",
    "DeliveryReport",
    "Layout",
    "MemberStage",
    "Mode",
    "RelayCoordinator",
    "RelaySession",
    "RelayStage",
    "Roster",
    "SegmentBuffer",
    "SenderSession",
    "ShuffleJob",
    "ShuffleMember",
    "ShuffleMessage",
    "ShufflePlan",
    "ShuffleResult",
    "SiloOutcome",
    "SiloSession",
    "UnitId",
    "UnitManifest",
    "UnitSpec",
    "UnitStore",
    "acyclic_bound",
    "assignment_from_support",
    "batch_assignment",
    "cached_subfiles",
    "centralized_load",
    "centralized_lower_bound",
    "check_holdings",
    "check_storage",
    "commit_delivery",
    "cyclic_assignment",
    "decentralized_load",
    "decode",
    "derive_key",
    "digest",
    "encode",
    "fanout_load",
    "holder_cut_bound",
    "install_silo",
    "largest_level",
    "load_silo",
    "make_group_key",
    "open_group_key",
    "plan_shuffle",
    "relay_plan",
    "reshuffle_bounds",
    "run_loopback",
    "shifted_assignment",
    "storage_for_level",
    "suspect_senders",
    "swap_fanout_load",
    "uncoded_load",
    "worst_case_loads",
]
