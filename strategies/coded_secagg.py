"""``CodedSecAgg``: coded secure aggregation around any Flower strategy.

::

    strategy = CodedSecAgg(FedAvg(), num_stragglers=2, privacy_threshold=2)
    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=10)

The wrapper runs the round loop itself (``Strategy.start`` waits for every reply; this one never
waits for the slowest s silos): keys once per run, then per round a train request to every
silo, the first max(n-s, U) uploads, a recovery request to those silos, the exact sum. The
decoded weighted average is handed to the wrapped strategy's ``aggregate_train`` as if one silo
had sent it, so server-side optimisers (FedAdam, FedYogi, FedAvgM, ...) work unchanged; its
``configure_train`` still makes the train config (FedProx's ``proximal-mu`` etc.) and evaluation
is the wrapped strategy's, passed through. A round that cannot complete leaves the model as it
was and says why.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from coded_fl.errors import CodedFLError, ConfigurationError, RemoteProtocolError
from coded_fl.secagg import ProtocolConfig, RoundAborted, RoundResult, ServerMachine
from coded_fl.secagg.client import NEEDS_KEYS
from coded_fl.secagg.messages import KeyReply, RecoveryReply, Upload
from coded_fl.secagg.messages import Message as ProtocolMessage
from strategies.exchange import Exchange
from strategies.records import (
    MSG_KEY,
    TRAIN_KEY,
    TrainSpec,
    accused_in,
    flatten,
    keep_layout,
    message_from,
    message_record,
    unflatten,
)
from strategies.roster import RosterGrid

__all__ = ["CodedSecAgg", "RoundReport"]

LOG = logging.getLogger("flwr")
#: Metrics travel scaled by clip_range / METRIC_BOUND (see clients.mod).
METRIC_BOUND = 1000.0


@dataclass
class RoundReport:
    """What happened in one round (also printed as the progress line)."""

    round: int
    ok: bool
    reason: str = ""
    silos: int = 0
    replies_used: int = 0
    stragglers: tuple[int, ...] = ()
    responders: int = 0
    close_seconds: float = 0.0
    seconds: float = 0.0
    total_weight: float = 0.0
    clipped_fraction: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    suspects: tuple[int, ...] = ()
    #: silo -> what another silo reported about it (a share that failed authentication)
    accused: dict[int, str] = field(default_factory=dict)
    #: protocol round trips in this round: a rekey (if any) + train/upload + recovery
    round_trips: int = 0
    #: silos that got new keys before this round (restarted or replaced nodes)
    rekeyed: tuple[int, ...] = ()
    #: the wrapped strategy's aggregate of this round (None if the round was aborted)
    arrays: ArrayRecord | None = field(default=None, repr=False)
    train_metrics: MetricRecord | None = field(default=None, repr=False)

    def line(self) -> str:
        acc = next((f"{k}={v:.4f}" for k, v in self.metrics.items() if "acc" in k), "")
        named = "".join(f"; silo {s} accused: {why}" for s, why in sorted(self.accused.items()))
        rekeyed = f" (rekeyed silo(s) {list(self.rekeyed)})" if self.rekeyed else ""
        if not self.ok:
            return (
                f"[coded-fl] round {self.round}: ABORTED after {self.seconds:.2f}s, model "
                f"unchanged: {self.reason}{named}{rekeyed}"
            )
        return (
            f"[coded-fl] round {self.round}: used {self.replies_used}/{self.silos} replies, "
            f"skipped {len(self.stragglers)} straggler(s) {list(self.stragglers)}, closed at "
            f"{self.close_seconds:.2f}s, round {self.seconds:.2f}s"
            + (f", {acc}" if acc else "")
            + (f", clipped {100 * self.clipped_fraction:.2f}%" if self.clipped_fraction else "")
            + f", {self.round_trips} round trips{rekeyed}{named}"
        )


class CodedSecAgg(Strategy):
    """Straggler-tolerant secure aggregation wrapped around ``strategy``.

    Parameters
    ----------
    strategy
        Any ``flwr.serverapp.strategy.Strategy`` (FedAvg, FedProx, FedAdam, FedYogi, ...).
    num_stragglers
        s: every round completes from the first n - s uploads.
    privacy_threshold
        T: up to T silos colluding with the server learn nothing beyond the sum.
    recovery_threshold
        U (T < U <= n - s): recovery replies needed to unmask; default n - s.
    num_silos
        n; default: all nodes connected once the wrapped strategy's ``min_available_nodes``
        are there.
    clip_range
        Each entry of :math:`(w_k/W)(\\theta_k - \\theta)` is clipped to this range.
    scale
        Quantization scale; default the finest that cannot wrap around (with headroom).
    max_weight
        W, the largest sample weight (``num-examples``) a partition may report.
    metric_keys
        Train metrics to aggregate securely (weighted by the sample weights).
    code
        ``"auto"``, ``"polynomial"`` or ``"repetition"``.
    extra_replies, extra_wait
        Wait up to ``extra_wait`` seconds for ``extra_replies`` uploads beyond n - s, to check
        that replicas agree (1 detects, 2 names the silo).
    round_timeout, recovery_timeout, key_timeout, node_wait_timeout, evaluate_timeout
        Deadlines (seconds) of the stages; nothing waits longer.
    progress
        Called with a :class:`RoundReport` after every round (default: log the line).
    """

    def __init__(
        self,
        strategy: Strategy,
        *,
        num_stragglers: int,
        privacy_threshold: int,
        recovery_threshold: int | None = None,
        num_silos: int | None = None,
        clip_range: float = 1.0,
        scale: float | None = None,
        max_weight: float = 1000.0,
        metric_keys: Iterable[str] = (),
        code: str = "auto",
        extra_replies: int = 0,
        extra_wait: float = 2.0,
        headroom_bits: int = 8,
        round_timeout: float = 600.0,
        recovery_timeout: float = 60.0,
        key_timeout: float = 120.0,
        node_wait_timeout: float = 300.0,
        evaluate_timeout: float | None = None,
        poll_interval: float = 0.05,
        progress: Callable[[RoundReport], None] | None = None,
    ) -> None:
        if not isinstance(strategy, Strategy):
            raise ConfigurationError(
                "strategy must be a flwr.serverapp.strategy.Strategy, got "
                f"{type(strategy).__name__}"
            )
        for name, value in (
            ("round_timeout", round_timeout),
            ("recovery_timeout", recovery_timeout),
            ("key_timeout", key_timeout),
            ("node_wait_timeout", node_wait_timeout),
            ("poll_interval", poll_interval),
            ("extra_wait", extra_wait),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigurationError(f"{name} must be a finite number >= 0, got {value!r}")
        if not (isinstance(max_weight, (int, float)) and max_weight > 0):
            raise ConfigurationError(f"max_weight must be > 0, got {max_weight!r}")
        self.strategy = strategy
        self.num_stragglers = num_stragglers
        self.privacy_threshold = privacy_threshold
        self.recovery_threshold = recovery_threshold
        self.num_silos = num_silos
        self.clip_range = clip_range
        self.scale = scale
        self.code = code
        self.extra_replies = extra_replies
        self.extra_wait = float(extra_wait)
        self.headroom_bits = headroom_bits
        self.round_timeout = float(round_timeout)
        self.recovery_timeout = float(recovery_timeout)
        self.key_timeout = float(key_timeout)
        self.node_wait_timeout = float(node_wait_timeout)
        self.evaluate_timeout = float(
            round_timeout if evaluate_timeout is None else evaluate_timeout
        )
        self.poll_interval = float(poll_interval)
        self.progress = progress or (lambda r: LOG.info(r.line()))
        self.spec = TrainSpec(
            arrays_key=getattr(strategy, "arrayrecord_key", "arrays"),
            config_key=getattr(strategy, "configrecord_key", "config"),
            weight_key=getattr(strategy, "weighted_by_key", "num-examples"),
            max_weight=float(max_weight),
            metric_keys=tuple(metric_keys),
        )
        self.reports: list[RoundReport] = []
        #: the public run id seeds derive from (set by start); a comparison run can reuse it
        self.run_id: str | None = None
        self._limit = math.inf
        self.late_train: dict[int, list[float]] = {}
        #: (before round, silos asked) of every key exchange of the run: (1, all) once, then
        #: one entry per rekey of restarted or replaced silos
        self.key_exchanges: list[tuple[int, tuple[int, ...]]] = []
        self._activated: dict[int, str] = {}  # node -> last_activated_at when its key came
        self._needs_keys: set[int] = set()  # silos whose reply said they hold no keys
        if num_silos is not None:  # validate the settings now, before any node is contacted
            self._config(num_silos, vector_length=1, run_id="check")

    # ------------------------------------------------------------------ Strategy interface
    def summary(self) -> None:
        LOG.info(
            "\t├──> CodedSecAgg: s=%s T=%s U=%s n=%s clip_range=%s code=%s max_weight=%s",
            self.num_stragglers,
            self.privacy_threshold,
            self.recovery_threshold or "n-s",
            self.num_silos or "all",
            self.clip_range,
            self.code,
            self.spec.max_weight,
        )
        self.strategy.summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        raise CodedFLError(
            "CodedSecAgg runs its own round loop (it must act on the first replies): call "
            "strategy.start(grid=..., initial_arrays=..., num_rounds=...) instead of driving "
            "configure_train/aggregate_train yourself"
        )

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        return self.strategy.aggregate_train(server_round, replies)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(server_round, replies)

    # ------------------------------------------------------------------ configuration
    def _config(
        self, n: int, *, vector_length: int, run_id: str, session: str = ""
    ) -> ProtocolConfig:
        return ProtocolConfig(
            num_silos=n,
            num_stragglers=self.num_stragglers,
            privacy_threshold=self.privacy_threshold,
            recovery_threshold=self.recovery_threshold,
            vector_length=vector_length,
            clip_range=self.clip_range,
            scale=self.scale,
            code=self.code,
            extra_replies=self.extra_replies,
            headroom_bits=self.headroom_bits,
            run_id=run_id,
            session=session,
        )

    def _wait_for_nodes(self, grid: Grid) -> list[int]:
        want = self.num_silos or int(getattr(self.strategy, "min_available_nodes", 2))
        deadline = time.monotonic() + self.node_wait_timeout
        while True:
            nodes = sorted(grid.get_node_ids())
            if len(nodes) >= want:
                return nodes[: self.num_silos] if self.num_silos else nodes
            if time.monotonic() >= deadline:
                raise ConfigurationError(
                    f"only {len(nodes)} nodes connected after {self.node_wait_timeout:.0f}s, "
                    f"num_silos={want} are needed: start more SuperNodes (or simulation "
                    "nodes, options.num-supernodes) or lower num_silos"
                )
            LOG.info("[coded-fl] waiting for nodes: %d of %d connected", len(nodes), want)
            time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))

    def _check_inner(self, n: int) -> None:
        inner = self.strategy
        for attr in ("min_available_nodes", "min_train_nodes"):
            v = getattr(inner, attr, None)
            if isinstance(v, int) and v > n:
                raise ConfigurationError(
                    f"the wrapped strategy's {attr}={v} exceeds the {n} silos: lower it to <= {n}"
                )
        frac = getattr(inner, "fraction_train", 1.0)
        if isinstance(frac, (int, float)) and frac < 1.0:
            LOG.warning(
                "[coded-fl] fraction_train=%s is ignored: every silo trains its "
                "partitions in every round (gradient coding needs all of them)",
                frac,
            )

    # ------------------------------------------------------------------ the run
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Run ``num_rounds`` rounds of coded secure aggregation (see the module docstring).

        ``timeout`` caps every stage deadline (as ``Strategy.start``'s timeout caps each wait
        for replies); the stage deadlines themselves are the constructor's.
        """
        train_config = ConfigRecord() if train_config is None else train_config
        evaluate_config = ConfigRecord() if evaluate_config is None else evaluate_config
        nodes = self._wait_for_nodes(grid)
        n = len(nodes)
        self._check_inner(n)
        theta = flatten(initial_arrays)
        d = theta.numel() + 2 + len(self.spec.metric_keys)
        run_id = f"flwr-run-{getattr(grid.run, 'run_id', 0)}"
        # a fresh session per start(): silos make new keys and restart their round counter
        cfg = self._config(n, vector_length=d, run_id=run_id, session=secrets.token_hex(8))
        self.run_id = run_id
        node_of = dict(enumerate(nodes))
        silo_of = {v: k for k, v in node_of.items()}
        LOG.info("[coded-fl] %s", cfg.describe())
        LOG.info(
            "[coded-fl] partitions per silo: %s",
            {i: list(cfg.gradient_code.support(i)) for i in range(min(n, 12))},
        )
        machine = ServerMachine(cfg)
        ex = Exchange(grid, poll_interval=self.poll_interval)
        self._limit = float(timeout)
        self._key_exchange(machine, ex, node_of, silo_of, before_round=1)

        result = Result(arrays=initial_arrays)
        arrays = initial_arrays
        if evaluate_fn:
            res = evaluate_fn(0, arrays)
            if res is not None:
                result.evaluate_metrics_serverapp[0] = res
        late_seen = 0
        for r in range(1, num_rounds + 1):
            # a restarted silo's "needs keys" reply may come after its round closed
            ex.poll()
            self._needs_keys |= {
                silo_of[late.node_id]
                for late in ex.late[late_seen:]
                if NEEDS_KEYS in late.reason and late.node_id in silo_of
            }
            late_seen = len(ex.late)
            rekeyed = self._membership(grid, machine, ex, node_of, silo_of, r)
            roster_grid = RosterGrid(grid, [node_of[i] for i in range(n)])
            report = self._train_round(
                r, machine, ex, node_of, silo_of, roster_grid, arrays, train_config, cfg
            )
            if rekeyed:
                report.rekeyed = rekeyed
                report.round_trips += 1
            if report.ok and report.arrays is not None:
                arrays = report.arrays
                result.arrays = arrays
                if report.train_metrics is not None:
                    result.train_metrics_clientapp[r] = report.train_metrics
            ev = self._evaluate_round(r, ex, roster_grid, arrays, evaluate_config)
            if ev is not None:
                result.evaluate_metrics_clientapp[r] = ev
                report.metrics.update(
                    {f"eval_{k}": float(v) for k, v in ev.items() if isinstance(v, (int, float))}
                )
            if evaluate_fn:
                res = evaluate_fn(r, arrays)
                if res is not None:
                    result.evaluate_metrics_serverapp[r] = res
                    report.metrics.update(
                        {k: float(v) for k, v in res.items() if isinstance(v, (int, float))}
                    )
            self.reports.append(report)
            self.progress(report)
        ex.drain(min(30.0, self.round_timeout))
        self._late_summary(ex, silo_of)
        return result

    # ------------------------------------------------------------------ stages
    def _membership(
        self,
        grid: Grid,
        machine: ServerMachine,
        ex: Exchange,
        node_of: dict[int, int],
        silo_of: dict[int, int],
        before_round: int,
    ) -> tuple[int, ...]:
        """Before a round: give a silo whose node left to a newly connected node, and rerun the
        key exchange for the silos that need keys: new nodes, nodes the SuperLink reactivated
        since they sent their key (a restarted SuperNode loses ``context.state``), and silos
        whose reply said they hold no keys. Keys are otherwise agreed once per run."""
        connected = set(grid.get_node_ids())
        spare = sorted(connected - set(node_of.values()))
        todo = set(self._needs_keys)
        now = self._activations(grid)
        for silo, node in node_of.items():
            before, after = self._activated.get(node, ""), now.get(node, "")
            if before and after and after != before:
                todo.add(silo)
        for silo, node in sorted(node_of.items()):
            if node not in connected and spare:
                new = spare.pop(0)
                del silo_of[node]
                node_of[silo], silo_of[new] = new, silo
                todo.add(silo)
                LOG.info("[coded-fl] silo %d moved from node %d to new node %d", silo, node, new)
        if not todo:
            return ()
        try:
            self._key_exchange(
                machine, ex, node_of, silo_of, before_round=before_round, silos=sorted(todo)
            )
        except ConfigurationError as exc:  # the old keys stay; those silos remain stragglers
            LOG.warning("[coded-fl] rekeying %s failed: %s", sorted(todo), exc)
        LOG.info("[coded-fl] keys renewed for silo(s) %s", sorted(todo))
        return tuple(sorted(todo))

    @staticmethod
    def _activations(grid: Grid) -> dict[int, str]:
        """node -> when the SuperLink last (re)activated it ("" where it does not say)."""
        try:
            infos = list(grid.get_nodes())
        except Exception:  # a grid without get_nodes (older Flower, test doubles)
            return {}
        return {
            int(i.node_id): str(getattr(i, "last_activated_at", "") or "")
            for i in infos
            if hasattr(i, "node_id")
        }

    def _key_exchange(
        self,
        machine: ServerMachine,
        ex: Exchange,
        node_of: dict[int, int],
        silo_of: dict[int, int],
        *,
        before_round: int,
        silos: list[int] | None = None,
    ) -> None:
        errors: dict[int, str] = {}
        stamps = self._activations(ex.grid)
        requests = machine.start_key_exchange(silos)
        self.key_exchanges.append((before_round, tuple(q.recipient for q in requests)))
        msgs = [self._flower(node_of[q.recipient], q) for q in requests]
        ids = ex.push(msgs, stage="keys", round_=before_round - 1)

        def on_reply(node: int, reply: Message) -> bool:
            self._feed(machine, silo_of[node], reply, KeyReply, errors)
            return len(errors) + machine.keys_received >= len(ids)

        ex.collect(ids, on_reply, deadline=self._deadline(self.key_timeout))
        try:
            missing = machine.close_key_exchange()
        except CodedFLError as exc:
            detail = "; ".join(
                f"silo {s} (node {node_of[s]}): {e}" for s, e in sorted(errors.items())
            )
            hint = (
                " A silo that fails the key exchange usually runs a ClientApp without the "
                "coded-fl mod: use ClientApp(mods=[clients.coded_secagg_mod])."
                if errors
                else ""
            )
            raise ConfigurationError(f"{exc}. Replies: {detail or 'none in time'}.{hint}") from None
        for q in requests:
            if q.recipient not in missing:  # keyed now: remember when its node was activated
                self._needs_keys.discard(q.recipient)
                node = node_of[q.recipient]
                if node in stamps:
                    self._activated[node] = stamps[node]
        if missing:
            LOG.warning(
                "[coded-fl] key exchange: no key from silo(s) %s: %s",
                list(missing),
                {s: errors.get(s, "no reply in time") for s in missing},
            )

    def _train_round(
        self,
        r: int,
        machine: ServerMachine,
        ex: Exchange,
        node_of: dict[int, int],
        silo_of: dict[int, int],
        roster_grid: RosterGrid,
        arrays: ArrayRecord,
        train_config: ConfigRecord,
        cfg: ProtocolConfig,
    ) -> RoundReport:
        t0 = time.monotonic()
        report = RoundReport(round=r, ok=False, silos=cfg.n)
        inner_msgs = list(
            self.strategy.configure_train(
                r, arrays, ConfigRecord(dict(train_config.items())), roster_grid
            )
        )
        if not inner_msgs:
            report.reason = "the wrapped strategy configured no training (fraction_train=0?)"
            report.seconds = time.monotonic() - t0
            return report
        content = inner_msgs[0].content
        send_arrays = content.get(self.spec.arrays_key, arrays)
        send_config = (
            content[self.spec.config_key] if self.spec.config_key in content else ConfigRecord()
        )
        train_msgs = []
        for req in machine.start_round(r):
            rec = RecordDict(
                {
                    self.spec.arrays_key: send_arrays,
                    self.spec.config_key: send_config,
                    MSG_KEY: message_record(req),
                    TRAIN_KEY: self.spec.to_record(),
                }
            )
            train_msgs.append(
                Message(
                    content=rec, dst_node_id=node_of[req.recipient], message_type=MessageType.TRAIN
                )
            )
        ids = ex.push(train_msgs, stage="train", round_=r)
        report.round_trips = 1
        deadline = t0 + min(self.round_timeout, self._limit)
        extra_until: list[float] = []

        def on_upload(node: int, reply: Message) -> bool:
            self._feed(machine, silo_of[node], reply, Upload, report.errors)
            if machine.uploads_complete:
                return True
            if machine.uploads_ready and not extra_until:
                extra_until.append(time.monotonic() + self.extra_wait)
            return bool(extra_until) and (
                self.extra_replies == 0 or time.monotonic() >= extra_until[0]
            )

        ex.collect(ids, on_upload, deadline=deadline)  # returns at the close or the deadline
        report.close_seconds = time.monotonic() - t0
        out = machine.close_collection()
        if isinstance(out, RoundAborted):
            return self._aborted(report, out, t0, node_of)
        rec_msgs = [self._flower(node_of[q.recipient], q) for q in out]
        rids = ex.push(rec_msgs, stage="recovery", round_=r)
        report.round_trips = 2

        def on_recovery(node: int, reply: Message) -> bool:
            self._feed(machine, silo_of[node], reply, RecoveryReply, report.errors, report.accused)
            return machine.recovery_ready

        ex.collect(rids, on_recovery, deadline=self._deadline(self.recovery_timeout))
        res = machine.finish()
        if isinstance(res, RoundAborted):
            return self._aborted(report, res, t0, node_of)
        return self._apply(report, res, t0, cfg, arrays, train_msgs[0])

    def _apply(
        self,
        report: RoundReport,
        res: RoundResult,
        t0: float,
        cfg: ProtocolConfig,
        arrays: ArrayRecord,
        template: Message,
    ) -> RoundReport:
        total = res.total
        d_model = cfg.vector_length - 2 - len(self.spec.metric_keys)
        c = cfg.clip_range
        rho_sum = float(total[d_model]) / c
        report.replies_used = len(res.survivors)
        report.stragglers = res.stragglers
        report.responders = len(res.responders)
        if not rho_sum > 0:
            report.reason = f"decoded total weight is {rho_sum:g} (no partition reported examples)"
            report.seconds = time.monotonic() - t0
            return report
        avg_delta = (total[:d_model] / rho_sum).to(torch.float32)
        new = unflatten(flatten(arrays) + avg_delta, arrays)
        report.total_weight = rho_sum * self.spec.max_weight
        report.clipped_fraction = float(total[d_model + 1]) / c / rho_sum
        metrics: dict[str, int | float | list[int] | list[float]] = {
            self.spec.weight_key: report.total_weight
        }
        for j, name in enumerate(self.spec.metric_keys):
            metrics[name] = float(total[d_model + 2 + j]) * METRIC_BOUND / c / rho_sum
        reply = Message(
            RecordDict({self.spec.arrays_key: new, "metrics": MetricRecord(metrics)}),
            reply_to=template,
        )
        agg_arrays, agg_metrics = self.strategy.aggregate_train(report.round, [reply])
        if agg_arrays is None:
            report.reason = (
                f"the wrapped {type(self.strategy).__name__}.aggregate_train returned no arrays"
            )
            report.seconds = time.monotonic() - t0
            return report
        agg_arrays = keep_layout(agg_arrays, arrays)
        report.ok = True
        report.arrays = agg_arrays
        report.train_metrics = agg_metrics
        report.metrics.update(
            {k: float(v) for k, v in metrics.items() if k != self.spec.weight_key}  # type: ignore[arg-type]
        )
        report.seconds = time.monotonic() - t0
        return report

    def _aborted(
        self, report: RoundReport, res: RoundAborted, t0: float, node_of: dict[int, int]
    ) -> RoundReport:
        report.ok = False
        errs = "; ".join(f"silo {s}: {e}" for s, e in sorted(report.errors.items())[:5])
        report.reason = res.reason + (f" (errors: {errs})" if errs else "")
        report.suspects = res.suspects
        report.replies_used = len(res.survivors)
        report.seconds = time.monotonic() - t0
        return report

    def _evaluate_round(
        self,
        r: int,
        ex: Exchange,
        roster_grid: RosterGrid,
        arrays: ArrayRecord,
        evaluate_config: ConfigRecord,
    ) -> MetricRecord | None:
        msgs = list(
            self.strategy.configure_evaluate(
                r, arrays, ConfigRecord(dict(evaluate_config.items())), roster_grid
            )
        )
        if not msgs:
            return None
        replies: list[Message] = []
        ids = ex.push(msgs, stage="evaluate", round_=r)

        def keep(node: int, reply: Message) -> bool:
            replies.append(reply)
            return False  # evaluation waits for every sampled node or its deadline

        ex.collect(ids, keep, deadline=self._deadline(self.evaluate_timeout))
        return self.strategy.aggregate_evaluate(r, replies)

    # ------------------------------------------------------------------ helpers
    def _deadline(self, seconds: float) -> float:
        return time.monotonic() + min(seconds, self._limit)

    def _flower(self, node: int, msg: ProtocolMessage) -> Message:
        return Message(
            content=RecordDict({MSG_KEY: message_record(msg)}),
            dst_node_id=node,
            message_type=MessageType.TRAIN,
        )

    def _feed(
        self,
        machine: ServerMachine,
        silo: int,
        reply: Message,
        kind: type,
        errors: dict[int, str],
        accused: dict[int, str] | None = None,
    ) -> None:
        """Hand a reply to the machine; a silo that errors or misbehaves counts as a straggler.

        An error reply that says the silo holds no keys marks it for a rekey before the next
        round; one that accuses another silo (a share from it failed authentication) is
        recorded in ``accused`` under the accused silo."""
        if reply.has_error():
            reason = str(reply.error.reason)
            errors[silo] = reason
            if NEEDS_KEYS in reason:
                self._needs_keys.add(silo)
            culprit = accused_in(reason)
            if accused is not None and culprit is not None and culprit != silo:
                accused[culprit] = (
                    f"silo {silo} reports that the share silo {culprit} sealed for it failed "
                    "authentication (altered in transit or by its sender)"
                )
                LOG.warning("[coded-fl] silo %d accuses silo %d", silo, culprit)
            return
        try:
            msg = message_from(reply.content)
            if msg is None:
                raise RemoteProtocolError(
                    "replied without coded-fl content: add clients.coded_secagg_mod to its "
                    "ClientApp (ClientApp(mods=[coded_secagg_mod]))",
                    sender=silo,
                )
            if not isinstance(msg, kind) or msg.sender != silo:
                raise RemoteProtocolError(
                    f"sent {type(msg).__name__} as silo {msg.sender}, expected {kind.__name__}",
                    sender=silo,
                )
            machine.receive(msg)
        except CodedFLError as exc:
            errors[silo] = str(exc)
            LOG.warning("[coded-fl] refused a reply from silo %d: %s", silo, exc)

    def _late_summary(self, ex: Exchange, silo_of: dict[int, int]) -> None:
        for late in ex.late:
            if late.stage == "train":
                seen = self.late_train.setdefault(late.round, [])
                seen.append(late.seconds)

    def waiting_estimate(self) -> tuple[float, float]:
        """(seconds the rounds took, seconds they would have taken waiting for every silo).

        Late uploads (and late error replies) are time-stamped when they came; a straggler
        that never answered before the run ended counts the round deadline, as it would for
        a strategy that waits for everyone."""
        ours = sum(r.seconds for r in self.reports)
        wait_all = 0.0
        for r in self.reports:
            late = self.late_train.get(r.round, [])
            slowest = max([r.close_seconds, *late])
            if len(late) < len(r.stragglers):
                slowest = max(slowest, self.round_timeout)
            wait_all += slowest + (r.seconds - r.close_seconds)
        return ours, wait_all
