"""Distributed DP's part of a run (issue 33): the keying rounds that deal the edge keys before
a noised round, the noisy sum applied, and the account.

:class:`PrivateRounds` is :class:`strategies.round_attempt.RoundAttempt` with these steps, and
the base of :class:`strategies.driver.RoundDriver`. With ``CodedSecAgg(dp=...)``:

- before a round whose masks would not cancel (the first, or after a rekey) the driver runs
  keying rounds (:meth:`PrivateRounds.keying_rounds`): the silos upload zeros
  (:func:`coded_fl.secagg.private.keying_round`) and nothing is applied or released;
- a noised round's decoded sum is rotated back and the model moves by its mean over the K
  partitions (:meth:`PrivateRounds.apply`);
- every noised round the server asked for counts in the account (:meth:`PrivateRounds.epsilon`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message

from coded_fl.errors import RunAbortedError
from coded_fl.layout import flatten
from coded_fl.secagg import RoundResult

from .records import unflatten
from .report import RoundReport
from .roster import RosterGrid
from .round_attempt import RoundAttempt

__all__ = ["MAX_KEYING_ROUNDS", "PrivateRounds"]

LOG = logging.getLogger("flwr")


class PrivateRounds(RoundAttempt):
    """Distributed DP's steps of a run: the round attempt of
    :class:`strategies.round_attempt.RoundAttempt`, with keying rounds, the noisy sum applied
    and the account (:class:`strategies.driver.RoundDriver` is one, and makes the attributes).

    Attributes
    ----------
    settings, state, transport, protocol
        As for :class:`strategies.round_attempt.RoundAttempt`.
    """

    def keying_rounds(
        self, r: int, roster_grid: RosterGrid, arrays: ArrayRecord, train_config: ConfigRecord
    ) -> Keying:
        """With distributed DP, the protocol rounds that deal the edge keys before round ``r``
        can be noised (the first round, and again after a rekey): the silos upload zeros
        (:func:`coded_fl.secagg.private.keying_round`), nothing is applied or released. A run
        whose keys are not dealt after :data:`MAX_KEYING_ROUNDS` stops.

        Parameters
        ----------
        r
            The Flower round about to run.
        roster_grid, arrays, train_config
            As for :meth:`train_round`.

        Returns
        -------
        Keying
            How many keying rounds ran, their round trips and seconds.
        """
        st = self.state
        out = Keying()
        if st.config.dp_plan is None:
            return out
        while not st.config.scheme.round_cancels(st.machine):
            if out.count >= MAX_KEYING_ROUNDS:
                raise RunAbortedError(
                    f"round {r}: the edge keys that distributed DP draws its noise from were "
                    f"not dealt after {out.count} keying rounds (silos missing or refusing: "
                    f"{sorted(st.notes.misconfigured) or sorted(st.silent) or 'none named'}); "
                    "no noised round can run, so no round was released"
                )
            attempt = self.train_round(r, roster_grid, arrays, train_config, keying=True)
            st.round_offset += 1  # the real round takes the next protocol round
            out.count += 1
            out.round_trips += attempt.round_trips
            out.seconds += attempt.seconds
            LOG.info(
                "[coded-fl] round %d: keying round %d for distributed DP (edge keys dealt: "
                "%s), nothing released",
                r,
                out.count,
                st.machine.edges_ready,
            )
        return out

    def epsilon(self) -> float | None:
        """The run's epsilon at the configured delta after the noised rounds so far (None
        without distributed DP)."""
        cfg = self.state.config
        plan, dp = cfg.dp_plan, cfg.dp
        if plan is None or dp is None:
            return None
        if not self.state.dp_releases:
            return 0.0
        from coded_fl.dp import epsilon_of

        return epsilon_of(
            plan.mu, delta=dp.delta, rounds=self.state.dp_releases, l2=plan.l2, l1=plan.l1
        )

    def apply(
        self,
        report: RoundReport,
        res: RoundResult,
        t0: float,
        arrays: ArrayRecord,
        template: Message,
    ) -> RoundReport:
        """:meth:`RoundAttempt.apply`; with distributed DP, the decoded noisy sum rotated back
        (:func:`coded_fl.dp.pipeline.release`), the model moved by its mean over the K
        partitions (every partition counts 1; no metric travels).

        Parameters
        ----------
        report, res, t0, arrays, template
            As for :meth:`RoundAttempt.apply`.

        Returns
        -------
        RoundReport
            report.arrays is the new model when report.ok.
        """
        plan = self.state.config.dp_plan
        if plan is None:
            return super().apply(report, res, t0, arrays, template)
        from coded_fl.dp.pipeline import release, rotation_seed

        st, spec = self.state, self.settings.spec
        cfg, lay = st.config, st.layout
        self.note_result(report, res)
        K = cfg.gradient_code.K
        # the decoded sum in steps (erased coordinates count 0), in model units, rotated back
        total = release(
            cfg.field.to_signed(res.aggregate).numpy(),
            plan,
            seed=rotation_seed(cfg.seed_id, res.round),
        )
        mean = torch.from_numpy(total[: lay.model_size] / K)
        theta = flatten(arrays, integers=lay.integer_names)
        new = unflatten(theta + mean.to(theta.dtype), arrays, integers={})
        report.total_weight = float(K)
        self.hand_on(report, new, {spec.weight_key: float(K)}, arrays, template, t0)
        return report


#: Keying rounds before a round gives up: dealing takes two when every silo
#: answers; more only while silos are missing.
MAX_KEYING_ROUNDS = 4


@dataclass
class Keying:
    """What :meth:`RoundDriver.keying_rounds` ran."""

    count: int = 0
    round_trips: int = 0
    seconds: float = 0.0
