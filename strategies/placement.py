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
    code_assignment,
    mixed_partitions,
    own_assignment,
    own_partitions,
    partition_holders,
    swap_partners,
    swapped_partitions,
)
from coded_fl.shuffling.transport.results import ShuffleResult
from coded_fl.shuffling.transport.routing import suspect_senders
from coded_fl.shuffling.transport.wire import ShuffleJob
from coded_fl.vocabulary import PARTITION_UNITS_ENTRY

from .coded_secagg import CodedSecAgg
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


@dataclass(frozen=True)
class EpochBytes:
    """What one placement or reshuffle moved (payload bytes on the relay's incoming link).

    Attributes
    ----------
    epoch, before_round
        The shuffle epoch and the round it preceded.
    coded_bytes, plain_bytes
        Bytes of the coded plan and of plain copying (the uncoded plan, same message size).
    load, formula_load, plain_load
        The same in units: measured, the scheme's formula, uncoded.
    t
        The storage level.
    complete, incomplete
        Silos whose store reached the epoch, and the others (stragglers until repaired).
    seconds
        Wall time of the epoch (a reshuffle's includes the wait for the previous round's
        stragglers before it, :meth:`CodedSecAgg.settle`).
    """

    epoch: int
    before_round: int
    coded_bytes: int
    plain_bytes: int
    load: float
    formula_load: float
    plain_load: float
    t: int
    complete: tuple[int, ...]
    incomplete: tuple[int, ...]
    seconds: float

    def line(self) -> str:
        """The progress line of the epoch."""
        kind = "placement" if self.before_round == 1 else "reshuffle"
        ratio = self.coded_bytes / self.plain_bytes if self.plain_bytes else 0.0
        miss = f"; incomplete silos {list(self.incomplete)}" if self.incomplete else ""
        return (
            f"[coded-fl shuffle] {kind} (epoch {self.epoch}, before round {self.before_round}): "
            f"{self.coded_bytes:,} B coded vs {self.plain_bytes:,} B plain copying "
            f"(ratio {ratio:.3f}, t={self.t}; load {self.load:.4g} units, formula "
            f"{self.formula_load:.4g}), {self.seconds:.2f}s{miss}"
        )


@dataclass
class ShuffledTraining:
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
        if self.strategy.num_silos is None:
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
        self.K = int(self.strategy.num_silos)
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

    # ------------------------------------------------------------------ epochs
    def shuffle(
        self,
        run_id: str,
        epoch: int,
        before_round: int,
        *,
        waited: float = 0.0,
        avoid: frozenset[int] = frozenset(),
    ) -> EpochBytes:
        """One epoch from what the silos hold now to the placement of :attr:`parts`.

        The silos report their stores at the hello. If the server's view had fallen behind (a
        delivery reply lost after its commit), the view takes the reported holdings (the relay
        stops such an epoch before any key or data moves when the stale silo had to send), and
        an epoch that did not complete is planned again once, under the next epoch number.
        ``avoid``: silos not to send from (the silent ones of an epoch planned again,
        :meth:`place`): each unit comes from another of its holders if it has one.
        ``waited``: seconds already spent for this epoch (the settle before a reshuffle),
        counted in its :attr:`EpochBytes.seconds`.

        Parameters
        ----------
        run_id
            The run.
        epoch
            The shuffle epoch.
        before_round
            The round the epoch comes before.
        waited
            Seconds already waited for nodes (reported with the epoch).
        avoid
            Senders whose units must come from other holders.
        """
        spent = float(waited)
        for attempt in range(2):
            current = self.holdings.assignment()
            if avoid:  # units come from their other holders where they have any
                current = {u: (h - avoid) or h for u, h in current.items()}
            job = ShuffleJob.make(
                run_id=run_id,
                epoch=epoch + attempt,
                current=current,
                nxt=code_assignment(self.support, self.parts),
                K=self.K,
                t=self.t,
                mode="decentralized",
            )
            res = self.relay.run(job)
            self.results.append(res)
            spent += float(res.seconds.get("total", 0.0))
            corrected = self.holdings.update(res)
            if not (corrected and not res.ok):
                break
            self._say(
                f"[coded-fl shuffle] epoch {job.epoch}: the view of the stores was stale "
                f"({res.aborted}); planning again from what the silos reported"
            )
        unready = self._unready()
        ready = [k for k in range(self.K) if k not in unready]
        out = EpochBytes(
            epoch=job.epoch,
            before_round=before_round,
            coded_bytes=res.uplink_bytes,
            plain_bytes=res.uncoded_uplink_bytes,
            load=res.load,
            formula_load=res.formula_load,
            plain_load=res.uncoded_load,
            t=self.t,
            complete=tuple(ready),
            incomplete=tuple(k for k in range(self.K) if k not in ready),
            seconds=spent,
        )
        self.epochs.append(out)
        self._say(out.line())
        return out

    def place(self, run_id: str, before_round: int, *, waited: float = 0.0) -> EpochBytes:
        """One epoch to :attr:`parts`, then up to :attr:`placement_retries` more while more
        than s silos lack their partitions (no round could complete): each moves only what is
        missing, and sends nothing from the senders that failed others in the epoch before
        (:func:`~coded_fl.shuffling.transport.routing.suspect_senders`: messages waited for in vain,
        or decoded into units that failed their SHA-256 check). Such a sender costs the
        receivers of all its messages their units (with coded reshuffles both units of each
        of its pairs); their other holders send them instead. It is not counted as a holder
        in that epoch, so it is sent again what it holds of its own partitions (a store
        commits a unit it has once).

        Parameters
        ----------
        run_id
            The run.
        before_round
            The round the placement comes before.
        waited
            Seconds already waited for nodes.

        Returns
        -------
        EpochBytes
            The last epoch's figures.
        """
        out = self.shuffle(run_id, len(self.results) + 1, before_round, waited=waited)
        for _ in range(self.placement_retries):
            if len(out.incomplete) <= int(self.strategy.num_stragglers):
                break
            silent = set(suspect_senders(self.results[-1]))
            self._say(
                f"[coded-fl shuffle] {len(out.incomplete)} silos lack their partitions, more "
                f"than s = {self.strategy.num_stragglers}; moving what is missing again, not "
                f"from the silent or failing senders {sorted(silent)}"
            )
            out = self.shuffle(run_id, len(self.results) + 1, before_round, avoid=frozenset(silent))
        return out

    def _unready(self) -> list[int]:
        """Silos that do not hold every unit of their partitions (stragglers of the rounds)."""
        return [
            k
            for k in range(self.K)
            if not self.holdings.ready(k, partition_holders(self.support, k), self.parts)
        ]

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
