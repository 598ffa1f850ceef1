"""``ShuffledTraining``: coded shuffling places the gradient code's data, then reshuffles it.

A recipe next to :class:`strategies.CodedSecAgg` (it wraps one, and a
:class:`strategies.shuffle.ShuffleRelay`)::

    strategy = CodedSecAgg(FedAvg(), num_silos=10, num_stragglers=2, privacy_threshold=2)
    run = ShuffledTraining(strategy, ShuffleRelay(grid), units_per_silo=8, reshuffle_every=5)
    result = run.start(grid=grid, initial_arrays=arrays, num_rounds=30, evaluate_fn=evaluate)

1. **Placement** (before round 1). Silo j starts with its own data only, cut into units
   ``s<j>-0..`` (:mod:`coded_fl.shuffling.partitions`); partition j is silo j's data. The
   gradient code's support B decides who must hold what
   (:func:`~coded_fl.shuffling.partitions.code_assignment`), so the placement and the code
   cannot disagree; one decentralized shuffle epoch moves the units.
2. **Rounds**: ``CodedSecAgg.start`` with the nodes the shuffle members answered from (silo i
   of the code is shuffle member i) and each round's partition map in its train config
   (``codedfl.partition-units``), from which :func:`clients.data.partition_arrays` reads
   partition k's units out of the silo's store.
3. **Reshuffle** (before rounds E + 1, 2E + 1, ...; ``reshuffle_every`` = E, 0 = never):
   the coordinator draws the next partition map, the holders follow from B again, and one
   shuffle epoch moves the units, from what each silo verifiably holds. ``reshuffle="coded"``
   pairs units across partitions whose holder sets meet
   (:func:`~coded_fl.shuffling.partitions.swapped_partitions`), and each pair goes as one XOR
   from a silo that holds both: half the uploads of sending each moved unit once. It needs
   overlapping supports (the polynomial code); the repetition code's disjoint groups admit no
   coded reshuffle at all (``docs/shuffling.md``), so there ``"auto"`` (the default) deals
   every unit to a uniformly random partition
   (:func:`~coded_fl.shuffling.partitions.mixed_partitions`, ``reshuffle="uniform"``).

Failures: the server's view of each silo's store (:class:`~coded_fl.shuffling.partitions.
Holdings`) follows every epoch's outcome; a silo that missed part of an epoch keeps its old
units plus the verified new ones, so it is not given partitions it does not hold: its train
function finds a unit missing and refuses (:class:`clients.data.MissingDataError`), and the round
counts it as a straggler (the code tolerates s). The next reshuffle's current assignment is
what its store holds, so that epoch repairs it. Stores hold only SHA-256 verified units.

The whole run is one ``CodedSecAgg.start`` (one key exchange); a reshuffle runs between two
rounds (``before_round``), outside the rounds' time.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from coded_fl.errors import ConfigurationError
from coded_fl.shuffling.partitions import (
    Holdings,
    mixed_partitions,
    own_assignment,
    own_partitions,
    swap_partners,
    swapped_partitions,
)
from coded_fl.shuffling.transport.results import ShuffleResult
from coded_fl.vocabulary import PARTITION_UNITS_ENTRY

from .coded_secagg import CodedSecAgg
from .placement_epochs import EpochBytes, ShuffleEpochs
from .report import RoundReport
from .shuffle import ShuffleRelay

__all__ = ["EpochBytes", "ShuffledTraining", "partition_units_json"]

LOG = logging.getLogger("flwr")


def partition_units_json(parts: tuple[tuple[object, ...], ...]) -> str:
    """The train config's ``codedfl.partition-units`` value.

    Parameters
    ----------
    parts
        The partition map.

    Returns
    -------
    str
        ``[[unit ids of partition 0], ...]`` as JSON.
    """
    return json.dumps([list(p) for p in parts])


@dataclass
class ShuffledTraining(ShuffleEpochs):
    """Coded shuffling places and reshuffles the data of a :class:`CodedSecAgg` run.

    Parameters
    ----------
    strategy
        The coded secure aggregation (``num_silos`` must be set: it is K of the shuffle).
    relay
        The shuffle transport over the same grid.
    units_per_silo
        Units each silo cuts its own data into (the granularity of mixing).
    reshuffle_every
        E: reshuffle before rounds E + 1, 2E + 1, ... (0: place once, never reshuffle).
    t
        The storage level of the epochs. Silos that start with their own data only hold no
        caches, so only t = 0 works from such a start. At t = 0 each moved unit is uploaded
        once and the relay forwards it to all of its new holders (the s + 1 silos of its
        partition's support): 1/s of plain copying's uploads for the placement, 1/(s + 1) for a
        reshuffle between disjoint supports; each silo still downloads every unit it lacks.
    reshuffle
        How the coordinator draws a reshuffle's partition map: ``"coded"`` (pairs of units
        traded between partner partitions, one XOR per pair; needs a code whose supports
        overlap, e.g. ``code="polynomial"``), ``"uniform"`` (every unit to a uniformly random
        partition, each moved unit sent once) or ``"auto"``: coded when the code allows it.
    seed
        Seeds the reshuffles' permutations (the same seed gives the same partitions).
    placement_retries
        Epochs to run again after a placement or reshuffle (moving only what is missing, not
        from the senders that failed others, :meth:`place`) while more than s silos lack
        their partitions: no round could complete.
    settle_timeout
        Before a reshuffle, the longest wait for the previous rounds' stragglers to answer
        (:meth:`CodedSecAgg.settle`; 0, the default: no wait). In Flower's simulation engine
        two messages of one node may run at once and the one that ends last writes the node's
        context back over the other's. The shuffle's own state is not in the context
        (:mod:`clients.shuffle`), so it needs no wait; set this if your ClientApp keeps node
        state (``context.state``) that a shuffle message running beside a late train call
        must not overwrite. A silo that is gone costs this wait once per reshuffle.
    progress
        Called with each epoch's line (default: the ``flwr`` logger).

    Attributes
    ----------
    epochs, results
        Every epoch's :class:`EpochBytes` and :class:`~coded_fl.shuffling.ShuffleResult`.
    reports
        Every round's report.
    """

    strategy: CodedSecAgg
    relay: ShuffleRelay
    units_per_silo: int
    reshuffle_every: int = 0
    t: int = 0
    reshuffle: str = "auto"
    seed: int = 0
    placement_retries: int = 2
    settle_timeout: float = 0.0
    progress: Callable[[str], None] | None = None
    epochs: list[EpochBytes] = field(default_factory=list)
    reports: list[RoundReport] = field(default_factory=list)
    results: list[ShuffleResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.strategy.protocol.num_silos is None:
            raise ConfigurationError(
                "ShuffledTraining needs CodedSecAgg(num_silos=...): the shuffle places "
                "partitions on that many silos"
            )
        if not (math.isfinite(self.settle_timeout) and self.settle_timeout >= 0):
            raise ConfigurationError(
                f"settle_timeout must be a finite number of seconds >= 0, got "
                f"{self.settle_timeout!r}"
            )
        if self.units_per_silo < 1 or self.reshuffle_every < 0:
            raise ConfigurationError(
                f"units_per_silo must be >= 1 and reshuffle_every >= 0 (0: never), got "
                f"{self.units_per_silo} and {self.reshuffle_every}"
            )
        self.K = int(self.strategy.protocol.num_silos)
        self.support = self.strategy.gradient_code(self.K).matrix != 0
        if self.reshuffle not in ("auto", "coded", "uniform"):
            raise ConfigurationError(
                f"reshuffle must be 'auto', 'coded' or 'uniform', got {self.reshuffle!r}"
            )
        codable = any(swap_partners(self.support).values())
        if self.reshuffle == "coded" and not codable:
            raise ConfigurationError(
                "reshuffle='coded' needs a gradient code whose partitions' holder sets overlap "
                "(code='polynomial'): this code's groups are disjoint, so no silo holds two "
                "units that trade places and every moved unit must be sent alone (the fan-out "
                "is already the least any scheme uploads there); use reshuffle='uniform' or "
                "'auto'"
            )
        self.coded_reshuffle = codable and self.reshuffle != "uniform"
        self.parts = own_partitions(self.K, self.units_per_silo)
        self.holdings = Holdings.from_assignment(own_assignment(self.parts), self.K)
        self._rng = np.random.default_rng(self.seed)
        self._say = self.progress or (lambda line: LOG.info(line))

    def silo_nodes(self, grid: Grid) -> list[int]:
        """Silo i's node: the node shuffle member i answered from (members that never
        answered get the remaining connected nodes, in sorted order).

        Parameters
        ----------
        grid
            The Flower grid.

        Returns
        -------
        list[int]
        """
        known = dict(self.relay.nodes_of_members)
        rest = iter(sorted(set(grid.get_node_ids()) - set(known.values())))
        out = []
        for k in range(self.K):
            node = known.get(k, next(rest, None))
            if node is None:
                raise ConfigurationError(
                    f"silo {k} has no node: fewer than num_silos={self.K} nodes are connected"
                )
            out.append(node)
        return out

    # ------------------------------------------------------------------ the run
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int,
        *,
        train_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Placement, then ``num_rounds`` rounds with a reshuffle every E rounds.

        Parameters
        ----------
        grid
            The Flower grid.
        initial_arrays
            The initial model.
        num_rounds
            Rounds to run.
        train_config
            Passed to the wrapped strategy's ``configure_train`` (the partition map is added).
        evaluate_fn
            Server-side evaluation, as for ``CodedSecAgg.start``.

        Returns
        -------
        Result
            Flower's result of the run.
        """
        run_id = f"flwr-run-{getattr(grid.run, 'run_id', 0)}"
        self.place(run_id, before_round=1)
        E = self.reshuffle_every

        def before_round(r: int) -> ConfigRecord:
            if E and r > 1 and (r - 1) % E == 0:  # before rounds E + 1, 2E + 1, ...
                t0 = time.monotonic()
                busy = self.strategy.settle(self.settle_timeout) if self.settle_timeout else []
                waited = time.monotonic() - t0
                if busy:
                    self._say(
                        f"[coded-fl shuffle] nodes {busy} still had not answered round {r - 1} "
                        f"after {self.settle_timeout:g}s; reshuffling anyway"
                    )
                self.parts = (
                    swapped_partitions(self.parts, self.support, rng=self._rng)
                    if self.coded_reshuffle
                    else mixed_partitions(self.parts, rng=self._rng)
                )
                self.place(run_id, before_round=r, waited=waited)
            return ConfigRecord({PARTITION_UNITS_ENTRY: partition_units_json(self.parts)})

        result = self.strategy.start(
            grid=grid,
            initial_arrays=initial_arrays,
            num_rounds=num_rounds,
            train_config=train_config,
            evaluate_fn=evaluate_fn,
            silo_nodes=self.silo_nodes(grid),
            before_round=before_round,
        )
        self.reports = list(self.strategy.reports)
        return result
