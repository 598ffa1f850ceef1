"""One attempt at a Flower round: the protocol round and the decoded sum handed on.

:class:`RoundAttempt` is the part of :class:`strategies.driver.RoundDriver` that runs one
attempt (:meth:`RoundAttempt.train_round`): the wrapped strategy's train config and model bound
into the round's inputs digest, the protocol round through
:class:`coded_fl.secagg.driver.ProtocolDriver`, and the decoded weighted average handed to the
wrapped strategy's ``aggregate_train`` (:meth:`RoundAttempt.apply`), or the reason the attempt
did not complete. The driver reruns an attempt when the weight bound or the clip range changes
(:mod:`strategies.adaptation`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from coded_fl.errors import DecodingError
from coded_fl.layout import flatten
from coded_fl.secagg import AbortCode, RoundAborted, RoundResult
from coded_fl.secagg.driver import ProtocolDriver
from coded_fl.secagg.messages import Message as ProtocolMessage
from coded_fl.secagg.transport import Waits
from coded_fl.vocabulary import MSG_KEY, TRAIN_KEY, inputs_digest, metric_slot_names
from coded_fl_flower.records import message_record

from .adaptation import narrow_clip_range
from .composable import one_sum_reply
from .records import integer_arrays, keep_layout, unflatten
from .replies import FlowerTransport
from .report import RoundReport
from .roster import RosterGrid
from .round_warnings import warn_clipped, warn_disagreement
from .run import RunSettings, RunState

__all__ = ["RoundAttempt"]

LOG = logging.getLogger("flwr")


class RoundAttempt:
    """One attempt at a round of :class:`strategies.driver.RoundDriver` (a part of it: the
    driver makes the attributes below).

    Attributes
    ----------
    settings
        The wrapper's settings for this run.
    state
        The run's state.
    transport
        The Flower transport the protocol round goes through.
    protocol
        The protocol driver over that transport.
    """

    settings: RunSettings
    state: RunState
    transport: FlowerTransport
    protocol: ProtocolDriver
    #: metrics beyond the slots: said once per run
    _said_dropped: bool

    # ------------------------------------------------------------------ one round
    def train_round(
        self,
        r: int,
        roster_grid: RosterGrid,
        arrays: ArrayRecord,
        train_config: ConfigRecord,
        *,
        keying: bool = False,
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
        keying
            A keying round of a run with distributed DP: its sum (of zeros) is not applied.

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
            report.abort_code = AbortCode.NO_TRAINING
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
        if st.config.dp_plan is not None and not keying:
            st.dp_releases += 1  # asked for: the account counts it whatever comes back
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
        if keying:  # zeros that dealt the edge keys: nothing to apply
            report.ok, report.seconds = True, time.monotonic() - t0
            return report
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
        st, spec = self.state, self.settings.spec
        self.note_result(report, res)
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
            report.abort_code = AbortCode.UNPACK_FAILED
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
            report.abort_code = AbortCode.CLIP_WIDENED
            report.seconds = time.monotonic() - t0
            return report
        theta = flatten(arrays, integers=st.layout.integer_names)
        new = unflatten(
            theta + decoded.mean_delta.to(theta.dtype),
            arrays,
            integers=integer_arrays(decoded, st.layout.integer_names, arrays),
        )
        report.total_weight = decoded.total_rho * st.weight_bound
        warn_clipped(report, st, self.settings, decoded.clipped_entries, K)
        named = self._label_metrics(decoded.metrics, res.survivors)
        metrics: dict[str, int | float | list[int] | list[float]] = {
            spec.weight_key: report.total_weight,
            **named,
        }
        if not self.hand_on(report, new, metrics, arrays, template, t0):
            return report
        report.metrics.update(named)
        narrow_clip_range(st, self.settings, report, decoded.wide_partitions)
        report.seconds = time.monotonic() - t0
        return report

    def hand_on(
        self,
        report: RoundReport,
        new: ArrayRecord,
        metrics: dict[str, int | float | list[int] | list[float]],
        arrays: ArrayRecord,
        template: Message,
        t0: float,
    ) -> bool:
        """Hand the round's new model and metrics to the wrapped strategy's
        ``aggregate_train`` as one reply standing for all K partitions; its aggregate goes in
        ``report`` (ok), or the reason it gave none.

        Parameters
        ----------
        report
            The round's report (filled here).
        new
            The model after the decoded update.
        metrics
            The reply's metrics (the weight key first).
        arrays
            The model the round started from (its layout is kept).
        template
            A train message of the round (the reply answers it).
        t0
            When the round started (monotonic seconds).

        Returns
        -------
        bool
            Whether the wrapped strategy returned arrays.
        """
        inner, spec = self.settings.strategy, self.settings.spec
        reply = Message(
            RecordDict({spec.arrays_key: new, "metrics": MetricRecord(metrics)}),
            reply_to=template,
        )
        with one_sum_reply(inner):  # one result standing for all K partitions
            agg_arrays, agg_metrics = inner.aggregate_train(report.round, [reply])
        report.seconds = time.monotonic() - t0
        if agg_arrays is None:
            report.reason = f"the wrapped {type(inner).__name__}.aggregate_train returned no arrays"
            report.abort_code = AbortCode.INNER_STRATEGY
            return False
        report.ok = True
        report.arrays = keep_layout(agg_arrays, arrays)
        report.train_metrics = agg_metrics
        return True

    def note_result(self, report: RoundReport, res: RoundResult) -> None:
        """The decoded round's figures in ``report``: replies used, stragglers, suspects, the
        replicas' comparisons; a warning where replicas disagreed.

        Parameters
        ----------
        report
            The round's report (filled here).
        res
            The protocol round's decoded result.
        """
        st = self.state
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
        warn_disagreement(report, st.layout.length)

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

    @staticmethod
    def _aborted(report: RoundReport, res: RoundAborted, t0: float) -> RoundReport:
        report.ok = False
        errs = "; ".join(f"silo {s}: {e}" for s, e in sorted(report.errors.items())[:5])
        report.reason = res.reason + (f" (errors: {errs})" if errs else "")
        report.abort_code = res.code
        report.suspects = res.suspects
        report.offenders = tuple(sorted({v.liar for v in res.verdicts}))
        report.replies_used = len(res.survivors)
        report.seconds = time.monotonic() - t0
        return report
