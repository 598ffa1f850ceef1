"""The quantizer's inputs: their checks, the NaN/Inf policy and the counts a kernel gathers.

:func:`prepare` checks an input (and maps NaN/Inf with ``nonfinite='clip'``),
:func:`count_values` counts on devices whose kernels do not, and :func:`account` records the
counts in :class:`QuantizationStats` and refuses NaN/Inf.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from coded_fl.errors import InputError
from coded_fl.kernels import cpu as _cpu
from coded_fl.quantize.config import QuantizationConfig
from coded_fl.quantize.keys import MAX_ELEMENTS

__all__ = ["QuantizationStats", "account", "count_values", "prepare"]


@dataclass
class QuantizationStats:
    """Counts gathered while quantizing (a user should widen ``clip_range`` if many clip)."""

    total: int = 0
    clipped: int = 0
    nonfinite: int = 0

    @property
    def clipped_fraction(self) -> float:
        """The fraction of the quantized entries that were clipped (0 before any)."""
        return self.clipped / self.total if self.total else 0.0


def _as_float(x: torch.Tensor, name: str = "x") -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor of floats, got {type(x).__name__}")
    if not x.is_floating_point():
        raise InputError(f"{name} must be a floating point tensor, got {x.dtype}")
    if x.numel() >= MAX_ELEMENTS:
        raise InputError(f"{name} has {x.numel()} elements; at most {MAX_ELEMENTS - 1} supported")
    if x.dtype not in (torch.float32, torch.float64):
        x = x.to(torch.float32)
    return x.detach().contiguous()


def prepare(x: torch.Tensor, config: QuantizationConfig, name: str = "x") -> torch.Tensor:
    """Check an input and return it as a contiguous float32/float64 tensor.

    With ``nonfinite='clip'`` a copy with NaN -> 0 and +-Inf -> +-clip_range is returned when
    the input holds any; with ``'raise'`` non-finite values are counted by the kernels instead
    (no extra pass) and :func:`account` raises.

    Parameters
    ----------
    x
        The input tensor.
    config
        The quantization configuration.
    name
        How errors name it.

    Returns
    -------
    torch.Tensor
    """
    x = _as_float(x, name)
    if config.nonfinite == "clip":
        if x.device.type == "cpu":
            bad, _ = _cpu.scan_values(x.reshape(-1).numpy(), float(config.clip_range))
            if bad:
                x = x.clone()
                _cpu.sanitize_nonfinite(x.reshape(-1).numpy(), float(config.clip_range))
        else:
            x = torch.nan_to_num(x, nan=0.0, posinf=config.clip_range, neginf=-config.clip_range)
    return x


def count_values(x: torch.Tensor, config: QuantizationConfig) -> tuple[int, int]:
    """(NaN/Inf count, clipped count) of a tensor on a non-CPU device (CPU kernels count inline).

    Parameters
    ----------
    x
        A float tensor.
    config
        The quantization configuration (its clip range).

    Returns
    -------
    tuple[int, int]
    """
    finite = torch.isfinite(x)
    return int((~finite).sum()), int(((x.abs() > config.clip_range) & finite).sum())


def account(
    counts: tuple[int, int],
    total: int,
    config: QuantizationConfig,
    stats: QuantizationStats | None,
    name: str = "x",
) -> None:
    """Record what a kernel counted; refuse NaN/Inf (the kernel's output is then discarded).

    Parameters
    ----------
    counts
        (NaN/Inf count, clipped count) from a kernel.
    total
        Elements the kernel read.
    config
        The quantization configuration.
    stats
        Where to add the counts (None: nowhere).
    name
        How errors name the input.
    """
    bad, clipped = int(counts[0]), int(counts[1])
    if stats is not None:
        stats.total += total
        stats.clipped += clipped
        stats.nonfinite += bad
    if bad:
        raise InputError(
            f"{name} holds {bad} NaN/Inf value(s); fix the update (e.g. lower the learning "
            "rate) or set nonfinite='clip' to map NaN to 0 and +-Inf to +-clip_range"
        )
