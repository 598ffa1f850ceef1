"""Distributed DP in the protocol's configuration: what ``ProtocolConfig(dp=...)`` implies.

A run with distributed DP needs the repetition code with aligned masks (the groups' noise keys
derive from the edge keys, :mod:`coded_fl.dp.keys`) and g >= T + 2 groups; it sets the
quantization (clip range = the L2 clip, scale = the plan's integers per clip over the clip)
and the plan (:meth:`coded_fl.dp.DistributedDP.plan`) that both ends derive from the
configuration alone, so a silo never takes the server's word for its noise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coded_fl.codes import GradientCode, GroupCode
from coded_fl.dp.keys import check_noise_keys
from coded_fl.dp.settings import DistributedDP, DPPlan
from coded_fl.errors import ConfigurationError
from coded_fl.quantize import QuantizationConfig

if TYPE_CHECKING:
    from coded_fl.secagg.config import ProtocolConfig
    from coded_fl.secagg.masking import MaskingScheme

__all__ = ["dp_quantization"]


def dp_quantization(
    cfg: ProtocolConfig, code: GradientCode, scheme: MaskingScheme
) -> tuple[QuantizationConfig, DPPlan]:
    """The quantization and the plan of ``cfg`` (which has ``dp``), or the refusal.

    Parameters
    ----------
    cfg
        The configuration being built (its ``dp``, T, d, p, ``scale``).
    code
        Its gradient code.
    scheme
        Its masking scheme.

    Returns
    -------
    (QuantizationConfig, DPPlan)

    Raises
    ------
    ConfigurationError
        Naming the setting: ``dp`` of another type, a scheme without edge keys or a code
        without groups, g < T + 2, conditional rounding, a ``scale`` other than the plan's, a
        sum that could wrap the field.
    """
    dp = cfg.dp

    if not isinstance(dp, DistributedDP):
        raise ConfigurationError(
            f"dp must be a coded_fl.dp.DistributedDP or None, got {type(dp).__name__}"
        )
    if not scheme.edge_keys or not isinstance(code, GroupCode):
        raise ConfigurationError(
            f"distributed DP needs masking='aligned' (the groups' noise keys derive from "
            f"its edge keys), got masking={cfg.masking!r} with code={code.kind!r}: use "
            "masking='aligned' (or 'auto') with the repetition code"
        )
    groups = len(code.groups)
    check_noise_keys(groups, cfg.privacy_threshold)
    if dp.beta is not None:
        raise ConfigurationError(
            "DistributedDP(beta=...) (conditional rounding) is not used by the protocol's "
            "upload, whose replicas round at random with the partition's key: leave beta=None"
        )
    c = dp.resolution(cfg.vector_length)
    quant = QuantizationConfig(
        clip_range=dp.clip,
        scale=c / dp.clip,
        num_summands=code.K,
        p=cfg.p,
        nonfinite=cfg.nonfinite,  # type: ignore[arg-type]
    )
    if cfg.scale is not None and float(cfg.scale) != quant.scale:
        raise ConfigurationError(
            f"scale={cfg.scale} with dp: distributed DP sets the scale "
            f"({quant.scale:g} = steps_per_clip {c:g} / clip {dp.clip:g}); leave scale=None"
        )
    plan = dp.plan(
        d=cfg.vector_length,
        partitions=code.K,
        groups=groups,
        colluders=cfg.privacy_threshold,
        rounds=1,
        modulus=cfg.p,
    )
    return quant, plan
