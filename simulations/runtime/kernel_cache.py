"""Fill numba's on-disk cache of the CPU kernels once, at set-up, so that no process of a run
compiles them.

numba keeps each compiled kernel (``cache=True``) keyed by the kernel, its argument types and a
hash of the source file's content, in the folder ``$CODED_FL_KERNEL_CACHE`` names
(:mod:`coded_fl.kernels.cache`; ``scripts/setup.sh`` and ``scripts/main.sh`` set it), else in
``coded_fl/kernels/__pycache__``: a kernel file edited later is compiled again at its first use,
and loaded from the cache after that. Without this step a fresh clone's first run compiles every
kernel in each silo's process at once (10 ClientApp processes on 2 cores: most of the 82 s
"once per run" of a fresh clone's first run, measured with other work on the machine), and the
ServerApp compiles its own in round 1.

This runs the protocol as a run does: :class:`strategies.CodedSecAgg` against ClientApps with
:func:`clients.coded_secagg_mod`, in this one process (:class:`~simulations.runtime.
inprocess_grid.InProcessGrid`), with both maskings, a straggler and enough rounds for the edge
keys, so the kernels compile with the argument types the server and the silos use; then
:func:`coded_fl.kernels.warm_up` (what a silo loads at the warm-up and the key exchange).

    python -m simulations.runtime.kernel_cache      # scripts/setup.sh runs it
"""

from __future__ import annotations

import logging
import time

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable
from flwr.serverapp.strategy import FedAvg

from clients import coded_secagg_mod
from coded_fl.kernels import warm_up
from coded_fl.vocabulary import TRAIN_KEY
from simulations.runtime.inprocess_grid import InProcessGrid, NoReplyError, task_identity
from strategies import CodedSecAgg

__all__ = ["fill"]

#: silos of the small runs (s = 1: the repetition code's groups of two, as in the main job)
_N = 4


def _train(msg: Message, context: Context) -> Message:
    """A silo's training: the model moved a little (float32 arrays, as a torch model gives)."""
    state = msg.content.array_records["arrays"].to_torch_state_dict()
    out = {k: v + 0.01 for k, v in state.items()}
    metrics = MetricRecord({"train_loss": 1.0, "num-examples": 10})
    return Message(RecordDict({"arrays": ArrayRecord(out), "metrics": metrics}), reply_to=msg)


def _silent_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """The last silo answers the key exchange but never uploads (a straggler: the server
    decodes without it)."""
    if TRAIN_KEY in msg.content.config_records:
        raise NoReplyError
    return call_next(msg, context)


def _app(*, silent: bool) -> ClientApp:
    app = ClientApp(mods=[_silent_mod, coded_secagg_mod] if silent else [coded_secagg_mod])
    app.train()(_train)
    return app


def _run(masking: str, rounds: int) -> None:
    grid = InProcessGrid([_app(silent=i == _N - 1) for i in range(_N)])
    strategy = CodedSecAgg(
        FedAvg(fraction_evaluate=0.0, min_available_nodes=_N, min_train_nodes=_N),
        num_silos=_N,
        num_stragglers=1,
        privacy_threshold=1,
        metric_keys=("train_loss",),
        masking=masking,
        round_timeout=0.5,  # the silent silo: the final drain waits this long
        recovery_timeout=5.0,
        key_timeout=5.0,
        node_wait_timeout=5.0,
        poll_interval=0.01,
    )
    model = {"w": torch.zeros(8, 4), "b": torch.zeros(4)}
    with task_identity(grid.run.run_id):
        strategy.start(grid=grid, initial_arrays=ArrayRecord(model), num_rounds=rounds)


def fill() -> float:
    """Compile (or load) every kernel with the argument types a run uses; returns seconds."""
    t0 = time.perf_counter()
    log = logging.getLogger("flwr")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        warm_up()
        _run("aligned", rounds=3)  # rounds 1-2 deal the edge keys, round 3 is one round trip
        _run("shares", rounds=1)
    finally:
        log.setLevel(level)
    return time.perf_counter() - t0


if __name__ == "__main__":
    print(f"setup: numba kernels compiled into their cache ({fill():.1f}s)")
