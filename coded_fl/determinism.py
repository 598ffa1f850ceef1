"""Training as deterministic as torch allows: thread count, deterministic kernels, cuDNN, cuBLAS.

Gradient coding needs every replica of a partition to quantize to the same field values. The
client mod seeds every RNG per (run, round, partition); what is left is the floating-point
arithmetic itself. Wrap the train function (or the training loop) in :func:`deterministic_torch`
to remove what torch can remove on one machine::

    @deterministic_torch(threads=1)
    def train(net, x, y, ...): ...

    with deterministic_torch(threads=1):
        train(net, x, y, ...)

It sets, and restores on exit (also after an exception):

- ``torch.set_num_threads(threads)``: reductions split over a different number of threads add
  in a different order;
- ``torch.use_deterministic_algorithms(True, warn_only=...)``: a kernel without a deterministic
  implementation raises (or warns, with ``warn_only=True``) instead of silently varying;
- ``torch.backends.cudnn.deterministic = True``, ``torch.backends.cudnn.benchmark = False``
  (no autotuned algorithm choice), and ``torch.backends.mkldnn.deterministic`` where it exists;
- ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` where CUDA is available and the variable is unset (cuBLAS
  reads it when its handle is made: set it in the environment before the process first uses CUDA
  to be sure it takes effect).

What it cannot do: make two *different* machines agree. CPU kernels are chosen by instruction
set (``ATEN_CPU_CAPABILITY``: default, avx2, avx512), and GPU kernels differ from CPU ones;
both change the float results (``python -m simulations.hetero.measure`` counts by how much).
Give every site the same thread count and the same ``ATEN_CPU_CAPABILITY`` (e.g. ``avx2``,
which most x86 servers have) where the sites can agree; the settings are process-wide, so they
also affect other threads of the process while the context is open.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from coded_fl.errors import ConfigurationError

__all__ = ["CUBLAS_WORKSPACE", "deterministic_torch", "torch_threads"]

#: The ``CUBLAS_WORKSPACE_CONFIG`` value :func:`deterministic_torch` sets where CUDA is available.
CUBLAS_WORKSPACE = ":4096:8"
_CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"


def _check_threads(threads: int | None) -> None:
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigurationError(
            f"threads must be an int >= 1 (or None to leave torch's thread count alone), "
            f"got {threads!r}"
        )


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run a block (or, as a decorator, a function) with ``threads`` torch intra-op threads.

    Parameters
    ----------
    threads
        The thread count for ``torch.set_num_threads``; ``None`` leaves it unchanged. The
        previous count is restored on exit.

    Yields
    ------
    None

    Raises
    ------
    ConfigurationError
        ``threads`` is not an int >= 1 or None.
    """
    _check_threads(threads)
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def deterministic_torch(threads: int | None = 1, *, warn_only: bool = False) -> Iterator[None]:
    """Make torch as deterministic as it allows inside a block or a decorated function.

    Parameters
    ----------
    threads
        The torch intra-op thread count to use (default 1: the same on every site whatever its
        core count); ``None`` leaves it unchanged.
    warn_only
        Passed to ``torch.use_deterministic_algorithms``: ``False`` (default) makes an operation
        without a deterministic implementation raise ``RuntimeError``; ``True`` only warns.

    Yields
    ------
    None

    Raises
    ------
    ConfigurationError
        As :func:`torch_threads` (a bad ``threads``).

    Notes
    -----
    Every setting is restored on exit, nested uses included. The settings are process-wide
    (torch has no per-thread version of them).
    """
    _check_threads(threads)
    before_alg = torch.are_deterministic_algorithms_enabled()
    before_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn = torch.backends.cudnn
    before_cudnn = (cudnn.deterministic, cudnn.benchmark)
    mkldnn = getattr(torch.backends, "mkldnn", None)
    has_mkldnn_flag = mkldnn is not None and hasattr(mkldnn, "deterministic")
    before_mkldnn = mkldnn.deterministic if has_mkldnn_flag else None  # type: ignore[union-attr]
    set_cublas = torch.cuda.is_available() and _CUBLAS_ENV not in os.environ
    try:
        with torch_threads(threads):
            if set_cublas:
                os.environ[_CUBLAS_ENV] = CUBLAS_WORKSPACE
            torch.use_deterministic_algorithms(True, warn_only=warn_only)
            cudnn.deterministic, cudnn.benchmark = True, False
            if has_mkldnn_flag:
                mkldnn.deterministic = True  # type: ignore[union-attr]
            yield
    finally:
        torch.use_deterministic_algorithms(before_alg, warn_only=before_warn)
        cudnn.deterministic, cudnn.benchmark = before_cudnn
        if has_mkldnn_flag:
            mkldnn.deterministic = before_mkldnn  # type: ignore[union-attr]
        if set_cublas:
            os.environ.pop(_CUBLAS_ENV, None)
