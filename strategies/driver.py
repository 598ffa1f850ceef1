"""The round driver of :class:`strategies.CodedSecAgg`: one run, from keys to the last round.

``CodedSecAgg.start`` makes a :class:`strategies.run.RunState` (everything one run owns: the
server machine, the silo <-> node maps, the reports) and a :class:`RoundDriver` that drives
it; a second ``start`` makes new ones, so two runs never mix. The protocol's messages are
ordered by :class:`coded_fl.secagg.driver.ProtocolDriver` over Flower's Grid
(:class:`strategies.replies.FlowerTransport`); this module adds what a Flower run wraps around
each protocol round. Per round it

1. renews keys where membership changed (:class:`strategies.membership.Membership`): new
   nodes, nodes the SuperLink reactivated since their key, silos that refused with
   ``NEEDS_KEYS``;
2. has the wrapped strategy configure the round, binds its content into the round's inputs
   digest and runs the protocol round (:meth:`RoundDriver.train_round`): train requests, the
   close at the first max(n - s, U) uploads, recovery and evidence where needed, the decode;
   reruns it with a raised weight bound or a wider clip range when the silos or the decoded
   sum say so (:meth:`RoundDriver.fit_round`), and hands the weighted average to the wrapped
   strategy (:meth:`RoundDriver.apply`);
3. runs the wrapped strategy's evaluation, and ``evaluate_fn``.

A silo's reply that cannot be read or is refused makes that silo a straggler of the round
(reported in :attr:`RoundReport.errors`); a round that cannot complete leaves the model as it
was and says why.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from coded_fl.errors import ConfigurationError, DecodingError, RunAbortedError
from coded_fl.layout import flatten
from coded_fl.secagg import RoundAborted, RoundResult
from coded_fl.secagg.driver import ProtocolDriver
from coded_fl.secagg.messages import Message as ProtocolMessage
from coded_fl.secagg.transport import Waits
from coded_fl.vocabulary import (
    CLIP_WIDENING,
    MSG_KEY,
    TRAIN_KEY,
    inputs_digest,
    metric_slot_names,
)

from .composable import one_sum_reply
from .exchange import Exchange
from .membership import Membership
from .records import integer_arrays, keep_layout, message_record, unflatten
from .replies import FlowerTransport, late_reply
from .report import RoundReport
from .roster import RosterGrid
from .run import RunSettings, RunState

__all__ = ["RoundDriver"]

LOG = logging.getLogger("flwr")
#: Above this weighted fraction of clipped update entries a round warns.
CLIP_WARNING = 1e-3


def _numbers(record: MetricRecord) -> dict[str, float]:
    return {k: float(v) for k, v in record.items() if isinstance(v, (int, float))}


def _log_final(result: Result, seconds: float) -> None:
    """Flower's own closing lines (as ``Strategy.start`` prints them)."""
    LOG.info("")
    LOG.info("Strategy execution finished in %.2fs", seconds)
    LOG.info("")
    LOG.info("Final results:")
    LOG.info("")
    for line in io.StringIO(str(result)):
        LOG.info("\t%s", line.strip("\n"))
    LOG.info("")


class RoundDriver:
    """Drives one run of coded secure aggregation over ``grid`` (see the module docstring).

    Parameters
    ----------
    settings
        The wrapper's settings for this run.
    grid
        The Flower grid.
    state
        The run's state (the driver fills its reports).
    """

    def __init__(self, settings: RunSettings, grid: Grid, state: RunState) -> None:
        self.settings = settings
        self.grid = grid
        self.state = state
        self.exchange = Exchange(
            grid,
            poll_interval=settings.poll_interval,
            on_late=lambda late, reply: late_reply(state, late, reply),
        )
        self.transport = FlowerTransport(self.exchange, state)
        self.protocol = ProtocolDriver(
            state.machine, self.transport, notes=state.notes, log=LOG, on_taken=state.taken
        )
        self.membership = Membership(grid, state, self.protocol, key_timeout=settings.key_timeout)
        self._said_dropped = False  # metrics beyond the slots: said once per run

    # ------------------------------------------------------------------ the run
    def run(
        self,
        initial_arrays: ArrayRecord,
        num_rounds: int,
        train_config: ConfigRecord,
        evaluate_config: ConfigRecord,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None,
        before_round: Callable[[int], ConfigRecord | None] | None = None,
    ) -> Result:
        """Keys, then ``num_rounds`` rounds; returns Flower's ``Result`` of the run.
        ``before_round(r)``, when given, runs before round r's train requests (outside the
        round's time) and may return entries to add to that round's train config.

        Parameters
        ----------
        initial_arrays
            The starting model.
        num_rounds
            Flower rounds to run.
        train_config
            The train config of every round.
        evaluate_config
            The evaluate config of every round.
        evaluate_fn
            The server-side evaluation (round, model) -> metrics, or None.
        before_round
            Called before each round's train requests; may return config entries to add.
        """
        st, ex = self.state, self.exchange
        t_start = time.time()
        t_keys = time.monotonic()
        self.membership.key_exchange(before_round=1)
        st.key_seconds = time.monotonic() - t_keys
        result = Result(arrays=initial_arrays)
        arrays = initial_arrays
        if evaluate_fn:
            res = evaluate_fn(0, arrays)
            LOG.info("Initial global evaluation results: %s", res)
            if res is not None:
                result.evaluate_metrics_serverapp[0] = res
        for r in range(1, num_rounds + 1):
            LOG.info("")
            LOG.info("[ROUND %s/%s]", r, num_rounds)
            extra = before_round(r) if before_round is not None else None
            config = (
                ConfigRecord({**dict(train_config.items()), **dict(extra.items())})
                if extra
                else train_config
            )
            report, roster_grid = self.fit_round(r, arrays, config)
            self._stop_after_aborted_rounds(report)
            if report.ok and report.arrays is not None:
                arrays = report.arrays
                result.arrays = arrays
                if report.train_metrics is not None:
                    LOG.info("\t└──> Aggregated MetricRecord: %s", report.train_metrics)
                    result.train_metrics_clientapp[r] = report.train_metrics
            ev = self.evaluate_round(r, roster_grid, arrays, evaluate_config)
            if ev is not None:
                LOG.info("\t└──> Aggregated MetricRecord: %s", ev)
                result.evaluate_metrics_clientapp[r] = ev
                report.evaluate_metrics = _numbers(ev)
            if evaluate_fn:
                LOG.info("Global evaluation")
                res = evaluate_fn(r, arrays)
                LOG.info("\t└──> MetricRecord: %s", res)
                if res is not None:
                    result.evaluate_metrics_serverapp[r] = res
                    report.server_metrics = _numbers(res)
            report.errors.update(st.late_errors.pop(r, {}))
            st.reports.append(report)
            self.settings.progress(report)
        # time-stamp the late replies already in, without waiting for the rest (a silo that
        # hangs would hold the run up to a round deadline): ``CodedSecAgg.settle`` waits for them
        ex.poll()
        _log_final(result, time.time() - t_start)
        return result

    def fit_round(
        self, r: int, arrays: ArrayRecord, train_config: ConfigRecord
    ) -> tuple[RoundReport, RosterGrid]:
        """Round ``r``'s training: keys renewed where membership changed, the coded round
        (rerun if the automatic weight bound rose or entries were clipped), the wrapped
        strategy's aggregate.

        Both the Message-API loop (:meth:`run`) and the legacy fit workflow
        (:class:`strategies.legacy.CodedSecAggWorkflow`) call it once per round.

        Parameters
        ----------
        r
            The Flower round.
        arrays
            The current model.
        train_config
            The round's train config.

        Returns
        -------
        tuple[RoundReport, RosterGrid]
            The round's report (``report.arrays`` is the new model when ``report.ok``) and the
            grid restricted to the run's silos (for the round's evaluation).
        """
        st, ex = self.state, self.exchange
        st.fit_started.setdefault(r, time.monotonic())
        ex.poll()  # a restarted silo's refusal may come after its round closed
        asked, rekeyed = self.membership.renew(r)
        roster_grid = RosterGrid(self.grid, [st.node_of[i] for i in range(st.config.n)])
        st.misconfigured.clear()
        report = self.train_round(r, roster_grid, arrays, train_config)
        reruns, discarded_trips, discarded_seconds = 0, 0, 0.0
        while (
            reruns < MAX_RERUNS
            and not report.ok
            and (self._raise_weight_bound(r) or self._widen_clip_range(r, report))
        ):
            reruns += 1
            discarded_trips += report.round_trips
            discarded_seconds += report.seconds
            report = self.train_round(r, roster_grid, arrays, train_config)
        # refused or clipped attempts cost their round trips and their time: the round's
        # figures count from its first attempt
        report.round_trips += discarded_trips
        report.seconds += discarded_seconds
        report.close_seconds += discarded_seconds
        if not report.ok:
            self._stop_if_hopeless(report)
        report.rekeyed = rekeyed
        report.round_trips += int(asked)
        report.tolerance = st.config.num_stragglers
        report.keyless = tuple(i for i in range(st.config.n) if i not in st.machine.roster)
        report.unawaited = tuple(sorted(st.silent))
        report.silent = self._silent_since(r - 1)
        st.silent = frozenset(report.silent)
        return report, roster_grid

    def _silent_since(self, r: int) -> tuple[int, ...]:
        """Silos the server heard nothing from (no reply in time, late or an error) since round
        ``r``'s training started: () before round 2. One quiet round is a straggler's (it may
        answer late); two are a silo that is gone or hangs: it is named, and the next round
        does not wait for it (still asked: its next reply brings it back)."""
        st, ex = self.state, self.exchange
        since = st.fit_started.get(r)
        if since is None:
            return ()
        ex.poll()  # late replies already in count as heard
        heard = {st.silo_of.get(node) for node in ex.heard_since(since)}
        return tuple(i for i in range(st.config.n) if i not in heard)

    def _raise_weight_bound(self, r: int) -> bool:
        """After a round that more silos refused for the automatic weight bound than a round
        can spare: raise it and say so; False when there is nothing to raise (or the bound is
        fixed). The new bound is the (spare + 1)-th largest asked for: every partition's s + 1
        or more holders ask for its bound, and no set of silos that a round could do without
        (a few misbehaving ones) can push W up (a huge W would cost every silo precision)."""
        st = self.state
        asked = sorted(st.weight_refused.values(), reverse=True)  # train_round resets it
        spare = st.config.n - st.config.min_uploads
        if not self.settings.spec.auto_weight or len(asked) <= spare:
            return False
        needed = asked[spare]
        if needed <= st.weight_bound:
            return False
        LOG.info(
            "[coded-fl] round %d: a partition holds more examples than the weight bound %g: "
            "bound raised to %d, round rerun (protocol round %d)",
            r,
            st.weight_bound,
            needed,
            r + st.round_offset + 1,
        )
        st.weight_bound = float(needed)
        st.round_offset += 1
        return True

    def _widen_clip_range(self, r: int, report: RoundReport) -> bool:
        """After an attempt whose decoded sum says that at least ``clip_quorum`` partitions
        had an entry beyond the clip range (with ``adaptive_clip``; :meth:`apply` then
        discarded it before the wrapped strategy saw it, so the model is unchanged): widen the
        clip range four times (the delta scale g, at most ``max_clip_range``) and say so;
        False otherwise."""
        st, settings = self.state, self.settings
        if not (
            settings.adaptive_clip
            and report.clipped_partitions >= settings.clip_quorum
            and st.delta_scale < settings.max_delta_scale
        ):
            return False
        st.delta_scale = min(settings.max_delta_scale, st.delta_scale * CLIP_WIDENING)
        LOG.info(
            "[coded-fl] round %d: %d of %d partitions had update entries beyond the clip "
            "range (%d entries, clip_quorum=%d): clip range widened to %g, round rerun "
            "(protocol round %d)",
            r,
            report.clipped_partitions,
            st.config.gradient_code.K,
            round(report.clipped_fraction * st.config.gradient_code.K * st.layout.model_size),
            settings.clip_quorum,
            st.config.clip_range * st.delta_scale,
            r + st.round_offset + 1,
        )
        st.round_offset += 1
        return True

    def _narrow_clip_range(self, report: RoundReport, wide: int | None) -> None:
        """After a completed round in which fewer than ``clip_quorum`` partitions had an entry
        beyond a quarter of the clip range (``wide``; None: erased, unknown): the next round
        uses a range four times narrower, never below ``clip_range``. No rerun."""
        st, settings = self.state, self.settings
        if not settings.adaptive_clip or st.delta_scale <= 1 or wide is None:
            return
        if wide >= settings.clip_quorum:
            return
        st.delta_scale = max(1.0, st.delta_scale / CLIP_WIDENING)
        report.next_clip_range = st.config.clip_range * st.delta_scale
        LOG.info(
            "[coded-fl] round %d: %d of %d partitions had update entries beyond a quarter of "
            "the clip range %g (clip_quorum=%d): clip range narrowed to %g for the next round",
            report.round,
            wide,
            st.config.gradient_code.K,
            report.clip_range,
            settings.clip_quorum,
            report.next_clip_range,
        )

    # ------------------------------------------------------------------ one round
    def train_round(
        self, r: int, roster_grid: RosterGrid, arrays: ArrayRecord, train_config: ConfigRecord
    ) -> RoundReport:
        """Train requests to every silo, the first max(n-s, U) uploads, recovery, the sum (the
        protocol's order is :class:`coded_fl.secagg.driver.ProtocolDriver`'s).

        Parameters
        ----------
        r
            The Flower round.
        roster_grid
            The grid restricted to the run's silos.
        arrays
            The current model.
        train_config
            The round's train config.

        Returns
        -------
        RoundReport
            report.arrays is the new model when report.ok.
        """
        st, settings = self.state, self.settings
        spec = replace(
            settings.spec,
            max_weight=st.weight_bound,
            delta_scale=st.delta_scale,
            integer_arrays=st.layout.integer_names,
        )
        st.metric_names = {}
        st.weight_refused.clear()  # this attempt's refusals only (the protocol driver's too)
        t0 = time.monotonic()
        report = RoundReport(round=r, ok=False, silos=st.config.n)
        inner_msgs = list(
            settings.strategy.configure_train(
                r, arrays, ConfigRecord(dict(train_config.items())), roster_grid
            )
        )
        if not inner_msgs:
            report.reason = "the wrapped strategy configured no training (fraction_train=0?)"
            report.seconds = time.monotonic() - t0
            return report
        content = inner_msgs[0].content
        send_arrays = content.get(spec.arrays_key, arrays)
        send_config = content[spec.config_key] if spec.config_key in content else ConfigRecord()
        # the digest every silo binds its shares to (the same content goes to every silo): a
        # disputed share is judged under it (docs/protocol.md, "Verifiable accusations")
        sent = RecordDict(
            {
                spec.arrays_key: send_arrays,
                spec.config_key: send_config,
                TRAIN_KEY: ConfigRecord(spec.to_dict()),  # type: ignore[arg-type]
            }
        )
        digest = inputs_digest(sent, spec)

        def records(req: ProtocolMessage) -> RecordDict:
            return RecordDict(
                {
                    spec.arrays_key: send_arrays,
                    spec.config_key: send_config,
                    MSG_KEY: message_record(req),
                    TRAIN_KEY: ConfigRecord(spec.to_dict()),  # type: ignore[arg-type]
                }
            )

        self.transport.train_records = records
        run = self.protocol.run_round(
            r + st.round_offset,
            inputs=digest,
            waits=Waits(
                round=st.wait(settings.round_timeout),
                recovery=st.wait(settings.recovery_timeout),
                extra=settings.extra_wait,
            ),
            skip=st.silent,
            label=r,
        )
        report.round_trips, report.close_seconds = run.round_trips, run.close_seconds
        report.errors.update(run.errors)
        report.accused.update(run.accused)
        res = run.result
        if res is None or isinstance(res, RoundAborted):
            return self._aborted(report, res or RoundAborted(r, "no outcome"), t0)
        return self.apply(report, res, t0, arrays, self.transport.sent_train[0])

    def apply(
        self,
        report: RoundReport,
        res: RoundResult,
        t0: float,
        arrays: ArrayRecord,
        template: Message,
    ) -> RoundReport:
        """Hand the decoded weighted average to the wrapped strategy's ``aggregate_train``.

        Parameters
        ----------
        report
            The round's report (filled here).
        res
            The protocol round's decoded result.
        t0
            When the round started (monotonic seconds).
        arrays
            The model the round started from.
        template
            A train message of the round (the reply handed to the wrapped strategy answers it).

        Returns
        -------
        RoundReport
            report.arrays is the new model when report.ok.
        """
        st, spec, inner = self.state, self.settings.spec, self.settings.strategy
        report.replies_used = len(res.survivors)
        report.stragglers = res.stragglers
        # uploaded, then dropped from S (accused), or beyond the drift tolerance where their
        # group had no majority (their coordinates erased: one of them deviates)
        report.suspects = tuple(sorted({*res.excluded, *res.unresolved}))
        report.responders = len(res.responders)
        report.disagreeing, report.corrected = res.disagreeing, res.corrected
        report.erased, report.off_silos = int(res.erased.numel()), dict(res.located)
        report.within_tolerance, report.offenders = res.within_tolerance, res.offenders
        report.excluded = tuple(sorted(st.machine.excluded - set(res.offenders)))
        _warn_disagreement(report, st.layout.length)
        K = st.config.gradient_code.K
        try:
            decoded = st.layout.unpack(
                res.total,
                clip_range=st.config.clip_range,
                erased=res.erased.tolist(),
                delta_scale=st.delta_scale,
                num_partitions=K,
            )
        except DecodingError as exc:
            report.reason = str(exc)
            report.seconds = time.monotonic() - t0
            return report
        report.clipped_fraction = decoded.clipped_fraction
        # an erased flag (replicas disagreed on it) is unknown: it widens nothing
        clipped = decoded.clipped_partitions
        report.clipped_partitions = -1 if clipped is None else clipped
        report.clip_range = st.config.clip_range * st.delta_scale
        quorum = self.settings.clip_quorum
        widen = (clipped or 0) >= quorum and st.delta_scale < self.settings.max_delta_scale
        if self.settings.adaptive_clip and widen:
            # not ok, with clipped_partitions >= quorum: fit_round widens the range and reruns
            report.reason = (
                f"{clipped} of {K} partitions had update entries clipped to {report.clip_range:g}"
            )
            report.seconds = time.monotonic() - t0
            return report
        theta = flatten(arrays, integers=st.layout.integer_names)
        new = unflatten(
            theta + decoded.mean_delta.to(theta.dtype),
            arrays,
            integers=integer_arrays(decoded, st.layout.integer_names, arrays),
        )
        report.total_weight = decoded.total_rho * st.weight_bound
        self._warn_clipped(report, decoded.clipped_entries, K)
        named = self._label_metrics(decoded.metrics, res.survivors)
        metrics: dict[str, int | float | list[int] | list[float]] = {
            spec.weight_key: report.total_weight,
            **named,
        }
        reply = Message(
            RecordDict({spec.arrays_key: new, "metrics": MetricRecord(metrics)}),
            reply_to=template,
        )
        with one_sum_reply(inner):  # one result standing for all K partitions
            agg_arrays, agg_metrics = inner.aggregate_train(report.round, [reply])
        if agg_arrays is None:
            report.reason = f"the wrapped {type(inner).__name__}.aggregate_train returned no arrays"
            report.seconds = time.monotonic() - t0
            return report
        report.ok = True
        report.arrays = keep_layout(agg_arrays, arrays)
        report.train_metrics = agg_metrics
        report.metrics.update(named)
        self._narrow_clip_range(report, decoded.wide_partitions)
        report.seconds = time.monotonic() - t0
        return report

    def _label_metrics(self, sums: dict[str, float], survivors: Sequence[int]) -> dict[str, float]:
        """The decoded metrics by name: ``metric_keys`` as they are; metric slots labelled
        with the names the silos of the sum gave in their replies, where they all gave the
        same (else none, with a warning: the slots then added different metrics)."""
        spec = self.settings.spec
        if spec.metric_keys or not spec.metric_slots:
            return dict(sums)
        lists = {self.state.metric_names.get(i) for i in survivors}
        if len(lists) != 1 or None in lists:
            LOG.warning(
                "[coded-fl] train metrics left out this round: the silos named different "
                "metrics (%s); return the same metrics from every silo's train function, or "
                "name them in CodedSecAgg(metric_keys=...)",
                {i: self.state.metric_names.get(i) for i in sorted(survivors)},
            )
            return {}
        names = next(iter(lists)) or ()
        slots = metric_slot_names(spec.metric_slots)
        if len(names) > len(slots) and not self._said_dropped:
            self._said_dropped = True
            LOG.warning(
                "[coded-fl] the train function returns %d metrics, %d slots: %s left out; "
                "name the ones to aggregate in CodedSecAgg(metric_keys=...)",
                len(names),
                len(slots),
                list(names[len(slots) :]),
            )
        return {name: sums[slot] for slot, name in zip(slots, names, strict=False) if slot in sums}

    def _warn_clipped(self, report: RoundReport, entries: int | None, K: int) -> None:
        """Say that an applied round was clipped: with ``adaptive_clip`` whenever a partition
        clipped (fewer than the quorum, or the range at ``max_clip_range``), naming the count;
        without it above :data:`CLIP_WARNING` of the entries."""
        st, settings = self.state, self.settings
        if not settings.adaptive_clip:
            if report.clipped_fraction > CLIP_WARNING:
                LOG.warning(
                    "[coded-fl] round %d: %.3g%% of the update entries were clipped to %g (the "
                    "aggregate differs from plain FedAvg there): set adaptive_clip=True, raise "
                    "clip_range or lower the learning rate",
                    report.round,
                    100 * report.clipped_fraction,
                    report.clip_range,
                )
            return
        if report.clipped_partitions <= 0:
            return
        why = (
            f"the range is at max_clip_range={settings.max_delta_scale * st.config.clip_range:g}"
            if st.delta_scale >= settings.max_delta_scale
            else f"fewer than clip_quorum={settings.clip_quorum}: the range stays"
        )
        LOG.warning(
            "[coded-fl] round %d: %d of %d partitions had update entries beyond the clip range "
            "%g (%s entries, %.3g%%): %s; those entries were clipped (the aggregate differs "
            "from plain FedAvg there, as a clipping FedAvg would)",
            report.round,
            report.clipped_partitions,
            K,
            report.clip_range,
            "?" if entries is None else entries,
            100 * report.clipped_fraction,
            why,
        )

    def _stop_if_hopeless(self, report: RoundReport) -> None:
        """Stop the run when more silos refused the round because of a setting than a round can
        spare: no round can complete until the setting changes (fewer such silos are only
        stragglers; a silo cannot stop the run alone)."""
        st = self.state
        spare = st.config.n - st.config.min_uploads
        if len(st.misconfigured) <= spare:
            return
        st.reports.append(report)
        self.settings.progress(report)
        silo, detail = sorted(st.misconfigured.items())[0]
        raise ConfigurationError(
            f"round {report.round} cannot complete: {len(st.misconfigured)} of {st.config.n} "
            f"silos refused it because of a setting (a round can spare {spare}); silo {silo}: "
            f"{detail}"
        )

    def _stop_after_aborted_rounds(self, report: RoundReport) -> None:
        """Stop the run once ``max_aborted_rounds`` rounds in a row aborted: a run whose rounds
        cannot complete fails early and visibly (the ServerApp raises, Flower records the run
        as failed, the scripts exit non-zero) instead of reporting N aborted rounds as done.
        The model stays the one of the last completed round."""
        limit = self.settings.max_aborted_rounds
        reports = [*self.state.reports, report]
        last = reports[-limit:] if limit else []
        if not limit or len(last) < limit or any(r.ok for r in last):
            return
        self.state.reports.append(report)
        self.settings.progress(report)
        good = [r.round for r in reports if r.ok]
        raise RunAbortedError(
            f"rounds {last[0].round}-{last[-1].round} aborted in a row "
            f"(max_aborted_rounds={limit}); the model is the one of "
            + (f"round {good[-1]}" if good else "the start (no round completed)")
            + f". Last reason: {report.reason}"
        )

    @staticmethod
    def _aborted(report: RoundReport, res: RoundAborted, t0: float) -> RoundReport:
        report.ok = False
        errs = "; ".join(f"silo {s}: {e}" for s, e in sorted(report.errors.items())[:5])
        report.reason = res.reason + (f" (errors: {errs})" if errs else "")
        report.suspects = res.suspects
        report.offenders = tuple(sorted({v.liar for v in res.verdicts}))
        report.replies_used = len(res.survivors)
        report.seconds = time.monotonic() - t0
        return report

    def evaluate_round(
        self, r: int, roster_grid: RosterGrid, arrays: ArrayRecord, evaluate_config: ConfigRecord
    ) -> MetricRecord | None:
        """The wrapped strategy's evaluation of round ``r`` (waits for every sampled node or
        the evaluation deadline).

        Parameters
        ----------
        r
            The Flower round.
        roster_grid
            The grid restricted to the run's silos.
        arrays
            The model to evaluate.
        evaluate_config
            The evaluate config.

        Returns
        -------
        MetricRecord | None
            The wrapped strategy's aggregate, or None without evaluation.
        """
        inner = self.settings.strategy
        msgs = list(
            inner.configure_evaluate(
                r, arrays, ConfigRecord(dict(evaluate_config.items())), roster_grid
            )
        )
        if not msgs:
            return None
        replies: list[Message] = []
        ids = self.exchange.push(msgs, stage="evaluate", round_=r)

        def keep(node: int, reply: Message) -> bool:
            replies.append(reply)
            return False  # evaluation waits for every sampled node or its deadline

        self.exchange.collect(
            ids, keep, deadline=self.state.deadline(self.settings.evaluate_timeout)
        )
        return inner.aggregate_evaluate(r, replies)


#: Reruns of one round with a raised automatic weight bound (each at least doubles it).
MAX_RERUNS = 8

#: Erased or disagreeing coordinates (fraction of the round's) above which the causes are named.
DISAGREEMENT_WARNING = 1e-3


def _warn_disagreement(report: RoundReport, length: int) -> None:
    """Name the silos overruled by their group, and the likely causes when replicas of
    partitions disagree beyond the drift tolerance at many coordinates (drift within it is
    the normal case across machines: the round line counts it)."""
    if report.offenders:
        LOG.warning(
            "[coded-fl] round %d: silo(s) %s sent replicas beyond the drift tolerance where the "
            "other members of their group agreed (at %s coordinate(s)): overruled, the sum is "
            "their groups' majority; a deviating or broken silo, left out of the next rounds",
            report.round,
            list(report.offenders),
            ", ".join(str(report.off_silos.get(s, 0)) for s in report.offenders),
        )
    beyond = max(report.erased, report.disagreeing - report.within_tolerance)
    if beyond <= DISAGREEMENT_WARNING * length:
        return
    top = sorted(report.off_silos.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    LOG.warning(
        "[coded-fl] round %d: replicas of a partition disagree beyond what the checks settle "
        "at %d of %d coordinates (%d corrected, %d erased%s). Silos that hold the same "
        "partition train it to different bits when their machines differ (torch thread "
        "counts, CPU instruction sets, GPU vs CPU, nondeterministic kernels), more so with "
        "longer local training. With the repetition code (code='auto'), raise drift_tolerance "
        "or wait for more replies per group (extra_replies); with the polynomial code, which "
        "mixes replicas, use code='repetition', run training under "
        "coded_fl.determinism.deterministic_torch() or raise headroom_bits",
        report.round,
        beyond,
        length,
        report.corrected,
        report.erased,
        f"; most off: {', '.join(f'silo {s} ({c})' for s, c in top)}" if top else "",
    )
