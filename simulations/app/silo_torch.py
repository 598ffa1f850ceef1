"""``silo_torch_mod``: per-silo torch settings of the main job (the heterogeneity test bed).

Two run-config keys (``[tool.flwr.app.config]``):

- ``threads-per-silo`` (string, default ``""``): comma-separated torch thread counts, cycled
  over the silos: silo i (its node's ``partition-id``) trains and evaluates with item
  ``i % len``. ``"1,2"`` gives even silos 1 thread and odd silos 2, so the replicas of one
  partition on neighbouring silos are computed with different thread counts, as on real sites
  with different core counts. ``""`` leaves torch alone (1 thread, set at import).
- ``deterministic`` (bool, default false): run the train and evaluate functions inside
  :func:`coded_fl.determinism.deterministic_torch` (deterministic kernels; the thread count
  from ``threads-per-silo``, or 1).

It is a mod rather than code in the train function because the coded-fl mod calls the train
function once per partition with ``partition-id`` set to *that partition*: only outside it is
the silo's own index known. Place it before (outside) ``coded_secagg_mod``. Torch's thread
count is process-wide: it is set for the call and restored afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from flwr.app import Context, Message
from flwr.clientapp.typing import ClientAppCallable

from coded_fl.determinism import deterministic_torch, torch_threads
from coded_fl.errors import ConfigurationError

__all__ = ["conv_kernels", "parse_threads", "silo_conv", "silo_threads", "silo_torch_mod"]

#: convolution kernel families a silo can be made to use (``silo_conv``): oneDNN's, or ATen's own
#: (im2col + GEMM). They round differently at most coordinates of a gradient (7,448 of the
#: CNN's 11,122 on a 32-example batch here), reliably and on any x86 CPU, unlike thread counts,
#: whose effect depends on the load (OpenMP's dynamic teams) and was nil on a quiet machine.
CONV_KERNELS = ("onednn", "native")


def parse_threads(spec: str) -> tuple[int, ...]:
    """The thread counts of a ``threads-per-silo`` value (``""``: none).

    Parameters
    ----------
    spec
        Comma-separated ints >= 1, e.g. ``"1,2"``.

    Returns
    -------
    tuple of int
        The counts in order (empty for ``""``).

    Raises
    ------
    ConfigurationError
        An item is not an int >= 1.
    """
    items = [s.strip() for s in str(spec).split(",")] if str(spec).strip() else []
    out = []
    for item in items:
        try:
            v = int(item)
        except ValueError:
            v = 0
        if v < 1:
            raise ConfigurationError(
                f"threads-per-silo={spec!r}: {item!r} is not a thread count; give comma-separated "
                'ints >= 1, e.g. threads-per-silo="1,2" (or "" to leave torch alone)'
            )
        out.append(v)
    return tuple(out)


def silo_threads(run_config: dict, silo: int) -> int | None:
    """Silo ``silo``'s torch thread count under ``run_config`` (None: not set).

    Parameters
    ----------
    run_config
        The run config (``threads-per-silo`` read from it).
    silo
        The silo's index (its node's ``partition-id``).

    Returns
    -------
    int or None
        Item ``silo % len`` of ``threads-per-silo``, or None when the key is empty or unset.
    """
    counts = parse_threads(str(run_config.get("threads-per-silo", "")))
    return counts[silo % len(counts)] if counts else None


def silo_conv(spec: str, silo: int) -> str | None:
    """Silo ``silo``'s convolution kernels under a comma-separated ``spec`` of
    :data:`CONV_KERNELS` items, cycled (None: ``spec`` is empty).

    Parameters
    ----------
    spec
        E.g. ``"onednn,native"``: even silos oneDNN, odd ones ATen's native kernels.
    silo
        The silo's index.

    Returns
    -------
    str or None

    Raises
    ------
    ConfigurationError
        An item is not one of :data:`CONV_KERNELS`.
    """
    items = [x.strip() for x in str(spec).split(",")] if str(spec).strip() else []
    for item in items:
        if item not in CONV_KERNELS:
            raise ConfigurationError(
                f"conv kernels {spec!r}: {item!r} is not one of {CONV_KERNELS}; give e.g. "
                '"onednn,native"'
            )
    return items[silo % len(items)] if items else None


@contextlib.contextmanager
def conv_kernels(kind: str | None) -> Iterator[None]:
    """Run the body with the convolution kernels ``kind`` (None: leave torch alone); restores
    the process-wide setting afterwards."""
    import torch

    if kind is None:
        yield
        return
    before = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = kind == "onednn"
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = before


def silo_torch_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower mod: apply the silo's ``threads-per-silo`` and ``deterministic`` settings.

    Parameters
    ----------
    msg
        The message for the ClientApp.
    context
        The node's context (its ``partition-id`` is the silo's index).
    call_next
        The rest of the ClientApp (the coded-fl mod and the train/evaluate functions).

    Returns
    -------
    Message
        What ``call_next`` returns.
    """
    cfg = context.run_config
    deterministic = bool(cfg.get("deterministic", False))
    raw = str(cfg.get("threads-per-silo", ""))
    if not raw.strip() and not deterministic:
        return call_next(msg, context)
    threads = silo_threads(dict(cfg), int(context.node_config.get("partition-id", 0)))
    guard: contextlib.AbstractContextManager[None] = (
        deterministic_torch(threads if threads is not None else 1)
        if deterministic
        else torch_threads(threads)
    )
    with guard:
        return call_next(msg, context)
