"""Compute and byte costs of one protocol round, measured step by step in memory.

The protocol's sans-IO machines (:mod:`coded_fl.secagg`) are driven directly, every message
through the binary codec (as in :class:`simulations.runtime.secagg_harness.Harness`, whose flow this
follows), and each step is timed on its own with thread CPU time:

- silo: ``on_train_request`` + ``upload`` (quantize, encode the s + 1 partitions, mask, share the
  mask) + encoding the Upload;
- server: decoding and checking one Upload; ``close_collection`` (decoding weights and the
  recovery requests); ``sum_uploads`` (the weighted sum of the survivors' masked uploads, which
  the driver does while the recovery requests travel); one recovery reply; ``finish`` (unmask
  and decode);
- silo: ``on_recovery_request`` (open the n - s sealed shares, weighted sum).

Plain FedAvg's costs are timed beside them: a silo serialises its float32 update, the server
parses it and adds it to a running sum.

With ``masking="aligned"`` (group-aligned masks, :mod:`coded_fl.secagg.aligned`) the round has
no recovery stage once the edge keys are dealt (rounds 1 and 2): the silo's upload step adds the
e edge streams of its group's mask instead of deriving and sealing shares,
``close_collection`` builds no request, and ``finish`` only decodes; the recovery steps cost
nothing. Each masking gets its own fit (:func:`fit_costs` of points measured with it).

:func:`fit_costs` fits each step to a few work counts (elements, shares) by non-negative least
squares, so that the discrete-event simulation can use them at sizes that were not measured
(n up to 1000); the fit's relative error on the measured points is reported with it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from coded_fl.crypto import SEAL_OVERHEAD
from coded_fl.secagg import ProtocolConfig, RoundResult
from coded_fl.secagg.aligned import mask_graph
from coded_fl.secagg.evidence import EPHEMERAL_BYTES
from coded_fl.secagg.policy import ClientPolicy
from simulations.runtime.secagg_harness import Harness, Silo, gaussian_partials

__all__ = [
    "MASKINGS",
    "CostModel",
    "StepCosts",
    "fit_costs",
    "mask_degree",
    "measure_step_costs",
    "privacy_for",
]

#: the two maskings of a coded round (``ProtocolConfig.masking``)
MASKINGS = ("shares", "aligned")


def privacy_for(n: int, s: int) -> int:
    """The T used in the straggler experiments: T = s, at most (n - s) / 2, at least 1."""
    return max(1, min(s, (n - s) // 2))


def mask_degree(n: int, s: int, masking: str = "shares") -> int:
    """e: the edge streams a silo of group 0 adds to its mask with ``masking="aligned"`` (the
    degree of group 0 in the mask graph over the repetition code's n // (s + 1) groups, the
    largest of the graph's degrees); 0 with ``masking="shares"`` or a single group."""
    if masking not in MASKINGS:
        raise ValueError(f"masking must be one of {MASKINGS}, got {masking!r}")
    if masking == "shares":
        return 0
    return sum(1 for edge in mask_graph(n // (s + 1), privacy_for(n, s)) if 0 in edge)


@dataclass(frozen=True)
class StepCosts:
    """Measured seconds (thread CPU) and bytes of one round at (n, s, T, d)."""

    n: int
    s: int
    T: int
    U: int
    d: int
    m: int  # mask-share piece length d / (U - T), rounded up
    client_upload: float
    server_upload: float  # per Upload
    server_close: float
    server_sum: float  # sum_uploads: overlaps the recovery round trip
    client_recovery: float
    server_recovery: float  # per RecoveryReply
    server_finish: float
    train_request_bytes: int
    upload_bytes: int
    recovery_request_bytes: int  # the request to silo 0
    recovery_request_mean_bytes: float  # mean over the n - s requests (what the server sends)
    recovery_reply_bytes: int
    plain_client: float
    plain_server: float  # per upload: parse + add
    plain_upload_bytes: int
    masking: str = "shares"
    e: int = 0  # mask_degree: the edge streams in group 0's mask (aligned)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.thread_time()
    out = fn()
    return out, time.thread_time() - t0


def measure_step_costs(
    n: int, s: int, d: int, *, rounds: int = 2, seed: int = 0, masking: str = "shares"
) -> StepCosts:
    """Run ``rounds`` rounds among in-memory machines (the last s silos never upload) and
    return the median step costs of the last round; round 1 warms caches. With
    ``masking="aligned"`` two more rounds come first (they deal the edge keys), and the
    timed round must have closed without a recovery stage."""
    T = privacy_for(n, s)
    e = mask_degree(n, s, masking)
    cfg = ProtocolConfig(
        num_silos=n,
        num_stragglers=s,
        privacy_threshold=T,
        vector_length=d,
        run_id=f"cost-{n}",
        masking=masking,
    )
    if masking == "aligned":
        rounds += 2
    h = Harness(
        cfg,
        partials=gaussian_partials(d, seed=seed),
        seed=seed,
        policy=ClientPolicy(max_silos=max(n, ClientPolicy().max_silos)),  # the n^2 anchors
    )
    h.setup()
    gone = {i: Silo(drop="train") for i in range(n - s, n)}
    last = None
    for r in range(1, rounds + 1):
        last = h.run_round(r, behaviour=gone)
        if not isinstance(last.result, RoundResult):
            raise RuntimeError(f"cost round aborted: {last.result.reason}")
    if last is None:  # pragma: no cover - rounds >= 1
        raise ValueError("rounds must be at least 1")
    sizes: dict[str, float] = {
        "train_request_bytes": last.sizes["train_request"][0],
        "upload_bytes": last.sizes["upload"][0],
    }
    asked = last.sizes.get("recovery_request", [])
    if masking == "aligned" and asked:
        raise RuntimeError(f"the timed aligned round {rounds} asked for a recovery stage")
    sizes.update(
        recovery_request_bytes=asked[0] if asked else 0,
        recovery_request_mean_bytes=statistics.fmean(asked) if asked else 0,
        recovery_reply_bytes=last.sizes["recovery_reply"][0] if asked else 0,
    )
    steps = (
        "client_upload",
        "server_upload",
        "server_close",
        "server_sum",
        "server_finish",
        "client_recovery",
        "server_recovery",
    )
    samples = {k: last.steps.get(k) or [0.0] for k in steps}
    plain = _plain_costs(n - s, d, seed=seed)
    return StepCosts(
        n=n,
        s=s,
        T=T,
        U=cfg.U,
        d=d,
        m=int(cfg.sharing.piece_length),
        **{k: statistics.median(v) for k, v in samples.items()},  # type: ignore[arg-type]
        **sizes,  # type: ignore[arg-type]
        **plain,  # type: ignore[arg-type]
        masking=masking,
        e=e,
    )


def _plain_costs(k: int, d: int, *, seed: int) -> dict[str, float | int]:
    gen = torch.Generator().manual_seed(seed)
    client, server, blobs = [], [], []
    for _ in range(k):
        u = torch.randn(d, generator=gen)
        raw, sec = _timed(lambda u=u: u.numpy().tobytes())  # type: ignore[misc]
        client.append(sec)
        blobs.append(raw)
    total = np.zeros(d, dtype=np.float32)
    for raw in blobs:
        _, sec = _timed(lambda raw=raw: np.add(total, np.frombuffer(raw, np.float32), out=total))  # type: ignore[misc]
        server.append(sec)
    return {
        "plain_client": statistics.median(client),
        "plain_server": statistics.median(server),
        "plain_upload_bytes": len(blobs[0]),
    }


# ---------------------------------------------------------------------------- the fitted model
#: masking -> step -> work counts it is fitted to (functions of n, s, T, U, d, m, e); a step
#: missing from a masking's table costs nothing with it (aligned: no recovery stage)
FEATURES: dict[str, dict[str, tuple[str, ...]]] = {
    "shares": {
        "client_upload": ("1", "(s+1)*d", "n*m", "n"),
        "server_upload": ("1", "d", "n*m", "n"),
        "server_close": ("1", "(n-s)**2", "(n-s)**2*n"),
        "server_sum": ("1", "(n-s)*d"),
        "client_recovery": ("1", "(n-s)*m", "n-s"),
        "server_recovery": ("1", "m"),
        "server_finish": ("1", "(n-s)*d", "U*d"),
        "plain_client": ("1", "d"),
        "plain_server": ("1", "d"),
    },
    "aligned": {
        "client_upload": ("1", "(s+1)*d", "e*d", "e"),
        "server_upload": ("1", "d", "e"),
        "server_close": ("1", "n-s"),
        "server_sum": ("1", "(n-s)*d"),
        "server_finish": ("1", "d"),
        "plain_client": ("1", "d"),
        "plain_server": ("1", "d"),
    },
}


def _work(expr: str, *, n: int, s: int, T: int, U: int, d: int, m: int, e: int) -> float:
    env = {"n": n, "s": s, "T": T, "U": U, "d": d, "m": m, "e": e}
    return float(eval(expr, {"__builtins__": {}}, env))  # noqa: S307 - fixed table above


@dataclass(frozen=True)
class CostModel:
    """Step costs as non-negative combinations of work counts (seconds per unit)."""

    coefficients: dict[str, dict[str, float]]
    fit_error: dict[str, float]  # max relative error on the measured points, per step
    masking: str = "shares"

    def seconds(self, step: str, *, n: int, s: int, d: int) -> float:
        coefficients = self.coefficients.get(step)
        if coefficients is None:  # not a step of this masking, or a fit stored before the
            return 0.0  # step was timed on its own (server_sum was part of server_finish)
        T = privacy_for(n, s)
        U = n - s
        m = math.ceil(d / (U - T))
        e = mask_degree(n, s, self.masking)
        return sum(c * _work(f, n=n, s=s, T=T, U=U, d=d, m=m, e=e) for f, c in coefficients.items())

    def bytes(self, what: str, *, n: int, s: int, d: int) -> float:
        """Wire sizes: the codec's layout (:mod:`coded_fl.secagg.messages`; 29-byte header,
        sealed share entries of 32 + 4m + SEAL_OVERHEAD bytes: the share's ephemeral key, a
        12-byte nonce and a 16-byte tag; the U shares of a silo's derived set are not sent, an
        entry of the ephemeral key and an 8-byte confirmation tag each is); the
        benchmark checks them against measured sizes. ``recovery_request`` is the one to the
        first survivor (silo 0) when the last s silos straggle, as measured;
        ``recovery_request_mean`` the mean over the n - s requests (silo 0 gets the most
        relayed shares, so the server's n - s requests add up to k times the mean, not k times
        silo 0's)."""
        T = privacy_for(n, s)
        U = k = n - s
        m = math.ceil(d / (U - T))
        box = EPHEMERAL_BYTES + SEAL_OVERHEAD + 4 * m
        token = 16 + EPHEMERAL_BYTES + 8  # context, ephemeral key, tag
        # survivor i's derived set is the U silos from i on, cyclically; with the survivors
        # 0..k-1 (the last s straggle) j gets i's share sealed and relayed iff 0 < i - j <= s:
        # min(s, k - 1 - j) relayed shares, the other k - that tokens (context, ephemeral key
        # and tag: 56)
        relayed = [min(s, k - 1 - j) for j in range(k)]

        def request(r: int) -> int:
            # per survivor: index and weight (12), public key (36), two lengths (8), and an
            # unsigned key's empty identity and signature (8; signed keys add 97 or 145); the
            # count of the survivors' view signatures (4: none without identity keys)
            return 41 + 60 * k + (k - r) * token + r * box

        if self.masking == "aligned":
            # no shares, tags or context (4 + 0); the scheme's extension (its id byte and two
            # edge-key lists) holds group 0's e confirmation tags once the keys are dealt:
            # edge, length, 8 bytes (20 each); the request carries no extension then
            e = mask_degree(n, s, self.masking)
            sizes = {
                "train_request": 35 + 48 * n,
                "upload": 54 + 4 * d + 20 * e,
                "recovery_request": 0,
                "recovery_request_mean": 0,
                "recovery_reply": 0,
                "plain_upload": 4 * d,
            }
            if what not in sizes:
                raise ValueError(f"unknown message {what!r}")
            return sizes[what]
        sizes = {
            # header and roster (per entry: index, key, and an unsigned key's empty identity and
            # signature, 48); the masks-cancel flag and no extension (2)
            "train_request": 35 + 48 * n,
            # masked vector, context (4 + 16), per tag entry: recipient, length, ephemeral key
            # and 8 bytes (48), per sealed share: recipient and length (8); no extension (1)
            "upload": 62 + 4 * d + (8 + EPHEMERAL_BYTES + 8) * U + (n - U) * (8 + box),
            "recovery_request": request(relayed[0]),
            "recovery_request_mean": sum(request(r) for r in relayed) / k,
            "recovery_reply": 37 + 4 * m,
            "plain_upload": 4 * d,
        }
        if what not in sizes:
            raise ValueError(f"unknown message {what!r}")
        return sizes[what]

    def to_json(self) -> dict[str, Any]:
        return {
            "coefficients": self.coefficients,
            "fit_error": self.fit_error,
            "masking": self.masking,
        }


def fit_costs(points: Sequence[StepCosts]) -> CostModel:
    """Non-negative least squares per step, relative residuals (each point weighs the same);
    the points must share one masking."""
    from scipy.optimize import nnls

    maskings = {p.masking for p in points}
    if len(maskings) != 1:
        raise ValueError(f"fit one masking at a time, got points of {sorted(maskings)}")
    (masking,) = maskings
    coefficients: dict[str, dict[str, float]] = {}
    errors: dict[str, float] = {}
    for step, feats in FEATURES[masking].items():
        A = np.array(
            [
                [
                    _work(f, **{k: getattr(p, k) for k in ("n", "s", "T", "U", "d", "m", "e")})
                    for f in feats
                ]
                for p in points
            ]
        )
        y = np.array([getattr(p, step) for p in points])
        w = 1.0 / np.maximum(y, 1e-9)
        coef, _ = nnls(A * w[:, None], y * w)
        pred = A @ coef
        coefficients[step] = {f: float(c) for f, c in zip(feats, coef, strict=True)}
        errors[step] = float(np.max(np.abs(pred - y) / np.maximum(y, 1e-9)))
    return CostModel(coefficients, errors, masking)


def points_to_json(points: Sequence[StepCosts]) -> list[dict[str, Any]]:
    return [asdict(p) for p in points]
