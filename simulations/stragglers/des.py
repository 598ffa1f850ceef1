"""A discrete-event simulation of one round on a virtual clock: plain FedAvg vs coded-fl.

Both schemes see the same silo times :math:`X_i` (:class:`~simulations.stragglers.model.SiloTimes`)
and the same network; the compute steps cost what :mod:`simulations.stragglers.costs` measured.

Plain FedAvg (waits for every silo)::

    model download -> X_i -> serialise (plain_client) -> upload 4d bytes
    -> server parses and adds each upload in arrival order (plain_server, one at a time)
    -> round ends when the n-th upload is added

coded-fl (closes at the (n-s)-th upload)::

    model download -> X_i -> quantize/encode/mask/share (client_upload) -> upload
    -> server checks each upload in arrival order (server_upload, one at a time)
    -> at the (n-s)-th: close_collection (server_close), n-s recovery requests sent one after
       another on the server's link (their mean size); meanwhile the server sums the
       survivors' masked uploads (server_sum) -> each survivor opens its shares
       (client_recovery) and replies -> the server takes the replies in order, once its sum
       is done (server_recovery) -> after U of them, finish (server_finish: unmask, decode)

coded-fl with ``masking="aligned"`` (one round trip, ``StepSeconds.round_trips = 1``)::

    ... as above up to the (n-s)-th upload's check -> close_collection (no requests) ->
    the server sums the survivors' uploads (server_sum) -> finish (server_finish: decode)

Network: one-way ``latency``; every silo link has ``silo_bandwidth``; the server's link
(``server_bandwidth``) is shared, so messages through it queue (FIFO). The download of the model
is the same for both schemes (sent to the silos one after another, in a random order each
round). Times in seconds.

With every cost and the network set to zero the simulation reduces to the order statistics of
seed 003 (``Costs.zero()``): a check that the event logic is right.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulations.stragglers.costs import CostModel, privacy_for
from simulations.stragglers.model import SiloTimes

__all__ = ["CODED_STEPS", "PLAIN_STEPS", "Network", "RoundTimes", "StepSeconds", "simulate"]

#: the coded round's compute steps (seconds in :class:`StepSeconds`), then plain FedAvg's
CODED_STEPS = (
    "client_upload",
    "server_upload",
    "server_close",
    "server_sum",
    "client_recovery",
    "server_recovery",
    "server_finish",
)
PLAIN_STEPS = ("plain_client", "plain_server")


@dataclass(frozen=True)
class Network:
    """One-way latency (s) and bandwidths (bytes/s): 1 Gbit/s silos, a 10 Gbit/s server."""

    latency: float = 0.005
    silo_bandwidth: float = 125e6
    server_bandwidth: float = 1.25e9

    @classmethod
    def instant(cls) -> Network:
        return cls(latency=0.0, silo_bandwidth=float("inf"), server_bandwidth=float("inf"))


@dataclass(frozen=True)
class StepSeconds:
    """The step costs and message sizes of one (n, s, d)."""

    client_upload: float = 0.0
    server_upload: float = 0.0
    server_close: float = 0.0
    server_sum: float = 0.0
    client_recovery: float = 0.0
    server_recovery: float = 0.0
    server_finish: float = 0.0
    plain_client: float = 0.0
    plain_server: float = 0.0
    model_bytes: int = 0
    upload_bytes: int = 0
    recovery_request_bytes: int = 0  # the largest (to silo 0): on that silo's link
    recovery_request_mean_bytes: float = 0.0  # mean: on the server's link (0: the largest)
    recovery_reply_bytes: int = 0
    plain_upload_bytes: int = 0
    round_trips: int = 2  # 1: masking="aligned" (no recovery stage)

    @classmethod
    def zero(cls) -> StepSeconds:
        return cls()

    @classmethod
    def from_model(cls, model: CostModel, *, n: int, s: int, d: int) -> StepSeconds:
        steps = {k: model.seconds(k, n=n, s=s, d=d) for k in (*CODED_STEPS, *PLAIN_STEPS)}
        sizes = {
            f"{k}_bytes": model.bytes(k, n=n, s=s, d=d)
            for k in (
                "upload",
                "recovery_request",
                "recovery_request_mean",
                "recovery_reply",
                "plain_upload",
            )
        }
        trips = 1 if model.masking == "aligned" else 2
        return cls(**steps, model_bytes=4 * d, **sizes, round_trips=trips)


@dataclass
class RoundTimes:
    """Per-round wall times (seconds) of the two schemes over the same silo times."""

    plain: np.ndarray
    coded: np.ndarray
    close: np.ndarray  # when the coded round closed collection
    wait_all: np.ndarray  # X_(n) of each round (the order statistics alone)
    wait_coded: np.ndarray  # X_(n-s)

    @property
    def speedup(self) -> float:
        return float(self.plain.mean() / self.coded.mean())

    @property
    def order_statistic_speedup(self) -> float:
        return float(self.wait_all.mean() / self.wait_coded.mean())


def _fifo(arrivals: np.ndarray, service: float) -> np.ndarray:
    """Completion times of a one-at-a-time server for sorted arrivals (per row):
    done_k = max(a_k, done_{k-1}) + c = (k+1) c + max_{j<=k} (a_j - j c)."""
    k = np.arange(arrivals.shape[-1])
    return np.maximum.accumulate(arrivals - k * service, axis=-1) + (k + 1) * service


def _transfer(nbytes: float, bandwidth: float) -> float:
    return 0.0 if nbytes == 0 or np.isinf(bandwidth) else nbytes / bandwidth


def simulate(
    times: SiloTimes,
    s: int,
    *,
    steps: StepSeconds,
    net: Network,
    rounds: int,
    rng: np.random.Generator,
    work_scaling: bool = False,
) -> RoundTimes:
    """Simulate ``rounds`` rounds of both schemes with the same silo times.

    ``work_scaling``: a coded silo trains s + 1 partitions instead of one, so its time is
    (s + 1) X_i (the compute redundancy of gradient coding when the silo time is all compute,
    not latency); plain FedAvg keeps X_i.
    """
    n = times.n
    if not 0 <= s < n:
        raise ValueError(f"need 0 <= s < n, got s={s}, n={n}")
    U = n - s
    if not privacy_for(n, s) < U:
        raise ValueError(f"no valid privacy threshold for n={n}, s={s}")
    X = times.draw(rng, rounds)
    lat = net.latency
    # model download, one silo after another on the server's link (same for both schemes), in
    # an order of its own every round: who is served last has nothing to do with who is slow
    # (in index order, the heavy tail's slowest silos, the highest indices, were also always
    # served last: 0.5 s of a coded round's fixed cost at n = 1000 came from that alone)
    per_copy = _transfer(steps.model_bytes, net.server_bandwidth)
    order = rng.permuted(np.broadcast_to(np.arange(1, n + 1), X.shape), axis=1)
    start = lat + _transfer(steps.model_bytes, net.silo_bandwidth) + per_copy * order

    # plain: every upload, FIFO at the server
    up_plain = steps.plain_client + lat + _transfer(steps.plain_upload_bytes, net.silo_bandwidth)
    arrive = np.sort(start + X + up_plain, axis=1)
    svc = _transfer(steps.plain_upload_bytes, net.server_bandwidth) + steps.plain_server
    plain = _fifo(arrive, svc)[:, -1]

    # coded: the first n - s uploads, then the recovery round trip and the decode
    Xc = X * (s + 1) if work_scaling else X
    up = steps.client_upload + lat + _transfer(steps.upload_bytes, net.silo_bandwidth)
    arrive = np.sort(start + Xc + up, axis=1)
    svc = _transfer(steps.upload_bytes, net.server_bandwidth) + steps.server_upload
    close = _fifo(arrive[:, : n - s], svc)[:, -1]
    if steps.round_trips == 1:  # group-aligned masks: sum and decode, nothing to recover
        coded = close + steps.server_close + steps.server_sum + steps.server_finish
        return _round_times(X, Xc, s, plain=plain, coded=coded, close=close)
    if steps.round_trips != 2:
        raise ValueError(f"round_trips must be 1 or 2, got {steps.round_trips}")
    # the n - s requests leave one after another: what they add up to is (n - s) times the
    # mean size (silo 0's, the largest, when no mean is given)
    req = _transfer(
        steps.recovery_request_mean_bytes or steps.recovery_request_bytes, net.server_bandwidth
    )
    sent = close[:, None] + steps.server_close + req * np.arange(1, n - s + 1)
    back = (
        sent
        + lat
        + _transfer(steps.recovery_request_bytes, net.silo_bandwidth)
        + steps.client_recovery
        + lat
        + _transfer(steps.recovery_reply_bytes, net.silo_bandwidth)
    )
    svc = _transfer(steps.recovery_reply_bytes, net.server_bandwidth) + steps.server_recovery
    # one server thread: it sums the uploads right after close_collection (sending is the
    # link's work), and takes the replies once that is done
    summed = close + steps.server_close + steps.server_sum
    taken = _fifo(np.maximum(back[:, :U], summed[:, None]), svc)  # requests left in order
    coded = taken[:, -1] + steps.server_finish
    return _round_times(X, Xc, s, plain=plain, coded=coded, close=close)


def _round_times(
    X: np.ndarray,
    Xc: np.ndarray,
    s: int,
    *,
    plain: np.ndarray,
    coded: np.ndarray,
    close: np.ndarray,
) -> RoundTimes:
    n = X.shape[1]
    return RoundTimes(
        plain=plain,
        coded=coded,
        close=close,
        wait_all=np.sort(X, axis=1)[:, -1],
        wait_coded=np.sort(Xc, axis=1)[:, n - s - 1],
    )
