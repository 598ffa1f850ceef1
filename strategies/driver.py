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
from collections.abc import Callable

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from coded_fl.errors import ConfigurationError, RunAbortedError
from coded_fl.secagg.driver import ProtocolDriver

from .adaptation import raise_weight_bound, widen_clip_range
from .exchange import Exchange
from .membership import Membership
from .private_rounds import PrivateRounds
from .replies import FlowerTransport, late_reply
from .report import RoundReport
from .roster import RosterGrid
from .round_warnings import CLIP_WARNING as CLIP_WARNING
from .round_warnings import DISAGREEMENT_WARNING as DISAGREEMENT_WARNING
from .run import RunSettings, RunState

__all__ = ["RoundDriver"]

LOG = logging.getLogger("flwr")


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


class RoundDriver(PrivateRounds):
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
        keying = self.keying_rounds(r, roster_grid, arrays, train_config)
        report = self.train_round(r, roster_grid, arrays, train_config)
        reruns, discarded_trips, discarded_seconds = 0, 0, 0.0
        while (
            reruns < MAX_RERUNS
            and not report.ok
            and (
                raise_weight_bound(st, self.settings, r)
                or widen_clip_range(st, self.settings, r, report)
            )
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
        report.keying_rounds = keying.count
        report.round_trips += int(asked) + keying.round_trips
        report.seconds += keying.seconds
        report.epsilon = self.epsilon()
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
