"""What :class:`strategies.CodedSecAgg`'s settings give at n silos, and how they are logged.

:class:`ProtocolView` is the part of ``CodedSecAgg`` that turns its settings
(:class:`strategies.ProtocolSettings`, :class:`strategies.Timeouts`) into a protocol
configuration (:class:`coded_fl.secagg.ProtocolConfig`) for n silos, the gradient code a
placement derives from, the fewest silos that work, the clip quorum and the settings one run
takes (:class:`strategies.run.RunSettings`); it waits for the nodes and
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
    from .settings import ProtocolSettings, Timeouts

__all__ = ["ProtocolView"]

LOG = logging.getLogger("flwr")


class ProtocolView:
    """The settings of :class:`strategies.CodedSecAgg` as a protocol configuration (a part of
    it: its constructor sets the attributes below).

    Attributes
    ----------
    strategy
        The wrapped Flower strategy.
    protocol
        The protocol and aggregation settings (:class:`strategies.ProtocolSettings`).
    timeouts
        The stages' deadlines (:class:`strategies.Timeouts`).
    progress
        Called with every :class:`RoundReport`.
    spec
        What the silos read from the train requests.
    """

    strategy: Strategy
    protocol: ProtocolSettings
    timeouts: Timeouts
    progress: Callable[[RoundReport], None]
    spec: TrainSpec

    def summary(self) -> None:
        """Log the coded-fl settings, then the wrapped strategy's summary."""
        LOG.info(
            "\t├──> CodedSecAgg: s=%s T=%s U=%s n=%s clip_range=%s code=%s max_weight=%s",
            self.protocol.num_stragglers,
            self.protocol.privacy_threshold,
            self.protocol.recovery_threshold or "n-s",
            self.protocol.num_silos or "all",
            self.protocol.clip_range,
            self.protocol.code,
            "auto" if self.spec.auto_weight else self.spec.max_weight,
        )
        self.strategy.summary()

    # ------------------------------------------------------------------ configuration
    def _config(
        self, n: int, *, vector_length: int, run_id: str, session: str = ""
    ) -> ProtocolConfig:
        p = self.protocol
        return ProtocolConfig(
            num_silos=n,
            num_stragglers=p.num_stragglers,
            privacy_threshold=p.privacy_threshold,
            recovery_threshold=p.recovery_threshold,
            vector_length=vector_length,
            clip_range=p.clip_range,
            scale=p.scale,
            code=p.code,
            masking=p.masking,
            extra_replies=p.extra_replies,
            headroom_bits=p.headroom_bits,
            run_id=run_id,
            session=session,
            dp=p.dp,
        )

    def _wait_for_nodes(self, grid: Grid) -> list[int]:
        num_silos, node_wait = self.protocol.num_silos, self.timeouts.node_wait
        want = num_silos or int(chain_attr(self.strategy, "min_available_nodes", 2))
        deadline = time.monotonic() + node_wait
        while True:
            nodes = sorted(grid.get_node_ids())
            if len(nodes) >= want:
                return nodes[:num_silos] if num_silos else nodes
            if time.monotonic() >= deadline:
                raise ConfigurationError(
                    f"only {len(nodes)} nodes connected after {node_wait:.0f}s, "
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
        s, t = self.protocol.num_stragglers, self.protocol.privacy_threshold
        u = self.protocol.recovery_threshold
        return s + max(t + 1, u or 0)

    def _too_few(self, n: int) -> ConfigurationError | None:
        """The error for a run with fewer silos than the settings need (None if not the case)."""
        need = self.min_silos()
        if n >= need:
            return None
        p = self.protocol
        u = f", recovery_threshold={p.recovery_threshold}" if p.recovery_threshold else ""
        return ConfigurationError(
            f"{n} silos (nodes) are connected, but num_stragglers={p.num_stragglers} and "
            f"privacy_threshold={p.privacy_threshold}{u} need at least {need} "
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
        p = self.protocol
        if p.num_silos is not None:  # validate the settings now, before any node is contacted
            try:
                checked = self._config(p.num_silos, vector_length=1, run_id="check")
            except ConfigurationError as exc:
                raise self._too_few(p.num_silos) or exc from None
            quant = checked.quantization
            self._quorum(checked.gradient_code)
        else:  # the quantization at the fewest silos the settings allow (K = n; more is coarser)
            k = self.min_silos()
            if p.scale is None:
                quant = QuantizationConfig.for_summands(
                    k, clip_range=p.clip_range, headroom_bits=p.headroom_bits
                )
            else:
                quant = QuantizationConfig(clip_range=p.clip_range, scale=p.scale, num_summands=k)
        if quant.scale < MIN_SCALE:
            LOG.warning(
                "[coded-fl] the quantization scale is %g (clip_range=%s), below the %g that "
                "silos accept by default (node config codedfl.min-scale): lower clip_range "
                "or headroom_bits, or the silos must set codedfl.allow-no-privacy = true",
                quant.scale,
                p.clip_range,
                MIN_SCALE,
            )

    def _quorum(self, code: GradientCode) -> int:
        """The clip quorum for ``code``: the setting, or one more than the most partitions
        one silo holds (at most K)."""
        K, quorum = code.K, self.protocol.clip_quorum
        if quorum is None:
            held = max(len(code.support(i)) for i in range(code.n))
            return min(K, held + 1)
        if quorum > K:
            raise ConfigurationError(
                f"clip_quorum={quorum} exceeds the K={K} partitions: the clip range "
                f"could never widen; set clip_quorum <= {K} (or None: automatic)"
            )
        return quorum

    def _settings(self, code: GradientCode) -> RunSettings:
        p, t = self.protocol, self.timeouts
        return RunSettings(
            clip_quorum=self._quorum(code),
            max_delta_scale=p.max_delta_scale,
            strategy=self.strategy,
            spec=self.spec,
            extra_wait=p.extra_wait,
            round_timeout=t.round,
            recovery_timeout=t.recovery,
            key_timeout=t.key,
            evaluate_timeout=t.evaluate_seconds,
            poll_interval=t.poll_interval,
            progress=self.progress,
            adaptive_clip=p.adapts_clip,
            max_aborted_rounds=p.max_aborted_rounds,
        )
