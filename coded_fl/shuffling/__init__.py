"""Coded data shuffling: move units between silos with coded multicasts (no Flower here).

Four layers, bottom up; each imports only the layers below it:

1. :mod:`~coded_fl.shuffling.plan`: what moves and what it can cost (load formulas and bounds,
   unit ids, placements and caches, the centralized / decentralized / uncoded planner);
2. :mod:`~coded_fl.shuffling.codec`: the vectorised XOR encode/decode of a plan's messages;
3. :mod:`~coded_fl.shuffling.storage`: one shuffle at a silo (the sans-IO sender, silo and relay
   machines, AES-GCM; the atomic on-disk unit store; a store meeting a plan);
4. :mod:`~coded_fl.shuffling.transport`: the shuffle through an untrusted relay (group key,
   wire format, sealed manifest shares, the members' and the relay's machines, an epoch's
   results, a loopback of both in one process).

:mod:`~coded_fl.shuffling.partitions` sits on top: the gradient code's partitions made of shuffle
units, and how an epoch's results change them. This module re-exports the public names of all
of them; import from here.

The in-memory harness (K silos in one process: ``simulate``, ``silo_buffer``) is a test and
simulation helper, not part of the library: ``simulations/runtime/shuffle_harness.py``.
"""

from coded_fl.shuffling.codec import SegmentBuffer, cached_subfiles, decode, encode
from coded_fl.shuffling.plan.placement import (
    Assignment,
    assignment_from_support,
    batch_assignment,
    check_storage,
    cyclic_assignment,
    largest_level,
    shifted_assignment,
)
from coded_fl.shuffling.plan.planner import CENTRAL, Mode, ShufflePlan, plan_shuffle
from coded_fl.shuffling.plan.sources import balanced_reassignment, sourced_load
from coded_fl.shuffling.plan.theory import (
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
from coded_fl.shuffling.plan.units import Layout, UnitId, UnitManifest, UnitSpec, digest
from coded_fl.shuffling.storage.session import (
    DeliveryReport,
    RelaySession,
    SenderSession,
    ShuffleMessage,
    SiloSession,
)
from coded_fl.shuffling.storage.silo import check_holdings, commit_delivery, install_silo, load_silo
from coded_fl.shuffling.storage.store import UnitStore
from coded_fl.shuffling.transport.coordinator import RelayCoordinator, RelayStage
from coded_fl.shuffling.transport.groupkey import Roster, derive_key, make_group_key, open_group_key
from coded_fl.shuffling.transport.loopback import run_loopback
from coded_fl.shuffling.transport.member import MemberStage, ShuffleMember
from coded_fl.shuffling.transport.results import ShuffleResult, SiloOutcome
from coded_fl.shuffling.transport.routing import relay_plan, suspect_senders
from coded_fl.shuffling.transport.wire import ShuffleJob

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
    "balanced_reassignment",
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
    "sourced_load",
    "storage_for_level",
    "suspect_senders",
    "swap_fanout_load",
    "uncoded_load",
    "worst_case_loads",
]
