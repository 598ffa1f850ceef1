"""What :class:`strategies.CodedSecAgg`'s settings give at n silos, and how they are logged.

:class:`ProtocolView` is the part of ``CodedSecAgg`` that turns the constructor's settings
into a protocol configuration (:class:`coded_fl.secagg.ProtocolConfig`) for n silos, the
gradient code a placement derives from, the fewest silos that work, the clip quorum and the
settings one run takes (:class:`strategies.run.RunSettings`); it waits for the nodes and
checks the settings against the configuration at construction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from coded_fl.codes import GradientCode
from coded_fl.errors import ConfigurationError
from coded_fl.quantize import QuantizationConfig
from coded_fl.secagg import ProtocolConfig
from coded_fl.secagg.policy import MIN_SCALE
from coded_fl.vocabulary import TrainSpec

from .composable import chain_attr, sampled_fraction
from .report import RoundReport
from .run import RunSettings

if TYPE_CHECKING:
    from coded_fl.dp import DistributedDP

__all__ = ["ProtocolView"]

LOG = logging.getLogger("flwr")


class ProtocolView:
    """The settings of :class:`strategies.CodedSecAgg` as a protocol configuration (a part of
    it: its constructor sets the attributes below).

    Attributes
    ----------
    strategy
        The wrapped Flower strategy.
    dp
        Distributed DP, or None.
    num_stragglers, privacy_threshold, recovery_threshold, num_silos, clip_range
        The constructor's settings.
    adaptive_clip, clip_quorum, max_clip_range, scale, code, masking, extra_replies
        The constructor's settings.
    extra_wait, headroom_bits, max_erased_fraction, drift_tolerance, max_aborted_rounds
        The constructor's settings.
    round_timeout, recovery_timeout, key_timeout, node_wait_timeout, evaluate_timeout
        The constructor's settings (``evaluate_timeout`` set).
    poll_interval, progress
        The constructor's settings (``progress`` set).
    max_delta_scale
        The largest delta scale g the clip range may reach.
    spec
        What the silos read from the train requests.
    """

    strategy: Strategy
    dp: DistributedDP | None
    num_stragglers: int
    privacy_threshold: int
    recovery_threshold: int | None
    num_silos: int | None
    clip_range: float
    adaptive_clip: bool
    clip_quorum: int | None
    max_clip_range: float
    scale: float | None
    code: str
    masking: str
    extra_replies: int
    extra_wait: float
    headroom_bits: int
    max_erased_fraction: float
    drift_tolerance: float
    max_aborted_rounds: int
    round_timeout: float
    recovery_timeout: float
    key_timeout: float
    node_wait_timeout: float
    evaluate_timeout: float
    poll_interval: float
    progress: Callable[[RoundReport], None]
    max_delta_scale: float
    spec: TrainSpec

    def summary(self) -> None:
        """Log the coded-fl settings, then the wrapped strategy's summary."""
        LOG.info(
            "\t├──> CodedSecAgg: s=%s T=%s U=%s n=%s clip_range=%s code=%s max_weight=%s",
            self.num_stragglers,
            self.privacy_threshold,
            self.recovery_threshold or "n-s",
            self.num_silos or "all",
            self.clip_range,
            self.code,
            "auto" if self.spec.auto_weight else self.spec.max_weight,
        )
        self.strategy.summary()

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
            masking=self.masking,
            extra_replies=self.extra_replies,
            headroom_bits=self.headroom_bits,
            run_id=run_id,
            session=session,
            dp=self.dp,
        )

    def _wait_for_nodes(self, grid: Grid) -> list[int]:
        want = self.num_silos or int(chain_attr(self.strategy, "min_available_nodes", 2))
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

    def gradient_code(self, n: int) -> GradientCode:
        """The gradient code the settings give for ``n`` silos (its support decides which
        partitions each silo must hold; a placement derives from it).

        Parameters
        ----------
        n
            The number of silos.

        Returns
        -------
        GradientCode
        """
        return self._config(n, vector_length=1, run_id="placement").gradient_code

    def min_silos(self) -> int:
        """The fewest silos the settings work with: T < U <= n - s, so n >= s + max(U, T + 1).

        Returns
        -------
        int
        """
        s, t = self.num_stragglers, self.privacy_threshold
        u = self.recovery_threshold
        return s + max(t + 1, u or 0)

    def _too_few(self, n: int) -> ConfigurationError | None:
        """The error for a run with fewer silos than the settings need (None if not the case)."""
        need = self.min_silos()
        if n >= need:
            return None
        u = f", recovery_threshold={self.recovery_threshold}" if self.recovery_threshold else ""
        return ConfigurationError(
            f"{n} silos (nodes) are connected, but num_stragglers={self.num_stragglers} and "
            f"privacy_threshold={self.privacy_threshold}{u} need at least {need} "
            "(n >= s + max(U, T + 1)): start more SuperNodes (in a simulation: "
            f'--federation-config "num_supernodes={need}"), or lower num_stragglers / '
            "privacy_threshold"
        )

    def _check_inner(self, n: int) -> None:
        inner = self.strategy
        for attr in ("min_available_nodes", "min_train_nodes"):
            v = chain_attr(inner, attr, None)
            if isinstance(v, int) and v > n:
                raise ConfigurationError(
                    f"the wrapped strategy's {attr}={v} exceeds the {n} silos: lower it to <= {n}"
                )
        sampled = sampled_fraction(inner)
        if sampled is not None:  # refused at construction under a DP wrapper
            LOG.warning(
                "[coded-fl] %s=%s is ignored: every silo trains its "
                "partitions in every round (gradient coding needs all of them)",
                *sampled,
            )

    def _check_protocol(self) -> None:
        """Check the settings against the protocol configuration, before any node is contacted:
        with ``num_silos``, what the configuration refuses and the clip quorum; without, the
        quantization at the fewest silos the settings allow. Warn where the quantization scale
        is below what silos accept by default."""
        if self.num_silos is not None:  # validate the settings now, before any node is contacted
            try:
                checked = self._config(self.num_silos, vector_length=1, run_id="check")
            except ConfigurationError as exc:
                raise self._too_few(self.num_silos) or exc from None
            quant = checked.quantization
            self._quorum(checked.gradient_code)
        else:  # the quantization at the fewest silos the settings allow (K = n; more is coarser)
            k = self.min_silos()
            if self.scale is None:
                quant = QuantizationConfig.for_summands(
                    k, clip_range=self.clip_range, headroom_bits=self.headroom_bits
                )
            else:
                quant = QuantizationConfig(
                    clip_range=self.clip_range, scale=self.scale, num_summands=k
                )
        if quant.scale < MIN_SCALE:
            LOG.warning(
                "[coded-fl] the quantization scale is %g (clip_range=%s), below the %g that "
                "silos accept by default (node config codedfl.min-scale): lower clip_range "
                "or headroom_bits, or the silos must set codedfl.allow-no-privacy = true",
                quant.scale,
                self.clip_range,
                MIN_SCALE,
            )

    def _quorum(self, code: GradientCode) -> int:
        """The clip quorum for ``code``: the setting, or one more than the most partitions
        one silo holds (at most K)."""
        K = code.K
        if self.clip_quorum is None:
            held = max(len(code.support(i)) for i in range(code.n))
            return min(K, held + 1)
        if self.clip_quorum > K:
            raise ConfigurationError(
                f"clip_quorum={self.clip_quorum} exceeds the K={K} partitions: the clip range "
                f"could never widen; set clip_quorum <= {K} (or None: automatic)"
            )
        return self.clip_quorum

    def _settings(self, code: GradientCode) -> RunSettings:
        return RunSettings(
            clip_quorum=self._quorum(code),
            max_delta_scale=self.max_delta_scale,
            strategy=self.strategy,
            spec=self.spec,
            extra_wait=self.extra_wait,
            round_timeout=self.round_timeout,
            recovery_timeout=self.recovery_timeout,
            key_timeout=self.key_timeout,
            evaluate_timeout=self.evaluate_timeout,
            poll_interval=self.poll_interval,
            progress=self.progress,
            adaptive_clip=self.adaptive_clip,
            max_aborted_rounds=self.max_aborted_rounds,
        )
