"""The decode: the weighted masked sums, the unmasked aggregate, the replicas' vote, and the
round's result or abort."""

from __future__ import annotations

import math

import numpy as np
import torch

from coded_fl.codes.repetition import GroupCode
from coded_fl.codes.resolve import Resolution, resolve
from coded_fl.codes.vote import sparse_comparisons, vote
from coded_fl.errors import DecodingError, LocalProtocolError
from coded_fl.quantize import dequantize
from coded_fl.secagg.server.state import (
    AbortCode,
    MachineCore,
    RoundAborted,
    RoundResult,
    RoundState,
    ServerStage,
    survivor_weights,
)


class DecodePhase(MachineCore):
    """The decode phase of :class:`~coded_fl.secagg.server.machine.ServerMachine`: its
    methods, on the state :class:`~coded_fl.secagg.server.state.MachineCore` declares."""

    def sum_uploads(self) -> None:
        """Sum the survivors' masked uploads with the round's weight rows now.

        Optional: :meth:`finish` does it otherwise. The sum needs the survivor set S, which
        :meth:`close_collection` fixes, but not the recovery replies, so a driver calls this
        while the recovery requests are out and the server would otherwise wait: the largest
        part of the decode, ((n - s) x d multiply-adds per row), then leaves the round's
        critical path. If the survivor set changes (:meth:`retry_recovery`) the sum is
        dropped and made again.
        """
        self._require(ServerStage.RECOVERING)
        rnd = self._current()
        if rnd.masked is not None:
            return
        cfg = self.config
        uploads = [rnd.uploads[i].masked for i in rnd.survivors]
        code = cfg.gradient_code
        if rnd.aligned and isinstance(code, GroupCode):
            # row 0 (the decoding vector reads one reference per group); the comparisons
            # are checked in one pass and formed only where replicas differ
            rnd.masked = cfg.field.matmul(survivor_weights(rnd)[:1], uploads)
            rnd.compared = code.differences(rnd.survivors, rnd.pairs or (), uploads)
        else:
            rnd.masked = cfg.field.matmul(survivor_weights(rnd), uploads)

    def finish(self) -> RoundResult | RoundAborted:
        """Decode the round (needs U recovery replies), or abort it saying why."""
        self._require(ServerStage.RECOVERING)
        rnd = self._current()
        cfg = self.config
        if len(rnd.replies) < cfg.U and not rnd.aligned:
            convicted = self.convicted
            if convicted:
                self._bar_next = frozenset({*rnd.excluded, *convicted})
                return self._abort(
                    f"silo(s) {list(convicted)}: the mask shares they left failed at "
                    f"{self.accusers_needed} or more survivors, or the evidence of an "
                    "accusation proved one bad, and the "
                    f"survivors without them are too few to unmask (need max(n-s, U) = "
                    f"{cfg.min_uploads} silos, U = {cfg.U} of them able to answer); they are left "
                    "out of the next round",
                    suspects=convicted,
                    code=AbortCode.CONVICTED,
                )
            return self._abort(
                f"only {len(rnd.replies)} of {len(rnd.survivors)} survivors answered the recovery "
                f"request; unmasking needs U = {cfg.U} (lower recovery_threshold to tolerate "
                "dropouts during recovery)",
                code=AbortCode.TOO_FEW_RECOVERY_REPLIES,
            )
        weights = survivor_weights(rnd)
        F = cfg.field
        self.sum_uploads()  # a no-op if the driver did it while the replies travelled
        masked = rnd.masked
        if masked is None:  # pragma: no cover - sum_uploads() just set it
            raise LocalProtocolError("no sum of the uploads")
        wrong: tuple[int, ...] = ()
        if rnd.aligned:  # the group masks cancel in every row
            sums = masked
        else:
            try:  # more than U replies are checked against each other (a codeword)
                replies, wrong = cfg.sharing.verified(rnd.replies)
            except DecodingError as exc:
                return self._abort(
                    f"{exc}; the aggregate was not formed",
                    suspects=exc.suspects,
                    code=AbortCode.RECOVERY_INCONSISTENT,
                )
            masks = cfg.sharing.decode(replies)  # (R, d): sum_i w_i z_i per row
            sums = F.sub(masked, masks)  # row 0: sum_k q(g_k); rows 1..: parity checks
        e = weights.shape[0] - 1
        res, voted = self._decode(rnd, weights, sums)
        located = {rnd.survivors[i]: c for i, c in res.located.items()}
        unresolved = {rnd.survivors[i]: c for i, c in res.unresolved.items()}
        erased = int(res.erased.numel())
        limit = self.max_erased_fraction * res.value.numel()
        broken = () if voted else tuple(sorted(i for i, c in located.items() if c > limit))
        if erased > limit and voted:
            beyond = sorted({*located, *unresolved})
            return self._abort(
                f"replicas of a partition disagree beyond the drift tolerance "
                f"(drift_tolerance={self.drift_tolerance:g} of the clip range) at {erased} of "
                f"{res.value.numel()} coordinates with no majority in their group "
                f"({res.out_of_range} outside the range of a true sum), more than "
                f"max_erased_fraction={self.max_erased_fraction:g} allows; the aggregate was not "
                f"applied; silos beyond the tolerance: "
                + (
                    ", ".join(f"{i} ({located.get(i, 0) + unresolved.get(i, 0)})" for i in beyond)
                    or "none"
                )
                + ". Honest sites drift further after long local training: raise "
                "drift_tolerance, or wait for more replies per group (extra_replies)",
                suspects=tuple(beyond),
                code=AbortCode.REPLICAS_DISAGREE,
            )
        if broken:
            # correction assumes at most e // 2 off replies per coordinate; a silo off at more
            # coordinates than float noise ever makes uses that budget everywhere, so another
            # silo's noise at the same coordinate would go beyond what the checks guarantee
            return self._abort(
                f"silo(s) {list(broken)} sent replies off at "
                f"{', '.join(str(located[i]) for i in broken)} of {res.value.numel()} "
                f"coordinates, more than max_erased_fraction={self.max_erased_fraction:g} "
                "allows for replicas that differ by float noise: a broken or malicious silo; "
                "the aggregate was not applied",
                suspects=broken,
                code=AbortCode.BROKEN_SILO,
            )
        if erased > limit:
            top = max(located.values(), default=0)
            suspects = tuple(sorted(i for i, c in located.items() if c == top and c > 0))
            named = (
                f"; suspect silo(s) {list(suspects)} (located at {top} of them)"
                if suspects
                else (
                    "; add extra replies (>= 2) to locate the silo"
                    if e < 2
                    else "; no silo could be located"
                )
            )
            return self._abort(
                f"replicas of a partition disagree beyond float noise: the aggregate is corrupt "
                f"at {erased} of {res.value.numel()} coordinates ({res.disagreeing} failed the "
                f"parity checks, {res.out_of_range} were outside the range of a true sum), more "
                f"than max_erased_fraction={self.max_erased_fraction:g} allows; it was not "
                f"applied{named}",
                suspects=suspects,
                code=AbortCode.REPLICAS_DISAGREE,
            )
        total = dequantize(
            res.value, cfg.quantization, F, check_range=False
        )  # out of range: erased
        result = RoundResult(
            round=rnd.number,
            total=total,
            aggregate=res.value,
            survivors=rnd.survivors,
            responders=tuple(sorted(rnd.replies)),
            stragglers=tuple(
                s for s in sorted(self.roster) if s not in rnd.uploads and s not in rnd.barred
            ),
            checks=e,
            disagreeing=res.disagreeing,
            corrected=res.corrected,
            erased=res.erased,
            located=located,
            excluded=rnd.excluded,
            within_tolerance=res.within_tolerance,
            offenders=tuple(sorted({*(located if voted else ()), *wrong, *self.liars})),
            unresolved=unresolved,
            verdicts=tuple(v for _, v in sorted(rnd.verdicts.items())),
        )
        self.excluded = frozenset({*self.excluded, *result.offenders})
        self._round = None
        self.stage = ServerStage.READY
        return result

    def _decode(
        self, rnd: RoundState, weights: np.ndarray, sums: torch.Tensor
    ) -> tuple[Resolution, bool]:
        """The round's sum, coordinate by coordinate: a vote within each silo group for a group
        code (True), the parity checks' location and correction otherwise (False)."""
        cfg = self.config
        quant = cfg.quantization
        bound = cfg.sum_bound  # K max|q|, plus the noise's tail with distributed DP
        pairs = rnd.pairs
        code = cfg.gradient_code
        if pairs is None or not isinstance(code, GroupCode):
            e = sums.shape[0] - 1
            return resolve(cfg.field, weights, sums, bound=bound, radius=e // 2), False
        if rnd.compared is not None:  # a group-masked round: found in sum_uploads
            diffs, cols = rnd.compared
        else:  # recovered rows: the comparisons in full
            diffs, cols = sparse_comparisons(sums)
        total = sums[0]
        groups: list[int] = []
        for ref, _ in pairs:
            group = code.group_of(rnd.survivors[ref])
            if group not in groups:
                groups.append(group)
        step = self.drift_tolerance * quant.max_abs
        wc = self.weight_coordinate
        if wc is not None:  # the mean weight rho: the packed updates scale with it
            at = np.flatnonzero(cols == wc)
            weight = vote(
                cfg.field,
                total[wc : wc + 1],
                diffs[:, at],
                np.zeros(at.size, dtype=np.int64),
                pairs,
                tolerance=[0] * len(groups),
                bound=bound,
            )
            rho_sum = int(cfg.field.to_signed(weight.value)[0])
            step *= min(1.0, max(0.0, rho_sum / quant.max_abs / code.K))
        # at least one quantization step per partition: replicas whose floats differ in the
        # last bits may round to neighbouring steps
        tolerance = [
            max(1, math.ceil(step)) * code.partitions_of_group(q) if self.drift_tolerance else 0
            for q in groups
        ]
        res = vote(
            cfg.field,
            total,
            diffs,
            cols,
            pairs,
            tolerance=tolerance,
            bound=bound,
            exact=() if wc is None else (wc,),
        )
        return res, True

    def abort(self, reason: str) -> RoundAborted:
        """Give up the current round (e.g. the driver's deadline passed).

        Parameters
        ----------
        reason
            Why the round is given up (in the RoundAborted).

        Returns
        -------
        RoundAborted
        """
        self._require(ServerStage.COLLECTING, ServerStage.RECOVERING)
        return self._abort(reason, code=AbortCode.GIVEN_UP)
